"""save() reuses the entry list of the last save while the registered objects walk to the
same tensors, and builds it anew when any of them changed (memento._entry_cache)."""
import pytest
import torch

import memento
from memento import _memento


class CountingImpl:
    """The engine's binding, counting the entry lists handed to it."""

    def __init__(self, impl):
        self._impl = impl
        self.set_calls = 0

    def set_tensors(self, entries):
        self.set_calls += 1
        return self._impl.set_tensors(entries)

    def __getattr__(self, name):
        return getattr(self._impl, name)


def model_and_adam():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


def step(model, opt, ck):
    model(torch.randn(4, 6)).pow(2).mean().backward()
    ck.wait_snapshot()
    opt.step()
    opt.zero_grad()


def test_saves_of_the_same_tensors_build_the_entries_once_and_restore_bit_exact(job):
    model, opt = model_and_adam()
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        ck._impl = counting = CountingImpl(ck._impl)
        for s in range(1, 6):
            step(model, opt, ck)
            ck.save(s)
        ck.wait()
        assert ck._cache.hits == 4
        assert counting.set_calls == 1
        expect = {k: v.clone() for k, v in model.state_dict().items()}
        expect_m = opt.state[model[0].weight]["exp_avg"].clone()
        for t in list(model.state_dict().values()) + [opt.state[model[0].weight]["exp_avg"]]:
            t.detach().fill_(7)
        assert ck.restore() == 5
        assert counting.set_calls == 1  # restore() hands over the same list: not again
        for k, v in model.state_dict().items():
            assert torch.equal(v, expect[k]), k
        assert torch.equal(opt.state[model[0].weight]["exp_avg"], expect_m)


def replace_storage(model, opt, named):
    model[0].weight.data = torch.full((8, 6), 3.0)


def replace_parameter(model, opt, named):
    model[2].weight = torch.nn.Parameter(torch.full((3, 8), 3.0))
    opt.param_groups[0]["params"][4] = model[2].weight
    opt.state[model[2].weight] = {}


def shrink_in_place(model, opt, named):
    named.resize_(5)  # the same storage, a shorter tensor
    named.fill_(3.0)


def replace_buffer(model, opt, named):
    model[1].running_mean = torch.full((8,), 3.0)


def add_param_group(model, opt, named):
    extra = torch.nn.Parameter(torch.full((2,), 3.0))
    opt.add_param_group({"params": [extra]})
    opt.state[extra] = {"exp_avg": torch.full((2,), 3.0)}
    named.extra = extra  # kept alive beside the optimizer


@pytest.mark.parametrize("change", [replace_storage, replace_parameter, shrink_in_place,
                                    replace_buffer, add_param_group])
def test_a_changed_tensor_builds_the_entries_again(job, change):
    """Each change must reach the engine: with the old list, the next save would copy the
    tensors registered before the change (or the old shape of the same storage)."""
    model, opt = model_and_adam()
    named = torch.arange(12, dtype=torch.float32)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model, opt)
        ck.register("counter", named)
        ck._impl = counting = CountingImpl(ck._impl)
        step(model, opt, ck)
        ck.save(1)
        ck.save(2)
        ck.wait()
        assert counting.set_calls == 1
        change(model, opt, named)
        ck.save(3)
        ck.wait()
        assert counting.set_calls == 2, "the change was not seen"
        current = {id(t) for t in list(model.state_dict(keep_vars=True).values()) + [named]}
        stored = dict((name, t) for name, t, _ in ck.tensors())
        assert tuple(stored["counter"].shape) == tuple(named.shape)
        # Every entry views the tensor registered now: its storage and shape.
        for name, t, _ in ck.tensors():
            if name.startswith("model.") or name == "counter":
                owner = named if name == "counter" else \
                    model.state_dict(keep_vars=True)[name[len("model."):]]
                assert id(owner) in current
                assert t.data_ptr() == owner.data_ptr() and t.shape == owner.shape, name
        threes = [t for name, t, _ in ck.tensors() if torch.all(t == 3.0) and t.numel() > 1]
        assert threes, "no entry holds the new tensor"
        for t in threes:
            t.zero_()
        assert ck.restore() == 3
        assert all(torch.all(t == 3.0) for t in threes)


