"""What a Python job writes for `memento launch` on its own (the launcher's job protocol,
memento/launch/job_reporter.h), checked in the status folder the launcher would read:
events.jsonl (start, restore_begin, a step per save() with loss and times, done),
restore.aA.rR.json, and the stage fault hook (MEMENTO_LAUNCH_FAULT) that SIGKILLs the
rank at the named stage of the named version after writing fault.aA."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import torch

import memento

HERE = os.path.dirname(os.path.abspath(__file__))


def events(folder):
    with open(os.path.join(folder, "events.jsonl")) as f:
        return [json.loads(line) for line in f]


def train(ck, model, optimizer, steps, start=0):
    for step in range(start, steps):
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        ck.wait_snapshot()
        optimizer.step()
        optimizer.zero_grad()
        ck.save(step + 1, loss=loss)


def test_a_python_job_reports_steps_restores_and_done(job, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMENTO_JOB", job)
    monkeypatch.setenv("MEMENTO_LAUNCH_DIR", str(tmp_path))
    monkeypatch.setenv("MEMENTO_LAUNCH_ATTEMPT", "0")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    ck = memento.Checkpointer(launcher="single", total_steps=5)
    ck.register(model, optimizer)
    assert ck.restore() is None
    train(ck, model, optimizer, 3)
    ck.close()

    ev = events(tmp_path)
    kinds = [e["event"] for e in ev]
    assert kinds == ["start", "restore_begin", "step", "step", "step", "done"], kinds
    assert ev[0]["total_steps"] == 5 and ev[0]["attempt"] == 0
    steps = [e for e in ev if e["event"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3]
    assert all(e["attempt"] == 0 for e in steps), steps  # an old generation's are told apart
    assert all(e["loss"] != 0 and e["step_s"] > 0 and e["stall_s"] > 0 for e in steps), steps
    assert ev[-1]["step"] == 3 and len(ev[-1]["state_hash"]) == 16
    times = [e["t"] for e in ev]
    assert times == sorted(times)
    with open(tmp_path / "restore.a0.r0.json") as f:
        restore = json.load(f)
    assert restore["ok"] is False and restore["not_found"] is True
    assert restore["t_end"] >= restore["t_begin"] > 0

    # A relaunch restores and reports where the entries came from.
    monkeypatch.setenv("MEMENTO_LAUNCH_ATTEMPT", "1")
    model2 = torch.nn.Linear(4, 3)
    optimizer2 = torch.optim.AdamW(model2.parameters())
    ck2 = memento.Checkpointer(launcher="single", total_steps=5)
    ck2.register(model2, optimizer2)
    assert ck2.restore() == 3
    train(ck2, model2, optimizer2, 5, start=3)
    ck2.close()
    with open(tmp_path / "restore.a1.r0.json") as f:
        restore = json.load(f)
    assert restore["ok"] is True and restore["version"] == 3
    sources = {e["source"] for e in restore["report"]["entries"]}
    assert sources == {"local-memory"}, restore["report"]
    ev = events(tmp_path)
    assert [e["step"] for e in ev if e["event"] == "step"] == [1, 2, 3, 4, 5]
    assert [e["attempt"] for e in ev if e["event"] == "step"] == [0, 0, 0, 1, 1]
    assert [e["event"] for e in ev].count("done") == 2 and ev[-1]["step"] == 5


def test_nothing_is_written_outside_the_launcher(job, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMENTO_JOB", job)
    monkeypatch.delenv("MEMENTO_LAUNCH_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with memento.Checkpointer(launcher="single") as ck:
        ck.register(model, optimizer)
        ck.restore()
        train(ck, model, optimizer, 2)
    assert os.listdir(tmp_path) == []


def test_the_stage_fault_hook_kills_the_rank_at_the_named_stage(job, tmp_path):
    script = textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        import memento
        from test_launch_events import train
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.AdamW(model.parameters())
        ck = memento.Checkpointer(launcher="single")
        ck.register(model, optimizer)
        ck.restore()
        train(ck, model, optimizer, 4)
        print("survived")
    """ % HERE)
    env = dict(os.environ, MEMENTO_JOB=job, MEMENTO_LAUNCH_DIR=str(tmp_path),
               MEMENTO_LAUNCH_ATTEMPT="2", MEMENTO_LAUNCH_FAULT="snapshot:3:0")
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    assert "survived" not in p.stdout
    with open(tmp_path / "fault.a2") as f:
        fault = json.load(f)
    assert fault["stage"] == "snapshot" and fault["version"] == 3 and fault["rank"] == 0
    # It died at the snapshot of v3, which runs behind save(3) on a worker thread:
    # step 3 may have been reported, step 4 (whose save waits for v3) never.
    steps = [e["step"] for e in events(tmp_path) if e["event"] == "step"]
    assert steps in ([1, 2], [1, 2, 3]), steps
