#!/usr/bin/env python3
"""The recovery-rate driver's classification, rate rows, report and plots on
launcher records with known outcomes (no processes; ctest label unit).

- a launch whose injected failure never fired is void, not failed, and is
  run again with another seed; a void trial is no sample of its cell's rate;
- a failure nobody injected, or a job that did not finish bit-identically,
  is failed;
- the report and the time-lost plot take only the cells of this run (a
  resumed log may hold trials of other cells);
- a run whose every cell was skipped writes its report and no plot.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "..", "..", "experiments", "recovery_rate", "run_recovery_rate.py")

spec = importlib.util.spec_from_file_location("run_recovery_rate", DRIVER)
rr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rr)

REF = {4: "h4", 6: "h6", 8: "h8"}  # state hash after each step of the failure-free run
STEPS = 8
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def failure(nodes, injected=True):
    return {"record": "failure", "nodes": nodes, "stage": "protect", "last_step": 7,
            "injected": injected}


def restore(version, memory=True, ok=True, state=None):
    lost = {s + "_s": 0.5 for s in rr.SOURCES}
    lost["steps_lost"] = 1
    return {"record": "restore", "attempt": 1, "ok": ok, "version": version,
            "state_hash": state or REF.get(version), "from_memory": memory,
            "from_remote": not memory, "lost": lost}


def summary(state="h8", outcome="finished"):
    return {"record": "summary", "outcome": outcome, "state_hash": state}


NOT_FIRED = {"record": "not_fired", "event": "rand2@5-7:rand", "what": "nodes 1+3 at step 7"}


def test_classify():
    c = rr.classify([NOT_FIRED, summary()], REF, STEPS)
    check(c["class"] == "void" and "never fired" in c["why"], "never fired: %s" % c)
    c = rr.classify([NOT_FIRED, summary(outcome="failed")], REF, STEPS)
    check(c["class"] == "failed", "never fired and not finished is failed: %s" % c)
    c = rr.classify([failure([2], injected=False), NOT_FIRED, summary()], REF, STEPS)
    check(c["class"] == "failed" and "nobody injected" in c["why"],
          "a failure nobody injected: %s" % c)
    c = rr.classify([failure([1, 3]), restore(6), summary()], REF, STEPS)
    check(c["class"] == "memory" and c["lost_nodes"] == [1, 3], "memory: %s" % c)
    c = rr.classify([failure([0, 1]), restore(4, memory=False), summary()], REF, STEPS)
    check(c["class"] == "remote", "remote: %s" % c)
    c = rr.classify([failure([1, 3]), restore(6, state="wrong"), summary()], REF, STEPS)
    check(c["class"] == "failed" and "differs" in c["why"], "wrong restored state: %s" % c)
    c = rr.classify([failure([1, 3]), restore(6), summary(state="wrong")], REF, STEPS)
    check(c["class"] == "failed" and "bit-identically" in c["why"], "wrong final state: %s" % c)


class FakeLog:
    def __init__(self, records):
        self.records = records

    find = rr.RecordLog.find


def trial(scheme, nodes, f, t, cls, lost=None):
    rec = {"record": "trial", "scheme": scheme, "nodes": nodes, "f": f, "trial": t,
           "class": cls, "wall_s": 1.0, "lost_nodes": [0, 1], "stage": "step"}
    if cls in ("memory", "remote"):
        rec["restore"] = {"lost": restore(6)["lost"]}
    if cls in ("failed", "void"):
        rec["why"] = "trial %s/%d/%d/%d %s" % (scheme, nodes, f, t, cls)
    return rec


def test_tally_and_report(tmp):
    cell = ("replica:2", 4, 2, 2.0, 2 / 3)
    records = [trial("replica:2", 4, 2, 0, "memory"), trial("replica:2", 4, 2, 1, "void"),
               trial("replica:2", 4, 2, 2, "memory"),
               # A cell of an earlier run that this run does not include.
               trial("xor:3", 4, 1, 0, "failed"), trial("xor:3", 4, 1, 1, "remote")]
    rows = rr.tally(FakeLog(records), [cell], 3)
    check(len(rows) == 1, "one row per cell: %s" % rows)
    row = rows[0]
    check(row["void"] == 1 and row["samples"] == 2 and row["memory"] == 2,
          "void counted apart: %s" % row)
    check(row["measured"] == 1.0, "the rate is over the trials that are not void: %s" % row)
    check(row["ci95"] == list(rr.wilson(2, 2)), "interval over 2 samples: %s" % row["ci95"])
    check(row["agree"], "2/2 agrees with 2/3: %s" % row)
    all_void = rr.tally(FakeLog([trial("replica:2", 4, 2, 0, "void")]), [cell], 1)[0]
    check(all_void["samples"] == 0 and not all_void["agree"] and all_void["measured"] == 0.0,
          "a cell without samples never agrees: %s" % all_void)

    trials = rr.cell_trials(records, [cell], 3)
    check({t["scheme"] for t in trials} == {"replica:2"}, "cell_trials: %s" % trials)
    a = types.SimpleNamespace(results=tmp, name="unit", steps=STEPS, demo_args="--dim 8",
                              window="5-7", persist_every=2, no_plots=False, trials=3,
                              goodput_failures=2, goodput_nodes=8)
    rr.write_report(a, rows, trials, [], 10.0)
    with open(os.path.join(tmp, "unit.md")) as f:
        md = f.read()
    check("xor:3" not in md, "the report names a cell this run did not run:\n" + md)
    check("replica:2/4/2/1 void" in md, "the void trial is listed:\n" + md)
    check("| 1 | 1.000 |" in md, "the row's void count and rate:\n" + md)
    rr.plot(a, rows, trials)
    # The plots need matplotlib (Debian's python3-matplotlib); without it the
    # driver says so and draws nothing.
    drawn = importlib.util.find_spec("matplotlib") is not None
    for png in ("unit.png", "unit_time_lost.png"):
        check(os.path.exists(os.path.join(tmp, png)) == drawn,
              "%s %s with matplotlib %s" % (png, "missing" if drawn else "drawn",
                                            "importable" if drawn else "missing"))

    a.name = "empty"
    rr.write_report(a, [], [], [], 0.0)
    rr.plot(a, [], [])
    check(os.path.exists(os.path.join(tmp, "empty.md")), "no report without rows")
    check(not os.path.exists(os.path.join(tmp, "empty.png")), "a plot without rows")


def fake_runner(outcomes, launches):
    """A Runner whose launches return the records in `outcomes` in turn (the
    last one again when they run out), noting each launch's seed."""
    def launch(self, job, nodes, scheme, inject=None, seed=1, remote=None, **_):
        recs = outcomes[min(len(launches), len(outcomes) - 1)]
        launches.append(seed)
        return subprocess.CompletedProcess([], 0, ""), recs, 1.0

    run = rr.Runner.__new__(rr.Runner)
    run.a = types.SimpleNamespace(seed=1, window="5-7", steps=STEPS)
    run.tmp = tempfile.mkdtemp(prefix="memento-rr-unit-")
    run.jobs = 0
    run.launch = types.MethodType(launch, run)
    return run


