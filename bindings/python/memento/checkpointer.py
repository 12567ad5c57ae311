"""Checkpointer: the Python face of memento's engine (registration, save, restore)."""
import json
import operator
import pickle
import time
import types
import weakref

import torch

from . import _compat, _logs, _memento, dcp, launch_events, optim, placement, stateful
from ._entry_cache import EntryCache
from ._logs import flush_logs as _flush_logs
from ._memento import (FailedPreconditionError, InvalidArgumentError, MementoError,  # noqa: F401
                       ResourceExhaustedError)
from .report import RestoreReport
from .settings import settings_keywords

try:
    _LR_SCHEDULER = torch.optim.lr_scheduler.LRScheduler
except AttributeError:
    _LR_SCHEDULER = torch.optim.lr_scheduler._LRScheduler


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



def _alias_key(t, is_dtensor):
    """What makes two registered tensors one entry: the same object, or views of the same
    storage with the same offset, shape, strides and dtype (tied or shared weights).
    Taken for every tensor at every save: the storage's address is computed from the
    tensor's own (no storage object is made)."""
    if is_dtensor:
        return ("dtensor", id(t))
    try:
        device = t.device
        offset = t.storage_offset()
        ptr = t.data_ptr() - offset * t.element_size() if device.type != "meta" else 0
    except (RuntimeError, NotImplementedError):  # no storage (sparse, ...): refused later
        ptr = 0
    if ptr == 0 or t.numel() == 0:  # no bytes to share: every such tensor is its own
        return ("object", id(t))
    return (device, ptr, offset, t.shape, t.stride(), t.dtype)


_OPEN = weakref.WeakSet()  # Checkpointers not closed yet (in-job recovery closes them)


def open_checkpointers():
    """The Checkpointers of this process that are not closed."""
    return list(_OPEN)


# Called on the training thread after each save() returned: the job's ranks are past their
# start-up and train in step (memento.resilient bounds its group's collectives from there).
AFTER_SAVE = []


def _count(what, value):
    """`value` as an int >= 0 (an int, a numpy or 0-dim tensor integer; not a float, which
    would be truncated), else InvalidArgumentError naming `what`."""
    try:
        n = operator.index(value)
    except TypeError:
        raise InvalidArgumentError("%s=%r: expected an integer >= 0" % (what, value)) from None
    if n < 0:
        raise InvalidArgumentError("%s=%d: expected an integer >= 0" % (what, n))
    return n


