"""memento: in-memory checkpointing for PyTorch training.

    import memento
    ck = memento.Checkpointer(scheme="replica:2", persist_every=50)
    ck.register(model, optimizer, extra={"data_pos": 0})
    start = ck.restore()                 # RestoreReport (an int: the step) or None
    for step in range(start or 0, steps):
        loss = ...; loss.backward()
        ck.wait_snapshot(); optimizer.step(); optimizer.zero_grad()
        ck.save(step + 1)

Settings. Every MEMENTO_* variable of the runtime (but MEMENTO_ALLOW_UNKNOWN) is a keyword:
its name without the prefix, lower case (MEMENTO_SCHEME -> scheme,
MEMENTO_TIMEOUT_S -> timeout_s, MEMENTO_REMOTE -> remote, ...). A keyword
overrides the environment; the environment fills the rest.

Launchers. `launcher="auto"` (default) picks MPI under mpirun ("mpi"), gloo over
torch's c10d under torchrun ("torchrun": RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT), and a single in-process rank otherwise ("single"); each can be named.

Entry names (stable; they name the node store's regions):
    register(model)            "model.<state_dict key>"      e.g. model.fc.weight
    register(optimizer)        "optimizer.state.<i>.<key>"   i as in optimizer.state_dict()
    register(encoder=m)        "encoder.<state_dict key>"    (keyword = prefix)
    a second model/optimizer   "model1." / "optimizer1." ...
    register("name", tensor)   "name"
Non-tensor optimizer state and the param groups' hyper-parameters (lr, ...)
travel in the extra state. Adam and AdamW state, and SGD's momentum buffers
(momentum > 0, dampening 0: the defaults), are created at register() so that
their first step computes what it would have (zeros, step 0), so the set of
tensors is the same before and after the first step and a relaunch restores
into it; other optimizers' lazily created state (SGD with dampening, RMSprop)
makes the next save re-register once (the node store is laid out anew, older
versions dropped), and a relaunched job, whose fresh optimizer has no such
state yet, cannot restore it (FailedPreconditionError naming the tensors).
restore() never lays the store out anew: after the set of tensors changed it
raises FailedPreconditionError and keeps the stored versions.

Extra state (restored by restore()): the step, the torch CPU generator (and
CUDA generators when present), Python `random`, numpy's global generator, what
modules keep besides tensors (get_extra_state(), handed back through
load_state_dict), the `extra` objects (a value with
state_dict()/load_state_dict() is saved through them; other values are pickled
and put back into the same dict).

replicated=True (data parallel): parameters and optimizer state are the same
on every rank; each rank stores 1/N of their bytes and restore() gathers the
rest. Module buffers are never replicated.

Sharded tensors and elastic restore. A tensor that is this rank's slice of a
global tensor (tensor, pipeline or ZeRO parallel) is registered with its place:
    ck.register("w", w_shard, global_shape=(4096, 1024), offsets=(512, 0))
    ck.register(model, optimizer, shards={"model.fc.weight": ((4096, 1024), (512, 0))})
(`shards` maps entry names to (global_shape, offsets); optimizer state with its
parameter's shape is sharded like the parameter). A job relaunched on another
number of nodes or ranks with elastic=True (MEMENTO_ELASTIC=1), each rank having
registered its new slices, gets them from the old slices that survive in memory
(remote storage only for what memory lacks); replicated tensors are re-cut over
the new ranks. The report's `elastic` is True then. Each new rank gets the extra
state of one old rank (of its own node when that node survived): the step, which
all ranks share, and that rank's generator states and `extra` objects; state
that differs per rank (a sampler's position, per-rank seeds) should be derived
again from the step and the new rank.

Errors are MementoError subclasses, one per status code (NotFoundError,
FailedPreconditionError, ...; InvalidArgumentError is also a ValueError).
Log lines go to logging.getLogger("memento").
"""

