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
    register(sched)            "lr_scheduler" in the extra state (state_dict() / load_state_dict())
    register(loader=obj)       "loader" in the extra state (any object with both methods)
    a second model/optimizer   "model1." / "optimizer1." ...
    register("name", tensor)   "name"
Tied or shared weights (one Parameter under two state_dict keys, or views of one storage
with the same offset, shape and strides) are one entry, under the first name.
A torch.compile'd module and a DistributedDataParallel wrapper are registered as the
module they wrap: the names have no "_orig_mod." or "module.", as in
torch.distributed.checkpoint. Non-tensor optimizer state and the param groups' hyper-parameters (lr, ...)
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

A bit-exact resume also needs the data position and any batch the loop carries
from one iteration to the next (fetched ahead): register a loader that saves its
position (torchdata's StatefulDataLoader, any object with state_dict() /
load_state_dict()) as register(loader=obj), and keep the carried batch in an
extra= dict the loop updates:
    carry = {"batch": None}
    ck.register(model, optimizer, loader=loader, extra=carry)
    ... x = carry["batch"]; carry["batch"] = next(batches); ...; ck.save(step + 1)
A plain DataLoader or sampler keeps no position: register(loader=DataLoader(...)) is
refused, one in an extra= dict is logged once as a warning, and a DataLoader's
iterator or a generator there is refused by key.

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

DTensors (FSDP2's fully_shard, tensor parallel, distribute_tensor). Parameters and
optimizer state that are DTensors are placed from their mesh and placements: each rank
registers its local shard as the slice of the global tensor it is (uneven shards
included), Replicate placements are stored once per replica group and broadcast back
over the mesh at restore, and an elastic restore re-cuts them onto another world size
or mesh (memento.placement).

restore() returns a RestoreReport: its `summary` is one short line (version, entries
counted per source, lost nodes, elastic, seconds), its to_dict() every entry (name,
bytes, crc, source), the notes and the timings. After close() the getters
(latest_committed(), blocked_seconds(), interval_stats(), entry_names(), rank, ...)
answer the values they had when it closed; save() and restore() raise.

Errors are MementoError subclasses, one per status code (NotFoundError,
FailedPreconditionError, ...; InvalidArgumentError is also a ValueError).
Log lines go to logging.getLogger("memento").
"""

import ctypes

import torch  # noqa: F401  (loads libtorch before the extension that links it)

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
from .checkpointer import Checkpointer  # noqa: E402
from .report import RestoreReport  # noqa: E402
from .injob import resilient  # noqa: E402
from .settings import settings_keywords  # noqa: E402

__all__ = ["Checkpointer", "RestoreReport", "MementoError", "resilient", "settings_keywords"]
