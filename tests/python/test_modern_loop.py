"""A modern PyTorch loop registers without special cases (one rank): torch.compile'd and
DDP-wrapped modules under their plain names, fused and foreach optimizers (AdamW's tensor
step), LR schedulers and other stateful objects; each resumes bit-exactly."""
import logging
import os
import random
import socket

import pytest
import torch

import memento
from test_checkpointer import Net, same_bits


def state_of(model, opt, sched=None):
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, (p, s) in enumerate(opt.state.items()):
        for k, v in s.items():
            out["opt.%d.%s" % (i, k)] = v.clone() if torch.is_tensor(v) else v
    if sched is not None:
        out["sched"] = sched.state_dict()
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if torch.is_tensor(a[k]):
            assert same_bits(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def step(model, opt, ck=None, sched=None):
    loss = model(torch.randn(16, 8) + random.random()).pow(2).mean()
    loss.backward()
    if ck is not None:
        ck.wait_snapshot()
    opt.step()
    opt.zero_grad()
    if sched is not None:
        sched.step()


def resumes_bit_exactly(ck, model, opt, sched=None, saved_steps=3, more=2):
    """Saves `saved_steps` steps, trains `more`, restores, trains `more` again: same bits."""
    assert ck.restore() is None
    for s in range(saved_steps):
        step(model, opt, ck, sched)
        ck.save(s + 1)
    ck.wait()
    for _ in range(more):
        step(model, opt, sched=sched)
    want = state_of(model, opt, sched)
    report = ck.restore()
    assert report == saved_steps
    for _ in range(more):
        step(model, opt, sched=sched)
    assert_same(want, state_of(model, opt, sched))
    assert ck.reregistrations() == 0  # the optimizer state existed from register() on
    return report


OPTIMIZERS = {
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
    "adam-fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "adamw-amsgrad-forloop": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True,
                                                         foreach=False),
    "sgd-fused": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, fused=True),
    "sgd-foreach-nesterov": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True,
                                                      foreach=True),
}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_fused_and_foreach_optimizers_resume_bit_exactly(job, kind):
    torch.manual_seed(0)
    random.seed(0)
    model = Net()
    opt = OPTIMIZERS[kind](model.parameters())
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt)
    steps = [n for n, _, _ in ck.tensors() if n.endswith(".step")]
    if "adam" in kind:
        # The step counters are tensors, registered like the moments, and are the
        # ones the optimizer's own first step would have made (dtype, device, shape).
        assert steps
        fresh = OPTIMIZERS[kind](Net().parameters())
        fresh.zero_grad()
        p0 = next(iter(fresh.param_groups[0]["params"]))
        p0.grad = torch.zeros_like(p0)
        fresh.step()
        mine = next(iter(opt.state.values()))["step"]
        theirs = fresh.state[p0]["step"]
        assert (mine.dtype, mine.shape, mine.device) == (theirs.dtype, theirs.shape,
                                                         theirs.device)
    resumes_bit_exactly(ck, model, opt)
    ck.close()


def test_a_compiled_module_is_registered_under_its_plain_names(job):
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.AdamW(compiled.parameters(), lr=1e-2)
    ck = memento.Checkpointer(job=job)
    ck.register(compiled, opt)
    names = [n for n, _, _ in ck.tensors()]
    assert "model.fc1.weight" in names
    assert not [n for n in names if "_orig_mod" in n]
    resumes_bit_exactly(ck, compiled, opt)
    ck.close()


def test_a_ddp_module_is_registered_as_the_module_it_wraps(job, tmp_path):
    import torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(Net())
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        ck = memento.Checkpointer(job=job)
        ck.register(model, opt, replicated=True)
        names = [n for n, _, _ in ck.tensors()]
        assert "model.fc1.weight" in names and not [n for n in names if ".module." in n]
        resumes_bit_exactly(ck, model, opt)
        ck.close()
    finally:
        dist.destroy_process_group()


