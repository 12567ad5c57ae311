"""The small state a bit-identical resume needs besides tensors ("extra state").

One pickled blob per rank, saved with every checkpoint and put back by restore():
the random generators of Python and numpy (torch's travel in the C++ adapter),
the optimizers' non-tensor state and param groups (lr, ...), what modules keep
besides tensors (get_extra_state()), the values of `extra=` dicts, and the
stateful objects registered by name (LR schedulers, data loaders: anything with
state_dict() / load_state_dict(), as torch.distributed.checkpoint's Stateful).
"""
import collections
import pickle
import random
import types

import torch

from ._logs import logger
from ._memento import FailedPreconditionError, InvalidArgumentError
from .optim import optimizer_params

EXTRA_FORMAT = 1


def is_stateful(obj):
    """Whether obj saves and loads itself (torch.distributed.checkpoint.stateful.Stateful)."""
    return callable(getattr(obj, "state_dict", None)) and \
        callable(getattr(obj, "load_state_dict", None))


# What keeps a data position instead, said wherever one is found missing.
KEEP_THE_POSITION = (
    "use a loader that saves its position (torchdata's StatefulDataLoader, or any object "
    "with state_dict() / load_state_dict(), registered as register(loader=obj)), or keep "
    "the count of batches consumed in an extra= dict and skip that many after restore(); "
    "a batch fetched ahead of the next step travels in an extra= dict as well")


def _loader_iterator_type():
    from torch.utils.data import dataloader
    return getattr(dataloader, "_BaseDataLoaderIter", ())


def lost_position(obj):
    """Why `obj` (a DataLoader, a sampler, an iterator without state_dict) cannot carry a
    data position through a checkpoint: a phrase naming it, or None for anything else."""
    if is_stateful(obj):
        return None
    if isinstance(obj, torch.utils.data.DataLoader):
        return ("a %s has no state_dict(): where its iterator stands in the data is not "
                "saved" % type(obj).__name__)
    if isinstance(obj, torch.utils.data.Sampler):
        return ("the sampler %s has no state_dict(): where its iterator stands is not saved"
                % type(obj).__name__)
    if isinstance(obj, (_loader_iterator_type(), types.GeneratorType)):
        return "the iterator %s has no state_dict() and cannot be pickled" % type(obj).__name__
    return None


def check_extra_values(extras, warned):
    """Refuses, by key, extra= values that cannot be saved (a DataLoader's iterator, a
    generator), and logs once per key a warning for those whose data position would be lost
    without an error (a DataLoader or a sampler: pickled, and put back as a copy that the loop
    does not iterate). warned: the (dict index, key) pairs warned about already."""
    for i, d in enumerate(extras):
        for k, v in d.items():
            why = lost_position(v)
            if why is None:
                continue
            if isinstance(v, (_loader_iterator_type(), types.GeneratorType)):
                raise InvalidArgumentError("extra[%r]: %s; %s" % (k, why, KEEP_THE_POSITION))
            if (i, k) not in warned:
                warned.add((i, k))
                logger.warning("extra[%r]: %s (it is pickled at every save and restore() puts "
                               "a copy back into the dict, not into the loop that iterates "
                               "it); %s", k, why, KEEP_THE_POSITION)


def is_extra_state(key):
    """Whether a state_dict key holds a module's get_extra_state() (any type)."""
    return key.rsplit(".", 1)[-1] == "_extra_state"


def load_module_values(module, values):
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


def _check_statefuls(registered, saved):
    added = sorted(set(registered) - set(saved))
    if added:
        logger.warning("restore: %s registered now, the checkpoint holds no state of %s: kept "
                       "as %s", ", ".join(repr(n) for n in added),
                       "it" if len(added) == 1 else "them", "it is" if len(added) == 1
                       else "they are")
    missing = sorted(set(saved) - set(registered))
    if missing:
        raise FailedPreconditionError(
            "restore: the checkpoint holds the state of %s, registered now: %s; register "
            "them as when it was saved" % (", ".join(repr(n) for n in missing),
                                           ", ".join(repr(n) for n in registered) or "none"))