import collections
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
    protection ("protected"; "re-protecting": what the lost nodes held is
    rebuilt in the background, see Checkpointer.protection_state();
    "unprotected": a blocking re-protect failed, until the next save commits),
    inventory_s, plan_s, transfer_s, reprotect_s, elastic (restored onto another
    topology), elastic_plan, notes, summary.
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


def _prime_sgd(optimizer):
    """Creates absent SGD momentum buffers as zeros where that changes nothing.

    Its first step takes the gradient as the buffer (torch 1.13); a zero buffer gives
    0 * momentum + (1 - dampening) * gradient, the same value when dampening is 0 (up
    to the sign of a zero).
    """
    created = 0
    with torch.no_grad():
        for group in optimizer.param_groups:
            if group.get("momentum", 0) == 0 or group.get("dampening", 0) != 0:
                continue
            for p in group["params"]:
                state = optimizer.state[p]
                if "momentum_buffer" in state:
                    continue
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                created += 1
    return created


def _prime_optimizer(optimizer):
    """Creates absent Adam/AdamW state, and SGD momentum, as their first step would."""
    kind = type(optimizer)
    if kind is torch.optim.SGD:
        return _prime_sgd(optimizer)
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


def _shard_spec(where, global_shape, offsets, dim):
    """(global_shape, offsets) as tuples of ints; offsets default to zeros."""
    try:
        global_shape = tuple(int(x) for x in global_shape)
        offsets = tuple(int(x) for x in offsets) if offsets is not None else (0,) * len(global_shape)
    except (TypeError, ValueError):
        raise InvalidArgumentError("%s: global_shape and offsets are sequences of ints" % where)
    if len(offsets) != len(global_shape) or (dim is not None and len(global_shape) != dim):
        raise InvalidArgumentError("%s: global_shape %s and offsets %s need one value per "
                                   "dimension of the tensor" % (where, global_shape, offsets))
    return global_shape, offsets


def _is_extra_state(key):
    """Whether a state_dict key holds a module's get_extra_state() (any type)."""
    return key.rsplit(".", 1)[-1] == "_extra_state"


def _load_module_values(module, values):
    """load_state_dict of what `module` keeps besides tensors (those are in place already).

    The module's own metadata (each submodule's state_dict version) goes with the values:
    without it every submodule takes them for a version-1 state dict, and BatchNorm then
    resets num_batches_tracked, restored a moment before, to 0.
    """
    values = collections.OrderedDict(values)
    metadata = getattr(module.state_dict(), "_metadata", None)
    if metadata is not None:
        values._metadata = metadata
    module.load_state_dict(values, strict=False)


