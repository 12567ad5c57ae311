"""A small GPT trained data-parallel the way public training scripts do it, with memento.

What it has that a resume must get right: a token embedding tied to the output head,
dropout (torch's generator), AdamW with a warm-up + cosine LR schedule, a data loader
that draws random windows from its own generator, and a loop that prefetches the next
batch before the current step ends (so a batch is carried from one step to the next).
memento gets all of it: model, optimizer and scheduler, the loader (state_dict /
load_state_dict) and the carried batch (an `extra` dict the loop updates).

Runs under `memento launch` (mpirun or torchrun), plain torchrun, or plain mpirun:

    memento launch -n 4 --ranks-per-node 2 --scheme replica:2 --launcher torchrun \\
        --inject 1@6,0@9:snapshot -- .venv/bin/python experiments/torch/gpt_train.py --steps 16

Under `memento launch` it reports its steps and loss and takes part in stage fault
injection through memento itself: nothing launcher-specific is in this file. Its training
runs inside memento.resilient, so `memento launch --recovery in-job [--spares K]` recovers
it without restarting the surviving processes.
--out FILE: rank 0 writes a digest of the final parameters, optimizer state, the batch it
carries, the loader's state and the next random draws (for bit comparisons).
"""
import argparse
import hashlib
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import memento


class Block(torch.nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim), torch.nn.Dropout(dropout))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab, context, dim, heads, blocks, dropout):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(context, dim)
        self.drop = torch.nn.Dropout(dropout)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, dropout) for _ in range(blocks))
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as GPT-2 does
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1),
                             persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t)))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))


class WindowLoader:
    """Random windows of a token stream, drawn from the loader's own generator (per rank).
    Stateful: state_dict() / load_state_dict() carry the generator and the count drawn."""

    def __init__(self, tokens, context, batch, seed):
        self.tokens, self.context, self.batch = tokens, context, batch
        self.gen = torch.Generator().manual_seed(seed)
        self.drawn = 0

    def next(self):
        starts = torch.randint(len(self.tokens) - self.context - 1, (self.batch,),
                               generator=self.gen)
        x = torch.stack([self.tokens[s:s + self.context] for s in starts.tolist()])
        y = torch.stack([self.tokens[s + 1:s + 1 + self.context] for s in starts.tolist()])
        self.drawn += 1
        return x, y

    def state_dict(self):
        return {"gen": self.gen.get_state(), "drawn": self.drawn}

    def load_state_dict(self, state):
        self.gen.set_state(state["gen"])
        self.drawn = state["drawn"]


def corpus(n, vocab, seed):
    """A token stream with structure to learn (a noisy repeating pattern)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.arange(n) % 17 % vocab
    noise = torch.randint(vocab, (n,), generator=g)
    keep = torch.rand(n, generator=g) < 0.8
    return torch.where(keep, base, noise)


def mpirun_env():
    """Under plain mpirun: torch.distributed's env:// variables from Open MPI's."""
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")


def digest(model, optimizer, loader, carry):
    h = hashlib.sha256()
    tensors = [t for _, t in sorted(model.state_dict().items())]
    for state in optimizer.state.values():
        tensors += [v for _, v in sorted(state.items()) if isinstance(v, torch.Tensor)]
    tensors += list(carry["batch"]) + [loader.gen.get_state(), torch.rand(4)]
    for t in tensors:
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--out", default="")
    p.add_argument("--pids", default="",
                   help="append 'rank pid attempt' here each time training (re)starts")
    args = p.parse_args()

    torch.set_num_threads(1)
    mpirun_env()
    # The process group is resilient()'s: under `memento launch --recovery in-job` a lost
    # node's ranks are replaced and train() runs again in the surviving processes.
    memento.resilient(train, args)


def train(args):
    rank = dist.get_rank()
    if args.pids:
        with open(args.pids, "a") as f:
            f.write("%d %d %s\n" % (rank, os.getpid(), os.environ.get("MEMENTO_LAUNCH_ATTEMPT", "0")))
    torch.manual_seed(args.seed)  # same initial weights on every rank
    vocab = 32
    model = GPT(vocab, args.context, args.dim, 4, args.blocks, dropout=0.1)
    # find_unused_parameters keeps DDP's first gradient buckets: it re-buckets after
    # the first iteration otherwise, which changes the order of the float sums in the
    # allreduce, and a resumed run would differ in the last bits.
    ddp = DDP(model, find_unused_parameters=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    warmup = 4

    def lr_at(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    loader = WindowLoader(corpus(4096, vocab, args.seed), args.context, args.batch,
                          seed=1000 + rank)
    torch.manual_seed(args.seed + 1 + rank)  # dropout differs per rank

    # memento: what a bit-exact resume needs, registered once.
    carry = {"batch": loader.next()}  # the batch prefetched for the next step
    ck = memento.Checkpointer(total_steps=args.steps)
    ck.register(model, optimizer, scheduler, loader=loader, extra=carry, replicated=True)
    start = ck.restore()
    if rank == 0:
        print("resume: %s" % (start.summary if start is not None else "fresh start"), flush=True)

    for step in range(start or 0, args.steps):
        x, y = carry["batch"]
        logits = ddp(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        carry["batch"] = loader.next()  # prefetch while the step is still in flight
        optimizer.zero_grad()
        loss.backward()
        ck.wait_snapshot()
        optimizer.step()
        scheduler.step()
        ck.save(step + 1, loss=loss.item())
        if rank == 0 and (step + 1) % 4 == 0:
            print("step %d/%d loss %.4f" % (step + 1, args.steps, loss.item()), flush=True)
    ck.close()
    final = digest(model, optimizer, loader, carry)
    if rank == 0:
        print("done: step %d, state %s" % (args.steps, final), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                f.write(final + "\n")


if __name__ == "__main__":
    main()