def test_void_trial_runs_again():
    """A never-fired launch is run again with another seed; the trial keeps
    the launch that fired."""
    launches = []
    run = fake_runner([[NOT_FIRED, summary()], [failure([1, 3]), restore(6), summary()]],
                      launches)
    rec = run.trial("replica:2", 4, 2, 0, REF)
    shutil.rmtree(run.tmp, ignore_errors=True)
    check(len(launches) == 2 and launches[0] != launches[1],
          "expected a second launch with another seed: %s" % launches)
    check(rec["class"] == "memory" and rec["attempts"] == 2 and rec["seed"] == launches[1],
          "the trial keeps the launch that fired: %s" % json.dumps(rec))

    launches = []
    run = fake_runner([[NOT_FIRED, summary()]], launches)
    rec = run.trial("replica:2", 4, 2, 1, REF)
    shutil.rmtree(run.tmp, ignore_errors=True)
    check(rec["class"] == "void" and len(launches) == rr.ATTEMPTS,
          "a failure that never fires is void after %d launches: %s, %d launches"
          % (rr.ATTEMPTS, rec, len(launches)))


def main():
    tmp = tempfile.mkdtemp(prefix="memento-rr-unit-")
    try:
        test_classify()
        test_tally_and_report(tmp)
        test_void_trial_runs_again()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
