"""torch.distributed.checkpoint (DCP) interop.

Writing (remote_format="dcp" / MEMENTO_REMOTE_FORMAT=dcp): the runtime writes every
persisted version as a DCP checkpoint; this module hands it what only Python knows,
with each save: the non-tensor values of the state under the names a plain
``dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()})`` uses
(optimizer param_groups, modules' extra state, stateful objects, extra= values), each
torch.save'd, and every item's path in the nested state dict (DCP's planner_data).

Reading (restore(from_dcp=PATH) / MEMENTO_RESTORE_FROM): when memento holds no
version of the job, the registered modules, optimizers, tensors and stateful objects
are loaded from a DCP checkpoint with torch.distributed.checkpoint.load itself, which
reshards onto this world size and these placements (DTensor / FSDP2, DDP).
"""
import importlib.util
import io
import json
import os
import re
import struct
from collections.abc import Mapping

import torch

from . import _compat, _memento, optim, stateful
from ._memento import InvalidArgumentError, MementoError

STEP_KEY = "memento.step"  # the step of a version memento persisted as DCP
_ITEMS_RECORD = "dcp.items"
_PATHS_RECORD = "dcp.paths"
_ALIASES_RECORD = "dcp.aliases"


def _terminal(values):
    """As torch.distributed.checkpoint's traversal: a list is a leaf unless it holds a
    tensor or a container that is not one."""
    for v in values:
        if isinstance(v, torch.Tensor):
            return False
        if isinstance(v, Mapping):
            return False
        if isinstance(v, list) and not _terminal(v):
            return False
    return True


