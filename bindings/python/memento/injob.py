"""In-job recovery: survive a lost node without restarting the surviving processes.

    def train():
        model = DDP(build_model())             # built on the group resilient() made
        ck = memento.Checkpointer(...)
        ck.register(model, optimizer, ...)
        start = ck.restore()
        for step in range(start or 0, steps): ...
        ck.close()

    memento.resilient(train)

resilient(train) creates torch.distributed's default process group (init_process_group
with `backend`, env://), runs train(), and destroys the group afterwards. Under
`memento launch --recovery in-job` it also survives node losses: when ranks are lost,
the launcher starts replacements for them (or hands their places to warm spares started
ahead with --spares) and announces the job's new membership in its status folder
(injob.json: the attempt, a fresh rendezvous port, the replaced ranks). Every survivor
then
  1. aborts the communicators of the old membership: a watcher thread shuts down the TCP
     connections this process opened since the group was formed (gloo's pairs, the
     store's), so that a rank blocked in a collective with the lost one fails at once
     instead of waiting for a timeout (gloo's own abort does not wake a blocked wait),
     and aborts the transfers of memento's own transport (a receive gloo keeps pending
     in its context outlives the connection); a collective that neither ends (gloo can
     keep a send queued past its connection's end) fails at the group's collective
     timeout, which resilient() bounds to half of the launcher's --injob-timeout once
     the generation's first save() returned;
  2. lets the exception leave train(), closes the Checkpointers train() left open
     (without marking the run finished) and destroys the old group;
  3. forms the new group with the same rank numbers (rank 0, survivor or replacement,
     serves the new store) and calls train() again in the same process: the libraries,
     the data and the interpreter stay; the Checkpointer made there restores the
     survivors from their own memory and the replacements from their peers.
A spare runs the same program: resilient() waits until the launcher gives it a rank,
then joins as that rank. An exception that no membership change explains (a bug, a
failure the launcher hands to a full relaunch) leaves resilient() as it came.

Sockets: the connections shut down at a loss are the TCP connections (not listening
sockets) this process opened while the lost membership's group existed; a train() that
opens its own connections to other services should open them before resilient().
"""
import datetime
import faulthandler
import gc
import json
import os
import socket
import threading
import time

import torch
import torch.distributed as dist

from . import _logs
from . import checkpointer as _checkpointer

MEMBERSHIP_FILE = "injob.json"
POLL_S = 0.02
# How long a rank's training thread may stay in train() after its watcher aborted the old
# group before the watcher reports it stalled (stall.aA.rR.txt in the status folder).
STALL_REPORT_S = 10.0


def in_job():
    """True when `memento launch --recovery in-job` runs this process."""
    return os.environ.get("MEMENTO_LAUNCH_RECOVERY") == "in-job" and bool(
        os.environ.get("MEMENTO_LAUNCH_DIR"))


