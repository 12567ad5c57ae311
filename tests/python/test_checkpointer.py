"""memento's Python module on one rank: bit-exact restore, dtypes, layouts,
names, errors, extra state, logging, the optimizer hook."""
import json
import logging
import os
import pickle
import random
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import memento


def bits(t):
    t = t.detach().contiguous()
    return t.view(torch.uint8) if t.dim() > 0 else t.reshape(1).view(torch.uint8)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.norm = torch.nn.BatchNorm1d(32)
        self.drop = torch.nn.Dropout(0.2)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.norm(self.fc1(x)))))


def train_step(model, opt, ck=None):
    x = torch.randn(16, 8) + np.random.rand() + random.random()
    loss = model(x).pow(2).mean()
    loss.backward()
    if ck is not None:
        ck.wait_snapshot()
    opt.step()
    opt.zero_grad()


def save_steps(model, opt, ck, steps, inputs):
    """`steps` steps of a model taking `inputs` features, each saved through `ck`."""
    for step in range(steps):
        model(torch.randn(2, inputs)).sum().backward()
        ck.wait_snapshot()
        opt.step()
        opt.zero_grad()
        ck.save(step + 1)
    ck.wait()


def all_state(model, opt):
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, (p, s) in enumerate(opt.state.items()):
        for k, v in s.items():
            out["opt.%d.%s" % (i, k)] = v.clone() if torch.is_tensor(v) else v
    return out


def test_model_with_adam_restores_bit_exact_with_rng_and_extra(job):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    extra = {"data_pos": 0, "sched": sched}
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt, extra=extra)
    assert ck.restore() is None
    for step in range(3):
        train_step(model, opt, ck)
        sched.step()
        extra["data_pos"] = step + 1
        ck.save(step + 1)
    ck.wait()
    expect = all_state(model, opt)
    pointers = [t.data_ptr() for _, t, _ in ck.tensors()]
    draws = (torch.rand(5), random.random(), np.random.rand(3))
    lr = opt.param_groups[0]["lr"]
    for _ in range(3):  # diverge: weights, optimizer, RNGs, extra
        train_step(model, opt)
        sched.step()
    extra["data_pos"] = 99
    report = ck.restore()
    assert report == 3 and int(report) == 3 and list(range(report, 5)) == [3, 4]
    # It is the int step: arithmetic, comparisons and formats as an int's.
    assert report + 1 == 4 and report - 1 == 2 and report // 2 == 1 and report < 10
    assert max(report, 2) == 3 and "%d" % report == "3" and f"{report:d}" == "3"
    assert isinstance(report, int) and report != 4 and bool(report)
    assert pickle.loads(pickle.dumps(report)) == report
    assert bool(memento.RestoreReport({"step": 0, "summary": "v0"})), "step 0 is a report"
    got = all_state(model, opt)
    assert expect.keys() == got.keys()
    for k in expect:
        if torch.is_tensor(expect[k]):
            assert same_bits(expect[k], got[k]), k
        else:
            assert expect[k] == got[k], k
    assert [t.data_ptr() for _, t, _ in ck.tensors()] == pointers  # in place
    assert same_bits(torch.rand(5), draws[0])
    assert random.random() == draws[1]
    assert np.array_equal(np.random.rand(3), draws[2])
    assert extra["data_pos"] == 3
    assert opt.param_groups[0]["lr"] == lr
    assert sched.last_epoch == 3
    d = report.to_dict()
    assert d["step"] == 3 and d["version"] == 3
    # The engine's whole report, made when asked for; to_dict() has it too.
    whole = json.loads(report.json)
    assert whole["version"] == 3 and whole["protection"] == "protected"
    assert [e["name"] for e in whole["entries"]] == [e["name"] for e in d["entries"]]
    assert d["json"] == report.json and report == memento.RestoreReport(d)
    assert set(report.sources().values()) == {"local-memory"}
    assert "model.fc1.weight" in report.sources()
    assert ck.reregistrations() == 0  # Adam state was created at register()
    ck.close()


