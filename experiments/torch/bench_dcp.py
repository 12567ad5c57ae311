#!/usr/bin/env python3
"""Stall per checkpoint: memento vs torch.distributed.checkpoint (DCP), same state, same run.

    .venv/bin/python experiments/torch/bench_dcp.py [--mib 256] [--tensors 300] [--iters 5]
        [--compute-s 1.0] [--dir /tmp]

State: a model of --tensors / 4 parameters (sizes geometric from 4 KiB to 64 MiB, about
--mib / 3 MiB) and its AdamW state (tensor step, exp_avg, exp_avg_sq): --tensors
tensors, about --mib MiB. One rank (a gloo process group of one, which DCP's
async_save needs).
  memento stall  time the training thread spends in save() and in wait_snapshot()
                 when --compute-s of forward/backward (a sleep) separates them;
  dcp.save       torch.distributed.checkpoint.save of {"model", "optim"} state dicts
                 to a fresh directory in --dir (blocking: the whole write);
  async blocking the part of dcp.async_save that blocks training (staging to CPU and
                 starting the write); the write is waited for outside the timing.
Medians over --iters; prints one JSON line with the two ratios and their targets.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import tempfile
import time
import uuid

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import memento
from bench_stall import param_sizes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--compute-s", type=float, default=1.0)
    p.add_argument("--dir", default=tempfile.gettempdir())
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0,
                            world_size=1)
    torch.manual_seed(0)
    sizes = param_sizes((args.tensors + 3) // 4, args.mib * 1024 * 1024 / 3)
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n)) for n in sizes])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for q in model:
        q.grad = torch.randn_like(q)
    opt.step()

    job = "bd-%s" % uuid.uuid4().hex[:8]
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt)
    ck.save(1)  # lays out the node store (first save)
    ck.wait()
    tensors = len(ck.tensors())
    total = sum(t.numel() * t.element_size() for _, t, _ in ck.tensors())
    stalls = []
    for i in range(args.iters):
        t0 = time.perf_counter()
        ck.save(2 + i)
        t1 = time.perf_counter()
        time.sleep(args.compute_s)
        t2 = time.perf_counter()
        ck.wait_snapshot()
        stalls.append((t1 - t0) + (time.perf_counter() - t2))
        ck.wait()
    ck.close()
    for s in os.listdir("/dev/shm"):
        if s.startswith("memento.%s." % job):
            os.unlink(os.path.join("/dev/shm", s))

    def state():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    root = tempfile.mkdtemp(prefix="bench-dcp-", dir=args.dir)
    saves, blocking = [], []
    try:
        for i in range(args.iters):
            path = os.path.join(root, "sync%d" % i)
            t0 = time.perf_counter()
            dcp.save(state(), checkpoint_id=path)
            saves.append(time.perf_counter() - t0)
            shutil.rmtree(path)
        for i in range(args.iters):
            path = os.path.join(root, "async%d" % i)
            t0 = time.perf_counter()
            future = dcp.async_save(state(), checkpoint_id=path)
            blocking.append(time.perf_counter() - t0)
            future.result()
            shutil.rmtree(path)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        dist.destroy_process_group()
    stall, save, block = (statistics.median(x) for x in (stalls, saves, blocking))
    print(json.dumps({
        "torch": torch.__version__, "tensors": tensors, "bytes": total,
        "compute_s": args.compute_s, "memento_stall_s": round(stall, 6),
        "dcp_save_s": round(save, 4), "dcp_async_save_blocking_s": round(block, 4),
        "stall_vs_dcp_save": round(stall / save, 5), "target_vs_dcp_save": 0.01,
        "stall_vs_async_blocking": round(stall / block, 5), "target_vs_async_blocking": 0.1,
    }))


if __name__ == "__main__":
    main()
