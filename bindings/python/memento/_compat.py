"""Where torch's APIs live in each supported torch release (2.6 and newer).

One place for what moved between releases, so that the rest of the package
names each API once.
"""
import importlib
import sys

import torch

# torch.distributed.tensor's names, imported on first use (PEP 562 __getattr__):
# importing that package pulls in sympy, about 0.4 s a process, which a job that
# has no DTensor should not pay. None where torch was built without distributed
# support. Public from torch 2.5.
_LAZY = {
    "DTensor": "torch.distributed.tensor",
    "Replicate": "torch.distributed.tensor",
    "Shard": "torch.distributed.tensor",
    "Partial": "torch.distributed.tensor.placement_types",
    "_StridedShard": "torch.distributed.tensor.placement_types",
    "compute_local_shape_and_global_offset": "torch.distributed.tensor._utils",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    try:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    except (ImportError, AttributeError):
        value = None
    globals()[name] = value
    return value


def dtensor_class():
    """DTensor's class, or None: a DTensor exists only once torch.distributed.tensor has
    been imported (its class lives there); until then no tensor is one, and nothing is
    imported."""
    return getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)


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
