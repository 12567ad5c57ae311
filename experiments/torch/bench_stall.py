#!/usr/bin/env python3
"""Stall per checkpoint of a model + Adam state dict vs torch.save + fsync, and
snapshot bandwidth vs memcpy; all ratios measured in the same run.

    PYTHONPATH=build/python .venv/bin/python experiments/torch/bench_stall.py \
        [--mib 256] [--tensors 300] [--iters 5] [--compute-s 1.0] [--dir /tmp]

State: --tensors tensors (a quarter parameters, the rest Adam's step, exp_avg
and exp_avg_sq), parameter sizes geometric from 4 KiB to at most 64 MiB,
about --mib MiB in all.
  stall      time the training thread spends in save() and in wait_snapshot()
             when --compute-s of forward/backward (a sleep) separates them;
             median and minimum over --iters checkpoints (on a loaded machine
             the median includes waits for a core);
  torch.save torch.save of model + optimizer state_dict to a file in --dir,
             then flush + fsync; median over --iters;
  snapshot   save() then wait_snapshot() at once: the copy into the node store;
  memcpy     one memcpy (numpy copyto, one thread) of the same number of bytes;
  one-tensor the snapshot of a single tensor of the same bytes (many small
             tensors vs one big buffer).
Prints one JSON line.
"""
import argparse
import json
import os
import statistics
import tempfile
import time
import uuid

import numpy as np
import torch

import memento


def param_sizes(count, total_bytes):
    lo, hi = 1024, 16 * 1024 * 1024  # elements: 4 KiB .. 64 MiB of float32
    ratio = (hi / lo) ** (1.0 / max(1, count - 1))
    sizes = [lo * ratio ** i for i in range(count)]
    scale = (total_bytes / 4) / sum(sizes)
    return [max(lo, min(hi, int(s * scale))) for s in sizes]


def snapshot_seconds(ck, step):
    t0 = time.perf_counter()
    ck.save(step)
    ck.wait_snapshot()
    t1 = time.perf_counter()
    ck.wait()
    return t1 - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--compute-s", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dir", default=tempfile.gettempdir())
    args = p.parse_args()
    torch.manual_seed(0)
    n_params = (args.tensors + 3) // 4
    sizes = param_sizes(n_params, args.mib * 1024 * 1024 / 3)
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n)) for n in sizes])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for q in model:
        q.grad = torch.randn_like(q)
    opt.step()
    job = "bs-%s" % uuid.uuid4().hex[:8]
    ck = memento.Checkpointer(job=job, threads=args.threads)
    ck.register(model, opt)
    step = 0

    def next_step():
        nonlocal step
        step += 1
        return step

    ck.save(next_step())  # lays out the node store (first save)
    ck.wait()
    names = ck.entry_names()
    total = sum(t.numel() * t.element_size() for _, t, _ in ck.tensors())

    stalls = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        ck.save(next_step())
        t1 = time.perf_counter()
        time.sleep(args.compute_s)
        t2 = time.perf_counter()
        ck.wait_snapshot()
        t3 = time.perf_counter()
        stalls.append((t1 - t0) + (t3 - t2))
        ck.wait()
    snaps = [snapshot_seconds(ck, next_step()) for _ in range(args.iters)]
    ck.close()

    big = torch.empty(total, dtype=torch.uint8).random_()
    job1 = "bs-%s" % uuid.uuid4().hex[:8]
    one = memento.Checkpointer(job=job1, threads=args.threads)
    one.register("all", big)
    one.save(1)
    one.wait()
    one_snaps = [snapshot_seconds(one, s) for s in range(2, 2 + args.iters)]
    one.close()

    src = big.numpy()
    dst = np.empty_like(src)
    copies = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t0)

    saves = []
    path = os.path.join(args.dir, "bench_stall_%s.pt" % job)
    for _ in range(args.iters):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        saves.append(time.perf_counter() - t0)
        os.unlink(path)
    for j in (job, job1):
        for s in os.listdir("/dev/shm"):
            if s.startswith("memento.%s." % j):
                os.unlink(os.path.join("/dev/shm", s))

    stall = statistics.median(stalls)
    save = statistics.median(saves)
    stall_min, save_min = min(stalls), min(saves)
    snap = min(snaps)
    one_snap = min(one_snaps)
    copy = min(copies)
    print(json.dumps({
        "tensors": len(names) - 1, "bytes": total, "compute_s": args.compute_s,
        "threads": args.threads,
        "stall_s_median": round(stall, 6), "torch_save_fsync_s_median": round(save, 4),
        "stall_ratio": round(stall / save, 5), "stall_target": 0.01,
        "stall_s_min": round(stall_min, 6), "torch_save_fsync_s_min": round(save_min, 4),
        "stall_ratio_min": round(stall_min / save_min, 5),
        "snapshot_s_best": round(snap, 4), "memcpy_s_best": round(copy, 4),
        "snapshot_vs_memcpy": round(copy / snap, 3), "snapshot_target": 0.8,
        "one_tensor_snapshot_s_best": round(one_snap, 4),
        "many_vs_one_tensor": round(one_snap / snap, 3),
        "snapshot_GBps": round(total / snap / 1e9, 2), "memcpy_GBps": round(total / copy / 1e9, 2),
    }))


if __name__ == "__main__":
    main()
