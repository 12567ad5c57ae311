"""Where torch's APIs live in each supported torch release (2.6 and newer).

One place for what moved between releases, so that the rest of the package
names each API once.
"""
import torch

try:  # public from torch 2.5
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
except ImportError:  # torch built without distributed support
    DTensor = Replicate = Shard = compute_local_shape_and_global_offset = None

try:
    from torch.distributed.tensor.placement_types import Partial
except ImportError:
    Partial = None


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local_tensor(t):
    """The tensor a DTensor keeps on this rank (its storage, not a copy)."""
    return t._local_tensor


def unwrap_module(module):
    """The module whose state_dict keys a user's checkpoint names.

    torch.compile's OptimizedModule prefixes every key with "_orig_mod.", DDP with
    "module."; torch.distributed.checkpoint's state dicts name neither, and neither
    does memento: a job that starts compiling, or wraps in DDP, keeps its names.
    """
    while True:
        inner = getattr(module, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            module = inner
            continue
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            module = module.module
            continue
        return module
