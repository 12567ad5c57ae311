"""Tensor-parallel MLP over gloo, checkpointed by memento, restorable onto another world size.

The hidden layer of width H is split over the N ranks, rows H*r//N .. H*(r+1)//N
(uneven when N does not divide H):
    layer 1, column parallel: w1 [H, D_in] and b1 [H] sharded along dim 0;
    layer 2, row parallel:    w2 [D_out, H] sharded along dim 1, its bias b2
                              [D_out] the same on every rank;
    y = all_reduce_sum(relu(x w1_r^T + b1_r) w2_r^T) + b2.
Every rank trains on the same batch, drawn from the global step, and the global
weights are initialised from a seed and then sliced, so the global model does not
depend on N (up to the summation order of the allreduce).

memento: the sharded parameters are registered with their place in the global
tensors (Adam's moments inherit it), b2 and its optimizer as replicated. A job
saved on N virtual nodes and relaunched on N' ranks with elastic=True gets its
new slices assembled from the old ones that survive in memory.

Launch: mpirun (OMPI_*) or torchrun, MASTER_ADDR / MASTER_PORT for gloo.
Environment hooks of the tests:
    EXAMPLE_KILL_STEP=s, EXAMPLE_KILL_RANKS=r1,r2: those ranks SIGKILL themselves
        once checkpoint s is committed;
    EXAMPLE_NODE_IDS=0,2,3: rank k takes the node identity "<host>/<k-th id>" (a
        relaunch on the surviving virtual nodes of a job that ran with
        MEMENTO_RANKS_PER_NODE=1).
"""
import argparse
import hashlib
import json
import os
import signal
import socket

import torch
import torch.distributed as dist

import memento
from ddp_common import init_distributed

D_IN, D_OUT = 16, 4


class _SumOverRanks(torch.autograd.Function):
    """all_reduce(sum) forward, identity backward (Megatron's row-parallel output).

    Every rank computes the same loss from the same sum, so the gradient of each
    rank's partial sum is the gradient of the sum; torch.distributed.nn's
    all_reduce would sum the N identical gradients instead (N times too large).
    """

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def rows(hidden, rank, world):
    """This rank's hidden rows [lo, hi)."""
    return hidden * rank // world, hidden * (rank + 1) // world


class ShardedMLP(torch.nn.Module):
    """This rank's slices of w1, b1, w2 (b2 is held outside, it is replicated)."""

    def __init__(self, hidden, rank, world, seed):
        super().__init__()
        self.lo, self.hi = rows(hidden, rank, world)
        w1, b1, w2, _ = global_init(hidden, seed)
        self.w1 = torch.nn.Parameter(w1[self.lo:self.hi].clone())
        self.b1 = torch.nn.Parameter(b1[self.lo:self.hi].clone())
        self.w2 = torch.nn.Parameter(w2[:, self.lo:self.hi].contiguous())

    def shards(self, hidden):
        """memento's shard specs: entry name -> (global shape, offsets)."""
        return {"model.w1": ((hidden, D_IN), (self.lo, 0)),
                "model.b1": ((hidden,), (self.lo,)),
                "model.w2": ((D_OUT, hidden), (0, self.lo))}

    def forward(self, x, b2):
        h = torch.relu(x @ self.w1.t() + self.b1)
        return _SumOverRanks.apply(h @ self.w2.t()) + b2


