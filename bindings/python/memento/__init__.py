"""memento: in-memory checkpointing for PyTorch training.

    import memento
    ck = memento.Checkpointer(scheme="replica:2", persist_every=50)
    ck.register(model, optimizer, extra={"data_pos": 0})
    start = ck.restore()                 # RestoreReport (an int: the step) or None
    for step in range(start or 0, steps):
        loss = ...; loss.backward()
        ck.wait_snapshot(); optimizer.step(); optimizer.zero_grad()
        ck.save(step + 1)

Settings. Every MEMENTO_* variable of the runtime is also a keyword argument:
its name without the prefix, lower case (MEMENTO_SCHEME -> scheme,
MEMENTO_TIMEOUT_S -> timeout_s, MEMENTO_REMOTE -> remote, ...). A keyword
overrides the environment; the environment fills the rest.

Launchers. `launcher="auto"` (default) picks MPI under mpirun, gloo over
torch's c10d under torchrun (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT),
and a single in-process rank otherwise.

Entry names (stable; they name the node store's regions):
    register(model)            "model.<state_dict key>"      e.g. model.fc.weight
    register(optimizer)        "optimizer.state.<i>.<key>"   i as in optimizer.state_dict()
    register(encoder=m)        "encoder.<state_dict key>"    (keyword = prefix)
    a second model/optimizer   "model1." / "optimizer1." ...
    register("name", tensor)   "name"
Non-tensor optimizer state and the param groups' hyper-parameters (lr, ...)
travel in the extra state. Adam and AdamW state is created at register()
exactly as their first step creates it (zeros, step 0), so the set of tensors
is the same before and after the first step and a relaunch restores into it;
other optimizers' lazily created state (SGD momentum) makes the next save
re-register once (the node store is laid out anew, older versions dropped).

Extra state (restored by restore()): the step, the torch CPU generator (and
CUDA generators when present), Python `random`, numpy's global generator, the
`extra` objects (a value with state_dict()/load_state_dict() is saved through
them; other values are pickled and put back into the same dict).

replicated=True (data parallel): parameters and optimizer state are the same
on every rank; each rank stores 1/N of their bytes and restore() gathers the
rest. Module buffers are never replicated.

Errors are MementoError subclasses, one per status code (NotFoundError,
FailedPreconditionError, ...; InvalidArgumentError is also a ValueError).
Log lines go to logging.getLogger("memento").
"""

import ctypes
import logging
import pickle
import random
import types

import torch

# Open MPI loads its components with dlopen and they resolve symbols of libmpi
# globally: make libmpi global before the extension (which links it) loads,
# as mpi4py does. Without Open MPI nothing changes.
try:
    ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
except OSError:
    pass

from . import _memento  # noqa: E402
from ._memento import (  # noqa: F401,E402  (re-exported)
    AlreadyExistsError,
    CorruptionError,
    ElasticRestoreNeededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    IoError,
    MementoError,
    NotFoundError,
    ResourceExhaustedError,
    TimeoutError,
    UnavailableError,
    UnrecoverableError,
)

__all__ = ["Checkpointer", "RestoreReport", "MementoError", "settings_keywords"]

logger = logging.getLogger("memento")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
_EXTRA_FORMAT = 1


def settings_keywords():
    """{keyword: MEMENTO_* variable} for every runtime setting."""
    return {v[len("MEMENTO_"):].lower(): v for v in _memento.config_variables()}


def _flush_logs():
    for level, message in _memento.drain_logs():
        logger.log(_LEVELS.get(level, logging.WARNING), message)


class RestoreReport:
    """What restore() brought back. Behaves as the int step (range(start, n)).

    Attributes: step, version, entries (list of {name, bytes, crc, source}),
    lost_nodes, source_detail, bytes_sent, bytes_received, reprotect_mode,
    inventory_s, plan_s, transfer_s, reprotect_s, notes, summary.
    """

    def __init__(self, d):
        self._d = dict(d)
        for k, v in self._d.items():
            setattr(self, k, v)

    def to_dict(self):
        return dict(self._d)

    def sources(self):
        """{entry name: source} ("local-memory", "replica", "decode", "remote")."""
        return {e["name"]: e["source"] for e in self.entries}

    def __index__(self):
        return int(self.step)

    __int__ = __index__

    def __eq__(self, other):
        if isinstance(other, int):
            return int(self.step) == other
        return isinstance(other, RestoreReport) and other._d == self._d

    def __hash__(self):
        return hash(int(self.step))

    def __repr__(self):
        return "RestoreReport(%s)" % self.summary


