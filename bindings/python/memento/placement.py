"""Where a DTensor's local shard sits in its global tensor, and how it is stored.

ck.register(model, optimizer) on parameters and optimizer state that are
DTensors (FSDP2's fully_shard, tensor parallelism, distribute_tensor) takes
each rank's place from the DTensor itself, never from the user:

- Shard(d) placements, on any number of mesh dimensions and uneven (a
  dimension the mesh does not divide), give the local shard's global shape and
  offsets (DTensor's own computation), so the entry is that slice of the
  global tensor: an elastic restore onto another world size or mesh re-cuts it.
- Replicate placements are stored once: the ranks that hold the same local
  shard (its replica group, the mesh dimensions placed Replicate) each store
  a different run of its rows, as replicated=True does for a whole job; the
  entry is that smaller slice. restore() writes each rank's run in place and
  then every member of the group broadcasts its run to the others over the
  mesh's own process groups, so every replica ends with the whole shard.
- Partial placements (a pending reduction) have no state to save: refused.

Names do not change: a DTensor parameter is "model.<state_dict key>" like any
other; its entry holds the part of the global tensor this rank stores.
"""
import math

import torch

from . import _compat
from ._memento import InvalidArgumentError


class DTensorSlot:
    """How one DTensor is registered: the view stored and its place, and its fills."""

    __slots__ = ("dtensor", "key", "stored", "spec", "fills")

    def __init__(self, dtensor, key, stored, spec, fills):
        self.dtensor = dtensor   # kept alive: the cache is keyed by its id
        self.key = key
        self.stored = stored     # the view of the local tensor this rank stores, or None
        self.spec = spec         # (global_shape, offsets) of `stored`
        self.fills = fills       # [(mesh dim, [(src global rank, row start, row end)])]


def _key(t):
    local = _compat.local_tensor(t)
    return (local.data_ptr(), local.shape, local.stride(), t.shape, t.placements,
            id(t.device_mesh))


def _runs(rows, parts):
    """Splits `rows` rows into `parts` runs as evenly as possible: [(start, end)]."""
    return [(i * rows // parts, (i + 1) * rows // parts) for i in range(parts)]


class Placer:
    """Computes and caches the registration of DTensors (cheap at every save)."""

    def __init__(self):
        self._cache = {}

    def slot(self, name, t):
        """The DTensorSlot of DTensor `t`, registered as entry `name`."""
        hit = self._cache.get(id(t))
        key = _key(t)
        if hit is not None and hit.dtensor is t and hit.key == key:
            return hit
        slot = self._compute(name, t, key)
        self._cache[id(t)] = slot
        return slot

    def forget_unused(self, used_ids):
        for k in [k for k in self._cache if k not in used_ids]:
            del self._cache[k]

    @staticmethod
    def _compute(name, t, key):
        mesh, placements = t.device_mesh, tuple(t.placements)
        for p in placements:
            if _compat.Partial is not None and isinstance(p, _compat.Partial):
                raise InvalidArgumentError(
                    "register: %r is a DTensor with a Partial placement (a pending "
                    "reduction), which holds no state to checkpoint; redistribute it first"
                    % name)
            # _StridedShard: FSDP2's dim over tensor parallelism (fully_shard on the dp mesh of
            # a ColwiseParallel layer): each rank's shard is still one block of the global
            # tensor, at the offsets DTensor computes (as torch.distributed.checkpoint takes
            # them); the shape check below refuses a layout where it is not.
            if type(p) not in (_compat.Shard, _compat.Replicate, _compat._StridedShard):
                raise InvalidArgumentError(
                    "register: %r has the DTensor placement %r; memento places Shard(d), "
                    "FSDP2's _StridedShard(d) and Replicate()" % (name, p))
        local = _compat.local_tensor(t).detach()
        coordinate = mesh.get_coordinate()
        if coordinate is None:  # this rank is not in the tensor's mesh: it holds nothing
            return DTensorSlot(t, key, None, None, [])
        shape, offsets = _compat.compute_local_shape_and_global_offset(t.shape, mesh, placements)
        if tuple(shape) != tuple(local.shape):
            raise InvalidArgumentError(
                "register: DTensor %r holds a local tensor of shape %s where its placements "
                "%s give %s" % (name, list(local.shape), placements, list(shape)))
        global_shape = tuple(int(x) for x in t.shape)
        offsets = tuple(int(x) for x in offsets)
        replicate_dims = [d for d, p in enumerate(placements) if isinstance(p, _compat.Replicate)]
        if not replicate_dims or local.dim() == 0:
            # A 0-dim replicated DTensor is a few bytes: every rank stores it whole.
            spec = (global_shape, offsets) if local.dim() > 0 else None
            return DTensorSlot(t, key, local, spec, [])
        # Rows of the local shard split over the replica group in the order of the
        # replicate dims (row-major over their coordinates).
        sizes = [mesh.size(d) for d in replicate_dims]
        group_size = math.prod(sizes)
        index = 0
        for d, s in zip(replicate_dims, sizes):
            index = index * s + coordinate[d]
        rows = local.shape[0]
        runs = _runs(rows, group_size)
        start, end = runs[index]
        stored = local[start:end] if end > start else None
        spec = (global_shape, (offsets[0] + start,) + offsets[1:]) if stored is not None else None
        # Broadcasts that put the local shard together again after a restore, one mesh
        # dim at a time, innermost first: after the broadcasts over dim k, each rank
        # holds the rows of every member that differs from it only along the dims from
        # k on (a contiguous run of indices).
        ranks = mesh.mesh
        fills = []
        stride = 1
        for pos in range(len(replicate_dims) - 1, -1, -1):
            d, s = replicate_dims[pos], sizes[pos]
            base = index - (index // stride % s) * stride  # index with coordinate d at 0
            base -= base % stride
            members = []
            for c in range(s):
                first = base + c * stride
                where = list(coordinate)
                where[d] = c
                src = int(ranks[tuple(where)].item())
                members.append((src, runs[first][0], runs[first + stride - 1][1]))
            fills.append((d, members))
            stride *= s
        return DTensorSlot(t, key, stored, spec, fills)


def fill_replicas(slots):
    """After a restore: every replica broadcasts its run of rows to its replica group.

    Collective over each DTensor's mesh groups, in registration order on every rank.
    """
    import torch.distributed as dist
    for slot in slots:
        if not slot.fills:
            continue
        local = _compat.local_tensor(slot.dtensor).detach()
        mesh = slot.dtensor.device_mesh
        with torch.no_grad():
            for d, members in slot.fills:
                group = mesh.get_group(d)
                for src, start, end in members:
                    if end <= start:
                        continue
                    piece = local[start:end]
                    if piece.is_contiguous():
                        dist.broadcast(piece, src=src, group=group)
                    else:
                        buf = piece.contiguous()
                        dist.broadcast(buf, src=src, group=group)
                        piece.copy_(buf)
