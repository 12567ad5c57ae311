"""torch.distributed.checkpoint (DCP) interop, both directions, under torchrun and mpirun
(MEMENTO_TEST_MPIRUN or mpirun on PATH), gloo on the CPU:

- memento -> DCP: a 4-rank job (FSDP2 model + replicated MLP, AdamW each) persists with
  remote_format="dcp"; with every node store gone, memento restores from that tier, and a
  script without memento (dcp_plain.py) dcp.load()s it on 1, 2 and 4 ranks: every tensor
  bit-identical to memento's restore, which is bit-identical to what the job held;
- DCP -> memento: a plain 4-rank FSDP2 job dcp.save()s; memento restores it with
  restore(from_dcp=) on 2 and 4 ranks, bit-identical to dcp.load on the same world size;
- damage: a flipped byte in a memento-written data file is named (by memento's own restore,
  which falls back to the older version, and by from_dcp); a truncated dcp.save file is
  named; a version whose persist was cut short is never chosen.
"""
import glob
import json
import os
import subprocess
import sys
import uuid

import pytest
import torch

from rank_jobs import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = os.path.join(HERE, "dcp_ranks.py")
PLAIN = os.path.join(HERE, "dcp_plain.py")


def launch(script, n, *args, job="", launcher="torchrun"):
    """Runs `script` on n ranks (one virtual node each) under `launcher`; the plain
    script on one rank runs without one (launcher None)."""
    assert launcher is not None or script == PLAIN, "only the plain script runs alone"
    env = dict(MEMENTO_JOB=job, DCP_NODES=",".join("n%d" % i for i in range(n)),
               MEMENTO_SCHEME="replica:2" if n > 1 else "none", MEMENTO_TIMEOUT_S="120")
    return run_ranks(script, n, args, env, launcher, tail=6000)