def test_resume_in_a_new_process_matches_uninterrupted_training(job, tmp_path):
    """Train 6 steps straight vs 3 steps, a new process restoring, 3 more."""
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, random, numpy as np, torch, memento\n"
        "sys.path.insert(0, %r)\n"
        "from test_checkpointer import Net, train_step\n"
        "job, first, last, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]\n"
        "torch.manual_seed(1); np.random.seed(1); random.seed(1)\n"
        "model = Net(); opt = torch.optim.Adam(model.parameters(), lr=1e-2)\n"
        "ck = memento.Checkpointer(job=job)\n"
        "ck.register(model, opt)\n"
        "start = ck.restore()\n"
        "assert (start or 0) == first, (start, first)\n"
        "for step in range(start or 0, last):\n"
        "    train_step(model, opt, ck); ck.save(step + 1)\n"
        "ck.wait()\n"
        "torch.save({'state': model.state_dict(), 'opt': opt.state_dict(),\n"
        "            'draw': (torch.rand(4), random.random(), np.random.rand())}, out)\n"
        % os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)

    def run(j, first, last, out):
        subprocess.run([sys.executable, str(script), j, str(first), str(last), str(out)],
                       check=True, env=env, timeout=120)

    run(job + "a", 0, 6, tmp_path / "straight.pt")
    run(job, 0, 3, tmp_path / "first.pt")
    run(job, 3, 6, tmp_path / "resumed.pt")
    from conftest import remove_segments
    remove_segments(job + "a")
    a = torch.load(tmp_path / "straight.pt")
    b = torch.load(tmp_path / "resumed.pt")
    for k in a["state"]:
        assert same_bits(a["state"][k], b["state"][k]), k
    for i in a["opt"]["state"]:
        for k, v in a["opt"]["state"][i].items():
            assert same_bits(v, b["opt"]["state"][i][k]), (i, k)
    assert same_bits(a["draw"][0], b["draw"][0])
    assert a["draw"][1:] == b["draw"][1:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool])
def test_dtypes(job, dtype):
    g = torch.Generator().manual_seed(5)
    if dtype == torch.bool:
        t = torch.rand(33, generator=g) > 0.5
    elif dtype == torch.int64:
        t = torch.randint(-2**40, 2**40, (17, 3), generator=g)
    else:
        t = torch.randn(9, 7, generator=g).to(dtype)
    expect = t.clone()
    with memento.Checkpointer(job=job) as ck:
        ck.register("t", t)
        ck.save(1)
        ck.wait()
        t.zero_()
        assert ck.restore() == 1
        assert same_bits(t, expect)


def test_non_contiguous_tensors(job):
    base = torch.randn(6, 10)
    views = {
        "transposed": torch.randn(5, 7).t(),
        "strided": base[:, ::3],
        "channels_last": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    }
    expect = {k: v.clone() for k, v in views.items()}
    untouched = base[:, 1].clone()  # between the strided columns: never written
    with memento.Checkpointer(job=job) as ck:
        for k, v in views.items():
            ck.register(k, v)
        ck.save(1)
        ck.wait()
        for v in views.values():
            v.fill_(0)
        base[:, 1] = 7.0
        ck.restore()
        for k, v in views.items():
            assert same_bits(v, expect[k]), k
        assert torch.all(base[:, 1] == 7.0)
        assert not untouched.equal(base[:, 1])
        assert views["transposed"].stride() == (1, 7)


def test_stable_names(job):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters())
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        ck.register("scale", torch.ones(2))
        ck.save(1)
        assert ck.entry_names() == [
            "model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
            "model.1.running_mean", "model.1.running_var", "model.1.num_batches_tracked",
            "optimizer.state.0.step", "optimizer.state.0.exp_avg",
            "optimizer.state.0.exp_avg_sq",
            "optimizer.state.1.step", "optimizer.state.1.exp_avg",
            "optimizer.state.1.exp_avg_sq",
            "optimizer.state.2.step", "optimizer.state.2.exp_avg",
            "optimizer.state.2.exp_avg_sq",
            "optimizer.state.3.step", "optimizer.state.3.exp_avg",
            "optimizer.state.3.exp_avg_sq",
            "scale", "__memento__"]
        # Python's own state_dict numbering is the same.
        assert sorted(opt.state_dict()["state"].keys()) == [0, 1, 2, 3]