class Checkpointer:
    """In-memory checkpoints of torch tensors, modules and optimizers."""

    def __init__(self, *, launcher="auto", extra_capacity=256 * 1024, total_steps=None,
                 **settings):
        keywords = settings_keywords()
        variables = {}
        for key, value in settings.items():
            if key not in keywords:
                raise InvalidArgumentError(
                    "unknown setting %r (accepted: launcher, extra_capacity, total_steps, %s)"
                    % (key, ", ".join(sorted(keywords))))
            if value is None:
                continue
            if isinstance(value, bool):
                value = int(value)
            variables[keywords[key]] = str(value)
        # total_steps: the step the job runs to, for `memento launch`'s progress line.
        extra_capacity = _count("extra_capacity", extra_capacity)
        total_steps = _count("total_steps", total_steps or 0)
        try:
            self._impl = _memento._Checkpointer(variables, launcher, extra_capacity, total_steps)
        except InvalidArgumentError as e:
            # The runtime names the variable; a value given as a keyword is named so too.
            given = [k for k in settings
                     if keywords[k] in variables and keywords[k] + "=" in str(e)]
            if not given:
                raise
            raise InvalidArgumentError("%s (given as %s=%r)" % (
                e, given[0], variables[keywords[given[0]]])) from None
        self._sources = []      # (kind, prefix, object, replicated, shard spec of a tensor)
        self._shards = {}       # entry name -> (global_shape, offsets), from register(shards=)
        self._extras = []       # dicts given as extra=
        self._statefuls = {}    # name -> object with state_dict() / load_state_dict()
        self._warned = set()    # (extra= dict index, key) warned about as a lost data position
        self._prefixes = set()
        self._counts = {"model": 0, "optimizer": 0, "lr_scheduler": 0, "stateful": 0}
        self._placer = placement.Placer()
        self._dtensor_slots = []  # DTensorSlots of the last _entries(), in its order
        self._cache = EntryCache()  # the last entry list, while the same tensors walk to it
        self._set = None            # (engine, the entry list it holds: set_tensors)
        # remote_format="dcp": the values and paths the runtime's DCP writer needs.
        self._dcp = dcp.Records() if self._impl.remote_format == "dcp" else None
        _OPEN.add(self)
        _flush_logs()

    # ---- registration ----------------------------------------------------------------------
    def register(self, *objects, extra=None, replicated=False, shards=None, global_shape=None,
                 offsets=None, **named):
        """register(model, optimizer, scheduler, extra={...}) | register("name", tensor) |
        register(enc=m, sched=s).

        Modules: a torch.compile'd module (OptimizedModule) and a DistributedDataParallel
        wrapper are registered as the module they wrap (names without "_orig_mod." or
        "module."). Objects with state_dict() / load_state_dict() that are neither a module
        nor an optimizer (LR schedulers, data loaders, torch.distributed.checkpoint Stateful
        objects) travel in the extra state under their name: "lr_scheduler" (then
        "lr_scheduler1", ...) for an LR scheduler, "stateful" (...) for others, or the keyword.
        DTensor parameters and optimizer state are placed from their mesh and placements
        (memento.placement); `replicated` does not apply to them.

        global_shape / offsets: the one tensor registered is this rank's slice of a global
        tensor. shards: {entry name: (global_shape, offsets)} for entries of modules and
        optimizers registered by any call.
        """
        # A registration that fails leaves what was registered before as it was.
        saved = (list(self._sources), dict(self._shards), list(self._extras),
                 dict(self._statefuls), set(self._prefixes), dict(self._counts))
        self._cache.clear()
        try:
            self._register(objects, extra, replicated, shards, global_shape, offsets, named)
            # Refuses, by name, what cannot be placed (a Partial DTensor, ...); shards= may
            # name entries of a module registered by a later call.
            self._entries(unknown_shards_ok=True)
        except BaseException:
            (self._sources, self._shards, self._extras, self._statefuls, self._prefixes,
             self._counts) = saved
            raise
        finally:
            # Also after: a save() on another thread may have built a list meanwhile.
            self._cache.clear()
        return self

    def _register(self, objects, extra, replicated, shards, global_shape, offsets, named):
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
                elif stateful.is_stateful(obj):
                    kind = ("lr_scheduler" if isinstance(obj, _LR_SCHEDULER) else "stateful")
                    self._add_stateful(self._auto_prefix(kind)[:-1], obj)
                elif stateful.lost_position(obj):
                    raise InvalidArgumentError("register: %s; %s" % (
                        stateful.lost_position(obj), stateful.KEEP_THE_POSITION))
                else:
                    raise InvalidArgumentError(
                        "register: %r is not a Module, an Optimizer, an object with state_dict()"
                        " and load_state_dict(); register a tensor as register(name, tensor) or "
                        "register(name=tensor)" % type(obj).__name__)
        for prefix, obj in named.items():
            if isinstance(obj, torch.nn.Module):
                self._add("module", prefix + ".", obj, replicated)
            elif isinstance(obj, torch.optim.Optimizer):
                self._add("optimizer", prefix + ".", obj, replicated)
            elif isinstance(obj, torch.Tensor):
                self._add("tensor", prefix, obj, replicated, spec)
            elif stateful.is_stateful(obj):
                self._add_stateful(prefix, obj)
            elif stateful.lost_position(obj):
                raise InvalidArgumentError("register(%s=...): %s; %s" % (
                    prefix, stateful.lost_position(obj), stateful.KEEP_THE_POSITION))
            else:
                raise InvalidArgumentError("register(%s=...): %r is not a Module, an Optimizer, "
                                           "a tensor or an object with state_dict() and "
                                           "load_state_dict()" % (prefix, type(obj).__name__))
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
            stateful.check_extra_values(self._extras + [extra], self._warned)
            self._extras.append(extra)

    def _auto_prefix(self, kind):
        n = self._counts[kind]
        self._counts[kind] += 1
        return kind + ("" if n == 0 else str(n)) + "."

    def _add_stateful(self, name, obj):
        if name in self._statefuls:
            raise InvalidArgumentError("register: %r is registered twice" % name)
        self._statefuls[name] = obj

    def _add(self, kind, prefix, obj, replicated, spec=None):
        if prefix in self._prefixes:
            raise InvalidArgumentError("register: %r is registered twice" % prefix)
        if kind == "module":
            obj = _compat.unwrap_module(obj)
        if spec is not None and replicated:
            raise InvalidArgumentError("register(%r): a tensor is replicated or sharded, "
                                       "not both" % prefix)
        self._prefixes.add(prefix)
        if kind == "optimizer":
            optim.prime_optimizer(obj)
        self._sources.append((kind, prefix, obj, bool(replicated), spec))

    def tensors(self):
        """[(name, tensor, replicated)] as registered now, in registration order; a tensor
        under several names (tied weights) once, under its first."""
        return [entry[:3] for entry in self._entries()]

    def placements(self):
        """{name: (global_shape, offsets)} of the tensors registered as slices of global ones."""
        return {e[0]: (e[3], e[4]) for e in self._entries() if e[3] is not None}

    def _module_states(self):
        """{prefix: state_dict(keep_vars=True)} of the registered modules, taken once per save."""
        return {prefix: obj.state_dict(keep_vars=True)
                for kind, prefix, obj, _, _ in self._sources if kind == "module"}

    def _entries(self, states=None, unknown_shards_ok=False):
        """_build_entries(), or the list it built last while the registered sources walk to
        the same tensors, in the same places (memento._entry_cache)."""
        if states is None:
            states = self._module_states()
        entries, slots, walk = self._cache.lookup(self._sources, states)
        if entries is not None:
            self._dtensor_slots = slots
            return entries
        entries = self._build_entries(states, unknown_shards_ok)
        if not unknown_shards_ok:  # register()'s check: shards= may name later entries
            self._cache.store(self._sources, states, walk, entries, self._dtensor_slots)
        return entries

    def _set_tensors(self, entries):
        """Hands the engine `entries` unless it holds that very list already."""
        if self._set is None or self._set[0] is not self._impl or self._set[1] is not entries:
            self._impl.set_tensors(entries)
            self._set = (self._impl, entries)

    def _build_entries(self, states, unknown_shards_ok):
        """[(name, tensor, replicated, global_shape, offsets, copy_at_save)] as registered now.

        In registration order. A tensor registered under several names (tied weights, views
        of one storage alike) is one entry, under the first name. global_shape and offsets
        are None for a tensor that is not a slice of a global one. copy_at_save: a module
        buffer, which the forward pass may change before the next wait_snapshot() (BatchNorm's
        running statistics): save() copies it before it returns instead of snapshotting it in
        place behind training.
        """
        out = []
        by_param = {}  # id(parameter) -> shard spec, for its optimizer state
        used = set()
        slots = []
        # Tied or shared storage (an LM head sharing the embedding's weight) is one entry,
        # stored under its first name; restoring it in place restores every name.
        first = {}  # _alias_key -> (index in out or None for a DTensor, first name)

        dtensor = _compat.dtensor_class()  # looked up once: every tensor is asked

        def is_dt(t):
            return dtensor is not None and isinstance(t, dtensor)

        def add(name, t, replicated, spec=None, copy_at_save=False, inherited=None):
            is_dtensor = is_dt(t)
            key = _alias_key(t, is_dtensor)
            if key in first:
                merge_alias(name, key, replicated, spec, copy_at_save, inherited)
                return
            first[key] = (len(out) if not is_dtensor else None, name)
            if is_dtensor:
                if name in self._shards or spec is not None:
                    raise InvalidArgumentError("register: %r is a DTensor, placed by its own "
                                               "mesh and placements: give it no shard spec"
                                               % name)
                slot = self._placer.slot(name, t)
                slots.append(slot)
                if slot.stored is not None:
                    out.append((name, slot.stored, False) +
                               (slot.spec if slot.spec else (None, None)) + (copy_at_save,))
                return
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

        def merge_alias(name, key, replicated, spec, copy_at_save, inherited):
            """A second name of a tensor already added: nothing is stored under it. A spec
            must agree; replicated only when both are (a buffer is not), copied at save
            when either is."""
            index, first_name = first[key]
            if name in self._shards:
                used.add(name)
                spec = self._shards[name] if spec is None else spec
            elif spec is None:
                spec = inherited
            if index is None:  # a DTensor: placed by its own mesh, nothing to merge
                if spec is not None:
                    raise InvalidArgumentError("register: %r is a DTensor, placed by its own "
                                               "mesh and placements: give it no shard spec"
                                               % name)
                return
            stored, given = out[index], ((spec[0], spec[1]) if spec else (None, None))
            place = stored[3:5]
            if given != (None, None):
                if place not in ((None, None), given):
                    raise InvalidArgumentError(
                        "register: %r is the same tensor as %r (tied or shared storage), "
                        "stored once under %r, and is given another shard spec (%s, not %s)"
                        % (name, first_name, first_name, given, place))
                place = given
            out[index] = (stored[0], stored[1], stored[2] and bool(replicated)) + place + \
                (stored[5] or copy_at_save,)

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
                owned = params | {id(b) for b in obj.buffers()}
                for key, t in states[prefix].items():
                    if isinstance(t, torch.Tensor) and not stateful.is_extra_state(key):
                        if id(t) not in owned:
                            # A copy (FSDP1's gathered state dict, a state_dict hook's
                            # tensor): restored into it, the module would never see it.
                            raise InvalidArgumentError(
                                "register: %r of the module's state_dict() is neither a "
                                "parameter nor a buffer of it (FullyShardedDataParallel (FSDP1) "
                                "and state_dict hooks return copies): a restore could not write "
                                "it back into the module. Use FSDP2 (fully_shard), or register "
                                "the tensors the module trains" % (prefix + key))
                        is_param = id(t) in params
                        add(prefix + key, t, replicated and is_param, copy_at_save=not is_param)
            else:
                for i, p in enumerate(optim.optimizer_params(obj)):
                    for key, value in obj.state.get(p, {}).items():
                        if isinstance(value, torch.Tensor):
                            # Moments shaped like the parameter are sliced like it;
                            # Adam's step counter is not, whatever its shape.
                            inherited = (by_param.get(id(p)) if value.shape == p.shape
                                         and key != "step" and not replicated else None)
                            if is_dt(p) and not is_dt(value):
                                # A plain tensor beside a DTensor parameter (FSDP2's step)
                                # is the same on every rank of the mesh.
                                inherited = None
                            add("%sstate.%d.%s" % (prefix, i, key), value, replicated,
                                inherited=inherited)
        unknown = sorted(set(self._shards) - used)
        if unknown and not unknown_shards_ok:
            raise InvalidArgumentError("register(shards=...): no registered tensor is named %s"
                                       % ", ".join(repr(n) for n in unknown))
        self._placer.forget_unused({id(s.dtensor) for s in slots})
        self._dtensor_slots = slots
        return out

    # ---- extra state -----------------------------------------------------------------------
    def _modules(self):
        return {prefix: obj for kind, prefix, obj, _, _ in self._sources if kind == "module"}

    def _extra_state(self, states):
        # The loop may have put a loader or an iterator into an extra= dict since register().
        stateful.check_extra_values(self._extras, self._warned)
        return stateful.build(self._sources, self._extras, self._statefuls, states)

    def _apply_extra_state(self, state):
        stateful.apply(state, self._sources, self._extras, self._statefuls, self._modules())

    # ---- checkpointing ---------------------------------------------------------------------
    def save(self, step, loss=None):
        """Collective. Starts checkpoint `step` (> the last one) and returns once its copy began.

        Under `memento launch` every call is the job's progress: `step` and the `loss` given
        (a number or a one-element tensor; optional) appear in the launcher's progress line,
        and `--inject N@STEP` fires once the job reached STEP.

        It waits first for the previous checkpoint if that is still being protected (one in
        flight), so a save interval shorter than the protect time stalls training.

        With interval=N or interval="auto" (MEMENTO_INTERVAL) only some steps are saved;
        the others return at once without copying anything (interval_stats() counts them).
        """
        saved = False
        extra = None
        try:
            t0 = time.perf_counter()
            step = _count("save: step", step)
            if loss is not None:
                if isinstance(loss, torch.Tensor):
                    loss = loss.detach()
                self._impl.set_loss(float(loss))
            if self._impl.would_save(int(step)):
                states = self._module_states()
                entries = self._entries(states)
                self._set_tensors(entries)
                extra = self._extra_state(states)
                self._impl.set_user_state(stateful.dumps(extra))
                if self._dcp is not None:
                    self._dcp.set(self._impl, self._sources, states, [e[0] for e in entries],
                                  extra, step)
            # The training thread's time in Python's part of save() is stall too.
            self._impl.add_caller_stall(time.perf_counter() - t0)
            try:
                self._impl.save(int(step))
            except ResourceExhaustedError as e:
                if extra is None or "extra state needs" not in str(e):
                    raise
                raise ResourceExhaustedError(
                    "save: %s; the largest parts: %s. The pickled state grows as these do (an "
                    "LBFGS keeps up to 2 * history_size vectors of all its parameters there): "
                    "give Checkpointer(extra_capacity=) room for the largest it will be" % (
                        e, "; ".join(stateful.largest(extra)) or "none of the registered "
                        "objects")) from None
            saved = True
            for f in AFTER_SAVE:  # none adds or removes one while it runs
                f()
        finally:
            if not saved:
                # Failed in Python's part (pickling the extra state, ...) or the engine's:
                # this rank's last save failed, so close() marks nothing.
                try:
                    self._impl.note_failed_save()
                except MementoError:
                    pass  # closed: nothing to mark anyway
            _flush_logs()

    def restore(self, from_dcp=None, step=None):
        """Collective. Restores the newest complete checkpoint in place.

        from_dcp: a torch.distributed.checkpoint directory (default MEMENTO_RESTORE_FROM /
        restore_from=) to start from when memento has nothing to resume: no version of this
        job in memory or on its remote tier, or its last run finished (a rerun then starts
        as the first run did): a project switching to memento keeps its progress. Loaded
        with torch.distributed.checkpoint.load onto this world size and these placements,
        under the names of a plain dcp.save({"model": model.state_dict(), "optimizer":
        optimizer.state_dict()}); returns a RestoreReport with source "dcp" and the step
        (`step`, else the one memento wrote, else the number ending the directory name).

        Returns a RestoreReport (usable as the int step), or None when the job never committed
        a checkpoint (a fresh start) or its last run finished (close(); logged at warning,
        naming the step: resume_finished=True / MEMENTO_RESUME_FINISHED=1 continues it), and
        no from_dcp is given.
        Raises UnrecoverableError when it did but no committed version can be rebuilt from
        memory or read from the remote tier. A restore that
        raises may have written part of a version into the tensors (it restores in place):
        do not train on from them; exit and relaunch, or restore() again. After an
        elastic restore (report.elastic) the restored tensors are snapshotted under the new
        topology in the background, as after save(): call wait_snapshot() before modifying
        them (the training loop does, before optimizer.step()).
        """
        try:
            self._set_tensors(self._entries())
            report = self._impl.restore()
            if report is None:
                return self._restore_from_dcp(from_dcp, step)
            blob = self._impl.user_state()
            if blob is not None:
                self._apply_extra_state(pickle.loads(blob))
            # Replicas of DTensor shards stored their rows once: put them together.
            placement.fill_replicas(self._dtensor_slots)
            return RestoreReport(report)
        finally:
            _flush_logs()

    def _restore_from_dcp(self, path, step):
        given = "from_dcp" if path else "MEMENTO_RESTORE_FROM (restore_from=)"
        path = path or self._impl.restore_from
        if not path:
            return None
        t0 = time.perf_counter()
        step = dcp.load(self, path, step, given)  # every replica loaded, nothing to fill
        seconds = time.perf_counter() - t0
        _logs.logger.info("restore: started from the DCP checkpoint %s at step %d (%.2f s)",
                          path, step, seconds)
        # Every attribute a report from memory has (nothing moved between ranks, nothing
        # in memory yet: protected once the first save() commits), and where it came from.
        return RestoreReport({
            "step": step, "version": step, "source": "dcp", "dcp_path": path, "entries": [],
            "lost_nodes": [], "elastic": False, "elastic_plan": "", "notes": [],
            "restore_s": seconds, "source_detail": "dcp " + path, "bytes_sent": 0,
            "bytes_received": 0, "reprotect_mode": "", "protection": self.protection_state(),
            "inventory_s": 0.0, "plan_s": 0.0, "transfer_s": seconds, "reprotect_s": 0.0,
            "summary": "v%d from the DCP checkpoint %s, %.2f s" % (step, path, seconds),
            "json": lambda: json.dumps({"version": step, "source": "dcp", "dcp_path": path,
                                        "restore_s": seconds})})

    def wait_snapshot(self):
        """Returns when registered tensors may be modified again (call before optimizer.step).

        Raises the failure of the snapshot in flight once (wait() raises it as well); later
        calls return until the next save's snapshot, as does any after a successful restore().
        """
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
        Afterwards save() and restore() raise FailedPreconditionError, the getters (rank,
        latest_committed(), interval_stats(), ...) answer the values they had when it
        closed, and close() again does nothing. Called from another thread (a watchdog), it
        first waits for the save(), restore() or wait in flight there to return.

        close() (also leaving a `with` block without an exception) ends the run normally:
        collectively, once every rank's last checkpoint committed, the run is marked finished
        (in the node stores and on the remote tier) and every rank's node store is unlinked,
        freeing its memory (keep_finished=True / MEMENTO_KEEP_FINISHED=1 keeps it, marked;
        so does a failed last persist, which close() then raises).
        The same job started again then begins fresh: restore() returns None (or starts from
        its from_dcp checkpoint, as the first run did), unless resume_finished=True /
        MEMENTO_RESUME_FINISHED=1. A `with` block left by an exception,
        or a close() after a failed save(), marks nothing: a relaunch restores as after a crash.
        """
        self._close(finished=True)

    def _close(self, finished):
        _OPEN.discard(self)
        try:
            failure = None
            if finished and launch_events.active():
                failure = self._report_done()
            # The last checkpoint failed (wait() above reported it): not a normal end.
            self._impl.close(finished=finished and failure is None)
            if failure is not None:
                raise failure
        finally:
            # The entry list and the tensors it walked are not held beyond the run.
            self._cache.clear()
            self._set = None
            _flush_logs()

    def _report_done(self):
        """Tells `memento launch` the run ended, once its last checkpoint committed. Returns
        the failure of that checkpoint (close() raises it), or None."""
        try:
            self._impl.wait()
            self._impl.report_done(launch_events.state_hash(self._entries()))
        except FailedPreconditionError:
            return None  # closed already (by another thread)
        except MementoError as e:
            return e
        return None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
            return False
        # An exception is on its way out: the failure of the last checkpoint is logged
        # rather than raised in its place.
        try:
            self._close(finished=False)
        except MementoError as e:
            _logs.logger.error("close: the checkpoint in flight failed: %s", e)
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
