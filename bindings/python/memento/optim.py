"""Optimizer state: created at register() where torch would create it lazily.

A relaunched job's fresh optimizer has no state before its first step; memento
restores into tensors that exist, so the state that Adam, AdamW and SGD with
momentum create at their first step is created at register() instead, exactly
as their first step creates it (the same shapes, dtypes and devices, zeros and
step 0), which changes nothing that step computes. A parameter that does not require
grad gets none (torch's step never gives it any; a frozen backbone would otherwise hold
twice its size in Adam moments, saved at every checkpoint), as torch.distributed.checkpoint's
own state_dict helper primes.

The state created so follows its parameter's dtype and device as torch's lazy state would: a
model moved (`model.to(torch.bfloat16)`, `model.cuda()`) after register() and before the first
step gets its primed state moved with it at that step (see follow_moved_params).
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


_PER_PARAM_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer")


def _move_state(optimizer, params):
    """Moves the state of `params` that is not on its parameter's dtype and device there.

    The moments and momentum take the parameter's dtype and device (as load_state_dict casts
    them); a `step` kept with the parameter (capturable, fused) only its device.
    """
    on_device = {id(p): bool(g.get("capturable")) or bool(g.get("fused"))
                 for g in optimizer.param_groups for p in g["params"]}
    with torch.no_grad():
        for p in params:
            state = optimizer.state.get(p)
            if not state:
                continue
            for key, value in list(state.items()):
                if not isinstance(value, torch.Tensor):
                    continue
                if key in _PER_PARAM_STATE:
                    if value.dtype != p.dtype or value.device != p.device:
                        state[key] = value.to(device=p.device, dtype=p.dtype)
                elif key == "step" and on_device.get(id(p)) and value.device != p.device:
                    state[key] = value.to(device=p.device)


def follow_moved_params(optimizer, params):
    """At the optimizer's first step, moves the state primed for `params` to where they are.

    Without it, a model moved after register() steps with state of the old dtype or device and
    torch's step fails ("expected dtype float for `end` ..."), where torch alone would have
    created the state at that step from the moved parameters. One pre-step hook that does
    nothing after its first call (removing a hook while torch iterates them is an error); a
    torch without step hooks keeps the state where it was primed.
    """
    if not params or not hasattr(optimizer, "register_step_pre_hook"):
        return
    pending = [list(params)]

    def first_step(*_):
        if pending:
            _move_state(optimizer, pending.pop())

    optimizer.register_step_pre_hook(first_step)


def prime_sgd(optimizer):
    """Creates absent SGD momentum buffers as zeros where that changes nothing.

    Its first step takes the gradient as the buffer; a zero buffer gives
    0 * momentum + (1 - dampening) * gradient, the same value when dampening is 0 (up
    to the sign of a zero).
    """
    created = []
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
                created.append(p)
    return created


def prime_adam(optimizer):
    """Creates absent Adam/AdamW state as Adam._init_group does (foreach, fused, capturable)."""
    created = []
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
                created.append(p)
    return created


def prime_optimizer(optimizer):
    """Creates absent Adam/AdamW state, and SGD momentum, as their first step would, and has
    it follow parameters moved before that step. Returns the parameters primed."""
    kind = type(optimizer)
    if kind is torch.optim.SGD:
        created = prime_sgd(optimizer)
    elif kind in (torch.optim.Adam, torch.optim.AdamW):
        created = prime_adam(optimizer)
    else:
        created = []
    follow_moved_params(optimizer, created)
    return created