def test_layout_mismatch_names_the_tensor(job):
    with memento.Checkpointer(job=job) as ck:
        ck.register("encoder.weight", torch.zeros(3, 4))
        ck.register("bias", torch.zeros(4))
        ck.save(1)
        ck.wait()
    with memento.Checkpointer(job=job) as ck:
        ck.register("encoder.weight", torch.zeros(4, 3))
        ck.register("bias", torch.zeros(4))
        with pytest.raises(memento.FailedPreconditionError) as e:
            ck.restore()
        msg = str(e.value)
        assert "tensor 'encoder.weight': stored float32 [3,4]" in msg
        assert "registered float32 [4,3]" in msg
        assert "'bias'" not in msg
    with memento.Checkpointer(job=job) as ck:
        ck.register("encoder.weight", torch.zeros(3, 4, dtype=torch.float16))
        ck.register("bias", torch.zeros(4))
        with pytest.raises(memento.FailedPreconditionError, match="stored float32.*registered "
                           "float16"):
            ck.restore()


def test_sharded_tensors_carry_their_place_and_bad_specs_are_refused(job):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    w = torch.arange(6.0).reshape(2, 3)
    with memento.Checkpointer(job=job, elastic=True) as ck:
        assert "MEMENTO_ELASTIC=1" in ck.config
        ck.register(model, opt, shards={"model.weight": ((6, 4), (3, 0))})
        ck.register("w", w, global_shape=(4, 3), offsets=(2, 0))
        # Adam's moments of the weight are sharded like it; its step and the
        # bias' state are not.
        assert ck.placements() == {"model.weight": ((6, 4), (3, 0)),
                                   "optimizer.state.0.exp_avg": ((6, 4), (3, 0)),
                                   "optimizer.state.0.exp_avg_sq": ((6, 4), (3, 0)),
                                   "w": ((4, 3), (2, 0))}
        assert len(ck.tensors()) == 9
        ck.save(1)
        ck.wait()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            model.weight.zero_()
            w.zero_()
        assert int(ck.restore()) == 1
        assert same_bits(model.weight, before["weight"])
        assert same_bits(w, torch.arange(6.0).reshape(2, 3))

    with memento.Checkpointer(job=job + "b") as ck:
        with pytest.raises(memento.InvalidArgumentError, match="one value per dimension"):
            ck.register("y", torch.zeros(2, 2), global_shape=(4,))
        with pytest.raises(memento.InvalidArgumentError, match="replicated or sharded"):
            ck.register("r", torch.zeros(2), global_shape=(4,), replicated=True)
        ck.register("x", torch.zeros(2, 2), global_shape=(3, 2), offsets=(2, 0))
        with pytest.raises(memento.InvalidArgumentError, match="'x'.*does not fit"):
            ck.save(1)
    with memento.Checkpointer(job=job + "c") as ck:
        ck.register(torch.nn.Linear(2, 2), shards={"model.nope": ((4, 2), (0, 0))})
        with pytest.raises(memento.InvalidArgumentError, match="no registered tensor is named "
                           "'model.nope'"):
            ck.save(1)
    from conftest import remove_segments
    remove_segments(job + "b")
    remove_segments(job + "c")


def test_lazily_created_state_reregisters_once(job):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    # Momentum buffers of an SGD with dampening are not created at register().
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        assert ck.restore() is None  # lays out the store without momentum buffers
        save_steps(model, opt, ck, 3, 4)
        assert ck.reregistrations() == 1
        assert "optimizer.state.0.momentum_buffer" in ck.entry_names()
        expect = opt.state[model.weight]["momentum_buffer"].clone()
        opt.state[model.weight]["momentum_buffer"].zero_()
        assert ck.restore() == 3
        assert same_bits(opt.state[model.weight]["momentum_buffer"], expect)


