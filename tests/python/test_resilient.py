"""memento.resilient's parts in one process: the group it owns, the connections it aborts
at a loss, the launcher's announcements, and re-running the training on a new membership.
The whole in-job recovery, with real node losses, is tests/launch/launch_injob_test.py."""
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

import memento
from memento import injob as rs
from rank_jobs import free_port


@pytest.fixture(autouse=True)
def environment_restored():
    """resilient adopts the launcher's variables into os.environ, as a rank must; these
    tests share one process with others (the installed package's run), so every variable
    comes back as it was, including ones that were absent."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def single_rank(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    for name in ("MEMENTO_LAUNCH_DIR", "MEMENTO_LAUNCH_RECOVERY", "MEMENTO_LAUNCH_ATTEMPT",
                 "MEMENTO_LAUNCH_GENERATION", "MEMENTO_LAUNCH_SPARE"):
        monkeypatch.delenv(name, raising=False)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def announce(directory, attempt, port, ranks=None):
    m = {"attempt": attempt, "master_addr": "127.0.0.1", "master_port": port,
         "world_size": 1, "ranks_per_node": 1, "ranks": ranks or {}, "fault": ""}
    path = os.path.join(directory, "injob.json")
    with open(path + ".tmp", "w") as f:
        json.dump(m, f)
    os.rename(path + ".tmp", path)


def test_outside_the_launcher_it_owns_the_default_group(single_rank):
    seen = []

    def train(x):
        seen.append((dist.is_initialized(), dist.get_world_size()))
        return x + 1

    assert memento.resilient(train, 41) == 42
    assert seen == [(True, 1)]
    assert not dist.is_initialized()
    assert not rs.in_job()


def test_a_group_made_before_is_left_alone(single_rank):
    dist.init_process_group("gloo")
    assert memento.resilient(lambda: dist.get_rank()) == 0
    assert dist.is_initialized()


def test_connections_opened_since_are_shut_down_listening_sockets_stay():
    server = socket.create_server(("127.0.0.1", 0))
    before = rs._socket_inodes()
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    assert rs.shutdown_connections_since(before) == 2  # both ends are this process's
    assert client.recv(1) == b"" and peer.recv(1) == b""
    # the write side stays open: no EPIPE (gloo's asynchronous path would take it as
    # "write later" and never fail the send)
    assert client.send(b"x") == 1
    late = socket.create_connection(server.getsockname())  # the listener still accepts
    server.accept()[0].close()
    for s in (late, client, peer, server):
        s.close()


def test_a_training_thread_that_stays_in_train_is_reported(tmp_path, monkeypatch):
    """A watcher that fired: a training thread that leaves the generation in time is not
    reported; one still in train() STALL_REPORT_S after the abort leaves every thread's
    stack in stall.aA.rR.txt (gloo can keep a send queued past the connection's end)."""
    monkeypatch.setenv("MEMENTO_LAUNCH_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(rs, "STALL_REPORT_S", 10)
    announce(str(tmp_path), 1, free_port())
    report = tmp_path / "stall.a0.r3.txt"
    left = rs._Watcher(rs.Membership(str(tmp_path)), 0, rs._socket_inodes())
    left.start()
    assert left.fired.wait(5)
    left.stop()  # the training thread left in time
    left.join(5)
    assert not left.is_alive() and not report.exists()
    monkeypatch.setattr(rs, "STALL_REPORT_S", 0.3)
    stalled = rs._Watcher(rs.Membership(str(tmp_path)), 0, rs._socket_inodes())
    stalled.start()
    stalled.join(5)
    assert not stalled.is_alive()
    text = report.read_text()
    assert text.startswith("pid %d: training thread still in train() of attempt 0" % os.getpid())
    assert "test_a_training_thread_that_stays_in_train_is_reported" in text


def test_a_collective_timeout_that_is_no_duration_is_refused_by_name(single_rank):
    for bad in (0, -1.5, float("nan")):
        with pytest.raises(memento.InvalidArgumentError, match="collective_timeout_s"):
            memento.resilient(lambda: None, collective_timeout_s=bad)
    assert not dist.is_initialized()


def test_a_spare_takes_the_rank_the_launcher_hands_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMENTO_LAUNCH_SPARE", "1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MEMENTO_NODE", "MEMENTO_LAUNCH_FAULT"):
        monkeypatch.delenv(name, raising=False)
    m = rs.Membership(str(tmp_path))
    announce(str(tmp_path), 3, 12345, {"2": {"node": "h-r1/2", "local_rank": 0,
                                             "spare_pid": os.getpid() + 1}})
    t = threading.Timer(0.1, announce, (str(tmp_path), 4, 23456, {
        "2": {"node": "h-r2/2", "local_rank": 0, "spare_pid": os.getpid()}}))
    t.start()
    rank, membership = m.wait_assignment(os.getpid())  # not the other spare's place
    t.join()
    rs._adopt(membership, rank)
    env = os.environ
    assert (rank, env["RANK"], env["MASTER_PORT"], env["MEMENTO_NODE"]) == (2, "2", "23456",
                                                                           "h-r2/2")
    assert env["MEMENTO_LAUNCH_ATTEMPT"] == env["MEMENTO_LAUNCH_GENERATION"] == "4"
    assert "MEMENTO_LAUNCH_SPARE" not in env


def in_job(monkeypatch, directory):
    monkeypatch.setenv("MEMENTO_LAUNCH_RECOVERY", "in-job")
    monkeypatch.setenv("MEMENTO_LAUNCH_DIR", directory)
    monkeypatch.setenv("MEMENTO_LAUNCH_ATTEMPT", "0")


def test_an_exception_no_membership_change_explains_leaves(single_rank, tmp_path, monkeypatch):
    """...and it told the launcher first (raised.aA.rR), which relaunches a job whose rank
    raised without a lost node at once instead of after --injob-timeout."""
    in_job(monkeypatch, str(tmp_path))
    monkeypatch.setenv("RANK", "0")

    def train():
        raise ValueError("a bug in the training\nsecond line")

    with pytest.raises(ValueError, match="a bug in the training"):
        memento.resilient(train, wait_s=0.2)
    assert (tmp_path / "raised.a0.r0").read_text() == "ValueError: a bug in the training\n"


def test_a_new_membership_reruns_the_training_on_a_new_group(single_rank, tmp_path,
                                                              monkeypatch, job):
    """The launcher announces attempt 1 while train() runs: the watcher aborts the old
    group's connections, train()'s exception gives way to a new group on the new port and
    train() runs again in this process; the Checkpointer it left open is closed unfinished."""
    in_job(monkeypatch, str(tmp_path))
    monkeypatch.setenv("MEMENTO_JOB", job)
    new_port = free_port()
    calls, left_open = [], []

    def train():
        calls.append((os.environ["MEMENTO_LAUNCH_ATTEMPT"], os.environ["MASTER_PORT"],
                      dist.is_initialized()))
        if len(calls) == 1:
            ck = memento.Checkpointer(launcher="torchrun")
            left_open.append(ck)
            announce(str(tmp_path), 1, new_port)
            # A collective that would wait for ever on a lost peer: here, a receive that
            # nobody sends; the watcher's shutdown of the group's connections ends it.
            store = dist.distributed_c10d._get_default_store()
            store.get("never-set")
        return "done"

    assert memento.resilient(train, wait_s=10) == "done"
    assert [c[0] for c in calls] == ["0", "1"] and calls[1][1] == str(new_port)
    assert all(c[2] for c in calls)
    assert left_open[0] not in memento.checkpointer.open_checkpointers()
    assert not dist.is_initialized()


# Rank 1 of the test below: saves step 1 with rank 0, then stays alive and silent.
SILENT_PEER = """
import time, torch, torch.distributed as dist, memento
dist.init_process_group("gloo")
time.sleep(3)  # rank 0 waits in the barrier past the bound: before any save, allowed
dist.barrier()
ck = memento.Checkpointer(launcher="torchrun")
ck.register("t", torch.zeros(4))
ck.save(1)
ck.wait()
time.sleep(20)
"""


def test_a_collective_no_abort_reaches_fails_at_the_bound_and_the_rank_rejoins(
        single_rank, tmp_path, monkeypatch, job, caplog):
    """gloo can keep a collective whose peer was lost waiting after its connections were
    shut down (a send queued in its pair is never failed). Here the shutdown reaches nothing
    and the peer stays alive without joining the collective: under in-job recovery the
    group's collective timeout, half of the launcher's --injob-timeout from the first save()
    on, ends the wait, and the rank rejoins the announced membership instead of waiting
    torch's 30 minutes (or, here, until the peer exits 20 s later). Before that save the
    same collective waits past the bound (a rank preparing data keeps the others waiting)."""
    caplog.set_level(logging.INFO, logger="memento")
    in_job(monkeypatch, str(tmp_path))
    monkeypatch.setenv("MEMENTO_LAUNCH_INJOB_WAIT_S", "4")
    monkeypatch.setenv("MEMENTO_JOB", job)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(rs, "shutdown_connections_since", lambda before: 0)
    peer = subprocess.Popen([sys.executable, "-c", SILENT_PEER],
                            env=dict(os.environ, RANK="1", MEMENTO_LAUNCH_GENERATION="0"))
    new_port = free_port()
    calls, waited = [], []

    def train():
        calls.append((os.environ["MEMENTO_LAUNCH_ATTEMPT"], dist.get_world_size()))
        if len(calls) == 1:
            t = time.monotonic()
            dist.barrier()
            waited.append(time.monotonic() - t)
            ck = memento.Checkpointer(launcher="torchrun")
            ck.register("t", torch.zeros(4))
            ck.save(1)
            ck.wait()
            announce(str(tmp_path), 1, new_port)  # without the peer: one rank
            t = time.monotonic()
            try:
                dist.all_reduce(torch.ones(4))
            finally:
                waited.append(time.monotonic() - t)
        return "done"

    try:
        assert memento.resilient(train) == "done"
    finally:
        peer.kill()
        peer.wait()
    assert calls == [("0", 2), ("1", 1)]
    assert waited[0] > 2.5, "the barrier before the first save took only %.1f s" % waited[0]
    if hasattr(dist, "set_timeout"):
        assert 1.5 < waited[1] < 4, "the collective ended after %.1f s, not at the 2 s bound" % (
            waited[1])
    else:
        # torch 2.6: no bound can be set after the rendezvous; said once, and the collective
        # ends only with its peer.
        assert waited[1] > 15, "the collective ended after %.1f s" % waited[1]
        assert any("cannot bound the job group's collectives" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert not memento.checkpointer.AFTER_SAVE, "a generation's bound outlived it"