def global_init(hidden, seed):
    """The global w1, b1, w2, b2 (the same whatever the world size)."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(hidden, D_IN, generator=g) / D_IN ** 0.5
    b1 = torch.randn(hidden, generator=g) * 0.1
    w2 = torch.randn(D_OUT, hidden, generator=g) / hidden ** 0.5
    b2 = torch.randn(D_OUT, generator=g) * 0.1
    return w1, b1, w2, b2


def batch(step, seed, size=32):
    """The batch of a global step: the same on every rank and in every world size."""
    g = torch.Generator().manual_seed(seed * 100003 + step)
    teacher = torch.Generator().manual_seed(seed + 1)
    a = torch.randn(D_IN, D_OUT, generator=teacher)
    x = torch.randn(size, D_IN, generator=g)
    y = torch.tanh(x @ a) + 0.05 * torch.randn(size, D_OUT, generator=g)
    return x, y


def global_digest(model, optimizer, b2, b2_optimizer):
    """sha256 of the assembled global parameters, and of parameters plus Adam state.

    Collective (all_gather_object of the local slices); rank 0 gets the digests,
    the others None.
    """
    def state(opt, p):
        s = opt.state[p]
        return [s["exp_avg"].detach().clone(), s["exp_avg_sq"].detach().clone(),
                float(s["step"])]

    local = {"w1": model.w1.detach().clone(), "b1": model.b1.detach().clone(),
             "w2": model.w2.detach().clone(), "b2": b2.detach().clone(),
             "opt": [state(optimizer, p) for p in (model.w1, model.b1, model.w2)],
             "opt_b2": state(b2_optimizer, b2)}
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, local)
    if dist.get_rank() != 0:
        return None, None
    for p in parts[1:]:
        if not torch.equal(p["b2"], parts[0]["b2"]):
            raise RuntimeError("b2 differs between ranks")
    params = [torch.cat([p["w1"] for p in parts], 0), torch.cat([p["b1"] for p in parts], 0),
              torch.cat([p["w2"] for p in parts], 1), parts[0]["b2"]]
    moments = []
    for i, dim in enumerate((0, 0, 1)):
        moments.append(torch.cat([p["opt"][i][0] for p in parts], dim))
        moments.append(torch.cat([p["opt"][i][1] for p in parts], dim))
    moments += parts[0]["opt_b2"][:2]
    steps = sorted({p["opt"][i][2] for p in parts for i in range(3)} | {parts[0]["opt_b2"][2]})

    def sha(tensors, extra=b""):
        h = hashlib.sha256()
        for t in tensors:
            h.update(t.contiguous().numpy().tobytes())
        h.update(extra)
        return h.hexdigest()

    return sha(params), sha(params + moments, repr(steps).encode())


def maybe_die(ck, step, rank):
    """Test hook: EXAMPLE_KILL_RANKS SIGKILL themselves once checkpoint EXAMPLE_KILL_STEP
    is committed (every rank waits for it, so the version survives the kill)."""
    at = os.environ.get("EXAMPLE_KILL_STEP")
    if not at or int(at) != step:
        return
    ck.wait()
    if str(rank) in os.environ.get("EXAMPLE_KILL_RANKS", "").split(","):
        print("rank %d: killed at step %d" % (rank, step), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--hidden", type=int, default=50)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--out", default="", help="rank 0 writes its JSON record here")
    args = p.parse_args()
    rank, world = init_distributed()

    model = ShardedMLP(args.hidden, rank, world, args.seed)
    b2 = torch.nn.Parameter(global_init(args.hidden, args.seed)[3])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    b2_optimizer = torch.optim.Adam([b2], lr=args.lr)

    settings = {}
    ids = os.environ.get("EXAMPLE_NODE_IDS")
    if ids:
        # One virtual node per rank, named like MEMENTO_RANKS_PER_NODE=1 names them.
        settings = {"node": "%s/%s" % (socket.gethostname(), ids.split(",")[rank]),
                    "ranks_per_node": 0}
    ck = memento.Checkpointer(elastic=True, **settings)  # the rest from MEMENTO_*
    ck.register(model, optimizer, shards=model.shards(args.hidden))
    ck.register("b2", b2, replicated=True)
    ck.register(b2_optimizer=b2_optimizer, replicated=True)
    report = ck.restore()
    start = int(report) if report is not None else 0
    if report is None:
        print("rank %d: fresh start (node %s, rows %d..%d)" % (rank, ck.node, model.lo, model.hi),
              flush=True)
    else:
        sources = sorted(set(report.sources().values()))
        print("rank %d: restored v%d elastic=%s sources=%s (node %s, rows %d..%d)"
              % (rank, report.step, bool(report.elastic), ",".join(sources), ck.node, model.lo,
                 model.hi), flush=True)
        if rank == 0:
            print("rank 0: %s" % report.summary, flush=True)
    # What every rank restored (the driver checks all of them).
    mine = {"rank": rank, "node": ck.node,
            "restored_step": report.step if report is not None else None,
            "elastic": bool(report.elastic) if report is not None else None,
            "sources": sorted(set(report.sources().values())) if report is not None else []}
    ranks = [None] * world
    dist.all_gather_object(ranks, mine)
    record = {"world": world, "restored_step": mine["restored_step"],
              "elastic": mine["elastic"], "ranks": ranks, "loss": {}, "sha": {},
              "state_sha": {}}
    sha, state_sha = global_digest(model, optimizer, b2, b2_optimizer)
    record["sha"][str(start)], record["state_sha"][str(start)] = sha, state_sha
    record["restored_sha"], record["restored_state_sha"] = sha, state_sha

    for step in range(start, args.steps):
        x, y = batch(step, args.seed)
        loss = torch.nn.functional.mse_loss(model(x, b2), y)
        loss.backward()
        ck.wait_snapshot()
        optimizer.step()
        b2_optimizer.step()
        optimizer.zero_grad()
        b2_optimizer.zero_grad()
        ck.save(step + 1)
        # loss[s]: the loss of step s (before its update); sha[s + 1]: the model after it.
        record["loss"][str(step)] = loss.item()
        sha, state_sha = global_digest(model, optimizer, b2, b2_optimizer)
        record["sha"][str(step + 1)], record["state_sha"][str(step + 1)] = sha, state_sha
        maybe_die(ck, step + 1, rank)
    ck.wait()
    ck.close()
    record["final_sha"], record["final_state_sha"] = sha, state_sha
    if rank == 0:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(record, f, indent=1)
        print("rank 0: %d ranks, steps %d..%d, last loss %.7f"
              % (world, start, args.steps, loss.item() if args.steps > start else float("nan")),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