def _socket_inodes():
    """{fd: 'socket:[inode]'} of this process's sockets."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            out[int(fd)] = link
    return out


def shutdown_connections_since(before):
    """Shuts down the read side (without closing the descriptors) of the TCP connections
    opened since `before` (a _socket_inodes() result); listening sockets stay. Returns how
    many. A blocked receive or wait sees the end of the stream at once and gloo closes the
    pair itself. The write side stays: gloo's asynchronous path takes an EPIPE as "write
    later", and an unbound send queued that way is never failed, blocking its collective
    for the whole group timeout."""
    count = 0
    for fd, link in _socket_inodes().items():
        if before.get(fd) == link:
            continue
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if (s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM
                    and not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                s.shutdown(socket.SHUT_RD)
                count += 1
        except OSError:
            pass  # not connected (any more)
        finally:
            s.close()  # the duplicate only
    return count


class Membership:
    """The launcher's announcements (MEMENTO_LAUNCH_DIR/injob.json, replaced atomically)."""

    def __init__(self, directory):
        self.directory = directory
        self.path = os.path.join(directory, MEMBERSHIP_FILE)

    def note_raised(self, attempt, what):
        """Tells the launcher that this rank's train() raised in `attempt`
        (raised.aA.rR: its first line): with no node lost, it relaunches the job at once
        instead of leaving every rank waiting for a membership. Best effort."""
        name = "raised.a%d.r%s" % (attempt, os.environ.get("RANK", "0"))
        try:
            tmp = os.path.join(self.directory, "." + name)
            with open(tmp, "w") as f:
                f.write(what.split("\n")[0][:500] + "\n")
            os.replace(tmp, os.path.join(self.directory, name))
        except OSError:
            pass

    def read(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def newer_than(self, attempt):
        m = self.read()
        return m if m is not None and int(m["attempt"]) > attempt else None

    def wait_newer(self, attempt, timeout_s):
        end = time.monotonic() + timeout_s
        while True:
            m = self.newer_than(attempt)
            if m is not None or time.monotonic() > end:
                return m
            time.sleep(POLL_S)

    def wait_assignment(self, pid):
        """A spare: waits until an announcement hands this process a rank; (rank, it)."""
        while True:
            m = self.read()
            if m is not None:
                for rank, place in m.get("ranks", {}).items():
                    if int(place.get("spare_pid", 0)) == pid:
                        return int(rank), m
            time.sleep(POLL_S)


def _adopt(membership, rank=None):
    """The environment of the new membership's group and Checkpointers."""
    env = os.environ
    env["MASTER_ADDR"] = membership.get("master_addr", "127.0.0.1")
    env["MASTER_PORT"] = str(membership["master_port"])
    env["MEMENTO_LAUNCH_ATTEMPT"] = str(membership["attempt"])
    # memento's own transport keys its store entries by it (the n-th transport of a
    # process counts per generation).
    env["MEMENTO_LAUNCH_GENERATION"] = str(membership["attempt"])
    env["WORLD_SIZE"] = str(membership["world_size"])
    fault = membership.get("fault", "")
    if fault:
        env["MEMENTO_LAUNCH_FAULT"] = fault
    else:
        env.pop("MEMENTO_LAUNCH_FAULT", None)
    # No torchrun agent serves the new store: rank 0 does.
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    if rank is not None:
        place = membership["ranks"][str(rank)]
        env["RANK"] = str(rank)
        env["LOCAL_RANK"] = str(place["local_rank"])
        env["LOCAL_WORLD_SIZE"] = str(membership["ranks_per_node"])
        env["MEMENTO_NODE"] = place["node"]
        env.pop("MEMENTO_LAUNCH_SPARE", None)
        env.pop("MEMENTO_LAUNCH_SPARE_PID", None)


def _wait_for_store(timeout_s):
    """Until rank 0's store at MASTER_ADDR:MASTER_PORT accepts connections. torch's store
    client retries a refused connection only after a back-off of about half a second; a
    rank of a new membership usually comes before rank 0 has its store up."""
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            socket.create_connection(address, timeout=1).close()
            return
        except OSError:
            time.sleep(0.005)


def warm_up():
    """What a spare does while it waits: imports that the training's first DDP / FSDP
    construction would otherwise pay for (torch._dynamo: about a second), so that the
    membership it joins does not wait for them."""
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # an optional speed-up only
        pass


class _Watcher(threading.Thread):
    """Aborts this generation's connections once the launcher announces a newer one."""

    def __init__(self, membership, attempt, before):
        super().__init__(name="memento-injob-watcher", daemon=True)
        self.membership, self.attempt, self.before = membership, attempt, before
        self.stopped = threading.Event()
        self.fired = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        while not self.stopped.wait(POLL_S):
            if self.membership.newer_than(self.attempt) is not None:
                self.abort()
                self.report_stall()
                return

    def report_stall(self):
        """The training thread leaves train() at once when the abort ends its collective;
        one still inside it STALL_REPORT_S later is blocked where neither a shut-down
        connection nor a transport abort reaches (gloo, for one, keeps an unbound send whose
        write met a closed connection queued until the group's collective timeout, which
        resilient() bounds so that the rank still rejoins within --injob-timeout): every
        thread's stack goes to MEMENTO_LAUNCH_DIR/stall.aA.rR.txt for the record."""
        if self.stopped.wait(STALL_REPORT_S):
            return
        name = "stall.a%d.r%s.txt" % (self.attempt, os.environ.get("RANK", "x"))
        path = os.path.join(os.environ.get("MEMENTO_LAUNCH_DIR", "."), name)
        try:
            with open(path, "w") as f:
                f.write("pid %d: training thread still in train() of attempt %d %g s after "
                        "its abort\n" % (os.getpid(), self.attempt, STALL_REPORT_S))
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        except OSError:
            path = "(not written)"
        _logs.logger.warning("in-job recovery: rank %s still in train() of attempt %d %g s "
                             "after the abort; stacks: %s", os.environ.get("RANK", "?"),
                             self.attempt, STALL_REPORT_S, path)

    def abort(self):
        with self.lock:
            if not self.fired.is_set():
                n = shutdown_connections_since(self.before)
                # memento's own transfers: gloo keeps a posted receive in its context,
                # where a closed connection does not end it.
                for ck in _checkpointer.open_checkpointers():
                    ck._impl.abort_transport()
                self.fired.set()
                _logs.logger.info("in-job recovery: membership changed; %d connection(s) of "
                                  "attempt %d shut down", n, self.attempt)

    def stop(self):
        self.stopped.set()


class _CollectiveBound:
    """Gives the job's default group `timeout_s` per collective (see resilient's
    collective_timeout_s) at the generation's first Checkpointer.save(), on the training
    thread: the collectives before it (one rank preparing data while the others wait, the
    replacements' start-up) keep torch's timeout. Not for a group with NCCL: its timeout
    ends the process, which the launcher answers with a relaunch."""

    def __init__(self, backend, timeout_s):
        self.pending = timeout_s is not None and "nccl" not in str(backend).lower()
        self.timeout_s = timeout_s

    def __call__(self):
        if not self.pending or not dist.is_initialized():
            return
        self.pending = False
        # torch.distributed.set_timeout reaches the contexts gloo's collectives take their
        # timeout from. Older torch (2.6) has only _set_pg_timeout, which changes a default
        # those collectives no longer read: there the bound cannot be set after the
        # rendezvous, and setting it before would bound the start-up waits too.
        if not hasattr(dist, "set_timeout"):
            _logs.logger.info("in-job recovery: torch %s cannot bound the job group's "
                              "collectives after its rendezvous (no torch.distributed."
                              "set_timeout); a collective gloo keeps past a loss waits the "
                              "group's timeout", torch.__version__)
            return
        try:
            dist.set_timeout(datetime.timedelta(seconds=self.timeout_s))
        except Exception as e:  # a safeguard only: never the save's failure
            _logs.logger.warning("in-job recovery: the job's group keeps its collective "
                                 "timeout (%s: %s)", type(e).__name__, e)


def _leave_generation(watcher, opened):
    """After a loss: the old group's connections down, its Checkpointers closed unfinished,
    the group destroyed."""
    watcher.abort()
    watcher.stop()
    for ck in list(_checkpointer.open_checkpointers()):
        if ck not in opened:
            try:
                ck._close(finished=False)
            except Exception as e:  # the transport is gone: expected
                _logs.logger.info("in-job recovery: closing a checkpointer: %s", e)
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def resilient(train, *args, backend="gloo", wait_s=None, spare_warm_up=warm_up,
              collective_timeout_s=None, **kwargs):
    """Runs train(*args, **kwargs) on a fresh default process group; under `memento launch
    --recovery in-job`, again on the new membership after each node loss (see the module's
    documentation). Returns what train() returned.

    wait_s: how long an exception waits for the launcher to announce a new membership
    before it is taken for the job's own (MEMENTO_LAUNCH_INJOB_WAIT_S, which the launcher
    sets to its --injob-timeout; default 30 s).
    spare_warm_up: called by a warm spare before it waits for a rank (default: warm_up();
    a job can pass a function that also builds what its train() builds first).
    collective_timeout_s: under in-job recovery, how long one collective of the job's group
    may wait before it fails, from the generation's first Checkpointer.save() on (default:
    half of wait_s; not applied to a group with NCCL, nor with a torch that has no
    torch.distributed.set_timeout, such as 2.6). gloo can keep a collective whose peer
    was lost waiting after its connections were shut down and memento's transport aborted
    (a send queued in its pair is never failed): with torch's default of 30 minutes its
    rank stayed in the lost generation and the launcher relaunched the whole job after
    --injob-timeout. Bounded, the collective fails and the rank rejoins within the other
    half. The rendezvous and the collectives before the first save (one rank preparing
    data while the others wait, a replacement's start-up) keep torch's timeout; a job whose
    training steps wait longer than the bound in one collective on purpose (one rank's long
    evaluation, say) passes more, or a longer --injob-timeout."""
    if collective_timeout_s is not None and not collective_timeout_s > 0:
        raise _checkpointer.InvalidArgumentError(
            "resilient: collective_timeout_s must be a number of seconds > 0, got %r" %
            (collective_timeout_s,))
    if not in_job():
        created = not dist.is_initialized()
        if created:
            dist.init_process_group(backend)
        try:
            return train(*args, **kwargs)
        finally:
            if created and dist.is_initialized():
                dist.destroy_process_group()
    if wait_s is None:
        wait_s = float(os.environ.get("MEMENTO_LAUNCH_INJOB_WAIT_S", "30"))
    if collective_timeout_s is None:
        collective_timeout_s = wait_s / 2
    membership = Membership(os.environ["MEMENTO_LAUNCH_DIR"])
    if os.environ.get("MEMENTO_LAUNCH_SPARE") == "1":
        if spare_warm_up is not None:
            spare_warm_up()
        # The process the launcher started (a wrapper script's, when the command is one).
        rank, m = membership.wait_assignment(
            int(os.environ.get("MEMENTO_LAUNCH_SPARE_PID", os.getpid())))
        _adopt(m, rank)
        _logs.logger.info("in-job recovery: spare takes rank %d (attempt %s)", rank, m["attempt"])
    elif os.environ.get("MEMENTO_LAUNCH_GENERATION") is None:
        os.environ["MEMENTO_LAUNCH_GENERATION"] = os.environ.get("MEMENTO_LAUNCH_ATTEMPT", "0")
    while True:
        attempt = int(os.environ.get("MEMENTO_LAUNCH_ATTEMPT", "0"))
        before = _socket_inodes()
        opened = set(_checkpointer.open_checkpointers())
        watcher = _Watcher(membership, attempt, before)
        bound = _CollectiveBound(backend, collective_timeout_s)
        failure = None
        try:
            t = time.monotonic()
            if os.environ.get("RANK") != "0":
                _wait_for_store(wait_s)
            dist.init_process_group(backend)
            _checkpointer.AFTER_SAVE.append(bound)
            _logs.logger.info("in-job recovery: rank %d joined attempt %d in %.3f s",
                              dist.get_rank(), attempt, time.monotonic() - t)
            watcher.start()
            result = train(*args, **kwargs)
        except Exception as exc:
            # Whatever failed, the peers blocked with this rank learn it at once.
            watcher.abort()
            membership.note_raised(attempt, "%s: %s" % (type(exc).__name__, exc))
            newer = membership.wait_newer(attempt, wait_s)
            if newer is None:
                watcher.stop()
                raise
            failure = "%s: %s" % (type(exc).__name__, str(exc).split("\n")[0][:200])
        finally:
            if bound in _checkpointer.AFTER_SAVE:
                _checkpointer.AFTER_SAVE.remove(bound)
        if failure is None:
            watcher.stop()
            dist.destroy_process_group()
            return result
        # Outside the except block: its traceback (train()'s frames, the old group's
        # users) is released before the group is destroyed.
        _logs.logger.info("in-job recovery: attempt %d ended by %s", attempt, failure)
        _leave_generation(watcher, opened)
        _adopt(newer)