def test_reallocated_storage_is_reregistered(job):
    model = torch.nn.Linear(4, 4)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        ck.save(1)
        ck.wait()
        model.weight.data = torch.full((4, 4), 3.0)  # new storage; the old one is freed
        ck.save(2)
        ck.wait()
        assert ck.reregistrations() == 1
        model.weight.data.zero_()
        assert ck.restore() == 2
        assert torch.all(model.weight == 3.0)


def test_settings_keywords_and_typed_errors(job):
    keywords = memento.settings_keywords()
    assert set(keywords.values()) == set(memento._memento.config_variables())
    assert keywords["scheme"] == "MEMENTO_SCHEME" and keywords["remote"] == "MEMENTO_REMOTE"
    with pytest.raises(memento.InvalidArgumentError, match="unknown setting 'schema'"):
        memento.Checkpointer(job=job, schema="rs:4+2")
    with pytest.raises(ValueError, match="MEMENTO_SLOTS"):
        memento.Checkpointer(job=job, slots=1)
    with pytest.raises(memento.InvalidArgumentError, match="MEMENTO_SCHEME"):
        memento.Checkpointer(job=job, scheme="raid5")
    # The stores follow the environment's MEMENTO_SHM_DIR: a keyword naming
    # another directory is refused, not ignored.
    assert keywords["shm_dir"] == "MEMENTO_SHM_DIR"
    with pytest.raises(memento.InvalidArgumentError,
                       match="MEMENTO_SHM_DIR='/dev/shm/memento-py-elsewhere'.*environment"):
        memento.Checkpointer(job=job, shm_dir="/dev/shm/memento-py-elsewhere")
    # The device transport: a bad value is named; asked for where it cannot run (CPU
    # tensors, or no GPU), the job runs over its own transport.
    with pytest.raises(ValueError, match="MEMENTO_TRANSPORT_DEVICE"):
        memento.Checkpointer(job=job, transport_device="gpu")
    with memento.Checkpointer(job=job, transport_device="nccl") as ck:
        assert "MEMENTO_TRANSPORT_DEVICE=nccl" in ck.config
        t = torch.arange(4.0)
        ck.register("t", t)
        ck.save(1)
        ck.wait()
        t.zero_()
        assert ck.restore() == 1 and torch.equal(t, torch.arange(4.0))
    with pytest.raises(ValueError, match="MEMENTO_THREADS='many'.*auto or an integer 1..64"):
        memento.Checkpointer(job=job, threads="many")
    # The device copy mode: a bad value is named; with host tensors staged changes nothing.
    with pytest.raises(ValueError, match="MEMENTO_DEVICE_COPY='bounce'"):
        memento.Checkpointer(job=job, device_copy="bounce")
    with memento.Checkpointer(job=job, device_copy="staged") as ck:
        assert "MEMENTO_DEVICE_COPY=staged" in ck.config
        t = torch.arange(4.0) * 2
        ck.register("t", t)
        ck.save(2)
        ck.wait()
        t.zero_()
        assert ck.restore() == 2 and torch.equal(t, torch.arange(4.0) * 2)
    for name in ["NotFoundError", "CorruptionError", "TimeoutError", "UnavailableError",
                 "ResourceExhaustedError", "FailedPreconditionError"]:
        cls = getattr(memento, name)
        assert issubclass(cls, memento.MementoError) and issubclass(cls, RuntimeError)
    with memento.Checkpointer(job=job, slots=3, chunk_bytes="64K", threads=1,
                              extra_capacity=4096) as ck:
        assert "MEMENTO_SLOTS=3" in ck.config and "MEMENTO_THREADS=1" in ck.config
        ck.register("t", torch.ones(2))
        ck.register(extra={"big": b"x" * 8000})
        with pytest.raises(memento.ResourceExhaustedError, match="extra_capacity"):
            ck.save(1)
    with memento.Checkpointer(job=job + "b") as ck:
        ck.register("t", torch.ones(2))
        ck.save(5)
        with pytest.raises(memento.InvalidArgumentError):
            ck.save(5)
    from conftest import remove_segments
    remove_segments(job + "b")


