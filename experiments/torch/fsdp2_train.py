"""FSDP2 (fully_shard) training of a small transformer over gloo, checkpointed in memory
by memento every step: parameters and AdamW state are DTensors sharded over the ranks,
and memento places each rank's shard from them (no shard specs by hand).

    torchrun --nproc-per-node 4 fsdp2_train.py --steps 10 [--out DIR] [--plain]
    mpirun -np 4 python fsdp2_train.py ...            (MASTER_ADDR / MASTER_PORT set)

--plain trains without memento (the failure-free reference of the tests).
"""
import argparse

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import ddp_common
import fault


class Block(torch.nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, 2, batch_first=True)
        self.up = torch.nn.Linear(width, hidden)    # hidden=30: uneven over 4 ranks
        self.drop = torch.nn.Dropout(0.1)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x):
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.down(self.drop(torch.relu(self.up(self.norm(x)))))


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab=37, width=16, hidden=30, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(Block(width, hidden) for _ in range(layers))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def full(t):
    """The whole tensor of a DTensor (collective), or the tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def dump(path, model, optimizer):
    """Whole parameters, whole AdamW state and the next random draws, for bit comparisons."""
    import random

    import numpy as np
    params = {k: full(v.detach()).clone() for k, v in model.state_dict().items()}
    opt = {}
    for i, p in enumerate(model.parameters()):
        for k, v in optimizer.state[p].items():
            opt["%d.%s" % (i, k)] = full(v).clone() if torch.is_tensor(v) else v
    torch.save({"params": params, "optimizer": opt,
                "draws": (torch.rand(8), np.random.rand(4), random.random())}, path)


# FSDP2's forward needs streams with events; torch.cpu.Stream has them from torch 2.7
# on. Before, tests give the model's DTensor parameters gradients by hand.
FSDP2_RUNS_ON_CPU = hasattr(torch.cpu.Stream(), "record_event")


def test_gradients(model, g):
    """Gradients for one step of the tests, drawn from generator `g`: a forward and
    backward pass of a batch where FSDP2 runs on the CPU, else random gradients placed
    like the parameters (DTensors) or whole (a plain module)."""
    if FSDP2_RUNS_ON_CPU or not any(hasattr(p, "device_mesh") for p in model.parameters()):
        tokens = torch.randint(0, 37, (4, 9), generator=g)
        logits = model(tokens[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 37),
                                          tokens[:, 1:].reshape(-1)).backward()
        return
    from torch.distributed.tensor import distribute_tensor
    for p in model.parameters():
        p.grad = distribute_tensor(torch.randn(p.shape, generator=g), p.device_mesh,
                                   p.placements)


def build(seed, rank, world):
    ddp_common.seed(seed, rank)  # the same initial weights everywhere; per-rank data
    mesh = init_device_mesh("cpu", (world,))
    model = TinyGPT()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default="")
    p.add_argument("--plain", action="store_true", help="no memento (the reference run)")
    args = p.parse_args()
    rank, world = ddp_common.init_distributed()
    model, optimizer = build(args.seed, rank, world)
    ck, start = None, None
    if not args.plain:
        import memento
        ck = memento.Checkpointer()  # settings from MEMENTO_* (scheme, job, ...)
        ck.register(model, optimizer)
        start = ck.restore()
        print("rank %d: %s; %s" % (rank, start and start.summary,
                                   start.protection if start else ck.protection_state()),
              flush=True)
    for step in range(start or 0, args.steps):
        tokens = torch.randint(0, 37, (4, 9))
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 37), tokens[:, 1:].reshape(-1))
        loss.backward()
        if ck:
            ck.wait_snapshot()
        optimizer.step()
        optimizer.zero_grad()
        if ck:
            ck.save(step + 1)
        fault.maybe_die(step + 1, rank)
    if ck:
        ck.wait()
        print("rank %d: checkpoints %s" % (rank, ck.protection_state()), flush=True)
    if args.out:
        dump("%s/rank%d.pt" % (args.out, rank), model, optimizer)
    print("rank %d: done %d steps, loss %.6f" % (rank, args.steps, loss.item()), flush=True)
    if ck:
        ck.close()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