def same_bits(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and
            torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def assert_same(want_path, got_path, what):
    want, got = torch.load(want_path), torch.load(got_path)
    assert set(want) == set(got), "%s: %s" % (what, sorted(set(want) ^ set(got)))
    for k in want:
        assert same_bits(want[k], got[k]), "%s: %s differs" % (what, k)
    return len(want)


@pytest.fixture
def job():
    from conftest import remove_segments
    name = "dcp-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    remove_segments(name + "*")  # with the jobs a test derives from it (name + "x", ...)
    yield name
    remove_segments(name + "*")


def newest_version(remote, job):
    versions = sorted(glob.glob(os.path.join(remote, job, "v*")))
    assert versions, "nothing persisted under %s" % remote
    return versions[-1]


# Each multi-rank phase runs once, under one launcher, and the two launchers alternate
# between the phases: every script phase meets both over the two tests, a version
# persisted under one launcher is restored under the other, and each launch costs
# several seconds of interpreter start-up per rank.

def test_memento_persists_dcp_that_plain_dcp_load_reads_on_1_2_4_ranks(job, tmp_path):
    from conftest import remove_segments
    remote = str(tmp_path / "remote")
    launch(RANKS, 4, "--phase", "persist", "--remote", remote, "--out",
           str(tmp_path / "held.pt"), job=job, launcher="torchrun")
    version = newest_version(remote, job)
    assert os.path.exists(os.path.join(version, ".metadata"))
    remove_segments(job)  # every node's memory is gone: only the DCP-format tier is left
    launch(RANKS, 4, "--phase", "restore", "--remote", remote, "--out",
           str(tmp_path / "restored.pt"), job=job, launcher="mpirun")
    n = assert_same(tmp_path / "held.pt", tmp_path / "restored.pt", "memento's restore")
    for ranks, launcher in ((1, None), (2, "mpirun"), (4, "torchrun")):
        out = str(tmp_path / ("plain%d.pt" % ranks))
        launch(PLAIN, ranks, "--phase", "load", "--dir", version, "--out", out,
               launcher=launcher)
        assert_same(tmp_path / "restored.pt", out, "dcp.load on %d ranks" % ranks)
    assert n > 20  # parameters, AdamW moments and steps, learning rates


def test_memento_restores_a_plain_fsdp2_dcp_checkpoint_on_2_and_4_ranks(tmp_path):
    from conftest import remove_segments
    ckpt = str(tmp_path / "step-3")
    launch(PLAIN, 4, "--phase", "save", "--steps", "3", "--dir", ckpt, launcher="mpirun")
    # dcp.load under one launcher, memento's from_dcp under the other.
    for ranks, load_with, memento_with in ((2, "torchrun", "mpirun"), (4, "mpirun", "torchrun")):
        ref = str(tmp_path / ("dcp%d.pt" % ranks))
        launch(PLAIN, ranks, "--phase", "load", "--dir", ckpt, "--out", ref,
               launcher=load_with)
        job = "dcpin-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
        try:
            out = str(tmp_path / ("memento%d.pt" % ranks))
            launch(RANKS, ranks, "--phase", "from-dcp", "--steps", "3", "--dir", ckpt,
                   "--remote", str(tmp_path / ("remote%d" % ranks)), "--out", out, job=job,
                   launcher=memento_with)
            assert_same(ref, out, "from_dcp on %d ranks" % ranks)
        finally:
            remove_segments(job)


# ---- one rank, in this process ------------------------------------------------------------

def small_job(tmp_path, job, steps):
    import memento
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    ck = memento.Checkpointer(job=job, scheme="none", remote=str(tmp_path / "remote"),
                              remote_format="dcp", persist_every=1, persist_keep=3)
    ck.register(model, opt)
    held = {}
    for step in range(1, steps + 1):
        model(torch.randn(3, 4)).sum().backward()
        ck.wait_snapshot()
        opt.step()
        opt.zero_grad()
        ck.save(step)
        ck.wait()
        ck.wait_persist()
        held[step] = {k: v.clone() for k, v in model.state_dict().items()}
    return ck, model, held


def flip_payload_byte(path):
    """Flips a byte of the first tensor's bytes in a memento-written .distcp file."""
    import json
    import struct
    with open(path, "r+b") as f:
        f.seek(-20, os.SEEK_END)
        length, = struct.unpack("<Q", f.read(8))
        f.seek(-20 - length, os.SEEK_END)
        index = json.loads(f.read(length))
        entry = next(e for e in index["entries"] if e["segments"])
        at = entry["segments"][0][1] + 1
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    return entry["name"]


def test_a_damaged_dcp_data_file_is_named_and_the_older_version_restored(job, tmp_path):
    from conftest import remove_segments
    import memento
    ck, model, held = small_job(tmp_path, job, 2)
    ck.close()
    remove_segments(job)
    newest = newest_version(str(tmp_path / "remote"), job)
    data = glob.glob(os.path.join(newest, "*.distcp"))
    assert len(data) == 1
    entry = flip_payload_byte(data[0])
    other = memento.Checkpointer(job=job + "x", scheme="none").register(model)
    with pytest.raises(memento.MementoError) as e:
        other.restore(from_dcp=newest)
    other.close()
    assert os.path.basename(data[0]) in str(e.value) and entry in str(e.value), str(e.value)
    ck2 = memento.Checkpointer(job=job, scheme="none", remote=str(tmp_path / "remote"),
                               remote_format="dcp")
    ck2.register(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    report = ck2.restore()
    assert int(report) == 1, report  # v2 passed over, v1 from the remote tier
    assert any(os.path.basename(data[0]) in note for note in report.notes), report.notes
    for k, v in held[1].items():
        assert same_bits(v, model.state_dict()[k]), k
    ck2.close()


def test_a_truncated_plain_dcp_file_is_named_and_a_cut_short_version_is_refused(job, tmp_path):
    import memento
    import torch.distributed.checkpoint as dcp
    model = torch.nn.Linear(5, 3)
    ckpt = str(tmp_path / "step-7")
    dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt)
    data = glob.glob(os.path.join(ckpt, "*.distcp"))
    with open(data[0], "r+b") as f:
        f.truncate(os.path.getsize(data[0]) // 2)
    ck = memento.Checkpointer(job=job, scheme="none")
    ck.register(model)
    with pytest.raises(memento.MementoError) as e:
        ck.restore(from_dcp=ckpt)
    assert os.path.basename(data[0]) in str(e.value) and "truncated" in str(e.value)
    # A version folder without .metadata (its persist cut short) is not a checkpoint.
    os.unlink(os.path.join(ckpt, ".metadata"))
    with pytest.raises(memento.InvalidArgumentError) as e:
        ck.restore(from_dcp=ckpt)
    assert ".metadata" in str(e.value)
    # Bad input, each refused by name.
    with pytest.raises(memento.InvalidArgumentError) as e:
        ck.restore(from_dcp=str(tmp_path / "nowhere"))
    assert "from_dcp=" in str(e.value) and "nowhere': does not exist" in str(e.value)
    with pytest.raises(memento.InvalidArgumentError) as e:
        ck.restore(from_dcp=data[0])
    assert "not a directory" in str(e.value)
    # The same path given by MEMENTO_RESTORE_FROM is named so.
    with memento.Checkpointer(job=job + "-env", scheme="none",
                              restore_from=str(tmp_path / "nowhere")) as fresh:
        fresh.register(model)
        with pytest.raises(memento.InvalidArgumentError) as e:
            fresh.restore()
    assert str(e.value).startswith("MEMENTO_RESTORE_FROM (restore_from=)="), str(e.value)
    nameless = str(tmp_path / "latest")
    dcp.save({"model": model.state_dict()}, checkpoint_id=nameless)
    with pytest.raises(memento.InvalidArgumentError) as e:
        ck.restore(from_dcp=nameless)
    assert "step=" in str(e.value), str(e.value)
    assert int(ck.restore(from_dcp=nameless, step=11)) == 11
    with pytest.raises(memento.MementoError) as e:
        memento.Checkpointer(job="dcp-bad", remote=str(tmp_path / "r"), remote_format="safetensors")
    assert "MEMENTO_REMOTE_FORMAT" in str(e.value)
    # A checkpoint without the registered names is refused, naming them.
    other = str(tmp_path / "other-1")
    dcp.save({"net": model.state_dict()}, checkpoint_id=other)
    with pytest.raises(memento.InvalidArgumentError) as e:
        ck.restore(from_dcp=other)
    assert "model.weight" in str(e.value)
    ck.close()


def test_from_dcp_reads_the_step_and_what_memento_wrote_matches_dcp_save(job, tmp_path):
    """The metadata memento writes equals dcp.save's for the same state (names, sizes,
    chunks, dtypes, nested paths), and restore(from_dcp=) of it takes memento's step."""
    import memento
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    ck, model, held = small_job(tmp_path, job, 3)
    opt = ck._sources[1][2]
    version = newest_version(str(tmp_path / "remote"), job)
    mine = FileSystemReader(version).read_metadata()
    ref_dir = str(tmp_path / "ref")
    dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict()},
             checkpoint_id=ref_dir)
    theirs = FileSystemReader(ref_dir).read_metadata()
    extra = set(mine.state_dict_metadata) - set(theirs.state_dict_metadata)
    assert extra == {"memento.step"}, extra
    for key, md in theirs.state_dict_metadata.items():
        got = mine.state_dict_metadata[key]
        assert type(got) is type(md), key
        if hasattr(md, "chunks"):
            assert (got.size, got.chunks) == (md.size, md.chunks), key
            # Strides are left out of the properties (the form torch < 2.8 reads too).
            for field in ("dtype", "layout", "requires_grad", "memory_format", "pin_memory"):
                assert getattr(got.properties, field) == getattr(md.properties, field), key
        assert mine.planner_data[key] == theirs.planner_data[key], key
    ck.close()
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    # restore_from= is MEMENTO_RESTORE_FROM as a keyword: restore() reads it.
    ck2 = memento.Checkpointer(job=job + "-b", scheme="none", restore_from=version)
    ck2.register(fresh, torch.optim.AdamW(fresh.parameters(), lr=0.01))
    report = ck2.restore()
    assert report.source == "dcp" and int(report) == 3, report
    # Every attribute a report from memory has.
    assert report.source_detail == "dcp " + version and report.bytes_received == 0
    assert report.transfer_s >= 0 and report.protection in ("protected", "unprotected")
    assert json.loads(report.json)["source"] == "dcp"
    for key in ("inventory_s", "plan_s", "reprotect_s", "reprotect_mode", "elastic_plan"):
        assert key in report.to_dict(), key
    for k, v in held[3].items():
        assert same_bits(v, fresh.state_dict()[k]), k
    ck2.close()


