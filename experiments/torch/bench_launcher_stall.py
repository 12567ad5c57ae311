#!/usr/bin/env python3
"""Stall per checkpoint of one Python job under mpirun (MPI transport) and under
torchrun (gloo transport), and their ratio; both launches in the same run.

    PYTHONPATH=build/python .venv/bin/python experiments/torch/bench_launcher_stall.py \\
        [--np 4] [--ranks-per-node 2] [--scheme replica:2] [--layers 64] [--width 320] \\
        [--saves 25] [--step-ms 40] [--protect-reps 5] [--launchers mpirun,torchrun]

Each launch runs the same worker on --np ranks (virtual nodes of --ranks-per-node,
MEMENTO_SCHEME --scheme): a model of --layers Linear(width, width) layers (weight and
bias: 2 x layers tensors) and its AdamW state (exp_avg, exp_avg_sq and step per
parameter), float32, registered with ck.register(model, optimizer). Then --saves
iterations of a simulated training step:
    sleep(--step-ms)          forward / backward on an accelerator (the CPU is free)
    ck.wait_snapshot()
    optimizer.step()          changes every registered tensor
    ck.save(step)
  stall      blocked seconds of save() + wait_snapshot() per save (ck.blocked_seconds()),
             each rank's mean over the saves; the job's figure is the slowest rank's;
  protect    save(); wait() back to back, --protect-reps times: snapshot, protect and
             commit of one version (median per rank, then the slowest rank's).
Prints a line per launcher and one JSON line: {launcher: {...}, "ratio": torchrun / mpirun
stall per save}. mpirun runs as `mpirun --allow-run-as-root --oversubscribe`
(MEMENTO_BENCH_MPIRUN overrides), torchrun as the `torchrun` beside this interpreter.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

def worker(args):
    import torch

    import memento

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        *[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)])
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ck = memento.Checkpointer(job=os.environ["MEMENTO_JOB"])
    ck.register(model, optimizer)
    tensors = ck.tensors()
    state_bytes = sum(t.numel() * t.element_size() for _, t, _ in tensors)
    ck.save(1)  # lays out the node store
    ck.wait()
    blocked0 = ck.blocked_seconds()
    t0 = time.perf_counter()
    step = 1
    for _ in range(args.saves):
        time.sleep(args.step_ms / 1000.0)
        ck.wait_snapshot()
        optimizer.step()
        step += 1
        ck.save(step)
    ck.wait_snapshot()
    stall = (ck.blocked_seconds() - blocked0) / args.saves
    loop_s = time.perf_counter() - t0
    ck.wait()
    protect = []
    for _ in range(args.protect_reps):
        step += 1
        t = time.perf_counter()
        ck.save(step)
        ck.wait()
        protect.append(time.perf_counter() - t)
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    row = {"rank": rank, "launcher": ck.launcher, "tensors": len(tensors),
           "state_mib": state_bytes / 2**20, "stall_s": stall, "loop_s": loop_s,
           "protect_s": statistics.median(protect) if protect else 0.0}
    ck.close()
    # A file per rank: the ranks' stdout lines may interleave.
    with open(os.path.join(os.environ["BENCH_LAUNCHER_STALL_OUT"], "rank%d.json" % rank), "w") as f:
        json.dump(row, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_segments(job):
    for name in os.listdir("/dev/shm"):
        if name.startswith("memento.%s." % job):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except FileNotFoundError:
                pass


def launch(launcher, args, passthrough):
    job = "bls-%s-%s" % (launcher, uuid.uuid4().hex[:6])
    env = dict(os.environ, MEMENTO_JOB=job, MEMENTO_SCHEME=args.scheme,
               MEMENTO_RANKS_PER_NODE=str(args.ranks_per_node), OMP_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    me = [sys.executable, os.path.abspath(__file__), "--worker"] + passthrough
    if launcher == "mpirun":
        mpirun = os.environ.get("MEMENTO_BENCH_MPIRUN",
                                "mpirun --allow-run-as-root --oversubscribe").split()
        cmd = mpirun + ["-np", str(args.np)] + me
    else:
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        cmd = [torchrun, "--nproc_per_node", str(args.np), "--master_port",
               env["MASTER_PORT"], "--max_restarts", "0"] + me[1:]
    with tempfile.TemporaryDirectory() as out:
        env["BENCH_LAUNCHER_STALL_OUT"] = out
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=args.timeout_s)
        finally:
            remove_segments(job)
        rows = []
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                rows.append(json.load(f))
    if r.returncode != 0 or len(rows) != args.np:
        sys.stderr.write(r.stdout[-8000:])
        raise SystemExit("%s: exit %d, %d of %d ranks reported"
                         % (launcher, r.returncode, len(rows), args.np))
    return {"stall_ms": 1e3 * max(x["stall_s"] for x in rows),
            "stall_ms_ranks": [round(1e3 * x["stall_s"], 2)
                               for x in sorted(rows, key=lambda x: x["rank"])],
            "protect_ms": 1e3 * max(x["protect_s"] for x in rows),
            "loop_s": max(x["loop_s"] for x in rows),
            "tensors": rows[0]["tensors"], "state_mib": rows[0]["state_mib"],
            "transport": rows[0]["launcher"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--scheme", default="replica:2")
    p.add_argument("--layers", type=int, default=64)
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--saves", type=int, default=25)
    p.add_argument("--step-ms", type=float, default=40.0)
    p.add_argument("--protect-reps", type=int, default=5)
    p.add_argument("--launchers", default="mpirun,torchrun")
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    passthrough = ["--layers", str(args.layers), "--width", str(args.width),
                   "--saves", str(args.saves), "--step-ms", str(args.step_ms),
                   "--protect-reps", str(args.protect_reps)]
    result = {}
    for launcher in args.launchers.split(","):
        result[launcher] = launch(launcher, args, passthrough)
        r = result[launcher]
        print("%-8s %d ranks, %d tensors, %.1f MiB/rank: stall %.2f ms per save (ranks %s), "
              "protect %.1f ms per version, step %.0f ms"
              % (launcher, args.np, r["tensors"], r["state_mib"], r["stall_ms"],
                 r["stall_ms_ranks"], r["protect_ms"], args.step_ms), flush=True)
    if "mpirun" in result and "torchrun" in result:
        result["ratio"] = result["torchrun"]["stall_ms"] / max(result["mpirun"]["stall_ms"], 1e-6)
        print("torchrun / mpirun stall per save: %.2f (target <= 1.5)" % result["ratio"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