def _check_extras(registered, saved):
    """Refuses, by name, extra= dicts that do not match what the checkpoint saved."""
    if len(saved) != len(registered):
        raise FailedPreconditionError(
            "restore: the checkpoint holds %d extra= dict(s), %d are registered; register "
            "them as when it was saved" % (len(saved), len(registered)))
    for i, (d, values) in enumerate(zip(registered, saved)):
        unknown = sorted(set(values) - set(d), key=repr)
        if unknown:
            raise FailedPreconditionError(
                "restore: extra= dict %d has no key %s, which the checkpoint saved (its keys: %s)"
                % (i, ", ".join(repr(k) for k in unknown), ", ".join(repr(k) for k in d)))
        for k, (how, _) in values.items():
            if how == "state_dict" and not hasattr(d[k], "load_state_dict"):
                raise FailedPreconditionError(
                    "restore: extra[%r] was saved as a state_dict, and the registered %s has "
                    "no load_state_dict" % (k, type(d[k]).__name__))


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
            if isinstance(value, bool):
                value = int(value)
            variables[keywords[key]] = str(value)
        self._impl = _memento._Checkpointer(variables, launcher, int(extra_capacity))
        self._sources = []      # (kind, prefix, object, replicated, shard spec of a tensor)
        self._shards = {}       # entry name -> (global_shape, offsets), from register(shards=)
        self._extras = []       # dicts given as extra=
        self._prefixes = set()
        self._counts = {"model": 0, "optimizer": 0}
        _flush_logs()

    # ---- registration ----------------------------------------------------------------------
    def register(self, *objects, extra=None, replicated=False, shards=None, global_shape=None,
                 offsets=None, **named):
        """register(model, optimizer, extra={...}) | register("name", tensor) | register(enc=m).

        global_shape / offsets: the one tensor registered is this rank's slice of a global
        tensor. shards: {entry name: (global_shape, offsets)} for entries of modules and
        optimizers registered by any call.
        """
        spec = None
        if global_shape is not None or offsets is not None:
            tensors = [o for o in objects[1:] if isinstance(o, torch.Tensor)] + \
                [o for o in named.values() if isinstance(o, torch.Tensor)]
            if global_shape is None or len(tensors) != 1 or len(objects) + len(named) not in (1, 2):
                raise InvalidArgumentError(
                    "register(global_shape=, offsets=) places one tensor: register(name, tensor, "
                    "global_shape=..., offsets=...)")
            spec = _shard_spec("register", global_shape, offsets, tensors[0].dim())
        if len(objects) == 2 and isinstance(objects[0], str):
            name, tensor = objects
            if not isinstance(tensor, torch.Tensor):
                raise InvalidArgumentError("register(%r, ...): not a tensor" % name)
            self._add("tensor", name, tensor, replicated, spec)
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
                self._add("tensor", prefix, obj, replicated, spec)
            else:
                raise InvalidArgumentError("register(%s=...): %r is not a Module, an Optimizer "
                                           "or a tensor" % (prefix, type(obj).__name__))
        if shards is not None:
            if not isinstance(shards, dict):
                raise InvalidArgumentError("register(shards=...) takes a dict {entry name: "
                                           "(global_shape, offsets)}")
            for name, value in shards.items():
                if name in self._shards:
                    raise InvalidArgumentError("register(shards=...): %r is sharded twice" % name)
                if not isinstance(value, (tuple, list)) or len(value) != 2:
                    raise InvalidArgumentError("register(shards=...): %r needs (global_shape, "
                                               "offsets)" % name)
                self._shards[name] = _shard_spec("shards[%r]" % name, value[0], value[1], None)
        if extra is not None:
            if not isinstance(extra, dict):
                raise InvalidArgumentError("register(extra=...) takes a dict")
            self._extras.append(extra)
        return self

    def _auto_prefix(self, kind):
        n = self._counts[kind]
        self._counts[kind] += 1
        return kind + ("" if n == 0 else str(n)) + "."

    def _add(self, kind, prefix, obj, replicated, spec=None):
        if prefix in self._prefixes:
            raise InvalidArgumentError("register: %r is registered twice" % prefix)
        if spec is not None and replicated:
            raise InvalidArgumentError("register(%r): a tensor is replicated or sharded, "
                                       "not both" % prefix)
        self._prefixes.add(prefix)
        if kind == "optimizer":
            _prime_optimizer(obj)
        self._sources.append((kind, prefix, obj, bool(replicated), spec))

    def tensors(self):
        """[(name, tensor, replicated)] as registered now, in registration order."""
        return [entry[:3] for entry in self._entries()]

    def placements(self):
        """{name: (global_shape, offsets)} of the tensors registered as slices of global ones."""
        return {e[0]: (e[3], e[4]) for e in self._entries() if e[3] is not None}

    def _module_states(self):
        """{prefix: state_dict(keep_vars=True)} of the registered modules, taken once per save."""
        return {prefix: obj.state_dict(keep_vars=True)
                for kind, prefix, obj, _, _ in self._sources if kind == "module"}

    def _entries(self, states=None):
        """[(name, tensor, replicated, global_shape, offsets, copy_at_save)] as registered now.

        In registration order. global_shape and offsets are None for a tensor that is not a
        slice of a global one. copy_at_save: a module buffer, which the forward pass may change
        before the next wait_snapshot() (BatchNorm's running statistics): save() copies it
        before it returns instead of snapshotting it in place behind training.
        """
        if states is None:
            states = self._module_states()
        out = []
        by_param = {}  # id(parameter) -> shard spec, for its optimizer state
        used = set()

        def add(name, t, replicated, spec=None, copy_at_save=False, inherited=None):
            # A spec in shards= names the entry: it overrides what optimizer state
            # inherits from its parameter.
            if name in self._shards:
                if spec is not None:
                    raise InvalidArgumentError("register: %r is given a shard spec twice (by "
                                               "global_shape= and by shards=)" % name)
                spec = self._shards[name]
                used.add(name)
            elif spec is None:
                spec = inherited
            out.append((name, t.detach(), replicated) + (spec if spec else (None, None)) +
                       (copy_at_save,))

        for kind, prefix, obj, _, spec in self._sources:
            if kind == "module":
                for key, t in states[prefix].items():
                    if prefix + key in self._shards:
                        by_param[id(t)] = self._shards[prefix + key]
            elif kind == "tensor":
                if spec is not None or prefix in self._shards:
                    by_param[id(obj)] = spec if spec is not None else self._shards[prefix]
        for kind, prefix, obj, replicated, spec in self._sources:
            if kind == "tensor":
                add(prefix, obj, replicated, spec)
            elif kind == "module":
                # By identity, not name: a tied weight (an LM head sharing the
                # embedding) is a parameter under each of its names.
                params = {id(p) for p in obj.parameters()}
                for key, t in states[prefix].items():
                    if isinstance(t, torch.Tensor) and not _is_extra_state(key):
                        is_param = id(t) in params
                        add(prefix + key, t, replicated and is_param, copy_at_save=not is_param)
            else:
                for i, p in enumerate(_optimizer_params(obj)):
                    for key, value in obj.state.get(p, {}).items():
                        if isinstance(value, torch.Tensor):
                            # Moments shaped like the parameter are sliced like it;
                            # Adam's step counter is not, whatever its shape.
                            inherited = (by_param.get(id(p)) if value.shape == p.shape
                                         and key != "step" and not replicated else None)
                            add("%sstate.%d.%s" % (prefix, i, key), value, replicated,
                                inherited=inherited)
        unknown = sorted(set(self._shards) - used)
        if unknown:
            raise InvalidArgumentError("register(shards=...): no registered tensor is named %s"
                                       % ", ".join(repr(n) for n in unknown))
        return out

    # ---- extra state -----------------------------------------------------------------------
    def _extra_state(self, states):
        state = {"format": _EXTRA_FORMAT, "random": random.getstate()}
        try:
            import numpy
            state["numpy"] = numpy.random.get_state()
        except ImportError:
            pass
        optim = {}
        for kind, prefix, obj, _, _ in self._sources:
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
        # What modules keep besides tensors (get_extra_state(): e.g. FP8 scaling
        # metadata), which load_state_dict hands back to set_extra_state().
        modules = {}
        for prefix, module_state in states.items():
            values = {k: v for k, v in module_state.items()
                      if _is_extra_state(k) or not isinstance(v, torch.Tensor)}
            if values:
                modules[prefix] = values
        state["modules"] = modules
        extras = []
        for d in self._extras:
            extras.append({k: (("state_dict", v.state_dict()) if hasattr(v, "state_dict")
                               and hasattr(v, "load_state_dict") else ("value", v))
                           for k, v in d.items()})
        state["extra"] = extras
        return state

    def _check_extra_state(self, state):
        _check_extras(self._extras, state.get("extra", []))
        for kind, prefix, obj, _, _ in self._sources:
            saved = state["optimizers"].get(prefix) if kind == "optimizer" else None
            if saved is None:
                continue
            if len(saved["groups"]) != len(obj.param_groups):
                raise FailedPreconditionError(
                    "restore: optimizer %r had %d param group(s) when saved, it has %d now"
                    % (prefix, len(saved["groups"]), len(obj.param_groups)))
            count = len(list(_optimizer_params(obj)))
            beyond = sorted({i for i, _ in saved["scalars"] if i >= count})
            if beyond:
                raise FailedPreconditionError(
                    "restore: optimizer %r had state for parameter %d, it has %d parameters now"
                    % (prefix, beyond[0], count))

    def _apply_extra_state(self, state):
        self._check_extra_state(state)
        random.setstate(state["random"])
        if "numpy" in state:
            import numpy
            numpy.random.set_state(state["numpy"])
        for kind, prefix, obj, _, _ in self._sources:
            if kind != "optimizer" or prefix not in state["optimizers"]:
                continue
            saved = state["optimizers"][prefix]
            params = list(_optimizer_params(obj))
            for (i, key), value in saved["scalars"].items():
                obj.state[params[i]][key] = value
            for group, values in zip(obj.param_groups, saved["groups"]):
                group.update(values)
        for kind, prefix, obj, _, _ in self._sources:
            values = state.get("modules", {}).get(prefix)
            if kind == "module" and values:
                _load_module_values(obj, values)
        for d, saved in zip(self._extras, state["extra"]):
            for k, (how, value) in saved.items():
                if how == "state_dict":
                    d[k].load_state_dict(value)
                else:
                    d[k] = value

    # ---- checkpointing ---------------------------------------------------------------------
    def save(self, step):
        """Collective. Starts checkpoint `step` (> the last one) and returns once its copy began.

        It waits first for the previous checkpoint if that is still being protected (one in
        flight), so a save interval shorter than the protect time stalls training.

        With interval=N or interval="auto" (MEMENTO_INTERVAL) only some steps are saved;
        the others return at once without copying anything (interval_stats() counts them).
        """
        try:
            if not self._impl.would_save(int(step)):
                self._impl.save(int(step))
                return
            states = self._module_states()
            self._impl.set_tensors(self._entries(states))
            self._impl.set_user_state(pickle.dumps(self._extra_state(states), protocol=4))
            self._impl.save(int(step))
        finally:
            _flush_logs()

    def restore(self):
        """Collective. Restores the newest complete checkpoint in place.

        Returns a RestoreReport (usable as the int step), or None when the job never committed
        a checkpoint (a fresh start). Raises UnrecoverableError when it did but no committed
        version can be rebuilt from memory or read from the remote tier. A restore that
        raises may have written part of a version into the tensors (it restores in place):
        do not train on from them; exit and relaunch, or restore() again. After an
        elastic restore (report.elastic) the restored tensors are snapshotted under the new
        topology in the background, as after save(): call wait_snapshot() before modifying
        them (the training loop does, before optimizer.step()).
        """
        try:
            self._impl.set_tensors(self._entries())
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
        """Returns when the checkpoint in flight is committed.

        Raises the first checkpoint failure since the last wait() (one a later save()
        overtook included), each failure once.
        """
        try:
            self._impl.wait()
        finally:
            _flush_logs()

    def wait_persist(self):
        """Returns when every persist scheduled so far has finished (raises as wait() does,
        else if the last persist failed)."""
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
        """Waits for the checkpoint in flight and releases the node store mapping.

        Raises a checkpoint failure wait() has not reported yet (after releasing everything).
        Afterwards save() and restore() raise FailedPreconditionError; close() again does
        nothing. Called from another thread (a watchdog), it first waits for the save(),
        restore() or wait in flight there to return.
        """
        try:
            self._impl.close()
        finally:
            _flush_logs()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
            return False
        # An exception is on its way out: the failure of the last checkpoint is logged
        # rather than raised in its place.
        try:
            self.close()
        except MementoError as e:
            logger.error("close: the checkpoint in flight failed: %s", e)
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

    def protection_state(self):
        """'protected', 're-protecting' (a restore's re-protect of what the lost
        nodes held runs in the background; wait() returns when it is done) or
        'unprotected' (it failed; the next committed save protects again)."""
        return self._impl.protection_state()

    def blocked_seconds(self):
        return self._impl.blocked_seconds()

    def interval_stats(self):
        """Which save() calls took a checkpoint: a dict with automatic, last_saved, saves,
        skipped, interval_steps, changes and the agreed step_s, stall_s, protect_s (auto)."""
        return self._impl.interval_stats()

    def reregistrations(self):
        return self._impl.reregistrations()
