#!/usr/bin/env python3
"""FSDP2 on N ranks: what a checkpoint costs each rank when the model is sharded, against
the same model registered whole on every rank; both in the same run.

    .venv/bin/torchrun --nproc_per_node 4 experiments/torch/bench_fsdp2.py \\
        [--layers 8] [--width 1024] [--iters 5]       (MEMENTO_SCHEME, default replica:2)
    MASTER_PORT=29500 mpirun -np 4 .venv/bin/python experiments/torch/bench_fsdp2.py ...

Model: --layers Linear(width, width) layers and AdamW state (float32). Each phase
registers with memento and times save() + wait() (snapshot, protect, commit) --iters
times on every rank; the figure of a checkpoint is the slowest rank's, median over
--iters.
  whole   every rank registers the unsharded model and its optimizer (what a job
          without sharding checkpoints per rank);
  fsdp2   fully_shard over the N ranks: each rank registers its DTensor shards.
Prints one JSON line (rank 0): bytes and seconds per rank, and fsdp2 / whole with the
target 1/N + 10 %.
"""
import argparse
import json
import os
import statistics
import time
import uuid

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import ddp_common
import memento


def model_and_optimizer(layers, width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    return model


def cost(model, optimizer, iters, job):
    ck = memento.Checkpointer(job=job)
    ck.register(model, optimizer)
    ck.save(1)  # lays out the node store
    ck.wait()
    stored = sum(t.numel() * t.element_size() for _, t, _ in ck.tensors())
    times = []
    for i in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        ck.save(2 + i)
        ck.wait()
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(elapsed.item())
    # Closed at the end: under mpirun the last close finalizes MPI for the process.
    return stored, statistics.median(times), ck


def remove(job):
    for s in os.listdir("/dev/shm"):
        if s.startswith("memento.%s." % job):
            try:
                os.unlink(os.path.join("/dev/shm", s))
            except FileNotFoundError:
                pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--iters", type=int, default=5)
    args = p.parse_args()
    rank, world = ddp_common.init_distributed()  # torchrun or mpirun (MASTER_ADDR/PORT)
    os.environ.setdefault("MEMENTO_SCHEME", "replica:2")
    base = "bf-%s" % uuid.uuid4().hex[:6] if rank == 0 else ""
    names = [base]
    dist.broadcast_object_list(names)

    whole = model_and_optimizer(args.layers, args.width)
    whole_opt = torch.optim.AdamW(whole.parameters(), lr=1e-3)
    whole_bytes, whole_s, whole_ck = cost(whole, whole_opt, args.iters, names[0] + "-whole")

    mesh = init_device_mesh("cpu", (world,))
    sharded = model_and_optimizer(args.layers, args.width)
    for layer in sharded:
        fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    sharded_opt = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
    fsdp_bytes, fsdp_s, fsdp_ck = cost(sharded, sharded_opt, args.iters, names[0] + "-fsdp2")
    whole_ck.close()
    fsdp_ck.close()
    dist.barrier()  # every rank has closed: its segments may go
    if rank == 0:
        remove(names[0] + "-whole")
        remove(names[0] + "-fsdp2")
    if rank == 0:
        print(json.dumps({
            "torch": torch.__version__, "ranks": world, "scheme": os.environ["MEMENTO_SCHEME"],
            "whole_bytes_per_rank": whole_bytes, "fsdp2_bytes_per_rank": fsdp_bytes,
            "whole_s": round(whole_s, 4), "fsdp2_s": round(fsdp_s, 4),
            "fsdp2_vs_whole": round(fsdp_s / whole_s, 3),
            "bytes_ratio": round(fsdp_bytes / whole_bytes, 3),
            "target": round(1.0 / world + 0.1 / world, 3),
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
