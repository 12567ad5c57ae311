"""One rank of the DTensor tests (launched by test_dtensor.py under torchrun or mpirun).

Modules: `Placed`, DTensor parameters placed by hand on a 1-D mesh of every rank
and a 2-D mesh (Shard(0) uneven, Shard(1) uneven, Replicate, (Shard(0), Shard(1)),
(Replicate, Shard(0)), (Shard(0), Replicate)), and the FSDP2 TinyGPT of
experiments/torch/fsdp2_train.py; AdamW over each.

    --phase check    save, then restore in place into zeroed tensors: bit-exact; every
                     global element stored once over all ranks; bad placements refused
    --phase save     train and save --steps steps; rank 0 writes the whole tensors to --ref,
                     and the job saves its module state dicts with torch.distributed.checkpoint
                     to --ref.dcp
    --phase restore  elastic restore on this world size: whole tensors equal --ref's, and
                     every local shard equals what dcp.load reshards from --ref.dcp
Node identities: DTENSOR_NODES (comma-separated, by rank).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "experiments", "torch"))
import fsdp2_train  # noqa: E402

import memento  # noqa: E402

SHAPES = {  # name: (global shape, placements on (1-D mesh,) or (2-D mesh))
    "a": ((10, 6), "1d", [Shard(0)]),
    "b": ((5, 9), "1d", [Shard(1)]),
    "c": ((7, 3), "1d", [Replicate()]),
    "d": ((6, 5), "2d", [Shard(0), Shard(1)]),
    "e": ((9, 4), "2d", [Replicate(), Shard(0)]),
    "f": ((8, 3), "2d", [Shard(0), Replicate()]),
}


class Placed(torch.nn.Module):
    def __init__(self, meshes):
        super().__init__()
        g = torch.Generator().manual_seed(11)
        for name, (shape, mesh, placements) in SHAPES.items():
            t = distribute_tensor(torch.randn(shape, generator=g), meshes[mesh], placements)
            setattr(self, name, torch.nn.Parameter(t))


def meshes_for(world):
    two = (2, world // 2) if world >= 4 else (1, world)
    return {"1d": init_device_mesh("cpu", (world,)), "2d": init_device_mesh("cpu", two)}




def train(placed, opt_p, gpt, opt_g, steps, first=0):
    for step in range(first, steps):
        g = torch.Generator().manual_seed(100 + step)
        for name, (shape, _, _) in SHAPES.items():
            p = getattr(placed, name)
            p.grad = distribute_tensor(torch.randn(shape, generator=g), p.device_mesh,
                                       p.placements)
        opt_p.step()
        opt_p.zero_grad()
        fsdp2_train.test_gradients(gpt, g)
        opt_g.step()
        opt_g.zero_grad()
        yield step + 1


def whole(placed, opt_p, gpt, opt_g):
    """Every parameter and optimizer tensor as a whole tensor (collective)."""
    out = {}
    for prefix, module, opt in (("placed", placed, opt_p), ("gpt", gpt, opt_g)):
        for k, v in module.state_dict().items():
            out["%s.%s" % (prefix, k)] = fsdp2_train.full(v.detach()).clone()
        for i, p in enumerate(module.parameters()):
            for k, v in opt.state[p].items():
                out["%s.opt.%d.%s" % (prefix, i, k)] = fsdp2_train.full(v).clone()
    return out


def same_bits(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and
            torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def build(world, rank):
    meshes = meshes_for(world)
    placed = Placed(meshes)
    opt_p = torch.optim.AdamW(placed.parameters(), lr=0.1, foreach=False)
    gpt, opt_g = fsdp2_train.build(7, 0, world)
    return placed, opt_p, gpt, opt_g


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)  # even: torch 2.6's FSDP over TP refuses uneven rows
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def fsdp_over_tp():
    """FSDP2 over tensor parallelism on a (dp 2, tp 2) mesh: ColwiseParallel's rows sharded
    again by fully_shard are placed (_StridedShard(0), Shard(0)); AdamW over it."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(3)
    model = TwoLayers()
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])  # no forward: torch 2.6's FSDP2 has none on the CPU
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def check_fsdp_over_tp(rank):
    """Every rank's stored block is the slice of the whole tensor at the offsets memento
    gives it, and a restore in place gives the same bits back."""
    model, opt = fsdp_over_tp()
    placements = {str(v.placements) for v in model.state_dict().values()}
    assert any("_StridedShard" in p for p in placements), placements
    ck = memento.Checkpointer(node=os.environ["DTENSOR_NODES"].split(",")[rank],
                              job=os.environ["MEMENTO_JOB"] + "-tp", keep_finished=False)
    ck.register(model, opt)
    ck.save(1)
    ck.wait()
    stored, places = {n: t for n, t, _ in ck.tensors()}, ck.placements()
    for key, v in model.state_dict().items():
        whole = v.full_tensor()
        global_shape, offsets = places["model." + key]
        block = whole[tuple(slice(o, o + n) for o, n in zip(offsets, stored["model." + key].shape))]
        assert tuple(global_shape) == tuple(whole.shape), (key, global_shape)
        assert same_bits(block, stored["model." + key]), "rank %d: %s at %s" % (rank, key, offsets)
    before = {k: v._local_tensor.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    assert ck.restore() == 1
    for k, v in model.state_dict().items():
        assert same_bits(v._local_tensor, before[k]), "rank %d: %s differs after restore" % (
            rank, k)
    ck.close()  # finished: its node stores go


def checkpointer(rank):
    nodes = os.environ["DTENSOR_NODES"].split(",")
    return memento.Checkpointer(node=nodes[rank])


def check(rank, world):
    placed, opt_p, gpt, opt_g = build(world, rank)
    ck = checkpointer(rank)
    ck.register(placed, opt_p, gpt=gpt, gpt_optimizer=opt_g)
    for step in train(placed, opt_p, gpt, opt_g, 2):
        ck.save(step)
    ck.wait()
    # Every global element is stored once over all ranks (Replicate placements too).
    stored = {}
    for name, t, _ in ck.tensors():
        stored[name] = t.numel()
    names = sorted(n for n in stored if "step" not in n and n != "__memento__")
    counts = torch.tensor([stored.get(n, 0) for n in names], dtype=torch.int64)
    dist.all_reduce(counts)
    want = {}
    for prefix, module in (("model.", placed), ("gpt.", gpt)):
        for k, v in module.state_dict().items():
            want[prefix + k] = v.numel()
    for i, p in enumerate(placed.parameters()):
        want["optimizer.state.%d.exp_avg" % i] = want["optimizer.state.%d.exp_avg_sq" % i] = \
            p.numel()
    for i, p in enumerate(gpt.parameters()):
        want["gpt_optimizer.state.%d.exp_avg" % i] = \
            want["gpt_optimizer.state.%d.exp_avg_sq" % i] = p.numel()
    for n, c in zip(names, counts.tolist()):
        assert c == want[n], "%s: %d elements stored over all ranks, the tensor has %d" % (
            n, c, want[n])
    assert set(names) == set(want), sorted(set(want) ^ set(names))
    # Restore in place into zeroed local tensors: the same bits, replicas filled.
    before = {k: v.clone() for k, v in local_state(placed, opt_p, gpt, opt_g).items()}
    with torch.no_grad():
        for v in local_state(placed, opt_p, gpt, opt_g).values():
            v.zero_()
    report = ck.restore()
    assert report == 2, report
    after = local_state(placed, opt_p, gpt, opt_g)
    for k, v in before.items():
        assert same_bits(v, after[k]), "rank %d: %s differs after restore" % (rank, k)
    # A Partial placement has nothing to checkpoint: refused by name at register().
    from torch.distributed.tensor.placement_types import Partial
    partial = DTensor.from_local(torch.ones(3), placed.a.device_mesh, [Partial()])
    try:
        ck.register("pending_sum", partial)
        raise AssertionError("a Partial DTensor was registered")
    except memento.InvalidArgumentError as e:
        assert "pending_sum" in str(e) and "Partial" in str(e), str(e)
    ck.save(3)
    ck.close()
    if world == 4:
        check_fsdp_over_tp(rank)
    print("rank %d: dtensor check passed (%d entries)" % (rank, len(names)), flush=True)


def local_state(placed, opt_p, gpt, opt_g):
    out = {}
    for prefix, module, opt in (("placed", placed, opt_p), ("gpt", gpt, opt_g)):
        for k, v in module.state_dict().items():
            out["%s.%s" % (prefix, k)] = (v._local_tensor if isinstance(v, DTensor) else v).detach()
        for i, p in enumerate(module.parameters()):
            for k, v in opt.state[p].items():
                out["%s.opt.%d.%s" % (prefix, i, k)] = \
                    v._local_tensor if isinstance(v, DTensor) else v
    return out


def save(rank, world, steps, ref):
    placed, opt_p, gpt, opt_g = build(world, rank)
    ck = checkpointer(rank)
    ck.register(placed, opt_p, gpt=gpt, gpt_optimizer=opt_g)
    for step in train(placed, opt_p, gpt, opt_g, steps):
        ck.wait_snapshot()
        ck.save(step)
    ck.wait()
    state = whole(placed, opt_p, gpt, opt_g)
    if rank == 0:
        torch.save(state, ref)
    import torch.distributed.checkpoint as dcp
    dcp.save({"placed": placed.state_dict(), "gpt": gpt.state_dict()}, checkpoint_id=ref + ".dcp")
    ck.close()
    print("rank %d: saved %d steps on %d ranks" % (rank, steps, world), flush=True)


def restore(rank, world, steps, ref):
    placed, opt_p, gpt, opt_g = build(world, rank)
    ck = checkpointer(rank)
    ck.register(placed, opt_p, gpt=gpt, gpt_optimizer=opt_g)
    report = ck.restore()
    assert report is not None and int(report) == steps, report
    assert report.elastic, "rank %d: not an elastic restore: %s" % (rank, report.summary)
    remote = [n for n, s in report.sources().items() if s == "remote"]
    assert not remote, "rank %d: from remote storage: %s" % (rank, remote)
    # The reference reshard: DCP loads the same step into fresh modules on this world.
    import torch.distributed.checkpoint as dcp
    placed_ref, _, gpt_ref, _ = build(world, rank)
    reference = {"placed": placed_ref.state_dict(), "gpt": gpt_ref.state_dict()}
    dcp.load(reference, checkpoint_id=ref + ".dcp")
    for prefix, module in (("placed", placed), ("gpt", gpt)):
        for k, v in module.state_dict().items():
            mine, theirs = v._local_tensor, reference[prefix][k]._local_tensor
            assert same_bits(mine, theirs), "rank %d: %s.%s differs from dcp.load's shard" % (
                rank, prefix, k)
    want = torch.load(ref)
    got = whole(placed, opt_p, gpt, opt_g)
    assert set(want) == set(got), sorted(set(want) ^ set(got))
    for k in want:
        assert same_bits(want[k], got[k]), "rank %d: %s differs from the reference" % (rank, k)
    # Training goes on from the restored state.
    for step in train(placed, opt_p, gpt, opt_g, steps + 1, steps):
        ck.wait_snapshot()
        ck.save(step)
    ck.wait()
    ck.close()
    print("rank %d: elastic restore of v%d on %d ranks bit-identical (%d tensors; shards as "
          "dcp.load reshards them)" % (rank, steps, world, len(want)), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["check", "save", "restore"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ref", default="")
    args = p.parse_args()
    rank, world = fsdp2_train.ddp_common.init_distributed()  # torchrun or mpirun
    torch.manual_seed(5)
    {"check": lambda: check(rank, world),
     "save": lambda: save(rank, world, args.steps, args.ref),
     "restore": lambda: restore(rank, world, args.steps, args.ref)}[args.phase]()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
