"""What a training script meets beyond a model and an optimizer, on one rank: tied weights,
a batch prefetched across the step boundary and the data position, the stats it prints after
close(), and the restore report it prints."""
import logging
import re

import pytest
import torch

import memento
from conftest import remove_segments
from test_checkpointer import same_bits


class TinyGPT(torch.nn.Module):
    """A language model whose output head shares the token embedding's weight."""

    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.block = torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, dim),
                                         torch.nn.GELU(), torch.nn.Dropout(0.1))
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        return self.head(self.block(self.tok(idx)))


def lm_step(model, opt, ck=None):
    idx = torch.randint(0, 32, (4, 8))
    loss = torch.nn.functional.cross_entropy(model(idx[:, :-1]).flatten(0, 1),
                                             idx[:, 1:].flatten())
    loss.backward()
    if ck is not None:
        ck.wait_snapshot()
    opt.step()
    opt.zero_grad()


def gpt_state(model, opt):
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, s in enumerate(opt.state.values()):
        out.update({"opt.%d.%s" % (i, k): v.clone() for k, v in s.items()})
    return out


def assert_same(want, got):
    assert want.keys() == got.keys()
    for k in want:
        assert same_bits(want[k], got[k]), k


def test_a_tied_weight_is_stored_once_and_restored_tied(job):
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(6):
        lm_step(model, opt)
    uninterrupted = gpt_state(model, opt)

    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tied = model.tok.weight
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        for step in range(3):
            lm_step(model, opt, ck)
            ck.save(step + 1)
        ck.wait()
        at_3 = gpt_state(model, opt)
        names = [n for n in ck.entry_names() if n.startswith("model.")]
        assert "model.tok.weight" in names and "model.head.weight" not in names, names
        assert len({n for n, _, _ in ck.tensors()}) == len(ck.tensors())
        for _ in range(2):  # diverge
            lm_step(model, opt)
        report = ck.restore()
        assert report == 3
        # Stored once: the entries' bytes are those of the distinct tensors.
        stored = sum(e["bytes"] for e in report.to_dict()["entries"] if e["name"] != "__memento__")
        distinct = {t.data_ptr(): t.numel() * t.element_size()
                    for t in list(model.state_dict().values()) +
                    [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]}
        assert stored == sum(distinct.values())
        assert model.tok.weight is tied and model.head.weight is tied
        assert_same(at_3, gpt_state(model, opt))
        for _ in range(2):  # the work a failure loses
            lm_step(model, opt, ck)

    # A relaunch: new objects (initialised otherwise), the same registration.
    torch.manual_seed(7)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        assert ck.restore() == 3
        assert model.head.weight is model.tok.weight
        assert_same(at_3, gpt_state(model, opt))
        for step in range(3, 6):
            lm_step(model, opt, ck)
            ck.save(step + 1)
    assert model.head.weight is model.tok.weight
    assert_same(uninterrupted, gpt_state(model, opt))


def test_a_tied_weight_given_two_shard_specs_is_refused_by_name(job):
    model = TinyGPT()
    ck = memento.Checkpointer(job=job)
    with pytest.raises(memento.InvalidArgumentError, match="'model.head.weight' is the same "
                                                           "tensor as 'model.tok.weight'"):
        ck.register(model, shards={"model.tok.weight": ((64, 16), (0, 0)),
                                   "model.head.weight": ((64, 16), (32, 0))})
    ck.close()


def test_getters_after_close_answer_their_last_values(job):
    model = torch.nn.Linear(4, 4)
    ck = memento.Checkpointer(job=job)
    ck.register(model)
    ck.save(1)
    ck.save(2)
    ck.wait()
    before = (ck.latest_committed(), ck.entry_names(), ck.protection_state(),
              ck.blocked_seconds(), ck.interval_stats(), ck.reregistrations(), ck.rank, ck.size,
              ck.node)
    ck.close()
    after = (ck.latest_committed(), ck.entry_names(), ck.protection_state(),
             ck.blocked_seconds(), ck.interval_stats(), ck.reregistrations(), ck.rank, ck.size,
             ck.node)
    assert after == before
    assert after[0] == 2 and after[4]["saves"] == 2 and "model.weight" in after[1]
    with pytest.raises(memento.FailedPreconditionError, match="closed"):
        ck.save(3)


