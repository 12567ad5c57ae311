"""CUDA tensors through the Python package (one rank): every dtype and odd sizes,
non-contiguous tensors, tensors written on a non-default stream. Each test is
skipped, with the reason, where torch sees no GPU."""
import logging
import os

import pytest
import torch

import memento

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device visible to torch %s (built for CUDA %s)" % (torch.__version__,
                                                                       torch.version.cuda))

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool]
ODD_SIZES = [1, 7, 4099, 3 * (1 << 20) + 5]
# MEMENTO_DEVICE_COPY: the copy engine into the store's registered pages, or through
# the snapshot workers' pinned buffers.
COPIES = ["direct", "staged"]
# The restore report's words for device bytes read from a store this process did not
# register with the driver.
STAGED = "staged through pinned buffers"


def raw(t):
    return t.detach().contiguous().view(-1).view(torch.uint8).cpu()


def random_tensor(n, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(n, generator=gen, device="cuda") < 0.5
    if dtype == torch.int64:
        return torch.randint(-2**62, 2**62, (n,), generator=gen, device="cuda")
    return torch.randn(n, generator=gen, device="cuda").to(dtype)


def overwrite(t):
    with torch.no_grad():
        if t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.add_(1)


def saved_then_overwritten(job, tensors, step=1, **settings):
    """Saves `tensors` ({name: tensor}) as `step`, overwrites each, restores; returns the
    report and the data pointers before and after."""
    ck = memento.Checkpointer(job=job, launcher="single", scheme="none", persist_every=0,
                              **settings)
    ck.register(**tensors)
    assert ck.restore() is None
    ck.save(step)
    ck.wait()
    for t in tensors.values():
        overwrite(t)
    before = [t.data_ptr() for t in tensors.values()]
    report = ck.restore()
    torch.cuda.synchronize()
    after = [t.data_ptr() for t in tensors.values()]
    ck.close()
    return report, before, after


@pytest.mark.parametrize("device_copy", COPIES)
def test_every_dtype_and_odd_size_restores_bit_exact_in_place(job, device_copy):
    torch.cuda.set_device(0)
    gen = torch.Generator(device="cuda").manual_seed(1)
    tensors = {"%s_%d" % (str(d).split(".")[-1], n): random_tensor(n, d, gen)
               for d in DTYPES for n in ODD_SIZES}
    expect = {k: raw(t) for k, t in tensors.items()}
    report, before, after = saved_then_overwritten(job, tensors, device_copy=device_copy)
    assert int(report) == 1
    assert before == after, "restore() must write the tensors in place"
    # The process that saved registered the store's pages: the copy engine reads them,
    # unless device copies are staged both ways.
    assert (STAGED in report.source_detail) == (device_copy == "staged"), report.source_detail
    for k, t in tensors.items():
        assert t.is_cuda
        assert torch.equal(raw(t), expect[k]), k


def test_a_relaunch_restores_through_pinned_buffers_bit_exact(job):
    """A new Checkpointer of the job (as after a relaunch) never registered the store's
    pages: the restore threads move the device bytes through their own pinned buffers,
    every dtype and odd size, pieces of several buffers' worth among them."""
    torch.cuda.set_device(0)
    gen = torch.Generator(device="cuda").manual_seed(4)
    sizes = ODD_SIZES + [(9 << 20) + 3]  # over two 4 MiB restore pieces as float32
    tensors = {"%s_%d" % (str(d).split(".")[-1], n): random_tensor(n, d, gen)
               for d in DTYPES for n in sizes}
    expect = {k: raw(t) for k, t in tensors.items()}
    with memento.Checkpointer(job=job, launcher="single", scheme="none",
                              persist_every=0) as ck:
        ck.register(**tensors)
        ck.save(1)
        ck.wait()
    for t in tensors.values():
        overwrite(t)
    with memento.Checkpointer(job=job, launcher="single", scheme="none",
                              persist_every=0) as ck:
        ck.register(**tensors)
        report = ck.restore()
        torch.cuda.synchronize()
        assert int(report) == 1
        device_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
        why = "(the slot's pages are not registered with the driver in this process)"
        assert "%d device bytes %s %s" % (device_bytes, STAGED, why) in report.source_detail, \
            report.source_detail
        for k, t in tensors.items():
            assert torch.equal(raw(t), expect[k]), k
        # Saved again by this process (the restored values), its slot is registered: the
        # next restore reads it with the copy engine.
        ck.save(2)
        ck.wait()
        for t in tensors.values():
            overwrite(t)
        report = ck.restore()
        torch.cuda.synchronize()
        assert int(report) == 2 and STAGED not in report.source_detail, report.source_detail
        for k, t in tensors.items():
            assert torch.equal(raw(t), expect[k]), k


@pytest.mark.parametrize("device_copy", COPIES)
def test_device_tensors_get_more_snapshot_threads_and_big_ones_restore_in_pieces(
        job, caplog, device_copy):
    # Auto: half this rank's CPUs, 2..8 (Config::SnapshotThreads); one rank here.
    caplog.set_level(logging.INFO, logger="memento")
    torch.cuda.set_device(0)
    cpus = len(os.sched_getaffinity(0))
    expect = max(2, min(8, cpus // 2))
    gen = torch.Generator(device="cuda").manual_seed(2)
    # Over 16 MiB: the restore queues it in several copies on several streams; staged,
    # each 4 MiB chunk goes through a worker's buffers in four pieces.
    tensors = {"big": random_tensor((20 << 20) + 3, torch.float32, gen),
               "small": random_tensor(5, torch.bfloat16, gen)}
    expect_bytes = {k: raw(t) for k, t in tensors.items()}
    with memento.Checkpointer(job=job, launcher="single", scheme="none", persist_every=0,
                              log="info", device_copy=device_copy) as ck:
        assert "MEMENTO_DEVICE_COPY=%s" % device_copy in ck.config
        ck.register(**tensors)
        ck.save(1)
        ck.wait()
        for t in tensors.values():
            overwrite(t)
        assert int(ck.restore()) == 1
    torch.cuda.synchronize()
    for k, t in tensors.items():
        assert torch.equal(raw(t), expect_bytes[k]), k
    messages = [r.getMessage() for r in caplog.records if r.name == "memento"]
    line = "snapshot: %d worker threads (auto, device buffers), device copies %s" % (
        expect, device_copy)
    assert line in messages, messages
    # The slot's pages are registered with the driver (once, in one range: the two entries
    # are neighbours) for the copy engine's direct copies; staged copies never need it.
    registered = [m for m in messages if "pages registered with the driver" in m]
    if device_copy == "direct":
        assert len(registered) == 1 and "(1 ranges)" in registered[0], messages
    else:
        assert not registered, registered


@pytest.mark.parametrize("device_copy", COPIES)
def test_non_contiguous_tensors_restore_bit_exact(job, device_copy):
    torch.cuda.set_device(0)
    base = torch.arange(4099 * 3, device="cuda", dtype=torch.float32).view(4099, 3)
    transposed = base.clone().t()          # strides (1, 3)
    strided = torch.randn(1000, 10, device="cuda")[:, ::3]  # a view with gaps
    tensors = {"transposed": transposed, "strided": strided}
    assert not transposed.is_contiguous() and not strided.is_contiguous()
    expect = {k: t.detach().cpu().clone() for k, t in tensors.items()}
    strides = {k: t.stride() for k, t in tensors.items()}
    report, before, after = saved_then_overwritten(job, tensors, device_copy=device_copy)
    assert int(report) == 1 and before == after
    for k, t in tensors.items():
        assert t.stride() == strides[k], "%s: the view's layout changed" % k
        assert torch.equal(t.cpu(), expect[k]), k


@pytest.mark.parametrize("device_copy", COPIES)
def test_snapshot_waits_for_the_current_non_default_stream(job, device_copy):
    """The last write of the saved step is still queued on a side stream (behind a
    device-side sleep of 0.2 s) when save() is called from within that stream's context: the
    snapshot must hold the written values, not what the tensor held at save()."""
    torch.cuda.set_device(0)
    w = torch.zeros(1 << 20, device="cuda")
    ck = memento.Checkpointer(job=job, launcher="single", scheme="none", persist_every=0,
                              device_copy=device_copy)
    ck.register(w=w)
    assert ck.restore() is None
    side = torch.cuda.Stream()
    cycles = int(0.2 * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # 0.2 s
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        w.fill_(7.0)
        ck.save(1)
    ck.wait()
    side.synchronize()
    w.zero_()
    assert int(ck.restore()) == 1
    torch.cuda.synchronize()
    assert torch.equal(w, torch.full_like(w, 7.0))
    ck.close()


def test_a_job_with_the_nccl_device_transport_saves_and_restores_on_the_gpu(job):
    """MEMENTO_TRANSPORT_DEVICE=nccl with CUDA tensors: the link is made (its own NCCL
    communicator, here of one rank) and the job saves and restores bit-exact."""
    torch.cuda.set_device(0)
    gen = torch.Generator(device="cuda").manual_seed(3)
    tensors = {"w": random_tensor(5 * (1 << 20) + 3, torch.float32, gen)}
    expect = raw(tensors["w"])
    ck = memento.Checkpointer(job=job, launcher="single", scheme="none", persist_every=0,
                              transport_device="nccl")
    assert "MEMENTO_TRANSPORT_DEVICE=nccl" in ck.config
    ck.register(**tensors)
    ck.save(1)
    ck.wait()
    overwrite(tensors["w"])
    assert int(ck.restore()) == 1
    torch.cuda.synchronize()
    ck.close()
    assert torch.equal(raw(tensors["w"]), expect)


@pytest.mark.parametrize("flags", [{}, {"capturable": True}, {"fused": True}])
def test_a_model_moved_to_the_gpu_after_register_steps_as_torch_alone(job, flags):
    """The optimizer state register() primes on the CPU moves with a model moved to the GPU
    at the first step, `step` too where the optimizer keeps it with its parameter
    (capturable, fused): the steps compute what torch alone computes, and save."""
    def run(with_memento):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 8)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **flags)
        ck = None
        if with_memento:
            ck = memento.Checkpointer(job=job)
            ck.register(model, opt)
        model.cuda()
        gen = torch.Generator(device="cuda").manual_seed(1)
        for step in range(1, 4):
            model(torch.randn(4, 16, generator=gen, device="cuda")).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            if ck is not None:
                ck.save(step)
                ck.wait()
        if ck is not None:
            ck.close()
        return [raw(t) for t in model.state_dict().values()] + [
            raw(v) for s in opt.state.values() for v in s.values()]

    alone, with_memento = run(False), run(True)
    assert len(alone) == len(with_memento)
    assert all(torch.equal(a, b) for a, b in zip(alone, with_memento))