def test_from_dcp_refuses_optimizer_state_the_optimizer_has_not_created(job, tmp_path):
    """RMSprop creates its state at its first step: a fresh one has none, and dcp.load
    would pass over the checkpoint's moments in silence. restore(from_dcp=) names them."""
    import memento
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    path = str(tmp_path / "step-1")
    dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, checkpoint_id=path)
    fresh = torch.nn.Linear(4, 2)
    ck = memento.Checkpointer(job=job, scheme="none")
    ck.register(fresh, torch.optim.RMSprop(fresh.parameters(), lr=0.01))
    with pytest.raises(memento.InvalidArgumentError) as e:
        ck.restore(from_dcp=path)
    assert "optimizer.state.0.square_avg" in str(e.value), e.value
    assert "has not created yet" in str(e.value), e.value
    ck.close()


class _TiedLM(torch.nn.Module):
    """An LM head sharing the embedding's weight, as GPT-2 and Llama-style models tie them."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x):
        return self.head(self.embed(x))


def test_a_tied_weight_is_in_the_dcp_checkpoint_under_every_name(job, tmp_path):
    """memento stores a tied weight once; the DCP checkpoint it writes names it under each
    key of model.state_dict() (over the same bytes), so that a plain strict dcp.load and
    restore(from_dcp=) of the tied model both take it."""
    import memento
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    torch.manual_seed(5)
    model = _TiedLM()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    ck = memento.Checkpointer(job=job, scheme="none", remote=str(tmp_path / "remote"),
                              remote_format="dcp", persist_every=1)
    ck.register(model, opt)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    ck.wait_snapshot()
    opt.step()
    ck.save(1)
    ck.wait()
    ck.wait_persist()
    ck.close()
    version = newest_version(str(tmp_path / "remote"), job)
    keys = set(FileSystemReader(version).read_metadata().state_dict_metadata)
    assert {"model.embed.weight", "model.head.weight"} <= keys, sorted(keys)
    fresh = _TiedLM()
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=version)  # strict: every key of the state dict
    fresh.load_state_dict(state["model"])
    assert same_bits(fresh.head.weight, model.head.weight)
    assert fresh.head.weight is fresh.embed.weight
    again = _TiedLM()
    ck2 = memento.Checkpointer(job=job + "-b", scheme="none")
    ck2.register(again, torch.optim.AdamW(again.parameters(), lr=0.01))
    assert ck2.restore(from_dcp=version) == 1
    assert same_bits(again.embed.weight, model.embed.weight)
    ck2.close()


def test_the_newer_dtypes_are_named_so_that_plain_dcp_load_reads_the_checkpoint(job, tmp_path):
    """float8, the wide unsigned integers and complex32 are written as the torch attributes
    they are (torch.float8_e4m3fn, not c10's Float8_e4m3fn, which made the whole .metadata
    unreadable); dcp.load gives every tensor back bit for bit."""
    import memento
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(7)
    base = torch.randn(5, 3)
    tensors = {
        "f8": base.to(torch.float8_e4m3fn), "f8b": base.to(torch.float8_e5m2),
        "u16": torch.arange(15, dtype=torch.int32).reshape(5, 3).to(torch.uint16),
        "u32": torch.arange(7, dtype=torch.int64).to(torch.uint32),
        "u64": torch.arange(7, dtype=torch.int64).to(torch.uint64),
        "c32": torch.randn(4, dtype=torch.complex64).to(torch.complex32),
        "bf16": base.to(torch.bfloat16),
    }
    ck = memento.Checkpointer(job=job, scheme="none", remote=str(tmp_path / "remote"),
                              remote_format="dcp", persist_every=1)
    for name, t in tensors.items():
        ck.register(name, t)
    ck.save(1)
    ck.wait()
    ck.wait_persist()
    ck.close()
    version = newest_version(str(tmp_path / "remote"), job)
    state = {name: torch.zeros_like(t) for name, t in tensors.items()}
    dcp.load(state, checkpoint_id=version)
    for name, t in tensors.items():
        assert same_bits(state[name], t), name
    # What DCP itself refuses (its CheckpointException is no Exception) is a MementoError.
    ck2 = memento.Checkpointer(job=job + "-b", scheme="none")
    ck2.register("u16", torch.zeros(4, 3, dtype=torch.uint16))
    with pytest.raises(memento.MementoError, match="from_dcp: loading .* failed: .*u16"):
        ck2.restore(from_dcp=version)
    ck2.close()


class _WithExtra(torch.nn.Module):
    """A module whose get_extra_state() is a dict (of a tensor too) or a new tensor each
    time (as Transformer Engine's FP8 metadata)."""

    def __init__(self, kind):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)
        self.kind = kind
        self.extra = ({"a": 1, "t": torch.zeros(3)} if kind == "dict" else torch.zeros(4))

    def get_extra_state(self):
        return self.extra if self.kind == "dict" else self.extra.clone()

    def set_extra_state(self, state):
        self.extra = state