def test_interval_saves_every_nth_step_and_auto_needs_the_mtbf(job):
    with pytest.raises((ValueError, memento.MementoError), match="MEMENTO_INTERVAL"):
        memento.Checkpointer(job=job, interval="sometimes")
    with pytest.raises((ValueError, memento.MementoError), match="MEMENTO_NODE_MTBF_H"):
        memento.Checkpointer(job=job, interval="auto")
    with memento.Checkpointer(job=job, interval=3) as ck:
        t = torch.zeros(4)
        ck.register("t", t)
        for step in range(1, 8):
            ck.wait_snapshot()
            t.fill_(step)
            ck.save(step)
        ck.wait()
        assert ck.latest_committed() == 6
        s = ck.interval_stats()
        assert (s["saves"], s["skipped"], s["interval_steps"]) == (2, 5, 3)
        assert not s["last_saved"] and not s["automatic"]
    from conftest import remove_segments
    remove_segments(job)
    with memento.Checkpointer(job=job + "a", interval="auto", node_mtbf_h=1000) as ck:
        ck.register("t", torch.zeros(4))
        ck.save(1)
        ck.wait()
        s = ck.interval_stats()
        assert s["automatic"] and s["last_saved"] and s["saves"] == 1
    remove_segments(job + "a")


@pytest.mark.parametrize("level, threads", [("info", None), ("info", 5), ("debug", None)])
def test_logs_go_through_python_logging(job, caplog, level, threads):
    caplog.set_level(logging.DEBUG, logger="memento")
    settings = {} if threads is None else {"threads": threads}
    with memento.Checkpointer(job=job, log=level, **settings) as ck:
        assert "MEMENTO_THREADS=%s" % (threads or "auto") in ck.config
        ck.register("t", torch.ones(2))
        ck.save(1)
        ck.wait()
        report = ck.restore()
    messages = [r.getMessage() for r in caplog.records if r.name == "memento"]
    assert any("node store" in m for m in messages), messages
    # The snapshot's workers: auto (2 for host tensors) or as set.
    assert "snapshot: %d worker threads (%s, host buffers)" % (
        threads or 2, "MEMENTO_THREADS" if threads else "auto") in messages, messages
    # The whole recovery report is logged, and made, at debug only.
    logged = [m for m in messages if m.startswith("recovery report {")]
    assert len(logged) == (level == "debug"), messages
    if logged:
        got, whole = json.loads(logged[0][len("recovery report "):]), json.loads(report.json)
        assert got["version"] == whole["version"] == 1
        assert got["entries"] == whole["entries"]
        assert "t" in [e["name"] for e in whole["entries"]]


def test_optimizer_hook_waits_for_the_snapshot(job):
    model = torch.nn.Linear(3, 3)
    opt = torch.optim.Adam(model.parameters())
    sched = None
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        calls = []
        real = ck.wait_snapshot
        ck.wait_snapshot = lambda: (calls.append(1), real())[1]
        handle = ck.hook_optimizer(opt)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps step again
        for step in range(2):
            model(torch.randn(2, 3)).sum().backward()
            opt.step()
            sched.step()
            ck.save(step + 1)
        assert len(calls) == 2
        handle.remove()
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
        assert len(calls) == 2


