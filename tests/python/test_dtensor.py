"""DTensor state (gloo, CPU): placements on 1-D and 2-D meshes, uneven shards and
Replicate stored once, restored in place (torchrun); elastic restores 4 -> 2 and 2 -> 4
ranks from memory, bit-identical to the whole tensors the saving job held and to
torch.distributed.checkpoint's reshard of the same step, under torchrun and mpirun (MEMENTO_TEST_MPIRUN or mpirun on PATH)."""
import glob
import os
import uuid

import pytest

from rank_jobs import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dtensor_ranks.py")


def launch(job, nodes, phase, *args, elastic=False, launcher="torchrun"):
    """Runs dtensor_ranks.py on one rank per node of `nodes` (their MEMENTO_NODE)."""
    env = dict(MEMENTO_JOB=job, DTENSOR_NODES=",".join(nodes), MEMENTO_SCHEME="replica:2",
               MEMENTO_TIMEOUT_S="120", MEMENTO_ELASTIC="1" if elastic else "0")
    return run_ranks(WORKER, len(nodes), ["--phase", phase] + list(args), env, launcher)


def unlink_node(job, node):
    """A lost node: its segments are gone (names as NodeStore::SegmentName makes them)."""
    paths = glob.glob("/dev/shm/memento.%s.%s-*" % (job, node))
    assert paths, "no segments of node %s" % node
    for p in paths:
        os.unlink(p)


@pytest.fixture
def job():
    from conftest import remove_segments
    name = "dt-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    remove_segments(name)
    yield name
    remove_segments(name + "*")  # with the check's FSDP-over-TP job (name + "-tp")


def test_placements_restore_in_place_and_replicas_are_stored_once(job):
    out = launch(job, ["n0", "n1", "n2", "n3"], "check")
    assert out.count("dtensor check passed") == 4


# The saving job runs under one launcher and the restoring job under the other (each
# launch costs several seconds of interpreter start-up per rank): both directions of
# the re-cut meet both launchers.
@pytest.mark.parametrize("before,after,save_with,restore_with",
                         [(4, 2, "torchrun", "mpirun"), (2, 4, "mpirun", "torchrun")])
def test_elastic_restore_recuts_dtensor_shards_from_memory(job, tmp_path, before, after,
                                                           save_with, restore_with):
    ref = str(tmp_path / "ref.pt")
    old = ["n%d" % i for i in range(before)]
    launch(job, old, "save", "--steps", "3", "--ref", ref, launcher=save_with)
    if after < before:
        # Nodes n1 and n3 are lost; replica:2 keeps their shards on n0 and n2.
        unlink_node(job, "n1")
        unlink_node(job, "n3")
        new = ["n0", "n2"]
    else:
        new = old + ["n%d" % i for i in range(before, after)]  # fresh nodes join
    out = launch(job, new, "restore", "--steps", "3", "--ref", ref, elastic=True,
                 launcher=restore_with)
    assert out.count("bit-identical") == after
