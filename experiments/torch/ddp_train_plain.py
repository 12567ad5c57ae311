"""Data-parallel training with DDP over gloo (no checkpointing): the baseline of ddp_train.py."""
import argparse

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp_common
import fault


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default="")
    args = p.parse_args()
    rank, world = ddp_common.init_distributed()
    ddp_common.seed(args.seed, rank)
    # find_unused_parameters: DDP keeps its first gradient buckets (it re-buckets
    # after the first iteration otherwise, which changes the order of the float
    # sums in the allreduce, so a relaunch would differ in the last bits).
    model = DDP(ddp_common.Net(args.width), find_unused_parameters=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for step in range(0, args.steps):
        x, y = ddp_common.batch(16)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        fault.maybe_die(step + 1, rank)

    if args.out:
        ddp_common.dump("%s/rank%d.pt" % (args.out, rank), model, optimizer)
    print("rank %d: done %d steps, loss %.6f" % (rank, args.steps, loss.item()), flush=True)


if __name__ == "__main__":
    main()