def _prime_adam(optimizer):
    """Creates absent Adam/AdamW state as their first step would (torch 1.13)."""
    kind = type(optimizer)
    if kind not in (torch.optim.Adam, torch.optim.AdamW):
        return 0
    d = optimizer.defaults
    special = d.get("capturable", False) or (kind is torch.optim.Adam and d.get("fused", False))
    created = 0
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state[p]
                if len(state) != 0:
                    continue
                state["step"] = (torch.zeros((1,), dtype=torch.float, device=p.device)
                                 if special else torch.tensor(0.0))
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format)
                created += 1
    return created


def _optimizer_params(optimizer):
    for group in optimizer.param_groups:
        for p in group["params"]:
            yield p


class Checkpointer:
    """In-memory checkpoints of torch tensors, modules and optimizers."""

    def __init__(self, *, launcher="auto", extra_capacity=256 * 1024, **settings):
        keywords = settings_keywords()
        variables = {}
        for key, value in settings.items():
            if key not in keywords:
                raise InvalidArgumentError(
                    "unknown setting %r (accepted: launcher, extra_capacity, %s)"
                    % (key, ", ".join(sorted(keywords))))
            if value is None:
                continue
            variables[keywords[key]] = str(value)
        self._impl = _memento._Checkpointer(variables, launcher, int(extra_capacity))
        self._sources = []      # (kind, prefix, object, replicated)
        self._extras = []       # dicts given as extra=
        self._prefixes = set()
        self._counts = {"model": 0, "optimizer": 0}
        _flush_logs()

    # ---- registration ----------------------------------------------------------------------
    def register(self, *objects, extra=None, replicated=False, **named):
        """register(model, optimizer, extra={...}) | register("name", tensor) | register(enc=m)."""
        if len(objects) == 2 and isinstance(objects[0], str):
            name, tensor = objects
            if not isinstance(tensor, torch.Tensor):
                raise InvalidArgumentError("register(%r, ...): not a tensor" % name)
            self._add("tensor", name, tensor, replicated)
        else:
            for obj in objects:
                if isinstance(obj, torch.nn.Module):
                    self._add("module", self._auto_prefix("model"), obj, replicated)
                elif isinstance(obj, torch.optim.Optimizer):
                    self._add("optimizer", self._auto_prefix("optimizer"), obj, replicated)
                else:
                    raise InvalidArgumentError(
                        "register: %r is not a Module, an Optimizer or a (name, tensor) pair"
                        % type(obj).__name__)
        for prefix, obj in named.items():
            if isinstance(obj, torch.nn.Module):
                self._add("module", prefix + ".", obj, replicated)
            elif isinstance(obj, torch.optim.Optimizer):
                self._add("optimizer", prefix + ".", obj, replicated)
            elif isinstance(obj, torch.Tensor):
                self._add("tensor", prefix, obj, replicated)
            else:
                raise InvalidArgumentError("register(%s=...): %r is not a Module, an Optimizer "
                                           "or a tensor" % (prefix, type(obj).__name__))
        if extra is not None:
            if not isinstance(extra, dict):
                raise InvalidArgumentError("register(extra=...) takes a dict")
            self._extras.append(extra)
        return self

    def _auto_prefix(self, kind):
        n = self._counts[kind]
        self._counts[kind] += 1
        return kind + ("" if n == 0 else str(n)) + "."

    def _add(self, kind, prefix, obj, replicated):
        if prefix in self._prefixes:
            raise InvalidArgumentError("register: %r is registered twice" % prefix)
        self._prefixes.add(prefix)
        if kind == "optimizer":
            _prime_adam(obj)
        self._sources.append((kind, prefix, obj, bool(replicated)))

    def tensors(self):
        """[(name, tensor, replicated)] as registered now, in registration order."""
        out = []
        for kind, prefix, obj, replicated in self._sources:
            if kind == "tensor":
                out.append((prefix, obj.detach(), replicated))
            elif kind == "module":
                params = {n for n, _ in obj.named_parameters()}
                for key, t in obj.state_dict(keep_vars=True).items():
                    if isinstance(t, torch.Tensor):
                        out.append((prefix + key, t.detach(), replicated and key in params))
            else:
                for i, p in enumerate(_optimizer_params(obj)):
                    for key, value in obj.state.get(p, {}).items():
                        if isinstance(value, torch.Tensor):
                            out.append(("%sstate.%d.%s" % (prefix, i, key), value.detach(),
                                        replicated))
        return out

    # ---- extra state -----------------------------------------------------------------------
    def _extra_state(self):
        state = {"format": _EXTRA_FORMAT, "random": random.getstate()}
        try:
            import numpy
            state["numpy"] = numpy.random.get_state()
        except ImportError:
            pass
        optim = {}
        for kind, prefix, obj, _ in self._sources:
            if kind != "optimizer":
                continue
            scalars = {}
            for i, p in enumerate(_optimizer_params(obj)):
                for key, value in obj.state.get(p, {}).items():
                    if not isinstance(value, torch.Tensor):
                        scalars[(i, key)] = value
            groups = [{k: v for k, v in g.items() if k != "params"} for g in obj.param_groups]
            optim[prefix] = {"scalars": scalars, "groups": groups}
        state["optimizers"] = optim
        extras = []
        for d in self._extras:
            extras.append({k: (("state_dict", v.state_dict()) if hasattr(v, "state_dict")
                               and hasattr(v, "load_state_dict") else ("value", v))
                           for k, v in d.items()})
        state["extra"] = extras
        return state

    def _apply_extra_state(self, state):
        random.setstate(state["random"])
        if "numpy" in state:
            import numpy
            numpy.random.set_state(state["numpy"])
        for kind, prefix, obj, _ in self._sources:
            if kind != "optimizer" or prefix not in state["optimizers"]:
                continue
            saved = state["optimizers"][prefix]
            params = list(_optimizer_params(obj))
            for (i, key), value in saved["scalars"].items():
                obj.state[params[i]][key] = value
            for group, values in zip(obj.param_groups, saved["groups"]):
                group.update(values)
        for d, saved in zip(self._extras, state["extra"]):
            for k, (how, value) in saved.items():
                if how == "state_dict" and k in d and hasattr(d[k], "load_state_dict"):
                    d[k].load_state_dict(value)
                else:
                    d[k] = value

    # ---- checkpointing ---------------------------------------------------------------------
    def save(self, step):
        """Collective. Starts checkpoint `step` (> the last one) and returns at once.

        With interval=N or interval="auto" (MEMENTO_INTERVAL) only some steps are saved;
        the others return at once without copying anything (interval_stats() counts them).
        """
        try:
            if not self._impl.would_save(int(step)):
                self._impl.save(int(step))
                return
            self._impl.set_tensors(self.tensors())
            self._impl.set_user_state(pickle.dumps(self._extra_state(), protocol=4))
            self._impl.save(int(step))
        finally:
            _flush_logs()

    def restore(self):
        """Collective. Restores the newest complete checkpoint in place.

        Returns a RestoreReport (usable as the int step) or None when there is none.
        """
        try:
            self._impl.set_tensors(self.tensors())
            report = self._impl.restore()
            if report is None:
                return None
            blob = self._impl.user_state()
            if blob is not None:
                self._apply_extra_state(pickle.loads(blob))
            return RestoreReport(report)
        finally:
            _flush_logs()

    def wait_snapshot(self):
        """Returns when registered tensors may be modified again (call before optimizer.step)."""
        try:
            self._impl.wait_snapshot()
        finally:
            _flush_logs()

    def wait(self):
        """Returns when the checkpoint in flight is committed (raises if it failed)."""
        try:
            self._impl.wait()
        finally:
            _flush_logs()

    def wait_persist(self):
        try:
            self._impl.wait_persist()
        finally:
            _flush_logs()

    def hook_optimizer(self, optimizer):
        """Makes optimizer.step() call wait_snapshot() first. Returns a handle with remove()."""
        if hasattr(optimizer, "register_step_pre_hook"):
            return optimizer.register_step_pre_hook(lambda *_: self.wait_snapshot())
        bound = optimizer.step
        ck = self

        def step(opt, *args, **kwargs):
            ck.wait_snapshot()
            return bound(*args, **kwargs)

        optimizer.step = types.MethodType(step, optimizer)

        class _Handle:
            def remove(self_):
                optimizer.step = bound

        return _Handle()

    def close(self):
        """Waits for the checkpoint in flight and releases the node store mapping."""
        if self._impl is not None:
            try:
                self._impl.close()
            finally:
                _flush_logs()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- introspection ---------------------------------------------------------------------
    @property
    def rank(self):
        return self._impl.rank

    @property
    def size(self):
        return self._impl.size

    @property
    def node(self):
        return self._impl.node

    @property
    def launcher(self):
        return self._impl.launcher

    @property
    def config(self):
        return self._impl.config

    def entry_names(self):
        return self._impl.entry_names()

    def latest_committed(self):
        return self._impl.latest_committed()

    def blocked_seconds(self):
        return self._impl.blocked_seconds()

    def interval_stats(self):
        """Which save() calls took a checkpoint: a dict with automatic, last_saved, saves,
        skipped, interval_steps, changes and the agreed step_s, stall_s, protect_s (auto)."""
        return self._impl.interval_stats()

    def reregistrations(self):
        return self._impl.reregistrations()
