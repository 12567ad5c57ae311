#!/usr/bin/env python3
"""The main experiment: what memento is worth against checkpoints on a shared file system.

    PYTHONPATH=build/python .venv/bin/python experiments/goodput/run_main.py \\
        [--reps 3] [--steps 400] [--failures 4] [--mib 64] [--step-s 0.05] [--fs-mibps 256]

One job (experiments/torch/goodput_job.py, N=4 virtual nodes of one rank, --mib MiB of state
per node, a --step-s step of accelerator compute, a gradient allreduce per step) under
`memento launch`, with the same --failures node losses (nodes, and times within windows
spread over the run, drawn from --seed; each set-up gets each loss at the same uniform
point of its own failure-free timeline, so a loss falls into a checkpoint write as often
as writes take the time, as failures that come at any time do), in three set-ups:
  remote-only, relaunch   every K steps each rank writes its state synchronously to an
                          emulated shared file system at its fair share of --fs-mibps
                          (--fs-mibps / N per node); a failure relaunches the job, which
                          reads the last complete checkpoint back at that rate;
  memento, relaunch       memento replica:2 (memory of the nodes); a failure relaunches;
  memento, in-job         the same, --recovery in-job with a warm spare per failure.
The state and step are sized as in LLM training: one remote write of the state takes >= 20
steps (64 MiB at 64 MiB/s = 1 s = 20 steps of 50 ms by default).

A failure-free run first measures the step as the job runs it (the compute plus the step's
own overheads: allreduce, update, interpreter); the model gets that step time. Each set-up
checkpoints at its own goodput-optimal interval: a first pass at a guessed interval
measures its costs from --calibrations pairs of runs, each a failure-free run and one with
failures of its own (what a save costs the wall, what a failure costs beyond its restore
and the work redone: costs_of; the pairs' median: one pair on 2 shared cores moved the
prediction by +-7 %); `memento advise` then gives the optimal save interval for those
costs at the failure rate of the run (F failures over the run's compute), and --reps runs
at that interval are measured. Reported per set-up: time lost per failure by component
(the launcher's records), goodput = compute / wall of the training (from the first
restore to the end), the model's prediction from the calibration's costs for the same
F failures (wall = steps x step / (1 - stall share) + F x the model's cost of one
failure; agreement: the prediction inside the range the repetitions measured, each
repetition with failures of its own; with the range of the predictions from each
calibration pair alone), and the ratios to the remote-only baseline. Results go to
experiments/results/main_experiment.*.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "experiments", "torch", "goodput_job.py")
NODES = 4
SETUPS = ("remote-only, relaunch", "memento, relaunch", "memento, in-job")


def launch(a, setup, save_every, inject, tag):
    work = tempfile.mkdtemp(prefix="memento-main-")
    records, out = os.path.join(work, "records"), os.path.join(work, "out")
    job = "main-%s" % uuid.uuid4().hex[:8]
    cmd = [a.cli, "launch", "-n", str(NODES), "--scheme", "replica:2", "--job", job,
           "--quiet", "--backoff", "0", "--records", records]
    if inject:
        cmd += ["--inject", inject]
    if setup == "memento, in-job":
        cmd += ["--recovery", "in-job", "--spares", str(max(1, a.failures))]
    cmd += ["--", sys.executable, JOB, "--mib", str(a.mib), "--step-s", repr(a.step_s),
            "--steps", str(a.steps), "--save-every", str(save_every), "--out", out]
    if setup.startswith("remote"):
        cmd += ["--mode", "remote", "--remote-dir", os.path.join(work, "fs"),
                "--remote-mibps", repr(a.fs_mibps / NODES)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if p.returncode != 0:
            sys.exit("%s (%s): launch failed (%d):\n%s" % (setup, tag, p.returncode,
                                                           p.stdout[-4000:]))
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        with open(out) as f:
            result = json.load(f)
    finally:
        subprocess.run(["rm", "-rf", work])
        subprocess.run([a.cli, "clean", "--force", "--job", job], capture_output=True)
    summary = [r for r in recs if r["record"] == "summary"][-1]
    first = [r for r in recs if r["record"] == "restore"][0]
    run = {"setup": setup, "save_every": save_every, "tag": tag,
           "failures": summary["failures"], "launches": summary["launches"],
           "injob_recoveries": summary.get("injob_recoveries", 0),
           "wall_s": summary["wall_s"], "train_wall_s": summary["t"] - first["t"],
           "lost": summary["time_lost_s"], "steps_lost": summary["steps_lost"],
           "digest": result["digest"], "stall_s": result["stall_s"], "saves": result["saves"]}
    run["compute_s"] = a.steps * a.step_s
    run["goodput"] = run["compute_s"] / run["train_wall_s"]
    return run


def per_failure(run):
    f = max(1, run["failures"])
    lost = run["lost"]
    return {k: (lost.get(k, 0.0) or 0.0) / f for k in
            ("detection", "relaunch", "rejoin", "restore", "reprotect", "recompute")}


def advise(a, setup, costs, save_every=None, mtbf_h=None):
    """memento advise's plan for the set-up (its optimum, or the given interval), with the
    step as the job runs it (a.step_eff_s: the compute and the step's own overheads), at the
    run's failure rate (F failures over its compute) unless mtbf_h is given."""
    compute = a.steps * a.step_eff_s
    if mtbf_h is None:
        mtbf_h = NODES * compute / max(1, a.failures) / 3600.0
    remote_only = setup.startswith("remote")
    args = [a.cli, "advise", "--nodes", str(NODES), "--shard", "%dM" % a.mib,
            "--step-s", repr(a.step_eff_s), "--node-mtbf-h", repr(mtbf_h), "--memory-budget", "2",
            "--schemes", "replica:2", "--node-remote-gibps", repr(a.fs_mibps / NODES / 1024),
            "--fs-write-gibps", repr(a.fs_mibps / 1024), "--fs-read-gibps",
            repr(a.fs_mibps / 1024), "--relaunch-s", repr(costs["relaunch_s"]),
            "--stall-s", repr(costs["stall_s"]), "--protect-s", repr(costs["stall_s"]),
            "--persist-s", repr(costs["stall_s"])]
    for src in ("local", "replica", "decode", "remote"):
        args += ["--recover-%s-s" % src, repr(costs["restore_s"])]
    if save_every is not None:
        args += ["--save-every-steps", str(save_every), "--persist-every-saves", "1"]
    p = subprocess.run(args + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("memento advise failed: %s\n%s" % (" ".join(args), p.stderr))
    j = json.loads(p.stdout)
    return j["remote_only"] if remote_only else j["schemes"][0]


def mean_delay_s(inject):
    """The mean of the delays of an --inject spec (NODES@STEP+Ds): work since the last
    step report that a loss throws away, besides the steps the launcher counts."""
    delays = [float(e.split("+")[-1][:-1]) if e.endswith("s") else 0.0
              for e in inject.split(",") if e]
    return sum(delays) / max(1, len(delays))


def costs_of(run, free, a):
    """The model's inputs measured from a set-up's calibration: `free`, a failure-free run
    at the same interval, and `run`, one with the failures.
      stall_s    what one save costs the training's wall: the failure-free run's wall
                 beyond the steps, per save (the blocking stall plus the background
                 work's share of the cores), at least the blocking stall;
      restore_s  restore and re-protect as the launcher times them;
      relaunch_s what one failure costs beyond the restore and the work redone, from the
                 walls: (run - free) / F, less the steps the launcher counts as redone, the
                 work since the last report that the loss threw away (the injection's
                 delays) and restore_s; at least the launcher's detection + relaunch +
                 rejoin. It takes in what a recovery slows down after it (on 2 cores, the
                 replacement's re-protect and store pages compete with the training)."""
    pf = per_failure(run)
    f = max(1, run["failures"])
    saves = max(1, a.steps // run["save_every"])
    blocking = run["stall_s"] / max(1, run["saves"])
    stall = max(blocking, (free["train_wall_s"] - a.steps * a.step_eff_s) / saves)
    restore = max(1e-3, pf["restore"] + pf["reprotect"])
    parts = pf["detection"] + pf["relaunch"] + pf["rejoin"]
    whole = (run["train_wall_s"] - free["train_wall_s"]) / f
    fixed = whole - pf["recompute"] - mean_delay_s(run.get("inject", "")) - restore
    return {"relaunch_s": max(parts, fixed), "restore_s": restore, "stall_s": max(1e-4, stall),
            "blocking_stall_s": blocking, "launcher_parts_s": parts}


def median_costs(costs):
    """The median of several calibrations' costs_of, field by field: one pair whose
    failure-free run the shared cores slowed (a save's cost there is the wall beyond the
    steps over a few saves) moves a mean by a second per save."""
    return {k: statistics.median(c[k] for c in costs) for k in costs[0]}


def calibration_pairs(rows, setup):
    """{k: (failure-free run, failing run)} of a set-up's calibration rows (tags
    "calibrate-free#k" and "calibrate#k"; "calibrate-free" and "calibrate" are pair 0)."""
    pairs = {}
    for r in rows:
        if r["setup"] != setup or not r["tag"].startswith("calibrate"):
            continue
        kind, _, k = r["tag"].partition("#")
        pairs.setdefault(int(k or 0), {})[kind] = r
    return {k: (p["calibrate-free"], p["calibrate"]) for k, p in sorted(pairs.items())
            if "calibrate-free" in p and "calibrate" in p}


# Where failures are rare enough that none overlaps another's recovery (per node, hours).
RARE_MTBF_H = 1e6


def predict(a, setup, costs, save_every):
    """The model's goodput for F failures (conditional on F, as the runs inject them): the
    training's wall is the steps at the job's own step time stretched by the saves' stall
    share, plus F times the model's cost of one failure (recovery, plus the work redone:
    half a save interval on average); goodput counts the compute alone. The cost of one
    failure is the model's where failures are rare: the runs inject theirs far apart,
    whereas at the run's own rate (F in about a minute) the model's renewal terms count
    failures that overlap a recovery as merged into it, a cost per failure well below what
    one isolated failure costs."""
    e = advise(a, setup, costs, save_every, mtbf_h=RARE_MTBF_H)["estimate"]
    cost = (e["recovery_s_per_day"] + e["lost_s_per_day"]) / e["failures_per_day"]
    e0 = 1 - e["stall_s_per_day"] / 86400.0
    wall = a.steps * a.step_eff_s / e0 + a.failures * cost
    return a.steps * a.step_s / wall, cost


def draw_failures(a, seed):
    """[(node, lo, hi, u)] per failure: a node, a window of progress (steps) around an even
    spread over the run, and a uniform draw u in [0, 1) that places the loss in time within
    that window (inject_for maps it onto each set-up's own timeline)."""
    rng = random.Random(seed)
    gap = a.steps // (a.failures + 1)
    out = []
    for i in range(a.failures):
        out.append((rng.randrange(NODES), gap * (i + 1) - gap // 4, gap * (i + 1) + gap // 4,
                    rng.random()))
    return out


def inject_for(a, failures, save_every, save_s, reports_every_step):
    """--inject for one set-up: each loss at the time u of the way through its window of
    progress, on the set-up's failure-free timeline (steps of a.step_eff_s, a save of
    save_s seconds after every save_every-th step), so that a loss falls anywhere in time,
    into a checkpoint write as often as its share of the time, as the model assumes. Said
    as the last step the job reported before that time plus a delay (NODES@STEP+Ds); the
    job reports after every step (remote-only) or at every save (memento)."""
    step = a.step_eff_s

    def t_of(x):  # the failure-free time at which the job has done x steps (and their saves)
        return x * step + (x // save_every) * save_s

    events = []
    for node, lo, hi, u in failures:
        t = t_of(lo) + u * (t_of(hi) - t_of(lo))
        s = lo
        while t_of(s + 1) <= t:
            s += 1
        if not reports_every_step:
            s -= s % save_every
        s = max(s, save_every if not reports_every_step else 1)
        delay = max(0.0, t - t_of(s))
        events.append("%d@%d+%.3fs" % (node, s, delay) if delay >= 0.001 else "%d@%d" % (node, s))
    return ",".join(events)


def setup_inject(a, setup, failures, save_every, save_s=None):
    remote = setup.startswith("remote")
    if save_s is None:
        save_s = a.mib / (a.fs_mibps / NODES) if remote else 0.0
    return inject_for(a, failures, save_every, save_s, reports_every_step=remote)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--failures", type=int, default=4)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--fs-mibps", type=float, default=256, help="shared FS, all nodes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--calibrations", type=int, default=3,
                   help="pairs of calibration runs per set-up (failure-free, failing)")
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "bindings", "cli", "memento"))
    p.add_argument("--out", default=os.path.join(ROOT, "experiments", "results",
                                                 "main_experiment.jsonl"))
    p.add_argument("--from-results", default="",
                   help="report the runs of an earlier .jsonl again (no job is run)")
    a = p.parse_args()
    if a.from_results:
        report(a, *from_results(a))
        return
    failures = draw_failures(a, a.seed)
    write_s = a.mib / (a.fs_mibps / NODES)
    print("job: %d nodes x %d MiB, step %.3f s, %d steps; remote write %.2f s = %.0f steps; "
          "%d failures, each at a uniform time within its window" % (
              NODES, a.mib, a.step_s, a.steps, write_s, write_s / a.step_s, a.failures),
          flush=True)
    # The step as the job runs it, without failures or saves (one at the end).
    free = launch(a, "memento, relaunch", a.steps, "", "step time")
    a.step_eff_s = free["train_wall_s"] / a.steps
    print("step time without saves or failures: %.4f s (compute %.3f s)" % (
        a.step_eff_s, a.step_s), flush=True)
    rows = [free]
    plans = {}
    if a.calibrations < 1:
        sys.exit("--calibrations must be at least 1")
    for setup in SETUPS:  # first pass: the set-up's costs at a first guess of the interval
        guess = 100 if setup.startswith("remote") else 10
        each = []
        for k in range(a.calibrations):
            # Failures of their own for every pair; the repetitions' draws come after.
            draws = failures if k == 0 else draw_failures(a, a.seed + 1000 + k)
            clean = launch(a, setup, guess, "", "calibrate-free#%d" % k)
            inject = setup_inject(a, setup, draws, guess)
            run = launch(a, setup, guess, inject, "calibrate#%d" % k)
            run["inject"] = inject
            rows += [clean, run]
            each.append(costs_of(run, clean, a))
            print("%-22s calibrate %d (every %d, %s): costs %s" % (
                setup, k, guess, inject, {n: round(v, 3) for n, v in each[-1].items()}),
                flush=True)
        costs = median_costs(each)
        plan = advise(a, setup, costs)
        plans[setup] = {"costs": costs, "each_costs": each,
                        "save_every": plan["save_every_steps"],
                        "advise_goodput": plan["estimate"]["goodput"]}
        print("%-22s median costs %s -> optimal every %d steps" % (
            setup, {n: round(v, 3) for n, v in costs.items()}, plan["save_every_steps"]),
            flush=True)
    measured = {s: [] for s in SETUPS}
    for rep in range(a.reps):
        # Each repetition its own failures (the same draws for every set-up, placed on
        # each one's own timeline).
        failures = draw_failures(a, a.seed + 1 + rep)
        for setup in SETUPS:
            every = plans[setup]["save_every"]
            inject = setup_inject(a, setup, failures, every,
                                  plans[setup]["costs"]["stall_s"] if setup.startswith("remote")
                                  else None)
            run = launch(a, setup, every, inject, "rep%d" % rep)
            run["inject"] = inject
            rows.append(run)
            measured[setup].append(run)
            print("%-22s rep %d (%s): goodput %.3f, lost per failure %.2f s" % (
                setup, rep, inject, run["goodput"], sum(per_failure(run).values())),
                flush=True)
    report(a, rows, plans, measured)


def from_results(a):
    """The runs and plans of an earlier run_main.py (its .jsonl), to report them again."""
    with open(a.from_results) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    job = [r for r in recs if r["record"] == "job"][-1]["args"]
    for k in ("reps", "steps", "failures", "mib", "step_s", "fs_mibps", "seed", "step_eff_s"):
        setattr(a, k, job[k])
    rows = [{k: v for k, v in r.items() if k != "record"} for r in recs if r["record"] == "run"]
    measured = {s: [r for r in rows if r["setup"] == s and r["tag"].startswith("rep")]
                for s in SETUPS}
    plans = {}
    for setup in SETUPS:
        each = [costs_of(run, free, a) for free, run in calibration_pairs(rows, setup).values()]
        plans[setup] = {"save_every": measured[setup][0]["save_every"],
                        "costs": median_costs(each), "each_costs": each}
    return rows, plans, measured


def report(a, rows, plans, measured):
    digests = {r["digest"] for r in rows}
    summary = {}
    for setup in SETUPS:
        runs = measured[setup]
        goodputs = [r["goodput"] for r in runs]
        # The prediction from the calibration's costs alone, as memento advise made it.
        costs = plans[setup]["costs"]
        pred, cost = predict(a, setup, costs, plans[setup]["save_every"])
        # What each calibration pair alone would have predicted: the calibration's spread.
        each = [predict(a, setup, c, plans[setup]["save_every"])[0]
                for c in plans[setup]["each_costs"]]
        pf = {k: statistics.median(per_failure(r)[k] for r in runs) for k in per_failure(runs[0])}
        summary[setup] = {"save_every": plans[setup]["save_every"], "goodput": goodputs,
                          "goodput_median": statistics.median(goodputs),
                          "predicted": pred, "model_cost_per_failure_s": cost,
                          "predicted_each_calibration": each,
                          "costs": costs,
                          "lost_per_failure": pf, "lost_per_failure_s": sum(pf.values()),
                          "agree": min(goodputs) <= pred <= max(goodputs)}
    base = summary[SETUPS[0]]
    print("\nsame final state in every run: %s" % ("yes" if len(digests) == 1 else digests))
    print("%-22s %6s %8s %8s %8s %7s %8s %8s %13s %8s %13s %7s %9s %6s" % (
        "set-up", "every", "lost/f s", "relaunch", "rejoin", "restore", "recomp", "goodput",
        "measured", "predict", "per calib.", "error", "÷ remote", "agree"))
    for setup, s in summary.items():
        pf = s["lost_per_failure"]
        g, e = s["goodput"], s["predicted_each_calibration"]
        print("%-22s %6d %8.2f %8.2f %8.2f %7.2f %8.2f %8.3f %6.3f-%.3f %8.3f %6.3f-%.3f "
              "%+6.1f%% %9.2f %6s" % (
                  setup, s["save_every"], s["lost_per_failure_s"], pf["relaunch"],
                  pf["rejoin"], pf["restore"], pf["recompute"], s["goodput_median"], min(g),
                  max(g), s["predicted"], min(e), max(e),
                  100 * (s["predicted"] / s["goodput_median"] - 1),
                  s["goodput_median"] / base["goodput_median"], "yes" if s["agree"] else "NO"))
    injob = summary["memento, in-job"]
    print("time lost per failure, in-job ÷ relaunch (memento): %.3f; goodput in-job ÷ "
          "remote-only: %.2f (model %.2f)" % (
              injob["lost_per_failure_s"] / summary["memento, relaunch"]["lost_per_failure_s"],
              injob["goodput_median"] / base["goodput_median"],
              injob["predicted"] / base["predicted"]))
    with open(a.out, "w") as f:
        f.write(json.dumps({"record": "job", "args": vars(a)}) + "\n")
        for r in rows:
            f.write(json.dumps(dict(r, record="run")) + "\n")
        f.write(json.dumps({"record": "summary", "setups": summary,
                            "same_state": len(digests) == 1}) + "\n")


if __name__ == "__main__":
    main()