def test_the_summary_is_one_short_line_and_to_dict_has_every_entry(job):
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(30)])
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        ck.save(1)
        ck.wait()
        report = ck.restore()
        names = ck.entry_names()
    assert len(names) == 61  # 30 weights, 30 biases and the extra state
    assert re.fullmatch(r"restored v1: 61 local-memory; \d+\.\d{3} s", report.summary), \
        report.summary
    assert repr(report) == "RestoreReport(%s)" % report.summary
    d = report.to_dict()
    assert [e["name"] for e in d["entries"]] == names
    assert all(e["source"] == "local-memory" and e["bytes"] > 0 and "crc" in e
               for e in d["entries"])
    assert {"notes", "lost_nodes", "elastic", "inventory_s", "plan_s", "transfer_s",
            "reprotect_s"} <= d.keys()


class Stream:
    """A data source that saves its position (as torchdata's StatefulDataLoader does)."""

    def __init__(self):
        self.data = torch.arange(64, dtype=torch.float32).reshape(16, 4)
        self.pos = 0

    def next_batch(self):
        """The next 2 samples, augmented with noise and a flip drawn from torch's generator:
        the batch depends on the RNG state when it is fetched."""
        rows = [self.data[(self.pos + i) % len(self.data)] for i in range(2)]
        self.pos += 2
        x = torch.stack(rows) + 0.1 * torch.randn(2, 4)
        return x.flip(1) if torch.rand(()) < 0.5 else x

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def prefetching_run(job, steps, stop_at=None, carry_batch=True):
    """Trains `steps` steps with a loop that fetches the next batch before the step ends.
    stop_at: saves every step, stops after that step and resumes from memory as a relaunch
    does (new model, optimizer and data objects, the same registration)."""
    torch.manual_seed(1)
    start, model, opt, stream, carry, ck = 0, None, None, None, None, None
    for attempt in ("first", "relaunch") if stop_at else ("first",):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2),
                                    torch.nn.Linear(8, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        stream = Stream()
        carry = {"batch": stream.next_batch()}  # fetched before the first step
        ck = memento.Checkpointer(job=job)
        ck.register(model, opt, loader=stream, extra=carry if carry_batch else None)
        start = int(ck.restore() or 0)
        if not carry_batch and start:
            carry["batch"] = stream.next_batch()  # what a loop not saving its batch does
        end = stop_at if attempt == "first" and stop_at else steps
        for step in range(start, end):
            x = carry["batch"]
            carry["batch"] = stream.next_batch()  # the next step's batch, ahead
            model(x).pow(2).mean().backward()
            ck.wait_snapshot()
            opt.step()
            opt.zero_grad()
            ck.save(step + 1)
        if attempt == "first" and stop_at:
            # The work a failure loses; like any training it waits for the last snapshot
            # before it modifies the registered tensors.
            ck.wait_snapshot()
            for _ in range(2):
                carry["batch"] = stream.next_batch()
                model(carry["batch"]).sum().backward()
                opt.step()
        ck.close()
    return gpt_state(model, opt), start


def test_a_prefetched_batch_registered_in_extra_resumes_bit_identically(job):
    try:
        want, _ = prefetching_run(job + "a", 8)
        got, start = prefetching_run(job + "b", 8, stop_at=4)
        assert start == 4
        assert_same(want, got)
        # The test can tell: a loop that does not carry its prefetched batch resumes on
        # another one.
        lost, start = prefetching_run(job + "c", 8, stop_at=4, carry_batch=False)
        assert start == 4
        assert any(not same_bits(want[k], lost[k]) for k in want)
    finally:
        for suffix in "abc":
            remove_segments(job + suffix)


def test_a_plain_data_loader_is_warned_about_once_and_refused_as_a_stateful(job, caplog):
    caplog.set_level(logging.WARNING, logger="memento")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)),
                                         batch_size=2, shuffle=True)
    model = torch.nn.Linear(4, 1)
    with memento.Checkpointer(job=job) as ck:
        with pytest.raises(memento.InvalidArgumentError, match="register\\(loader=...\\): a "
                           "DataLoader has no state_dict.*StatefulDataLoader"):
            ck.register(model, loader=loader)
        with pytest.raises(memento.InvalidArgumentError, match="RandomSampler has no state_dict"):
            ck.register(sampler=loader.sampler)
        # A correct setup says nothing.
        ck.register(model, loader=Stream(), extra={"batch": torch.zeros(2, 4), "epoch": 0})
        ck.save(1)
        assert not [r for r in caplog.records if r.name == "memento"
                    and r.levelno >= logging.WARNING]
        carry = {"loader": loader}
        ck.register(extra=carry)
        for step in range(2, 5):
            ck.save(step)
        warnings = [r.getMessage() for r in caplog.records
                    if r.name == "memento" and r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "extra['loader']: a DataLoader has no state_dict()" in warnings[0]
        assert "StatefulDataLoader" in warnings[0]
        carry["it"] = iter(loader)  # cannot be pickled: refused by name
        with pytest.raises(memento.InvalidArgumentError, match="extra\\['it'\\]: the iterator"):
            ck.save(5)


def test_a_job_without_dtensors_does_not_import_torchs_dtensor_package(tmp_path):
    """torch.distributed.tensor (and sympy, which it pulls in) costs every process about
    0.4 s to import: a job that has no DTensor saves and restores without it."""
    import os
    import subprocess
    import sys
    script = """
import sys, torch, memento
model = torch.nn.Linear(4, 2)
ck = memento.Checkpointer(launcher="single", scheme="none").register(model)
ck.save(1); ck.wait()
assert int(ck.restore()) == 1
ck.close()
print("imported:", sorted(m for m in ("torch.distributed.tensor", "sympy") if m in sys.modules))
"""
    env = dict(os.environ, MEMENTO_JOB="nodt-%d" % os.getpid())
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=120)
    remove_segments(env["MEMENTO_JOB"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "imported: []" in p.stdout, p.stdout


def _linear_and_optimizer(kind):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 4))
    if kind == "adamw":
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2, amsgrad=True)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_model_moved_after_register_trains_as_torch_alone_and_restores(job, kind, dtype):
    """register() primes the optimizer state that torch creates at the first step; a model
    moved after it (model.to(dtype)) gets that state at its parameters' dtype as torch alone
    does, not a step that fails on the old dtype; a relaunch that moves the model before
    register() restores it."""
    def train(model, opt, steps, ck=None, first=1):
        torch.manual_seed(first)
        for step in range(first, first + steps):
            x = torch.randn(5, 8).to(dtype)
            model(x).float().pow(2).mean().backward()
            if ck is not None:
                ck.wait_snapshot()
            opt.step()
            opt.zero_grad()
            if ck is not None:
                ck.save(step)

    def state(model, opt):
        out = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for i, s in enumerate(opt.state.values()):
            out.update({"opt.%d.%s" % (i, k): v.clone() for k, v in s.items()})
        return out

    model, opt = _linear_and_optimizer(kind)
    model.to(dtype)
    train(model, opt, 3)
    torch_alone = state(model, opt)
    train(model, opt, 2, first=4)
    torch_alone_5 = state(model, opt)

    model, opt = _linear_and_optimizer(kind)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        model.to(dtype)
        train(model, opt, 3, ck)
        ck.wait()
    got = state(model, opt)
    assert all(v.dtype == dtype for k, v in got.items() if not k.endswith(".step")), \
        {k: v.dtype for k, v in got.items()}
    assert_same(torch_alone, got)

    model, opt = _linear_and_optimizer(kind)
    model.to(dtype)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        assert ck.restore() == 3
        assert_same(torch_alone, state(model, opt))
        train(model, opt, 2, ck, first=4)
    assert_same(torch_alone_5, state(model, opt))
