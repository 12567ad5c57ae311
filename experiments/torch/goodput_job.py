"""The main experiment's training job: a data-parallel job whose per-rank state and step time
stand in for LLM training, checkpointed with memento or with the usual synchronous write to
a shared file system (the remote-only baseline).

    memento launch -n 4 --scheme replica:2 [--recovery in-job --spares 1] --inject ... -- \\
        python experiments/torch/goodput_job.py --mode memento --mib 64 --step-s 0.05 \\
        --steps 400 --save-every 20
    memento launch -n 4 --inject ... -- python experiments/torch/goodput_job.py --mode remote \\
        --remote-dir DIR --remote-mibps 64 --mib 64 --step-s 0.05 --steps 400 --save-every 200

Per rank: --mib MiB of float32 state (16 tensors) and a step of --step-s seconds of
accelerator compute (a sleep: the CPU stays free, as on a GPU node), an allreduce (the
gradient sync) and an update of part of the state. Everything is a function of the step, so
every run ends in the same state whatever failed (the digest proves it).

--mode memento: memento.Checkpointer saves every --save-every steps (restore from memory).
--mode remote: every --save-every steps each rank torch.save's its state into --remote-dir
  at --remote-mibps MiB/s (its fair share of the shared file system: the write is paced to
  that rate), fsyncs it, and the ranks agree before rank 0 marks the step complete; a
  relaunch reads it back at the same rate. The job reports to `memento launch` itself
  (steps, restores) since memento is not in the loop.
--out FILE: rank 0 writes {"digest", "stall_s", "saves"} at the end.
"""
import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist

import memento

TENSORS = 16


def launch_event(event, **fields):
    """Rank 0's event in `memento launch`'s status folder (its job protocol)."""
    d = os.environ.get("MEMENTO_LAUNCH_DIR")
    if not d or dist.get_rank() != 0:
        return
    fields.update(event=event, t=time.time(),
                  attempt=int(os.environ.get("MEMENTO_LAUNCH_ATTEMPT", "0")))
    with open(os.path.join(d, "events.jsonl"), "a") as f:
        f.write(json.dumps(fields) + "\n")


def launch_restored(ok, version, t_begin, seconds):
    d = os.environ.get("MEMENTO_LAUNCH_DIR")
    if not d:
        return
    rank, attempt = dist.get_rank(), os.environ.get("MEMENTO_LAUNCH_ATTEMPT", "0")
    rec = {"rank": rank, "attempt": int(attempt), "t_begin": t_begin, "t_end": time.time()}
    if ok:
        rec.update(ok=True, version=version, state_hash="", report={
            "entries": [{"source": "remote"}], "seconds": {"transfer": seconds}})
    else:
        rec.update(ok=False, error="NotFound: nothing to restore", not_found=True)
    path = os.path.join(d, "restore.a%s.r%d.json" % (attempt, rank))
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
    os.rename(path + ".tmp", path)


def paced(seconds_wanted, t0):
    rest = seconds_wanted - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)


class RemoteBaseline:
    """Synchronous checkpoints to a shared file system at the node's fair share of it."""

    def __init__(self, directory, mibps, tensors):
        self.dir, self.bps, self.tensors = directory, mibps * 2.0 ** 20, tensors
        self.rank = dist.get_rank()
        self.nbytes = sum(t.numel() * t.element_size() for t in tensors)
        os.makedirs(directory, exist_ok=True)

    def save(self, step, extra):
        t0 = time.monotonic()
        path = os.path.join(self.dir, "rank%d.pt" % self.rank)
        with open(path + ".tmp", "wb") as f:
            torch.save({"step": step, "tensors": self.tensors, "extra": extra}, f)
            f.flush()
            os.fsync(f.fileno())
        paced(self.nbytes / self.bps, t0)
        os.rename(path + ".tmp", path + ".%d" % step)
        dist.barrier()  # every rank's file of this step is durable
        if self.rank == 0:
            with open(os.path.join(self.dir, "complete.tmp"), "w") as f:
                f.write(str(step))
            os.rename(os.path.join(self.dir, "complete.tmp"), os.path.join(self.dir, "complete"))
        for name in os.listdir(self.dir):  # older steps of this rank
            if name.startswith("rank%d.pt." % self.rank) and name != "rank%d.pt.%d" % (
                    self.rank, step) and not name.endswith(".tmp"):
                os.unlink(os.path.join(self.dir, name))
        return time.monotonic() - t0

    def restore(self):
        t_begin = time.time()
        launch_event("restore_begin")
        try:
            with open(os.path.join(self.dir, "complete")) as f:
                step = int(f.read())
        except OSError:
            launch_restored(False, 0, t_begin, 0)
            return 0, None
        t0 = time.monotonic()
        state = torch.load(os.path.join(self.dir, "rank%d.pt.%d" % (self.rank, step)))
        for t, s in zip(self.tensors, state["tensors"]):
            t.copy_(s)
        paced(self.nbytes / self.bps, t0)
        launch_restored(True, step, t_begin, time.monotonic() - t0)
        return step, state["extra"]


def update(tensors, step):
    """The step's change of the state: a deterministic function of the step."""
    t = tensors[step % len(tensors)]
    n = min(t.numel(), 1 << 16)
    t[:n].mul_(0.999).add_(step * 1e-3)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def train(args):
    rank = dist.get_rank()
    per = args.mib * 2 ** 20 // 4 // TENSORS
    gen = torch.Generator().manual_seed(1 + rank)
    tensors = [torch.rand(per, generator=gen) for _ in range(TENSORS)]
    grad = torch.zeros(1024)
    stall, saves = 0.0, 0
    ck, remote = None, None
    if args.mode == "memento":
        ck = memento.Checkpointer(total_steps=args.steps)
        for i, t in enumerate(tensors):
            ck.register("state%d" % i, t)
        start = int(ck.restore() or 0)
    else:
        remote = RemoteBaseline(args.remote_dir, args.remote_mibps, tensors)
        launch_event("start", total_steps=args.steps)
        start, _ = remote.restore()
    last = time.monotonic()
    for step in range(start, args.steps):
        time.sleep(args.step_s)  # forward / backward on the accelerator
        grad.fill_(step)
        dist.all_reduce(grad)  # the gradient sync
        if ck is not None:
            t0 = time.monotonic()
            ck.wait_snapshot()
            stall += time.monotonic() - t0
        update(tensors, step)  # the optimizer step
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            saves += 1
            if ck is not None:
                t0 = time.monotonic()
                ck.save(step + 1)
                stall += time.monotonic() - t0
            else:
                stall += remote.save(step + 1, None)
        if ck is None:
            now = time.monotonic()
            launch_event("step", step=step + 1, loss=0.0, step_s=now - last, stall_s=0.0)
            last = now
    final = digest(tensors)
    if ck is not None:
        ck.close()
    else:
        launch_event("done", step=args.steps, state_hash=final)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"digest": final, "stall_s": stall, "saves": saves}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("memento", "remote"), default="memento")
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--remote-dir", default="")
    p.add_argument("--remote-mibps", type=float, default=64)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    memento.resilient(train, args)


if __name__ == "__main__":
    main()
