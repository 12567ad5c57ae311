"""The entry list of the last save(), reused while nothing registered changed.

Building the entries (names, tied weights merged, shard specs inherited, DTensors
placed) costs a few microseconds per tensor in Python: 2.8 ms per save for a
transformer and AdamW of 596 tensors, the training thread's time. A save that finds
the same objects as the last one reuses its list instead. What it compares:

- the structure: each module's state_dict() keys, each optimizer parameter's state
  keys, in registration order;
- every tensor met on the way (module states, optimizer parameters and their state,
  tensors registered by name, a DTensor's local tensor): the same object, with the
  same storage, offset, dtype, device, shape and strides (_memento.tensor_fingerprint,
  one pass in C++; a save compares without building it), so a parameter replaced,
  `p.data = ...`, a resize or a move is a new list; a DTensor also keeps its spec
  object (its placements and mesh). Values that are not tensors (a float `step`, a
  module's extra state) count by their type only.

What the walk holds keeps those objects alive until the next build, so no other
tensor can take one's place at the same address. register() forgets the list.
"""
from . import _compat, _memento, optim


class EntryCache:
    """One entry list and what it was built from, replaced as one tuple: a getter on
    another thread (ck.tensors() from a watchdog) never pairs one build's fingerprint
    with another's entries."""

    def __init__(self):
        # (keys, fingerprint, walked objects, walked past DTensors, entries, DTensorSlots)
        self._last = None
        self.hits = 0

    def clear(self):
        """Forgets the list (hits go on counting)."""
        self._last = None

    def lookup(self, sources, states):
        """(entries, DTensorSlots) built last if `sources` still walk to the same tensors,
        else (None, None); and the walk, for store() after a new build."""
        last = self._last
        walk = self._walk(sources, states, last is not None and last[3])
        if (last is not None and walk[0] == last[0] and
                _memento.tensor_fingerprint_matches(walk[1], last[1])):
            self.hits += 1
            return last[4], last[5], walk
        return None, None, walk

    def store(self, sources, states, walk, entries, slots):
        """Keeps `entries` (built from what `walk` found) for the next lookup."""
        dtensors = bool(slots)
        last = self._last
        if dtensors != (last is not None and last[3]):
            walk = self._walk(sources, states, dtensors)  # past DTensors: their local tensors
        keys, objects = walk
        # The objects stay referenced: the tensors, and so their addresses, stay theirs.
        self._last = (keys, _memento.tensor_fingerprint(objects), objects, dtensors, entries,
                      slots)

    @staticmethod
    def _walk(sources, states, dtensors):
        """(structure keys, objects) of the registered sources, in _entries' order."""
        keys, objects = [], []
        for kind, prefix, obj, _, _ in sources:
            if kind == "tensor":
                objects.append(obj)
            elif kind == "module":
                state = states[prefix]
                keys.append(tuple(state))
                objects.extend(state.values())
            elif kind == "optimizer":
                state = obj.state
                for p in optim.optimizer_params(obj):
                    objects.append(p)
                    values = state.get(p)
                    if values:
                        keys.append(tuple(values))
                        objects.extend(values.values())
                    else:
                        keys.append(())
        dtensor = _compat.dtensor_class() if dtensors else None
        if dtensor is not None:
            more = []
            for t in objects:
                if isinstance(t, dtensor):
                    spec = getattr(t, "_spec", None)
                    keys.append(id(spec))
                    more += [_compat.local_tensor(t), spec]  # the spec held: its id stays its
            objects.extend(more)
        return keys, objects