def test_install_tree_is_importable(tmp_path):
    build = os.environ.get("MEMENTO_BUILD_DIR")
    if not build:
        pytest.skip("MEMENTO_BUILD_DIR not set (ctest sets it)")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    found = [p for p in prefix.rglob("memento/__init__.py")]
    assert len(found) == 1
    env = dict(os.environ, PYTHONPATH=str(found[0].parent.parent))
    env.pop("MEMENTO_TEST_PYTHON_PATH", None)
    out = subprocess.run([sys.executable, "-c", "import memento, os; print(memento.__file__)"],
                         check=True, env=env, capture_output=True, text=True, cwd=str(tmp_path),
                         timeout=120)
    assert out.stdout.startswith(str(prefix))


def test_buffers_the_forward_pass_changes_right_after_save_are_saved_as_they_were(job):
    """BatchNorm's running statistics change in the next step's forward pass, before
    wait_snapshot(): the checkpoint holds them as they were when save() returned."""
    torch.manual_seed(0)
    # Four 16 MiB weights come first in the state dict: a snapshot in the background
    # would copy them before it reached the running statistics.
    layers = [torch.nn.Linear(2048, 2048) for _ in range(4)]
    model = torch.nn.Sequential(*layers, torch.nn.BatchNorm1d(2048))
    ck = memento.Checkpointer(job=job)
    ck.register(model)
    assert ck.restore() is None
    model(torch.randn(4, 2048))
    expect = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ck.save(1)
    model[4](torch.randn(4, 2048) * 10 + 5)  # the next forward: running stats change
    ck.wait()
    changed = model[4].running_mean.clone()
    assert not same_bits(changed, expect["4.running_mean"])
    report = ck.restore()
    assert report == 1
    for k, v in model.state_dict().items():
        assert same_bits(v, expect[k]), k
    assert ck.reregistrations() == 0
    ck.close()


def test_after_close_save_and_restore_raise_and_close_again_does_nothing(job):
    model = torch.nn.Linear(3, 2)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        ck.save(1)
    with pytest.raises(memento.FailedPreconditionError, match="closed"):
        ck.restore()
    with pytest.raises(memento.FailedPreconditionError, match="closed"):
        ck.save(2)
    ck.close()


class _CloseFails:
    """The real checkpointer whose close() then reports a failed last checkpoint."""

    def __init__(self, impl):
        self._impl = impl

    def __getattr__(self, name):
        return getattr(self._impl, name)

    def close(self, finished=False):
        self._impl.close(finished=finished)
        raise memento.TimeoutError("the last checkpoint did not commit")


def test_a_failed_last_checkpoint_is_raised_by_close_and_logged_under_an_exception(job, caplog):
    with pytest.raises(memento.TimeoutError):
        with memento.Checkpointer(job=job) as ck:
            ck.register(torch.nn.Linear(3, 2))
            ck._impl = _CloseFails(ck._impl)
    caplog.set_level(logging.ERROR, logger="memento")
    with pytest.raises(ValueError, match="the training loop's"):
        with memento.Checkpointer(job=job + "b") as ck:
            ck.register(torch.nn.Linear(3, 2))
            ck._impl = _CloseFails(ck._impl)
            raise ValueError("the training loop's own error")
    assert "the last checkpoint did not commit" in caplog.text


@pytest.mark.parametrize("nesterov", [False, True])
def test_primed_sgd_momentum_computes_what_lazy_momentum_does(nesterov):
    torch.manual_seed(3)
    a = torch.nn.Linear(6, 3)
    b = torch.nn.Linear(6, 3)
    b.load_state_dict(a.state_dict())
    kw = dict(lr=0.05, momentum=0.9, nesterov=nesterov, weight_decay=1e-3)
    oa = torch.optim.SGD(a.parameters(), **kw)
    ob = torch.optim.SGD(b.parameters(), **kw)
    assert len(memento.optim.prime_optimizer(ob)) == 2
    for _ in range(3):
        x = torch.randn(4, 6)
        for m, o in ((a, oa), (b, ob)):
            m(x).pow(2).mean().backward()
            o.step()
            o.zero_grad()
    for k in a.state_dict():
        assert same_bits(a.state_dict()[k], b.state_dict()[k]), k
    damped = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1, momentum=0.9,
                             dampening=0.5)
    assert memento.optim.prime_optimizer(damped) == []


