"""One rank of a job WITHOUT memento (launched by test_dcp.py under torchrun or mpirun,
or alone for one rank): what a project that does not use memento does with
torch.distributed.checkpoint.

The job: an FSDP2 TinyGPT (DTensor parameters and AdamW state, sharded over the ranks;
a plain module on one rank) and a small MLP replicated on every rank (DDP-style), each
with AdamW. State dict names: {"model", "optimizer", "ddp", "ddp_optimizer"}.

    --phase save   train --steps steps and dcp.save the plain state dicts to --dir
    --phase load   dcp.load --dir into freshly built modules on this world size and write
                   the whole tensors to --out (rank 0)
This file never imports memento (checked at the end).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "experiments", "torch"))
import fsdp2_train  # noqa: E402

def distributed():
    return dist.is_available() and dist.is_initialized()


def build(world):
    """(gpt, its AdamW, mlp, its AdamW); gpt FSDP2-sharded over `world` ranks when > 1."""
    torch.manual_seed(7)
    if world > 1:
        gpt, opt_g = fsdp2_train.build(7, 0, world)
    else:
        gpt = fsdp2_train.TinyGPT()
        opt_g = torch.optim.AdamW(gpt.parameters(), lr=1e-2)
    torch.manual_seed(9)
    mlp = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))
    opt_m = torch.optim.AdamW(mlp.parameters(), lr=0.05, weight_decay=0.1)
    return gpt, opt_g, mlp, opt_m


def prime(optimizer):
    """AdamW state as its first step makes it (zeros), so that load has targets."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not optimizer.state.get(p):
                optimizer.state[p] = {"step": torch.tensor(0.0),
                                      "exp_avg": torch.zeros_like(p),
                                      "exp_avg_sq": torch.zeros_like(p)}


def train(gpt, opt_g, mlp, opt_m, first, last):
    """Steps first+1..last; yields each step once taken. The MLP gets the same gradients
    on every rank (replicated)."""
    for step in range(first + 1, last + 1):
        g = torch.Generator().manual_seed(100 + step)
        fsdp2_train.test_gradients(gpt, g)
        opt_g.step()
        opt_g.zero_grad()
        x = torch.randn(5, 6, generator=g)
        mlp(x).pow(2).mean().backward()
        opt_m.step()
        opt_m.zero_grad()
        yield step


def state_dict(gpt, opt_g, mlp, opt_m):
    return {"model": gpt.state_dict(), "optimizer": opt_g.state_dict(),
            "ddp": mlp.state_dict(), "ddp_optimizer": opt_m.state_dict()}


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def whole(gpt, opt_g, mlp, opt_m):
    """{name: whole tensor} under the state dict names (collective)."""
    out = {}
    for top, sd in state_dict(gpt, opt_g, mlp, opt_m).items():
        if "optimizer" in top:
            for i, st in sd["state"].items():
                for k, v in st.items():
                    out["%s.state.%s.%s" % (top, i, k)] = full(v).detach().clone()
            for g, group in enumerate(sd["param_groups"]):
                out["%s.param_groups.%d.lr" % (top, g)] = torch.tensor(group["lr"])
        else:
            for k, v in sd.items():
                out["%s.%s" % (top, k)] = full(v).detach().clone()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["save", "load"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dir", required=True)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if "WORLD_SIZE" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ:
        rank, world = fsdp2_train.ddp_common.init_distributed()
    else:
        rank, world = 0, 1
    gpt, opt_g, mlp, opt_m = build(world)
    if args.phase == "save":
        for _ in train(gpt, opt_g, mlp, opt_m, 0, args.steps):
            pass
        dcp.save(state_dict(gpt, opt_g, mlp, opt_m), checkpoint_id=args.dir)
    else:
        prime(opt_g)
        prime(opt_m)
        sd = state_dict(gpt, opt_g, mlp, opt_m)
        dcp.load(sd, checkpoint_id=args.dir)
        opt_g.load_state_dict(sd["optimizer"])
        opt_m.load_state_dict(sd["ddp_optimizer"])
        state = whole(gpt, opt_g, mlp, opt_m)
        if rank == 0:
            torch.save(state, args.out)
    assert "memento" not in sys.modules, "this job must not use memento"
    print("rank %d: plain %s on %d ranks done" % (rank, args.phase, world), flush=True)
    if distributed():
        # No rank tears gloo down while a peer may still use its connections.
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.15 over gloo sometimes aborts in interpreter finalization after a DCP
    # load ("terminate called without an active exception", pytorch/pytorch#190489);
    # this job's results are written: it leaves without finalizing.
    sys.stdout.flush()
    os._exit(0)
