"""A run that ends normally (close()) is finished: the same job started again begins at
step 0 unless resume_finished=True, its node stores are freed unless keep_finished=True,
and without MEMENTO_JOB the job id comes from torchrun's run id."""
import glob
import json
import logging
import os
import subprocess

import torch

import memento

# Finished runs as a user meets them (conftest.reopening_resumes).
FINISHED_RUN_DEFAULTS = True


def segments(job):
    shm = os.environ.get("MEMENTO_SHM_DIR", "/dev/shm")
    return glob.glob(os.path.join(shm, "memento.%s.*" % job))


def run(job, steps, **settings):
    """One run of a tiny training job: restores, trains `steps` steps saving each, closes.
    Returns (what restore() returned, the weight right after it, the final weight)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memento.Checkpointer(job=job, **settings) as ck:
        ck.register(model, opt)
        restored = ck.restore()
        at_start = model.weight.detach().clone()
        first = int(restored) if restored is not None else 0
        for step in range(first + 1, first + steps + 1):
            model(torch.randn(2, 4)).sum().backward()
            ck.wait_snapshot()
            opt.step()
            opt.zero_grad()
            ck.save(step)
        ck.wait()
    return restored, at_start, model.weight.detach().clone()


def test_a_finished_run_starts_fresh_and_its_memory_is_freed(job, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="memento")
    remote = dict(remote=str(tmp_path / "remote"), persist_every=1)
    restored, _, finished = run(job, 3, **remote)
    assert restored is None
    assert segments(job) == [], "a run that ended normally unlinks its node stores"
    build = os.environ.get("MEMENTO_BUILD_DIR")
    if build:
        out = subprocess.run([os.path.join(build, "bindings", "cli", "memento"), "inspect",
                              "--job", job, "--json"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["segments"] == []

    caplog.clear()
    # The same command again: the remote tier holds the run and its finished mark; a
    # fresh start, and one line saying why.
    restored, at_start, second = run(job, 2, **remote)
    assert restored is None
    lines = [r.getMessage() for r in caplog.records
             if r.name == "memento" and "finished at step" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "job '%s'" % job in lines[0] and "finished at step 3" in lines[0]
    assert "resume_finished=True" in lines[0]
    torch.manual_seed(0)
    assert torch.equal(at_start, torch.nn.Linear(4, 3).weight), "trained from step 0"

    # Asked to, a run continues the one that finished last, from the remote tier.
    restored, at_start, _ = run(job, 1, resume_finished=True, **remote)
    assert restored == 2
    assert torch.equal(at_start, second)


def test_resume_finished_continues_from_the_last_step(job):
    _, _, finished = run(job, 3, keep_finished=True)
    restored, at_start, _ = run(job, 2, resume_finished=True)
    assert restored == 3
    assert torch.equal(at_start, finished), "continues from the finished run's last step"
    # That run finished in turn (at step 5), and freed its memory this time.
    assert segments(job) == []
    restored, _, _ = run(job, 1)
    assert restored is None


def test_a_with_block_left_by_an_exception_does_not_finish(job):
    model = torch.nn.Linear(4, 3)
    try:
        with memento.Checkpointer(job=job) as ck:
            ck.register(model)
            ck.save(1)
            ck.wait()
            raise RuntimeError("the training loop failed")
    except RuntimeError:
        pass
    assert len(segments(job)) == 1
    restored, _, _ = run(job, 1)
    assert restored == 1, "a failed run is restored by its relaunch"


def test_a_close_after_a_failed_save_does_not_finish(job):
    """Whether the save failed in Python's part (the extra state does not pickle) or in the
    adapter's (the extra state is larger than its capacity), close() right after it marks
    nothing: the relaunch restores the last committed step (it used to find the run
    finished and its stores unlinked, and start over)."""
    import threading
    for bad in ({"lock": threading.Lock()}, {"blob": b"x" * 300_000}):
        model = torch.nn.Linear(4, 3)
        ck = memento.Checkpointer(job=job, extra_capacity=65536)
        ck.register(model)
        ck.save(1)
        ck.wait()
        ck.register(extra=bad)
        try:
            ck.save(2)
        except (TypeError, memento.MementoError):
            pass
        else:
            raise AssertionError("save(2) with %s did not fail" % sorted(bad))
        ck.close()
        assert len(segments(job)) == 1, "closed after a failed save: the stores stay"
        with memento.Checkpointer(job=job, extra_capacity=65536) as again:
            again.register(model)
            assert again.restore() == 1, "a relaunch restores the last committed step"
        assert segments(job) == [], "that run ended normally"


def test_the_settings_are_keywords():
    keywords = memento.settings_keywords()
    assert keywords["resume_finished"] == "MEMENTO_RESUME_FINISHED"
    assert keywords["keep_finished"] == "MEMENTO_KEEP_FINISHED"


def test_job_id_from_torchrun(job, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="memento")
    monkeypatch.delenv("MEMENTO_JOB", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", job + ".run/1")
    with memento.Checkpointer(launcher="single", log="info") as ck:
        assert "MEMENTO_JOB=%s_run_1 " % job in ck.config
    assert any("from TORCHELASTIC_RUN_ID" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default names no job
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with memento.Checkpointer(launcher="single") as ck:
        assert "MEMENTO_JOB=memento " in ck.config


def test_a_run_that_saved_nothing_does_not_hold_the_next_runs_model(job):
    """close() before any save marks nothing and keeps the node store, which then holds no
    version: a run with another model reuses the job id without an error or a clean-up."""
    with memento.Checkpointer(job=job) as ck:
        ck.register(torch.nn.Linear(2, 2))
        assert ck.restore() is None
    assert segments(job), "the store of a run that committed nothing is kept"
    model = torch.nn.Linear(3, 3)
    with memento.Checkpointer(job=job) as ck:
        ck.register(model)
        assert ck.restore() is None
        ck.save(1)
        ck.wait()
        assert ck.latest_committed() == 1