def test_sgd_momentum_is_restored_into_a_fresh_optimizer(job):
    """A relaunch registers an SGD without momentum yet: restore() fills it."""
    torch.manual_seed(4)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        assert ck.restore() is None
        save_steps(model, opt, ck, 2, 4)
        assert ck.reregistrations() == 0
    expect = all_state(model, opt)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        assert ck.restore() == 2
        got = all_state(model, opt)
    assert expect.keys() == got.keys()
    for k in expect:
        assert same_bits(expect[k], got[k]), k


class _WithExtraState(torch.nn.Module):
    """Keeps metadata besides tensors, as FP8 modules do (get_extra_state)."""

    def __init__(self, as_tensor):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.as_tensor = as_tensor
        self.meta = {"scale": 1.0, "history": [1.0]}

    def get_extra_state(self):
        if self.as_tensor:
            return torch.tensor([self.meta["scale"]] + self.meta["history"], dtype=torch.float64)
        return {"scale": self.meta["scale"], "history": list(self.meta["history"])}

    def set_extra_state(self, state):
        if self.as_tensor:
            values = state.tolist()
            self.meta = {"scale": values[0], "history": values[1:]}
        else:
            self.meta = {"scale": state["scale"], "history": list(state["history"])}


@pytest.mark.parametrize("as_tensor", [False, True])
def test_module_extra_state_is_restored_through_set_extra_state(job, as_tensor):
    model = torch.nn.Sequential(_WithExtraState(as_tensor), torch.nn.ReLU())
    model[0].meta = {"scale": 0.5, "history": [2.0, 3.0]}
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        ck.save(1)
        ck.wait()
        assert not any(n.endswith("_extra_state") for n in ck.entry_names())
        model[0].meta = {"scale": 9.0, "history": []}
        assert ck.restore() == 1
    assert model[0].meta == {"scale": 0.5, "history": [2.0, 3.0]}


def test_a_tied_weight_is_one_replicated_entry(job):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(6, 4)
            self.head = torch.nn.Linear(4, 6, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("count", torch.zeros(1))

    model = Tied()
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, replicated=True)
        replicated = {name: rep for name, _, rep in ck.tensors()}
        assert replicated == {"model.embed.weight": True, "model.count": False}
        want = model.embed.weight.detach().clone()
        ck.save(1)
        ck.wait()
        with torch.no_grad():
            model.embed.weight.zero_()
        assert ck.restore() == 1
    assert same_bits(model.head.weight, want) and model.head.weight is model.embed.weight


def test_extra_state_beside_batch_norm_keeps_its_batch_count(job):
    # Loading a module's extra state goes through load_state_dict, where BatchNorm
    # fills in a missing num_batches_tracked for state dicts of an old version.
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3), _WithExtraState(False))
    model.train()
    model[0](torch.randn(4, 3))
    model[0](torch.randn(4, 3))
    want = {k: v.clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        ck.save(1)
        ck.wait()
        model[0](torch.randn(4, 3))
        assert ck.restore() == 1
    got = model.state_dict()
    assert int(got["0.num_batches_tracked"]) == 2
    for k, v in want.items():
        assert same_bits(v, got[k]), k


def test_extra_dicts_that_do_not_match_the_checkpoint_are_refused_by_name(job):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt, extra={"sched": sched})
        ck.register(extra={"data_pos": 7})
        ck.save(1)
        ck.wait()
    swapped = [{"data_pos": 0}, {"sched": sched}]
    for extras, match in [(swapped, "extra= dict 0 has no key 'sched'"),
                          (swapped[:1], "holds 2 extra= dict"),
                          ([{"sched": 5}, {"data_pos": 0}], "has no load_state_dict")]:
        with memento.Checkpointer(job=job) as ck:
            ck.register(model, opt)
            for d in extras:
                ck.register(extra=d)
            with pytest.raises(memento.FailedPreconditionError, match=match):
                ck.restore()
        assert swapped == [{"data_pos": 0}, {"sched": sched}]  # nothing planted
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt, extra={"sched": sched})
        ck.register(extra={"data_pos": 0})
        with pytest.raises(memento.FailedPreconditionError, match="1 param group"):
            ck.restore()