def test_module_extra_state_is_written_as_dcp_save_writes_it_and_read_back(job, tmp_path):
    """A dict of get_extra_state() is flattened as dcp.save flattens it (one bytes item made
    a plain dcp.load of model and optimizer fail, "Missing key ... optimizer.param_groups",
    and from_dcp refuse memento's own checkpoint); a tensor returned anew by
    get_extra_state() goes back through set_extra_state() (it was loaded into a temporary)."""
    import memento
    import torch.distributed.checkpoint as dcp
    for kind in ("dict", "tensor"):
        torch.manual_seed(0)
        model = _WithExtra(kind)
        model.extra = ({"a": 42, "t": torch.arange(3.0)} if kind == "dict"
                       else torch.arange(4.0) + 10)
        opt = torch.optim.AdamW(model.parameters())
        remote = str(tmp_path / kind)
        ck = memento.Checkpointer(job=job + kind, scheme="none", remote=remote,
                                  remote_format="dcp", persist_every=1)
        ck.register(model, opt)
        ck.save(1)
        ck.wait()
        ck.wait_persist()
        ck.close()
        version = newest_version(remote, job + kind)

        plain, plain_opt = _WithExtra(kind), torch.optim.AdamW(model.parameters())
        memento.optim.prime_optimizer(plain_opt)
        state = {"model": plain.state_dict(), "optimizer": plain_opt.state_dict()}
        dcp.load(state, checkpoint_id=version)
        plain.load_state_dict(state["model"])

        again = _WithExtra(kind)
        ck2 = memento.Checkpointer(job=job + kind + "-b", scheme="none")
        ck2.register(again, torch.optim.AdamW(again.parameters()))
        assert ck2.restore(from_dcp=version) == 1
        ck2.close()
        for got in (plain.extra, again.extra):
            if kind == "dict":
                assert got["a"] == 42 and torch.equal(got["t"], torch.arange(3.0)), got
            else:
                assert torch.equal(got, torch.arange(4.0) + 10), got
        assert same_bits(again.lin.weight, model.lin.weight)


