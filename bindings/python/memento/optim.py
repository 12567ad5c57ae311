"""Optimizer state: created at register() where torch would create it lazily.

A relaunched job's fresh optimizer has no state before its first step; memento
restores into tensors that exist, so the state that Adam, AdamW and SGD with
momentum create at their first step is created at register() instead, exactly
as their first step creates it (the same shapes, dtypes and devices, zeros and
step 0), which changes nothing that step computes. A parameter that does not require
grad gets none (torch's step never gives it any; a frozen backbone would otherwise hold
twice its size in Adam moments, saved at every checkpoint), as torch.distributed.checkpoint's
own state_dict helper primes.
"""
import torch


def optimizer_params(optimizer):
    """The parameters of every param group, in order (optimizer.state_dict()'s numbering)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            yield p


def _scalar_dtype(fused=False):
    """The dtype torch's optimizers give `step` (torch.optim.optimizer._get_scalar_dtype)."""
    if fused:
        return torch.float32
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def prime_sgd(optimizer):
    """Creates absent SGD momentum buffers as zeros where that changes nothing.

    Its first step takes the gradient as the buffer; a zero buffer gives
    0 * momentum + (1 - dampening) * gradient, the same value when dampening is 0 (up
    to the sign of a zero).
    """
    created = 0
    with torch.no_grad():
        for group in optimizer.param_groups:
            if group.get("momentum", 0) == 0 or group.get("dampening", 0) != 0:
                continue
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                state = optimizer.state[p]
                if "momentum_buffer" in state:
                    continue
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                created += 1
    return created


def prime_adam(optimizer):
    """Creates absent Adam/AdamW state as Adam._init_group does (foreach, fused, capturable)."""
    created = 0
    with torch.no_grad():
        for group in optimizer.param_groups:
            on_device = bool(group.get("capturable")) or bool(group.get("fused"))
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                state = optimizer.state[p]
                if len(state) != 0:
                    continue
                if on_device:
                    state["step"] = torch.zeros((), dtype=_scalar_dtype(group.get("fused")),
                                                device=p.device)
                else:
                    state["step"] = torch.tensor(0.0, dtype=_scalar_dtype())
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format)
                created += 1
    return created


def prime_optimizer(optimizer):
    """Creates absent Adam/AdamW state, and SGD momentum, as their first step would."""
    kind = type(optimizer)
    if kind is torch.optim.SGD:
        return prime_sgd(optimizer)
    if kind in (torch.optim.Adam, torch.optim.AdamW):
        return prime_adam(optimizer)
    return 0
