"""What the plain and the memento DDP example share: arguments, launch detection, the
DDP model and its optimizer, the data, and the final dump the tests compare."""
import argparse
import atexit
import os
import random

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def init_distributed():
    """Rank and size from mpirun (OMPI_*) or torchrun (RANK/WORLD_SIZE); gloo process group."""
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT", "29500")
        dist.init_process_group("gloo", init_method="tcp://%s:%s" % (addr, port), rank=rank,
                                world_size=world)
    else:
        dist.init_process_group("gloo", init_method="env://")
    # A group left to the interpreter's exit can end the process with "terminate called
    # without an active exception" (a gloo thread destroyed while joinable), which turns
    # a finished run into a failed one; 1 run in 16 of the plain DDP example under load.
    atexit.register(_destroy_group)
    return dist.get_rank(), dist.get_world_size()


def _destroy_group():
    if dist.is_initialized():
        dist.destroy_process_group()


class Net(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, width)
        self.drop = torch.nn.Dropout(0.1)
        self.fc2 = torch.nn.Linear(width, width)
        self.fc3 = torch.nn.Linear(width, 1)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(self.drop(torch.relu(self.fc1(x))))))


def batch(size):
    """A synthetic batch drawn from torch's, numpy's and Python's generators."""
    x = torch.randn(size, 32) * (1.0 + random.random())
    noise = torch.from_numpy(np.random.standard_normal((size, 1)).astype(np.float32))
    return x, x[:, :1] * 0.5 - x[:, 1:2] + 0.1 * noise


def seed(base, rank):
    torch.manual_seed(base)  # same initial weights on every rank (DDP also broadcasts them)
    np.random.seed(base + 1 + rank)
    random.seed(base + 2 + rank)


def dump(path, model, optimizer):
    """Parameters, optimizer state and the next random draws, for bit comparisons."""
    state = {"params": {k: v.detach().clone() for k, v in model.state_dict().items()},
             "optimizer": optimizer.state_dict(),
             "draws": (torch.rand(8), np.random.rand(4), random.random())}
    torch.save(state, path)


def setup(description):
    """Arguments, process group, seeds, the DDP model and its Adam optimizer."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default="")
    args = p.parse_args()
    rank, _ = init_distributed()
    seed(args.seed, rank)
    # find_unused_parameters: DDP keeps its first gradient buckets (it re-buckets
    # after the first iteration otherwise, which changes the order of the float
    # sums in the allreduce, so a relaunch would differ in the last bits).
    model = DDP(Net(args.width), find_unused_parameters=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return args, rank, model, optimizer
