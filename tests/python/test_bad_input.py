"""Bad input to the Python API is refused by name, before anything is stored: a tensor
without data, a step or count that is not an integer >= 0, an extra= value that cannot be
pickled."""
import re
import threading

import numpy as np
import pytest
import torch

import memento


def test_a_meta_tensor_is_refused_by_name(job):
    with memento.Checkpointer(job=job) as ck:
        ck.register("deferred", torch.empty(3, 4, device="meta"))
        with pytest.raises(memento.InvalidArgumentError, match="'deferred' is on the meta device"):
            ck.save(1)


def test_a_tensor_without_data_of_its_own_is_refused_by_name(job):
    # A wrapper subclass (torchao's float8 / NF4 weights are of this kind) has no storage
    # the snapshot could read: it was saved as a byte of nothing, or crashed the process.
    from torch.testing._internal.two_tensor import TwoTensor
    with memento.Checkpointer(job=job) as ck:
        ck.register("w", TwoTensor(torch.ones(1 << 20), torch.ones(1 << 20)))
        with pytest.raises(memento.InvalidArgumentError,
                           match="'w' is a tensor subclass dispatched in Python"):
            ck.save(1)
    # A storage freed in place after a save (FSDP frees its parameters' storage this way).
    with memento.Checkpointer(job=job) as ck:  # the refusal above stored nothing
        t = torch.ones(1 << 20)
        ck.register("t", t)
        ck.save(1)
        ck.wait()
        t.untyped_storage().resize_(0)
        with pytest.raises(memento.InvalidArgumentError,
                           match=r"'t' of 1048576 elements needs 4194304 bytes of storage and "
                                 r"has 0"):
            ck.save(2)
        assert ck.latest_committed() == 1
        # Its data back in place, the next save goes through (and close() ends the run).
        t.untyped_storage().resize_(4 << 20)
        t.fill_(2)
        ck.save(3)
        ck.wait()
        assert ck.latest_committed() == 3


def test_a_module_whose_state_dict_holds_copies_is_refused_by_name(job):
    # FSDP1's state_dict() gathers copies of the parameters, as does any state_dict hook
    # that returns new tensors: restored into those, the module kept its own values and
    # restore() reported success.
    class Copying(torch.nn.Linear):
        def state_dict(self, *args, **kwargs):
            state = super().state_dict(*args, **kwargs)
            state["weight"] = state["weight"].detach().clone()
            return state

    ck = memento.Checkpointer(job=job)
    with pytest.raises(memento.InvalidArgumentError,
                       match=r"'model.weight' of the module's state_dict\(\) is neither a "
                             r"parameter nor a buffer of it \(FullyShardedDataParallel"):
        ck.register(Copying(2, 2))
    ck.register(torch.nn.Linear(2, 2))  # nothing of the refused module was kept
    ck.save(1)
    ck.wait()
    ck.close()


def test_bad_steps_counts_and_unpicklable_extras_are_refused_by_name(job):
    for key in ("extra_capacity", "total_steps"):
        with pytest.raises(memento.InvalidArgumentError, match="%s=-1: expected an integer" % key):
            memento.Checkpointer(job=job, **{key: -1})
    # A setting given as a keyword is named as the keyword too, with the value given.
    with pytest.raises(memento.InvalidArgumentError,
                       match=r"MEMENTO_SLOTS='3.0' is invalid.*\(given as slots='3.0'\)"):
        memento.Checkpointer(job=job, slots=3.0)
    with pytest.raises(memento.InvalidArgumentError,
                       match=r"MEMENTO_CHUNK_BYTES='2G' is invalid.*given as chunk_bytes='2G'"):
        memento.Checkpointer(job=job, chunk_bytes="2G")
    extra = {"lock": threading.Lock(), "pos": 7}
    ck = memento.Checkpointer(job=job)
    ck.register(torch.nn.Linear(2, 2), extra=extra)
    for bad in (-1, 2.5, "3"):
        with pytest.raises(memento.InvalidArgumentError, match="save: step=.*integer >= 0"):
            ck.save(bad)
    with pytest.raises(memento.InvalidArgumentError,
                       match=r"save: extra\['lock'\] cannot be pickled \(TypeError"):
        ck.save(1)
    extra["lock"] = None
    ck.save(np.int64(1))  # an integer of another type is a step
    ck.wait()
    assert ck.latest_committed() == 1
    ck.close()


def test_an_extra_state_over_its_capacity_names_its_largest_parts(job):
    """LBFGS keeps lists of tensors, pickled into the extra state, that grow step by step:
    the save that outgrows extra_capacity names them, and what was committed stays."""
    torch.manual_seed(0)
    model = torch.nn.Linear(100, 100)
    opt = torch.optim.LBFGS(model.parameters(), history_size=8, max_iter=1)
    x = torch.randn(4, 100)

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    with memento.Checkpointer(job=job, extra_capacity=128 * 1024) as ck:
        ck.register(model, opt, extra={"note": "x" * 1000})
        step = 0
        with pytest.raises(memento.ResourceExhaustedError) as failed:
            for step in range(1, 20):
                opt.step(closure)
                ck.save(step)
                ck.wait()
        assert step > 1, "the first save should fit"
        message = str(failed.value)
        assert re.search(r"extra state needs \d+ bytes but its entry holds 131072", message)
        largest = message.split("the largest parts: ")[1]
        assert largest.startswith("optimizer's state that is not one tensor per parameter ("), \
            message
        assert "old_dirs" in largest and "extra['note']" in largest, message
        assert "Checkpointer(extra_capacity=)" in message
        assert ck.latest_committed() == step - 1
        assert ck.restore() == step - 1  # the last version that fit