def flatten(value, path, out):
    """{path tuple: leaf} of a nested state dict, the way dcp.save flattens it (mapping
    keys as strings, list positions as ints)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            flatten(v, path + (str(k),), out)
    elif isinstance(value, list) and not _terminal(value):
        for i, v in enumerate(value):
            flatten(v, path + (i,), out)
    else:
        out[path] = value
    return out


def fqn(path):
    return ".".join(str(p) for p in path)


def _json_key(k):
    return k if isinstance(k, (int, str)) and not isinstance(k, bool) else str(k)


_SCALARS = (bool, int, float, str, type(None))
_saved_cache = {}  # (type, value) -> torch.save bytes, for immutable scalar values


def _cacheable(value):
    if isinstance(value, tuple):
        return all(_cacheable(v) for v in value)
    return isinstance(value, _SCALARS)


def _key(value):
    """Tells apart values that compare equal but save differently (1, 1.0, True)."""
    if isinstance(value, tuple):
        return (tuple,) + tuple(_key(v) for v in value)
    return (type(value), value)


def _torch_saved(value):
    """torch.save(value) as bytes; the same bytes again for an immutable scalar value seen
    before (an optimizer group's betas, eps, flags: most of what a save hands over)."""
    if _cacheable(value):
        key = _key(value)
        blob = _saved_cache.get(key)
        if blob is None:
            if len(_saved_cache) > 4096:
                _saved_cache.clear()
            blob = _saved_cache[key] = _torch_save_bytes(value)
        return blob
    return _torch_save_bytes(value)


def _torch_save_bytes(value):
    buf = io.BytesIO()
    # The legacy format: what torch.load reads too, and 2-3x cheaper to write for a
    # small value than a zip archive.
    torch.save(value, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def _name(prefix):
    return prefix[:-1] if prefix.endswith(".") else prefix


def tensor_paths(sources, states):
    """{entry name: (path, value)} of the registered tensors in the nested state dict."""
    paths = {}
    for kind, prefix, obj, _, _ in sources:
        if kind == "module":
            for key, value in states[prefix].items():
                paths[prefix + key] = ([_name(prefix), key], value)
        elif kind == "optimizer":
            for i, p in enumerate(optim.optimizer_params(obj)):
                for key, value in obj.state.get(p, {}).items():
                    paths["%sstate.%d.%s" % (prefix, i, key)] = (
                        [_name(prefix), "state", str(i), key], value)
        elif kind == "tensor":
            paths[prefix] = ([prefix], obj)
    return paths


def tensor_aliases(found, stored):
    """{name: stored name} for the tensors of `found` (tensor_paths) stored under another
    name (tied weights: an LM head sharing the embedding's). DCP names every one: a plain
    dcp.load of model.state_dict() wants the head's key too."""
    from .checkpointer import _alias_key  # the rule register() merges names by
    dtensor = _compat.dtensor_class()

    def key(t):
        plain = isinstance(t, torch.Tensor) and not (dtensor and isinstance(t, dtensor))
        return _alias_key(t, False) if plain else None

    by_key = {}
    for name, (_, value) in found.items():
        k = key(value) if name in stored else None
        if k is not None and k[0] != "object":
            by_key.setdefault(k, name)
    aliases = {}
    for name, (_, value) in found.items():
        if name in stored:
            continue
        k = key(value)
        if k is not None and k in by_key:
            aliases[name] = by_key[k]
    return aliases


def values(sources, extra_state, step):
    """{path: value} of the state's non-tensor values (see the module docstring)."""
    out = {("memento", "step"): int(step)}
    for kind, prefix, obj, _, _ in sources:
        if kind != "optimizer":
            continue
        name = _name(prefix)
        saved = extra_state["optimizers"].get(prefix, {})
        for (i, key), value in saved.get("scalars", {}).items():
            out[(name, "state", str(i), key)] = value
        start = 0
        for g, (group, live) in enumerate(zip(saved.get("groups", []), obj.param_groups)):
            # optimizer.state_dict()'s form: the group's settings and its params as indices.
            packed = dict(group)
            packed["params"] = list(range(start, start + len(live["params"])))
            start += len(live["params"])
            flatten(packed, (name, "param_groups", g), out)
    for prefix, module_values in extra_state.get("modules", {}).items():
        for key, value in module_values.items():
            flatten(value, (_name(prefix), key), out)  # a dict of it as dcp.save flattens it
    for name, state in extra_state.get("stateful", {}).items():
        flatten(state, (name,), out)
    for extra in extra_state.get("extra", []):
        for key, (kind, value) in extra.items():
            if kind == "state_dict":
                flatten(value, (key,), out)
            else:
                out[(key,)] = value
    return out


class Records:
    """The two records of the extra state the dcp format reads (set before each save)."""

    def __init__(self):
        self._paths_key = None
        self._paths_blob = None
        self._aliases_blob = None

    def set(self, impl, sources, states, entry_names, extra_state, step):
        items = bytearray()
        paths = {}
        for path, value in values(sources, extra_state, step).items():
            name = fqn(path).encode()
            blob = _torch_saved(value)
            items += struct.pack("<I", len(name)) + name + struct.pack("<Q", len(blob)) + blob
            paths[fqn(path)] = [_json_key(k) for k in path]
        key = (tuple(entry_names), tuple(sorted(paths)))
        if key != self._paths_key:  # the tensors' paths change only with registrations
            stored = set(entry_names)
            found = tensor_paths(sources, states)
            aliases = tensor_aliases(found, stored)
            tensors = {n: [_json_key(k) for k in p]
                       for n, (p, _) in found.items() if n in stored or n in aliases}
            tensors.update(paths)
            self._paths_blob = json.dumps(tensors).encode()
            self._aliases_blob = json.dumps(aliases).encode()
            self._paths_key = key
        impl.set_user_record(_ITEMS_RECORD, bytes(items))
        impl.set_user_record(_PATHS_RECORD, self._paths_blob)
        impl.set_user_record(_ALIASES_RECORD, self._aliases_blob)


# ---- reading a DCP checkpoint ------------------------------------------------------------

def _step_from_name(path):
    m = re.search(r"(\d+)$", os.path.basename(os.path.normpath(path)))
    return int(m.group(1)) if m else None


def _check_files(path, metadata):
    """Every file the metadata names is there and long enough; rank files memento wrote
    pass their crc32c. Raises naming the file."""
    needed = {}
    for info in metadata.storage_data.values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    for rel, end in sorted(needed.items()):
        full = os.path.join(path, rel)
        try:
            size = os.path.getsize(full)
        except OSError as e:
            raise MementoError("from_dcp: %s: data file %s is missing (%s)" % (path, rel, e))
        if size < end:
            raise MementoError("from_dcp: %s: data file %s is truncated: %d bytes, the "
                               "metadata needs %d" % (path, rel, size, end))
        _memento.dcp_check_file(full)


def _as_slices(target, places):
    """Makes each tensor of `target` registered as a slice of a global tensor (global_shape=
    / offsets=, shards=, the moments inheriting a parameter's) load as that slice: an alias
    of it that carries DCP's CheckpointableTensor fields (DTensors place themselves). Walks
    `target` as flatten() does, replacing those leaves in place."""
    dtensor = _compat.dtensor_class()
    protocol = importlib.util.find_spec("torch.distributed.checkpoint.protocol") is not None

    def alias(path, value):
        name = fqn(path)
        if name not in places or not isinstance(value, torch.Tensor) or (
                dtensor and isinstance(value, dtensor)):
            return value
        if not protocol:
            raise InvalidArgumentError(
                "from_dcp: %r is registered as a slice of a global tensor; loading slices "
                "needs torch.distributed.checkpoint's CheckpointableTensor protocol (a newer "
                "torch)" % name)
        global_shape, offsets = places[name]
        out = value.detach()  # the same memory: what DCP writes lands in the tensor
        out.global_shape = tuple(int(x) for x in global_shape)
        out.global_offsets = (tuple(int(x) for x in offsets),)
        out.local_offsets = ((0,) * value.dim(),)
        out.local_sizes = (tuple(value.shape),)
        return out

    def walk(value, path):
        if isinstance(value, Mapping):
            for k in list(value):
                value[k] = walk(value[k], path + (str(k),))
        elif isinstance(value, list) and not _terminal(value):
            for i, v in enumerate(value):
                value[i] = walk(v, path + (i,))
        else:
            return alias(path, value)
        return value

    walk(target, ())


def load(ck, path, step=None, given="from_dcp"):
    """Loads the registered state from the DCP checkpoint at `path` in place. Returns the
    step to resume after: `step`, else the one memento recorded, else the number that
    ends the directory's name (step-1000). `given`: where the path came from, for errors."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    if not os.path.isdir(path):
        raise InvalidArgumentError("%s=%r: %s" % (
            given, path, "not a directory" if os.path.exists(path) else "does not exist"))
    try:
        metadata = FileSystemReader(path).read_metadata()
    except Exception as e:  # noqa: BLE001 - a missing or unreadable .metadata
        raise InvalidArgumentError("%s=%r: not a torch.distributed.checkpoint checkpoint "
                                   "(its .metadata: %s)" % (given, path, e))
    keys = set(metadata.state_dict_metadata)
    _check_files(path, metadata)

    target, statefuls = {}, {}
    for kind, prefix, obj, _, _ in ck._sources:
        if kind in ("module", "optimizer"):
            target[_name(prefix)] = obj.state_dict()
        elif kind == "tensor":
            target[prefix] = obj
    required = [fqn(p) for p in flatten(target, (), {})]
    missing = [k for k in required if k not in keys]
    if missing:
        raise InvalidArgumentError(
            "from_dcp=%r: the checkpoint has no %s (%d of the %d values registered; it holds "
            "%s ...)" % (path, ", ".join(missing[:8]), len(missing), len(required),
                         ", ".join(sorted(keys)[:8])))
    # Optimizer state the checkpoint holds and the optimizer does not have yet (created at
    # its first step: RMSprop, SGD with dampening, ...): dcp.load would pass over it in
    # silence and the restore would train on from fresh moments.
    have = set(required)
    for kind, prefix, _, _, _ in ck._sources:
        if kind != "optimizer":
            continue
        state = _name(prefix) + ".state."
        absent = sorted(k for k in keys if k.startswith(state) and k not in have)
        if absent:
            raise InvalidArgumentError(
                "from_dcp=%r: the checkpoint holds %s (%d values of optimizer '%s') that the "
                "optimizer has not created yet (its state appears at its first step): this "
                "restore would drop them; give the optimizer its state before restore() (as "
                "its first step would create it), or restore with dcp.load after one step"
                % (path, ", ".join(absent[:8]), len(absent), _name(prefix)))
    _as_slices(target, ck.placements())
    def take_state(name, obj):
        """Adds a stateful object's state to `target` when the checkpoint holds all of it."""
        state = {name: obj.state_dict()}
        found = all(fqn(p) in keys for p in flatten(state, (), {}))
        if found:
            target.update(state)
        return found

    # Stateful objects and modules' extra state come along when the checkpoint has them,
    # and extra= values: a stateful one as its state dict, another as the one item memento
    # writes for it (a checkpoint that lacks one leaves it as it is).
    for name, obj in ck._statefuls.items():
        if take_state(name, obj):
            statefuls[name] = obj
    extras = []
    for d in ck._extras:
        for k, v in d.items():
            if k in target:
                continue
            if stateful.is_stateful(v):
                if take_state(k, v):
                    extras.append((d, k, True))
            elif k in keys:
                target[k] = v
                extras.append((d, k, False))
    recorded = STEP_KEY in keys and step is None
    if recorded:
        target["memento"] = {"step": 0}
    from torch.distributed.checkpoint.api import CheckpointException
    try:
        dcp.load(target, checkpoint_id=path)
    # CheckpointException derives from BaseException, not Exception.
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - and whatever a reader raises
        why = str(e)
        failures = getattr(e, "failures", None)  # {rank: (exception, traceback)}
        if isinstance(failures, dict) and failures:
            why = "; ".join("rank %s: %s" % (rank, f[0] if isinstance(f, tuple) else f)
                            for rank, f in sorted(failures.items()))
        raise MementoError("from_dcp: loading %s failed: %s" % (path, why)) from e
    for kind, prefix, obj, _, _ in ck._sources:
        if kind == "optimizer":
            obj.load_state_dict(target[_name(prefix)])
        elif kind == "module":
            # In place already; extra state (get_extra_state) goes back through the module,
            # a tensor too (get_extra_state may return a new one each time).
            extra = {k: v for k, v in target[_name(prefix)].items()
                     if not isinstance(v, torch.Tensor) or stateful.is_extra_state(k)}
            if extra:
                obj.load_state_dict({**obj.state_dict(), **extra})
    for name, obj in statefuls.items():
        obj.load_state_dict(target[name])
    for d, k, is_stateful in extras:
        if is_stateful:
            d[k].load_state_dict(target[k])
        else:
            d[k] = target[k]
    if step is None:
        step = target["memento"]["step"] if recorded else _step_from_name(path)
    if step is None:
        raise InvalidArgumentError(
            "from_dcp=%r: which step is this checkpoint's? memento did not write it and its "
            "directory name does not end in a number: pass restore(from_dcp=..., step=N)"
            % path)
    return int(step)