def test_close_lets_go_of_the_tensors_the_list_walked(job):
    """A parameter replaced after the last save is still held by the entries (the engine's
    and the reused list's) until the run ends; then its memory is freed."""
    import gc
    import weakref
    import numpy as np
    model = torch.nn.Linear(4, 8)
    memory = np.zeros((8, 4), dtype=np.float32)  # the old weight's storage, observable
    freed = weakref.ref(memory)
    model.weight = torch.nn.Parameter(torch.from_numpy(memory))
    del memory
    ck = memento.Checkpointer(job=job)
    ck.register(model)
    ck.save(1)
    ck.wait()
    model.weight = torch.nn.Parameter(torch.zeros(8, 4))
    gc.collect()
    assert freed() is not None
    ck.close()
    gc.collect()
    assert freed() is None, "the old weight's memory outlived close()"


def test_register_forgets_the_entries(job):
    """A later register() may change what the same tensors are stored as (here a shard
    spec for an entry already registered): the next save must not reuse the old list."""
    model = torch.nn.Linear(4, 8)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        assert ck.placements() == {}
        assert ck.placements() == {} and ck._cache.hits >= 1
        ck.register(shards={"model.weight": ((16, 4), (8, 0))})
        assert ck.placements() == {"model.weight": ((16, 4), (8, 0))}


def fingerprint(*objects):
    """The bytes, after checking that the allocation-free comparison agrees with them."""
    out = _memento.tensor_fingerprint(list(objects))
    assert _memento.tensor_fingerprint_matches(list(objects), out)
    assert not _memento.tensor_fingerprint_matches(list(objects), out + out[:8])
    assert not _memento.tensor_fingerprint_matches(list(objects) + [1.0], out)
    if out:
        assert not _memento.tensor_fingerprint_matches(list(objects), out[:-8])
        assert not _memento.tensor_fingerprint_matches(list(objects),
                                                       out[:-1] + bytes([out[-1] ^ 1]))
    return out


def test_the_fingerprint_changes_with_every_place_of_a_tensor_and_nothing_else():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    other = torch.zeros(3)
    same = fingerprint(base, other, 1.5, "x")
    assert same == fingerprint(base, other, 1.5, "x")
    # Values that are not tensors count by type: a float step counter changes every step.
    assert same == fingerprint(base, other, 2.5, "y")
    assert same != fingerprint(base, other, 2, "x")
    assert same != fingerprint(other, base, 1.5, "x")
    assert same != fingerprint(base.clone(), other, 1.5, "x")  # another object
    base.add_(1)  # values do not count
    deep = torch.zeros([1] * 20)  # a record longer than the comparison's inline room
    assert fingerprint(deep) != fingerprint(deep.view([1] * 19))
    assert same == fingerprint(base, other, 1.5, "x")

    def changed(mutate):
        t = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        before = fingerprint(t)
        mutate(t)
        return before != fingerprint(t)

    assert changed(lambda t: t.t_())                                    # shape and strides
    assert changed(lambda t: t.as_strided_((4, 6), (1, 4)))             # strides alone
    assert changed(lambda t: t.set_(t.untyped_storage(), 6, (3, 6), (6, 1)))  # shape, offset
    assert changed(lambda t: t.resize_(20))                             # the same storage
    assert changed(lambda t: t.set_(torch.zeros(4, 6)))                 # another storage
    assert changed(lambda t: setattr(t, "data", t.data.double()))       # dtype
    assert changed(lambda t: t.as_strided_((4, 6), (6, 1), 0)) is False  # nothing changed
    whole = torch.arange(24, dtype=torch.float32)
    rows = whole[:18].view(3, 6)
    before = fingerprint(rows)
    rows.set_(whole.untyped_storage(), 6, (3, 6), (6, 1))  # the offset alone
    assert before != fingerprint(rows)


def test_a_dtensor_whose_local_tensor_is_replaced_builds_the_entries_again(job, tmp_path):
    """A DTensor keeps its object while its local tensor is swapped (as FSDP2 may do when it
    resets its sharded parameters): the walk takes each DTensor's local tensor too."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    dist.init_process_group("gloo", init_method="file://%s" % (tmp_path / "pg"), rank=0,
                            world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        w = distribute_tensor(torch.arange(8, dtype=torch.float32), mesh, [Shard(0)])
        with memento.Checkpointer(job=job, launcher="single") as ck:
            ck.register("w", w)
            ck._impl = counting = CountingImpl(ck._impl)
            ck.save(1)
            ck.save(2)
            ck.wait()
            assert counting.set_calls == 1 and ck._cache.hits >= 1
            w._local_tensor = torch.full((8,), 3.0)
            ck.save(3)
            ck.wait()
            assert counting.set_calls == 2, "the new local tensor was not seen"
            (name, stored, _), = ck.tensors()
            assert stored.data_ptr() == w._local_tensor.data_ptr()
            w._local_tensor.zero_()
            assert ck.restore() == 3
            assert torch.all(w._local_tensor == 3.0)
    finally:
        dist.destroy_process_group()
