#!/usr/bin/env python3
"""Goodput model vs the injected-failure runs of experiments/recovery_rate.

For every goodput record of a recovery_rate results file (a 12-step run of the demo on N
nodes with F single-node losses injected, memento schemes and the synchronous-remote
baseline), feeds `memento advise` the same job and the costs measured in that run, with the
run's save and persist intervals, and compares the measured goodput with the model's.

The model is a steady state (renewal reward over a long job); these runs are 12 steps long,
and most of their wall time is the first launch (process start, imports, model set-up and
teardown), which no failure causes and the model leaves out. That launch overhead is
measured, not modelled: from the trial records of the same file (12-step runs with one
failure event), overhead = wall - time lost to the failure - useful compute. The prediction
is then

    wall_pred = overhead + W / e0 + F x (model's expected cost of one failure)
    goodput_pred = W / wall_pred

with W the useful compute (the record's useful_s), e0 the model's share of time not
stalled by saves, and the cost of one failure (recovery by where it is served from, plus
the work redone) from `memento advise --save-every-steps 1 --persist-every-saves P --json`
with the run's measured relaunch and restore times. The runs inject exactly F failures at
step boundaries, none during a recovery, so the comparison is conditional on F rather than
at a Poisson rate: a stationary rate that puts 2 failures of ~30 s each into 2 s of work
would have failures strike recoveries (Daly's restart term), which these runs never do.
With one run per
scheme there is no sampling interval for the measurement; the stated tolerance is two
standard deviations of the measured overhead plus F times two standard deviations of the
measured relaunch time (both from the trials): the run-to-run spread of what the model does
not predict.

    .venv/bin/python experiments/goodput/validate_injected.py \\
        [--results experiments/results/recovery_rate_small.jsonl] [--cli build/bindings/cli/memento]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def lost_total(lost):
    keys = ("detection", "relaunch", "restore", "reprotect", "recompute")
    return sum(lost.get(k, 0.0) or 0.0 for k in keys)


def trial_overheads(records, steps, useful_s):
    """Per scheme: the launch overhead and the relaunch time of each trial run."""
    out = {}
    for r in records:
        if r.get("record") != "trial" or not r.get("restore", {}).get("ok"):
            continue
        lost = r["restore"]["lost"]
        time_lost = (lost.get("detection_s", 0) + lost.get("relaunch_s", 0) +
                     lost.get("restore_s", 0) + lost.get("reprotect_s", 0) +
                     lost.get("recompute_s", 0))
        o = out.setdefault(r["scheme"], {"overhead": [], "relaunch": []})
        o["overhead"].append(r["wall_s"] - time_lost - useful_s)
        o["relaunch"].append(lost.get("detection_s", 0) + lost.get("relaunch_s", 0))
    return out


def advise(cli, nodes, step_s, failures_per_s, costs, scheme, save_every, persist_every):
    node_mtbf_h = nodes / failures_per_s / 3600.0
    remote_only = scheme == "baseline"
    args = [cli, "advise", "--nodes", str(nodes), "--shard", "1M", "--step-s", repr(step_s),
            "--node-mtbf-h", repr(node_mtbf_h), "--memory-budget", "8",
            "--schemes", "none" if remote_only else scheme,
            "--relaunch-s", repr(costs["relaunch_s"]),
            "--stall-s", repr(costs["stall_s"]), "--protect-s", repr(costs["stall_s"]),
            "--persist-s", repr(costs["stall_s"])]
    for src in ("local", "replica", "decode", "remote"):
        args += ["--recover-%s-s" % src, repr(costs["restore_s"])]
    args += ["--save-every-steps", str(save_every), "--persist-every-saves", str(persist_every),
             "--json"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("memento advise failed (%d): %s\n%s" % (p.returncode, " ".join(args), p.stderr))
    j = json.loads(p.stdout)
    return j["remote_only"] if remote_only else j["schemes"][0]


def model_wall(cli, rec, steps, costs, persist_every):
    """The model's wall time for the run's useful work W and its F failures.

    The runs inject exactly F failures, at step boundaries and never during a recovery, so
    the comparison is conditional on F: the model gives the stall share (e0) and the
    expected cost of one failure (recovery plus work redone, by where the failure is
    served from), taken in the limit of a low failure rate where no failure strikes a
    recovery (the Daly restart term vanishes): wall = W / e0 + F x cost per failure.
    """
    useful = rec["useful_s"]
    cand = advise(cli, rec["nodes"], useful / steps, 1e-7, costs, rec["scheme"], 1,
                  persist_every)
    e = cand["estimate"]
    per_failure = (e["recovery_s_per_day"] + e["lost_s_per_day"]) / e["failures_per_day"]
    e0 = 1 - e["stall_s_per_day"] / 86400.0
    return useful / e0 + rec["failures"] * per_failure, per_failure


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results",
                    default=os.path.join(ROOT, "experiments/results/recovery_rate_small.jsonl"))
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/bindings/cli/memento"))
    ap.add_argument("--steps", type=int, default=12, help="steps of each run (recovery_rate's)")
    ap.add_argument("--persist-every", type=int, default=3,
                    help="recovery_rate's persist interval, in saves")
    a = ap.parse_args()

    records = load(a.results)
    goodput = [r for r in records if r.get("record") == "goodput" and r.get("ok")]
    if not goodput:
        sys.exit("no finished goodput record in " + a.results)
    useful_s = goodput[0]["useful_s"]
    trials = trial_overheads(records, a.steps, useful_s)
    pooled = {"overhead": [x for t in trials.values() for x in t["overhead"]],
              "relaunch": [x for t in trials.values() for x in t["relaunch"]]}

    print("%-10s %3s %2s %8s %8s %8s %8s %9s %9s %9s %9s %5s" % (
        "scheme", "N", "F", "wall_s", "ovh_s", "G_model", "wall_prd", "measured", "predicted",
        "tol", "diff", "agree"))
    rows = []
    for rec in goodput:
        n = rec["failures"]
        lost = rec["time_lost_s"] or {}
        costs = {"relaunch_s": (lost.get("detection", 0) + lost.get("relaunch", 0)) / n,
                 "restore_s": (lost.get("restore", 0) + lost.get("reprotect", 0)) / n,
                 # not itemised by the runs: the save cost is inside the step time
                 "stall_s": 0.0}
        own = trials.get(rec["scheme"], pooled)  # the baseline has no trials: all schemes
        if len(own["overhead"]) < 2 or len(own["relaunch"]) < 2:
            sys.exit("%s: fewer than 2 successful trials of %s in %s to measure its overhead"
                     % (rec["scheme"], rec["scheme"], a.results))
        ovh = statistics.mean(own["overhead"])
        tol = 2 * statistics.stdev(own["overhead"]) + n * 2 * statistics.stdev(own["relaunch"])
        wall_model, per_failure = model_wall(a.cli, rec, a.steps, costs, a.persist_every)
        g = useful_s / wall_model
        wall_pred = ovh + wall_model
        pred = useful_s / wall_pred
        # Tolerance on the wall time, carried to goodput (W / wall is monotone).
        lo, hi = useful_s / (wall_pred + tol), useful_s / max(wall_pred - tol, 1e-9)
        ok = lo <= rec["goodput"] <= hi
        row = {"scheme": rec["scheme"], "nodes": rec["nodes"], "failures": n,
               "wall_s": rec["wall_s"], "overhead_s": ovh, "overhead_trials": len(own["overhead"]),
               "model_goodput": g, "model_wall_s": wall_model,
               "model_cost_per_failure_s": per_failure, "wall_pred_s": wall_pred,
               "measured": rec["goodput"], "predicted": pred, "interval": [lo, hi],
               "wall_tolerance_s": tol, "agree": ok}
        rows.append(row)
        print("%-10s %3d %2d %8.1f %8.1f %8.4f %8.1f %9.4f %9.4f %9s %+9.4f %5s" % (
            rec["scheme"], rec["nodes"], n, rec["wall_s"], ovh, g, wall_pred, rec["goodput"],
            pred, "%.4f-%.4f" % (lo, hi), rec["goodput"] - pred, "yes" if ok else "NO"))
    agree = sum(r["agree"] for r in rows)
    print("%d of %d measured goodputs inside the model's interval (tolerance: 2 sd of the "
          "launch overhead + F x 2 sd of the relaunch time, from %d trial runs)" % (
              agree, len(rows), len(pooled["overhead"])))
    for r in rows:
        print(json.dumps(r))
    return 0 if agree == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