class _Position:
    """A stateful object (state_dict / load_state_dict), as a data loader's position."""

    def __init__(self, at=0):
        self.at = at

    def state_dict(self):
        return {"at": self.at}

    def load_state_dict(self, state):
        self.at = state["at"]


def test_from_dcp_gives_extra_values_back(job, tmp_path):
    """extra= values, plain and stateful, are in the DCP checkpoint memento writes, and
    from_dcp puts them back (a data position kept there restarted from 0)."""
    import memento
    model = torch.nn.Linear(3, 2)
    extra = {"my.key": 0, "name": "", "loader": _Position()}
    ck = memento.Checkpointer(job=job, scheme="none", remote=str(tmp_path / "remote"),
                              remote_format="dcp", persist_every=1)
    ck.register(model, extra=extra)
    extra.update({"my.key": 30, "name": "hello"})
    extra["loader"].at = 17
    ck.save(3)
    ck.wait()
    ck.wait_persist()
    ck.close()
    version = newest_version(str(tmp_path / "remote"), job)
    fresh = {"my.key": 0, "name": "", "loader": _Position(), "absent": "kept"}
    ck2 = memento.Checkpointer(job=job + "-b", scheme="none")
    ck2.register(torch.nn.Linear(3, 2), extra=fresh)
    assert ck2.restore(from_dcp=version) == 3
    ck2.close()
    assert (fresh["my.key"], fresh["name"], fresh["loader"].at, fresh["absent"]) == \
        (30, "hello", 17, "kept"), fresh


def test_from_dcp_loads_tensors_registered_as_slices_as_their_slices(job, tmp_path):
    """A tensor registered as a slice of a global one (global_shape= / offsets=, shards=, and
    the AdamW moments that inherit a parameter's) gets that slice of the checkpoint's whole
    tensor (the local tensor was taken for the whole one: "Size mismatch")."""
    import memento
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(9)
    whole_w, whole_m = torch.randn(8, 5), torch.randn(6, 4)
    model = torch.nn.Linear(4, 6, bias=False)
    with torch.no_grad():
        model.weight.copy_(whole_m)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    path = str(tmp_path / "step-4")
    dcp.save({"w": whole_w, "model": model.state_dict(), "optimizer": opt.state_dict()},
             checkpoint_id=path)
    moment, stepped = opt.state[model.weight]["exp_avg"], model.weight.detach()

    w = torch.zeros(3, 5)
    part = torch.nn.Linear(4, 2, bias=False)
    part_opt = torch.optim.AdamW(part.parameters())
    ck = memento.Checkpointer(job=job, scheme="none")
    ck.register("w", w, global_shape=(8, 5), offsets=(4, 0))
    ck.register(part, part_opt, shards={"model.weight": ((6, 4), (2, 0))})
    import importlib.util
    if importlib.util.find_spec("torch.distributed.checkpoint.protocol") is None:
        # An older torch: such tensors are refused by name.
        with pytest.raises(memento.InvalidArgumentError,
                           match="'w' is registered as a slice.*CheckpointableTensor"):
            ck.restore(from_dcp=path)
        ck.close()
        return
    assert ck.restore(from_dcp=path) == 4
    ck.close()
    assert same_bits(w, whole_w[4:7])
    assert same_bits(part.weight.detach(), stepped[2:4])
    assert same_bits(part_opt.state[part.weight]["exp_avg"], moment[2:4])