def test_optimizer_state_takes_a_spec_named_for_it_or_its_parameters(job):
    # A parameter registered as a named slice passes its place to its moments;
    # a spec in shards= for a moment overrides the inherited one.
    w = torch.nn.Parameter(torch.randn(2, 3))
    v = torch.nn.Parameter(torch.randn(2, 3))
    opt = torch.optim.Adam([w, v])
    with memento.Checkpointer(job=job, elastic=True) as ck:
        ck.register("w", w, global_shape=(4, 3), offsets=(2, 0))
        ck.register("v", v, global_shape=(2, 6), offsets=(0, 3))
        ck.register(opt, shards={"optimizer.state.1.exp_avg_sq": ((4, 3), (0, 0))})
        assert ck.placements() == {"w": ((4, 3), (2, 0)),
                                   "v": ((2, 6), (0, 3)),
                                   "optimizer.state.0.exp_avg": ((4, 3), (2, 0)),
                                   "optimizer.state.0.exp_avg_sq": ((4, 3), (2, 0)),
                                   "optimizer.state.1.exp_avg": ((2, 6), (0, 3)),
                                   "optimizer.state.1.exp_avg_sq": ((4, 3), (0, 0))}
        with pytest.raises(memento.InvalidArgumentError, match="'x' is given a shard spec twice"):
            ck.register("x", torch.zeros(2), global_shape=(4,), offsets=(0,),
                        shards={"x": ((2,), (0,))})
        assert "x" not in ck.placements() and len(ck.placements()) == 6  # nothing registered


def test_a_restore_after_the_registered_set_changed_is_refused_and_keeps_the_versions(job):
    with memento.Checkpointer(job=job) as ck:
        ck.register(torch.nn.Linear(3, 2))
        ck.save(1)
        ck.wait()
        ck.register("late", torch.zeros(4))
        with pytest.raises(memento.FailedPreconditionError, match="changed since"):
            ck.restore()
    with memento.Checkpointer(job=job) as again:
        again.register(torch.nn.Linear(3, 2))
        assert int(again.restore()) == 1


def test_dropping_a_checkpointer_without_close_lets_other_threads_run(job, tmp_path):
    ck = memento.Checkpointer(job=job, remote=str(tmp_path), persist_every=1)
    ck.register("t", torch.arange(32 << 20, dtype=torch.float32))  # 128 MiB to persist
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    ck.save(1)
    start = time.monotonic()
    del ck  # waits for the commit and the persist
    end = time.monotonic()
    stop.set()
    ticker.join()
    # About one tick per ms when the drop lets other threads run (~250 in the
    # ~0.3 s it takes here); a handful when it holds the GIL throughout.
    during = [t for t in ticks if start < t < end]
    assert len(during) >= 40, "%d ticks in the %.3f s the drop took" % (len(during), end - start)


def test_the_environment_is_checked_as_config_from_env_checks_it(job, monkeypatch):
    # A misspelt variable is an error naming it, not silently ignored...
    monkeypatch.setenv("MEMENTO_SHCEME", "xor:3")
    with pytest.raises(memento.InvalidArgumentError, match="MEMENTO_SHCEME"):
        memento.Checkpointer(job=job)
    # ...unless MEMENTO_ALLOW_UNKNOWN=1; keywords still go over the environment.
    monkeypatch.setenv("MEMENTO_ALLOW_UNKNOWN", "1")
    monkeypatch.setenv("MEMENTO_SLOTS", "3")
    with memento.Checkpointer(job=job, slots=4) as ck:
        assert "MEMENTO_SLOTS=4" in ck.config