def test_lr_schedulers_and_stateful_objects_travel_in_the_extra_state(job, caplog):
    class Loader:
        def __init__(self):
            self.position = 0

        def state_dict(self):
            return {"position": self.position}

        def load_state_dict(self, d):
            self.position = d["position"]

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[3])
    loader = Loader()
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt, sched, loader=loader)
    assert ck.restore() is None
    for s in range(4):
        step(model, opt, ck, sched)
        loader.position = (s + 1) * 16
        ck.save(s + 1)
    ck.wait()
    want = (sched.state_dict(), opt.param_groups[0]["lr"], loader.position)
    for _ in range(3):
        step(model, opt, sched=sched)
        loader.position += 16
    assert ck.restore() == 4
    assert (sched.state_dict(), opt.param_groups[0]["lr"], loader.position) == want
    ck.close()
    # A relaunch that does not register what the checkpoint holds is refused by name.
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt, sched)
    with pytest.raises(memento.FailedPreconditionError, match="'loader'"):
        ck.restore()
    ck.close()
    # One that registers more restores, and says what the checkpoint had nothing for.
    ck = memento.Checkpointer(job=job)
    sampler = Loader()
    sampler.position = 5
    ck.register(model, opt, sched, loader=loader, sampler=sampler)
    with caplog.at_level(logging.WARNING, logger="memento"):
        assert ck.restore() == 4
    assert "'sampler' registered now, the checkpoint holds no state of it: kept as it is" in \
        caplog.text, caplog.text
    assert sampler.position == 5
    ck.close()


def test_objects_that_cannot_be_registered_are_refused_by_name(job):
    ck = memento.Checkpointer(job=job)
    with pytest.raises(memento.InvalidArgumentError, match="'object'"):
        ck.register(Net(), object())
    with pytest.raises(memento.InvalidArgumentError, match="loader="):
        ck.register(loader=3)
    # The failed calls registered nothing: the model can be registered now.
    ck.register(Net())
    assert "model.fc1.weight" in [n for n, _, _ in ck.tensors()]
    ck.close()


def test_a_param_group_added_after_register_is_named_when_its_state_cannot_be_restored(job):
    """A group added after register() (a head unfrozen later) gets its state at its first
    step, and saves carry it; a relaunch that registers the optimizer before adding the group
    cannot restore that state. The refusal names it, says how to register it, and that the
    checkpoint must be kept (not the generic advice to remove it)."""
    def build():
        torch.manual_seed(0)
        model = Net()
        head = torch.nn.Linear(4, 2)
        return model, head, torch.optim.AdamW(model.parameters())

    model, head, opt = build()
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt)
    opt.add_param_group({"params": head.parameters()})
    (model(torch.ones(2, 8)).sum() + head(torch.ones(2, 4)).sum()).backward()
    ck.wait_snapshot()
    opt.step()
    ck.save(1)
    ck.wait()
    ck.close()

    model, head, opt = build()
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt)
    with pytest.raises(memento.FailedPreconditionError,
                       match=r"'optimizer.state.\d+.exp_avg'.*in the stored checkpoint but not "
                             r"registered.*a param group added after register\(\).*add the "
                             r"group first\). The stored checkpoint is intact: do not remove it"):
        ck.restore()
    ck.close()

    model, head, opt = build()
    opt.add_param_group({"params": head.parameters()})
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt)
    assert ck.restore() == 1
    ck.close()


def test_frozen_parameters_get_no_primed_state_and_the_rest_restores(job):
    """A parameter that does not require grad gets no Adam moments at register() (torch's
    step gives it none): a frozen backbone held twice its size in zeros, saved each time."""
    def build():
        torch.manual_seed(6)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        model[0].requires_grad_(False)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1)

    model, opt = build()
    ck = memento.Checkpointer(job=job)
    ck.register(model, opt)
    assert [len(opt.state[p]) for p in model.parameters()] == [0, 0, 3, 3]
    assert not [n for n, _, _ in ck.tensors() if n.startswith(("optimizer.state.0.",
                                                              "optimizer.state.1."))]
    model(torch.ones(2, 4)).sum().backward()
    ck.wait_snapshot()
    opt.step()
    assert [len(opt.state[p]) for p in model.parameters()] == [0, 0, 3, 3]
    ck.save(1)
    ck.wait()
    ck.close()
    again, again_opt = build()
    ck = memento.Checkpointer(job=job)
    ck.register(again, again_opt)
    assert ck.restore() == 1
    ck.close()
    for p, q in zip(model.parameters(), again.parameters()):
        assert same_bits(p.detach(), q.detach())
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert same_bits(opt.state[model[1].weight][key], again_opt.state[again[1].weight][key])