def build(sources, extras, statefuls, module_states):
    """The extra state of this rank, now (a dict, pickled by the caller).

    sources: the registered (kind, prefix, object, ...) tuples; extras: the extra= dicts;
    statefuls: {name: object with state_dict()}; module_states: {prefix: state_dict}.
    """
    state = {"format": EXTRA_FORMAT, "random": random.getstate()}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    optim = {}
    for kind, prefix, obj, *_ in sources:
        if kind != "optimizer":
            continue
        scalars = {}
        for i, p in enumerate(optimizer_params(obj)):
            for key, value in obj.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor):
                    scalars[(i, key)] = value
        groups = [{k: v for k, v in g.items() if k != "params"} for g in obj.param_groups]
        optim[prefix] = {"scalars": scalars, "groups": groups}
    state["optimizers"] = optim
    # What modules keep besides tensors (get_extra_state(): e.g. FP8 scaling
    # metadata), which load_state_dict hands back to set_extra_state().
    modules = {}
    for prefix, module_state in module_states.items():
        values = {k: v for k, v in module_state.items()
                  if is_extra_state(k) or not isinstance(v, torch.Tensor)}
        if values:
            modules[prefix] = values
    state["modules"] = modules
    state["extra"] = [{k: (("state_dict", v.state_dict()) if is_stateful(v) else ("value", v))
                       for k, v in d.items()} for d in extras]
    state["stateful"] = {name: obj.state_dict() for name, obj in statefuls.items()}
    return state


def _places(state):
    """(where, value) of each part of the extra state a user put there, named as registered."""
    places = [("extra[%r]" % k, v) for d in state.get("extra", []) for k, v in d.items()]
    places += [("the stateful object %r" % name, v)
               for name, v in state.get("stateful", {}).items()]
    places += [("%s (a module's value)" % ".".join(filter(None, (prefix, k))), v)
               for prefix, values in state.get("modules", {}).items()
               for k, v in values.items()]
    places += [("%s's state that is not one tensor per parameter (%s)" % (
                    prefix.rstrip("."), ", ".join(sorted({str(k) for _, k in v["scalars"]}))),
                v["scalars"]) for prefix, v in state.get("optimizers", {}).items()]
    return places


def dumps(state):
    """The extra state `build` made, pickled. A value that cannot be pickled (a lock, a
    file, a lambda) is named by where it was registered, not left to pickle's bare
    TypeError: extra[key], the stateful object's name, or the module value."""
    try:
        return pickle.dumps(state, protocol=4)
    except Exception as e:  # noqa: BLE001 - pickle raises TypeError, AttributeError, ...
        for where, value in _places(state):
            try:
                pickle.dumps(value, protocol=4)
            except Exception as why:  # noqa: BLE001
                raise InvalidArgumentError(
                    "save: %s cannot be pickled (%s: %s); keep it out of the saved state, or "
                    "give it state_dict() / load_state_dict()" % (where, type(why).__name__,
                                                                  why)) from e
        raise


def largest(state, count=3):
    """The `count` largest parts of the extra state, as "where: N bytes" (pickled sizes)."""
    sizes = []
    for where, value in _places(state):
        try:
            sizes.append((len(pickle.dumps(value, protocol=4)), where))
        except Exception:  # noqa: BLE001 - dumps() named it already
            continue
    sizes.sort(reverse=True)
    return ["%s: %d bytes" % (where, n) for n, where in sizes[:count]]


def check(state, sources, extras, statefuls):
    """Refuses, by name, a saved extra state that does not fit what is registered now."""
    _check_extras(extras, state.get("extra", []))
    _check_statefuls(statefuls, state.get("stateful", {}))
    for kind, prefix, obj, *_ in sources:
        saved = state["optimizers"].get(prefix) if kind == "optimizer" else None
        if saved is None:
            continue
        if len(saved["groups"]) != len(obj.param_groups):
            raise FailedPreconditionError(
                "restore: optimizer %r had %d param group(s) when saved, it has %d now"
                % (prefix, len(saved["groups"]), len(obj.param_groups)))
        count = len(list(optimizer_params(obj)))
        beyond = sorted({i for i, _ in saved["scalars"] if i >= count})
        if beyond:
            raise FailedPreconditionError(
                "restore: optimizer %r had state for parameter %d, it has %d parameters now"
                % (prefix, beyond[0], count))


def apply(state, sources, extras, statefuls, modules):
    """Puts a saved extra state back (after check()). modules: {prefix: the module itself}."""
    check(state, sources, extras, statefuls)
    random.setstate(state["random"])
    if "numpy" in state:
        import numpy
        numpy.random.set_state(state["numpy"])
    for kind, prefix, obj, *_ in sources:
        if kind != "optimizer" or prefix not in state["optimizers"]:
            continue
        saved = state["optimizers"][prefix]
        params = list(optimizer_params(obj))
        for (i, key), value in saved["scalars"].items():
            obj.state[params[i]][key] = value
        for group, values in zip(obj.param_groups, saved["groups"]):
            group.update(values)
    for prefix, values in state.get("modules", {}).items():
        if prefix in modules and values:
            load_module_values(modules[prefix], values)
    for d, saved in zip(extras, state["extra"]):
        for k, (how, value) in saved.items():
            if how == "state_dict":
                d[k].load_state_dict(value)
            else:
                d[k] = value
    for name, value in state.get("stateful", {}).items():
        statefuls[name].load_state_dict(value)