def test_a_persist_killed_before_its_manifest_leaves_a_version_nobody_chooses(job, tmp_path):
    """SIGKILL at v3's manifest stage (every rank file written, no .metadata, no MANIFEST):
    dcp.load finds no checkpoint there and memento restores v2 from the remote tier."""
    import json
    import signal
    import textwrap
    from conftest import remove_segments
    import memento
    from torch.distributed.checkpoint import FileSystemReader
    remote = str(tmp_path / "remote")
    script = textwrap.dedent("""
        import torch, memento
        torch.manual_seed(3)
        model = torch.nn.Linear(4, 3)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        ck = memento.Checkpointer(launcher="single", scheme="none", remote=%r,
                                  remote_format="dcp", persist_every=1, persist_keep=5)
        ck.register(model, opt)
        for step in range(1, 6):
            model(torch.ones(2, 4)).sum().backward()
            ck.wait_snapshot(); opt.step(); opt.zero_grad()
            ck.save(step); ck.wait(); ck.wait_persist()
            if step == 2:
                torch.save(model.state_dict(), %r)
        print("survived")
    """ % (remote, str(tmp_path / "v2.pt")))
    env = dict(os.environ, MEMENTO_JOB=job, MEMENTO_LAUNCH_DIR=str(tmp_path),
               MEMENTO_LAUNCH_ATTEMPT="1", MEMENTO_LAUNCH_FAULT="manifest:3:0")
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    with open(tmp_path / "fault.a1") as f:
        assert json.load(f)["stage"] == "manifest"
    v3 = os.path.join(remote, job, "v%020d" % 3)
    assert glob.glob(os.path.join(v3, "*.distcp")), os.listdir(v3)
    assert not os.path.exists(os.path.join(v3, ".metadata"))
    assert not os.path.exists(os.path.join(v3, "MANIFEST"))
    with pytest.raises(Exception):
        FileSystemReader(v3).read_metadata()
    remove_segments(job)
    model = torch.nn.Linear(4, 3)
    ck = memento.Checkpointer(job=job, launcher="single", scheme="none", remote=remote,
                              remote_format="dcp")
    ck.register(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    report = ck.restore()
    assert int(report) == 2 and set(report.sources().values()) == {"remote"}, report
    for k, v in torch.load(str(tmp_path / "v2.pt")).items():
        assert same_bits(v, model.state_dict()[k]), k
    ck.close()


def test_from_dcp_starts_a_fresh_run_and_the_rerun_of_a_finished_one_but_never_an_unfinished_one(
        job, tmp_path):
    """from_dcp is where the job starts when memento has nothing to resume: the first run,
    and the rerun of a finished run (which starts as the first did); a run that did not
    finish resumes its own newest version instead."""
    import memento
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    ckpt = str(tmp_path / "step-7")
    dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt)
    remote = str(tmp_path / "remote")

    class Crashed(Exception):
        pass

    def run(steps, finish):
        try:
            with memento.Checkpointer(job=job, scheme="none", remote=remote, persist_every=1,
                                      resume_finished=False) as ck:
                ck.register(model)
                start = ck.restore(from_dcp=ckpt)
                for step in range(int(start) + 1, int(start) + steps + 1):
                    ck.save(step)
                ck.wait_persist()
                if not finish:
                    raise Crashed()  # a block left by an exception marks nothing
        except Crashed:
            pass
        return start

    def from_dcp(report):
        return report.source_detail.startswith("dcp ")

    first = run(2, finish=False)
    assert from_dcp(first) and int(first) == 7
    resumed = run(2, finish=True)  # resumes its own v9, not the DCP checkpoint
    assert not from_dcp(resumed) and int(resumed) == 9, resumed.source_detail
    rerun = run(1, finish=True)  # v11 finished: the rerun starts from the DCP checkpoint
    assert from_dcp(rerun) and int(rerun) == 7
