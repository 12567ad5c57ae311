#!/usr/bin/env python3
"""Time lost per node failure: in-job recovery against a full relaunch, same job, same run.

    PYTHONPATH=build/python .venv/bin/python experiments/torch/bench_injob.py \\
        [--reps 3] [--steps 20] [--inject 1@8] [--launcher mpirun] [--cli build/bindings/cli/memento]
        [--job python|demo|ulfm|demo_ulfm] [--nodes 4] [--scheme replica:2]

Runs experiments/torch/gpt_train.py (a small GPT, DDP over gloo, AdamW; --job python) or
the C++ demo GPT (build/experiments/demo/memento_demo, launch::Resilient; --job demo) on
--nodes virtual nodes of one rank under `memento launch` with one injected node loss, in
three modes, interleaved --reps times:
  relaunch       --recovery relaunch: every rank is killed and the job started again;
  in-job fresh   --recovery in-job: the survivors keep running, a fresh process takes
                 the lost place (it pays the interpreter's and torch's start-up);
  in-job spare   --recovery in-job --spares 1: a warm spare (started ahead, torch
                 imported) takes it.
--job ulfm: the C++ job that repairs its own MPI world over ULFM
(tests/runtime/ulfm/ulfm_worker.cc on runtime::RunResilient, --step-ms of sleep per step,
MPI collectives) under Open MPI 5's mpirun (--ulfm-mpirun), in two modes:
  relaunch       --recovery relaunch under that mpirun without --with-ft (a lost rank ends
                 the job, which is started again);
  in-job spare   --launcher ulfm --recovery in-job --spares 1: the survivors repair their
                 world and a spare rank of the same mpirun takes the lost place.
--job demo_ulfm: the C++ demo GPT built against that MPI
(build/experiments/demo/memento_demo_ulfm: MPI collectives, its world repaired over ULFM)
in the same two modes, and a third:
  relaunch sys   memento_demo (the same training, built against the system's MPI) under
                 the system's mpirun, --recovery relaunch: what the demo's relaunch costs
                 without Open MPI 5's start-up.
Time lost per failure is the launcher's own account (summary.time_lost_s): detection +
relaunch (or in-job rejoin) + restore + re-protect + recompute. Prints the medians per
mode, the ratios to the relaunch, and one JSON line with every run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {"relaunch": [], "in-job fresh": ["--recovery", "in-job"],
         "in-job spare": ["--recovery", "in-job", "--spares", "1"]}
ULFM_MODES = {"relaunch": [], "in-job spare": ["--recovery", "in-job", "--spares", "1"]}
DEMO_ULFM_MODES = {"relaunch": [], "relaunch sys": [],
                   "in-job spare": ["--recovery", "in-job", "--spares", "1"]}
PARTS = ("detection", "relaunch", "rejoin", "restore", "reprotect", "recompute")


def over_ulfm(args):
    return args.job in ("ulfm", "demo_ulfm")


def modes(args):
    if args.job == "demo_ulfm":
        return DEMO_ULFM_MODES
    return ULFM_MODES if args.job == "ulfm" else MODES


def run(args, mode):
    records = tempfile.mktemp(prefix="memento-bench-injob-")
    out = tempfile.mktemp(prefix="memento-bench-injob-out-")
    job = "bench-injob-%s" % uuid.uuid4().hex[:8]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [args.cli, "launch", "-n", str(args.nodes), "--ranks-per-node", "1", "--scheme",
           args.scheme, "--job", job, "--quiet", "--backoff", "0", "--records", records,
           "--torchrun", torchrun, "--inject", args.inject] + modes(args)[mode]
    ulfm = over_ulfm(args) and not mode.startswith("relaunch")
    cmd += ["--launcher", "ulfm" if ulfm else args.launcher]
    spares = "0" if mode.startswith("relaunch") else "1"
    if over_ulfm(args) and mode == "relaunch":
        cmd += ["--mpirun", args.ulfm_mpirun + " --oversubscribe"]
    if mode == "relaunch sys":
        cmd += ["--", args.demo, "--steps", str(args.steps), "--quiet"]
    elif args.job == "ulfm":
        cmd += ["--", args.ulfm_job, str(args.steps), spares, str(args.step_ms)]
    elif args.job == "demo_ulfm":
        cmd += ["--", args.demo_ulfm, "--spares", spares, "--steps", str(args.steps), "--quiet"]
    elif args.job == "demo":
        cmd += ["--", args.demo, "--steps", str(args.steps), "--quiet"]
    else:
        cmd += ["--", sys.executable, os.path.join(HERE, "gpt_train.py"), "--steps",
                str(args.steps), "--out", out]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if p.returncode != 0:
            sys.exit("%s: launch failed (%d):\n%s" % (mode, p.returncode, p.stdout[-3000:]))
        with open(records) as f:
            summary = [json.loads(line) for line in f if '"summary"' in line][-1]
        if args.job != "python":
            digest = summary["state_hash"]
        else:
            with open(out) as f:
                digest = f.read().split()[0]
    finally:
        for path in (records, out):
            if os.path.exists(path):
                os.unlink(path)
    lost = summary["time_lost_s"]
    row = {k: lost.get(k, 0.0) for k in PARTS}
    row["total"] = sum(row.values())
    row["wall"] = summary["wall_s"]
    row["digest"] = digest
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--inject", default="1@8")
    p.add_argument("--launcher", default="mpirun", choices=("mpirun", "torchrun"))
    p.add_argument("--cli", default=os.path.join(HERE, "..", "..", "build", "bindings", "cli",
                                                  "memento"))
    p.add_argument("--job", default="python", choices=("python", "demo", "ulfm", "demo_ulfm"))
    p.add_argument("--ulfm-job", default=os.path.join(HERE, "..", "..", "build", "tests",
                                                      "runtime", "memento_ulfm_worker"))
    p.add_argument("--ulfm-mpirun", default=os.path.join(HERE, "..", "..", ".venv", "ulfm-mpi",
                                                         "bin", "mpirun"))
    p.add_argument("--step-ms", type=int, default=30, help="--job ulfm: sleep per step")
    p.add_argument("--demo", default=os.path.join(HERE, "..", "..", "build", "experiments",
                                                   "demo", "memento_demo"))
    p.add_argument("--demo-ulfm", default=os.path.join(HERE, "..", "..", "build", "experiments",
                                                        "demo", "memento_demo_ulfm"))
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--scheme", default="replica:2")
    args = p.parse_args()
    rows = {m: [] for m in modes(args)}
    for rep in range(args.reps):
        for mode in modes(args):
            rows[mode].append(run(args, mode))
            r = rows[mode][-1]
            print("rep %d %-13s lost %.2f s (%s)" % (rep, mode, r["total"], ", ".join(
                "%s %.2f" % (k, r[k]) for k in PARTS if r[k] > 0)), flush=True)
    digests = {r["digest"] for rs in rows.values() for r in rs}
    if len(digests) != 1:
        sys.exit("the modes ended in different states: %s" % digests)
    med = {m: {k: statistics.median(r[k] for r in rs) for k in PARTS + ("total", "wall")}
           for m, rs in rows.items()}
    base = med["relaunch"]["total"]
    print("\nmedians of %d runs, %s job, %d nodes, %s, %s, one loss (%s), state %s in every run"
          % (args.reps, args.job, args.nodes, args.scheme, args.launcher, args.inject,
             digests.pop()))
    sys_base = med["relaunch sys"]["total"] if "relaunch sys" in med else None
    print("%-13s %9s %9s %9s %9s %9s %9s %9s%s" % (
        "mode", "lost s", "relaunch", "rejoin", "restore", "detect", "recomp", "÷ relaunch",
        "  ÷ relaunch sys" if sys_base else ""))
    for m, v in med.items():
        print("%-13s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.3f%s" % (
            m, v["total"], v["relaunch"], v["rejoin"], v["restore"], v["detection"],
            v["recompute"], v["total"] / base if base > 0 else float("nan"),
            "  %9.3f" % (v["total"] / sys_base) if sys_base else ""))
    print(json.dumps({"job": args.job, "nodes": args.nodes, "scheme": args.scheme,
                      "launcher": args.launcher, "inject": args.inject, "medians": med,
                      "ratio_fresh": med["in-job fresh"]["total"] / base if "in-job fresh" in med
                      else None,
                      "ratio_spare": med["in-job spare"]["total"] / base,
                      "ratio_spare_sys": med["in-job spare"]["total"] / sys_base if sys_base
                      else None, "runs": rows}))


if __name__ == "__main__":
    main()
