#!/usr/bin/env python3
"""Device state through memento against plain torch copies of the same tensors,
all measured in the same run (one process, one GPU).

    PYTHONPATH=build/python python experiments/torch/bench_gpu.py [--device cuda|cpu]
        [--mib 1100] [--tensors 320] [--reps 5] [--threads 2,4,8] [--json FILE]

State: --tensors tensors on the device, about --mib MiB in all, sizes spread
over two decades and rounded to odd element counts, fp32 and bf16 alternating.

  snapshot      save() until wait_snapshot() returns: the copy into the pinned
                node store (median of --reps saves after a first one);
  pinned copy   the same tensors copied by torch into preallocated pinned host
                tensors (copy_(non_blocking=True), then one synchronize);
                snapshot_speed_vs_pinned = pinned copy / snapshot (target >= 0.9);
  registered    the same copy into host memory like the node store's: a tmpfs
                file's mapping (MEMENTO_SHM_DIR, else /dev/shm) registered with
                the driver (cudaHostRegister) instead of allocated by it; what
                the link gives into such memory (no target: it tells the
                engine's share of a shortfall from the memory's);
  lanes         the pinned and the registered copies again, round-robin over 4
                streams as the engine's copies are: whether more copies in
                flight move more bytes into either memory; and the copies back
                from the registered mapping to the device, on one stream and on
                4 (what the restore reads from);
  threads       the snapshot again with MEMENTO_THREADS = each of --threads
                (the snapshot workers hash every landed byte on the host):
                whether the hashing or the copy bounds the snapshot; and the
                same with MEMENTO_DEVICE_COPY=staged (through pinned buffers of
                the driver's, copied into the store on the host);
  blocked       a training loop whose step (matmuls on the device) is longer
                than the snapshot: the time save() and wait_snapshot() hold the
                training thread per save, over the snapshot's duration
                (target <= 0.05);
  restore       restore() of the same state after every tensor was overwritten,
                bit-exact, over torch's copy from pinned host tensors back into
                the device tensors (target <= 1.1);
  first saves   save() into each slot the first time (it registers the slot's pages
                with the driver), and every warning the engine logged;
  relaunch      the same by a new Checkpointer of the job, as after a relaunch:
                its process never registered the store's pages with the driver
                (median of 3, each checked; whether the report says the device
                bytes went through pinned buffers), and that Checkpointer's next
                restore (its pinned buffer pairs already made);
  device memory what the device lost while memento snapshots and restores
                (torch.cuda.mem_get_info before and after, torch's own pool
                excluded): memento's staging and streams.
Prints the figures and one line "BENCH_GPU {json}" (also written to --json).
--device cpu checks the script on a machine without a GPU (the figures then
compare host copies and mean nothing for the targets).
"""
import argparse
import json
import logging
import os
import statistics
import sys
import time
import uuid

import torch

import memento


LANES = 4  # the engine's copy streams per device (DeviceCopyBatch::kLanes)


def make_state(count, total_bytes, device):
    lo, hi = 1.0, 100.0
    weights = [lo * (hi / lo) ** (i / max(1, count - 1)) for i in range(count)]
    scale = total_bytes / sum(w * 3 for w in weights)  # fp32 and bf16 alternate: 3 bytes each
    gen = torch.Generator(device="cpu").manual_seed(0)
    tensors = []
    for i, w in enumerate(weights):
        n = max(1, int(w * scale)) | 1  # odd element counts
        dtype = torch.float32 if i % 2 == 0 else torch.bfloat16
        tensors.append(torch.randn(n, generator=gen, dtype=torch.float32).to(dtype).to(device))
    return tensors


class Grab(logging.Handler):
    """Keeps the engine's log lines (the snapshot's worker count among them) and its
    warnings (a failed registration of the store's pages among them)."""
    def __init__(self):
        super().__init__()
        self.lines = []
        self.warnings = []

    def emit(self, record):
        self.lines.append(record.getMessage())
        if record.levelno >= logging.WARNING:
            self.warnings.append(record.getMessage())


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Timer:
    def __init__(self, device):
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def __call__(self, fn, reps):
        times = []
        for _ in range(reps + 1):  # the first warms up
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return median(times[1:])


def registered_buffers(state):
    """Host tensors shaped like `state` in one tmpfs file's mapping, registered with the
    driver as the node store's slots are; (tensors, keepalive) or (None, reason)."""
    import mmap
    offsets, total = [], 0
    for t in state:
        offsets.append(total)
        total += (t.numel() * t.element_size() + 63) // 64 * 64
    path = os.path.join(os.environ.get("MEMENTO_SHM_DIR") or "/dev/shm",
                        "bench-gpu-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6]))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, total)
        mapping = mmap.mmap(fd, total)
    finally:
        os.close(fd)
        os.unlink(path)
    whole = torch.frombuffer(mapping, dtype=torch.uint8)
    err = torch.cuda.cudart().cudaHostRegister(whole.data_ptr(), total, 0)
    if int(err) != 0:
        return None, "cudaHostRegister failed: %s" % err
    views = [whole[o:o + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
             for o, t in zip(offsets, state)]
    return views, (mapping, whole)


def shmem_huge_mib():
    """Shared memory (tmpfs) held in huge pages now, from /proc/meminfo; None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("ShmemHugePages:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def device_free(device):
    if device != "cuda":
        return 0
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0] + (torch.cuda.memory_reserved() -
                                           torch.cuda.memory_allocated())


def run(args):
    dev = args.device
    if dev == "cuda":
        torch.cuda.set_device(0)
    timer = Timer(dev)
    state = make_state(args.tensors, args.mib << 20, dev)
    nbytes = sum(t.numel() * t.element_size() for t in state)
    print("state: %d tensors, %.1f MiB on %s" % (len(state), nbytes / 2**20, dev))
    pinned = [torch.empty_like(t, device="cpu", pin_memory=(dev == "cuda")) for t in state]

    def to_host():
        for h, t in zip(pinned, state):
            h.copy_(t, non_blocking=True)

    def to_device():
        for h, t in zip(pinned, state):
            t.copy_(h, non_blocking=True)

    pinned_s = timer(to_host, args.reps)
    lanes = [torch.cuda.Stream() for _ in range(LANES)] if dev == "cuda" else []

    def on_lanes(host, to_device=False):
        """The same copies round-robin over LANES side streams, as the engine queues them."""
        def copy():
            current = torch.cuda.current_stream()
            for s in lanes:
                s.wait_stream(current)
            for i, (h, t) in enumerate(zip(host, state)):
                with torch.cuda.stream(lanes[i % LANES]):
                    if to_device:
                        t.copy_(h, non_blocking=True)
                    else:
                        h.copy_(t, non_blocking=True)
            for s in lanes:
                current.wait_stream(s)
        return copy

    pinned_lanes_s = timer(on_lanes(pinned), args.reps) if lanes else None
    h2d_s = timer(to_device, args.reps)
    registered_s = registered_lanes_s = registered_h2d_s = registered_h2d_lanes_s = None
    if dev == "cuda":
        try:
            registered, keep = registered_buffers(state)
        except (OSError, RuntimeError) as e:
            registered, keep = None, str(e)
        if registered is None:
            print("registered host memory: %s" % keep)
        else:
            def to_registered():
                for h, t in zip(registered, state):
                    h.copy_(t, non_blocking=True)
            def from_registered():
                for h, t in zip(registered, state):
                    t.copy_(h, non_blocking=True)
            registered_s = timer(to_registered, args.reps)
            registered_lanes_s = timer(on_lanes(registered), args.reps)
            registered_h2d_s = timer(from_registered, args.reps)
            registered_h2d_lanes_s = timer(on_lanes(registered, to_device=True), args.reps)
            torch.cuda.cudart().cudaHostUnregister(keep[1].data_ptr())
            del registered, keep

    # The step's matrices, and one product first: cuBLAS loads its kernels into device
    # memory outside torch's pool, which is not memento's.
    side = 4096 if dev == "cuda" else 256
    a = torch.randn(side, side, device=dev)
    b = torch.randn(side, side, device=dev)
    torch.mm(a, b)
    timer.sync()

    job = "bench-gpu-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    out = {"device": dev, "tensors": len(state), "state_mib": round(nbytes / 2**20, 1),
           "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "",
           "torch": torch.__version__}
    grab = Grab()
    logger = logging.getLogger("memento")
    logger.addHandler(grab)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    with memento.Checkpointer(job=job, launcher="single", scheme="none", slots=2,
                              persist_every=0, log="info", keep_finished=True) as ck:
        ck.register(**{"t%03d" % i: t for i, t in enumerate(state)})
        assert ck.restore() is None
        free_before = device_free(dev)
        # Snapshot alone.
        snaps, saves = [], []
        for step in range(args.reps + 1):
            timer.sync()
            t0 = time.perf_counter()
            ck.save(step + 1)
            saves.append(time.perf_counter() - t0)
            ck.wait_snapshot()
            snaps.append(time.perf_counter() - t0)
            ck.wait()
        snap_s = median(snaps[1:])
        huge_mib = shmem_huge_mib()  # the store's two slots are up

        # A training loop whose step is longer than the snapshot.
        one = timer(lambda: torch.mm(a, b), 3)
        mms = max(1, int(2.0 * snap_s / max(one, 1e-6)) + 1)
        step_s = timer(lambda: [torch.mm(a, b) for _ in range(mms)], 2)
        blocked, waits, steps = [], [], args.reps + 1
        base = len(snaps) + 1
        for i in range(steps):
            for _ in range(mms):  # forward and backward
                torch.mm(a, b)
            timer.sync()  # the step's loss.item()
            t0 = time.perf_counter()
            ck.wait_snapshot()
            held = time.perf_counter() - t0
            waits.append(held)
            torch._foreach_mul_(state, 1.0)  # the optimizer writes the state in place
            t0 = time.perf_counter()
            ck.save(base + i)
            held += time.perf_counter() - t0
            blocked.append(held)
        ck.wait()
        blocked_s = median(blocked[1:])

        # Restore after every tensor was overwritten (median of 3, each checked).
        timer.sync()
        to_host()  # the committed state, to check the restore against
        timer.sync()
        expect = [h.clone() for h in pinned]
        def overwritten_then_restored(ck):
            """Inverts every byte of the state, restores it: (seconds, report, bit-exact)."""
            for t in state:
                t.view(-1).view(torch.uint8).bitwise_not_()
            timer.sync()
            t0 = time.perf_counter()
            report = ck.restore()
            timer.sync()
            took = time.perf_counter() - t0
            return took, report, all(torch.equal(t.cpu().view(torch.uint8), e.view(torch.uint8))
                                     for t, e in zip(state, expect))

        restores, exact, report = [], True, None
        for _ in range(3):
            took, report, ok = overwritten_then_restored(ck)
            restores.append(took)
            exact = exact and ok
        restore_s = median(restores)
        free_after = device_free(dev)
        out.update({"restored_step": int(report) if report is not None else None,
                    "restore_bit_exact": exact})

    # Restore by a new Checkpointer of the job (as after a relaunch), median of 3; the
    # last one frees the store.
    # A second restore by the same Checkpointer reads the same unregistered slot with the
    # pinned buffer pairs already made: the difference is the first one's set-up.
    relaunches, again, staged = [], [], []
    for i in range(3):
        with memento.Checkpointer(job=job, launcher="single", scheme="none", slots=2,
                                  persist_every=0, resume_finished=True,
                                  keep_finished=i < 2) as ck:
            ck.register(**{"t%03d" % k: t for k, t in enumerate(state)})
            for times in (relaunches, again):
                took, report, ok = overwritten_then_restored(ck)
                times.append(took)
                staged.append("staged through pinned buffers" in report.source_detail)
                exact = exact and ok
    relaunch_s = median(relaunches)
    out.update({"restore_bit_exact": exact, "restore_relaunch_s": round(relaunch_s, 5),
                "restore_relaunch_gbps": round(nbytes / relaunch_s / 1e9, 2),
                "restore_relaunch_vs_h2d": round(relaunch_s / h2d_s, 3),
                "restore_relaunch_again_s": round(median(again), 5),
                "restore_relaunch_staged": all(staged)})

    auto = [m for m in grab.lines if m.startswith("snapshot: ") and "worker threads" in m]
    out["snapshot_threads"] = int(auto[0].split()[1]) if auto else None
    by_threads = {"direct": {}, "staged": {}}
    restore_by_copy = {}
    for copy in by_threads:
        for n in args.threads:
            with memento.Checkpointer(job="%s-%s%d" % (job, copy[0], n), launcher="single",
                                      scheme="none", slots=2, persist_every=0, threads=n,
                                      device_copy=copy) as ck:
                ck.register(**{"t%03d" % i: t for i, t in enumerate(state)})
                snaps = []
                for step in range(args.reps + 1):
                    timer.sync()
                    t0 = time.perf_counter()
                    ck.save(step + 1)
                    ck.wait_snapshot()
                    snaps.append(time.perf_counter() - t0)
                    ck.wait()
                if n == args.threads[-1]:  # the restore in this process (median of 3)
                    times = []
                    for _ in range(3):
                        took, _, ok = overwritten_then_restored(ck)
                        times.append(took)
                        exact = exact and ok
                    restore_by_copy[copy] = round(nbytes / median(times) / 1e9, 2)
            by_threads[copy][str(n)] = round(nbytes / median(snaps[1:]) / 1e9, 2)
    out["restore_bit_exact"] = exact
    logger.removeHandler(grab)
    out["engine_warnings"] = grab.warnings[:20]
    out.update({
        "snapshot_s": round(snap_s, 5), "save_call_s": round(median(saves[1:]), 5),
        # The first save() into each of the two slots registers the slot's pages.
        "first_save_calls_s": [round(t, 5) for t in saves[:2]],
        "pinned_copy_s": round(pinned_s, 5), "h2d_copy_s": round(h2d_s, 5),
        "snapshot_gbps": round(nbytes / snap_s / 1e9, 2),
        "pinned_gbps": round(nbytes / pinned_s / 1e9, 2),
        "snapshot_speed_vs_pinned": round(pinned_s / snap_s, 3),
        "shmem_huge_mib": huge_mib,
        "registered_copy_s": round(registered_s, 5) if registered_s else None,
        "registered_gbps": round(nbytes / registered_s / 1e9, 2) if registered_s else None,
        "lanes": LANES,
        "pinned_lanes_gbps": round(nbytes / pinned_lanes_s / 1e9, 2) if pinned_lanes_s else None,
        "registered_lanes_gbps":
            round(nbytes / registered_lanes_s / 1e9, 2) if registered_lanes_s else None,
        "registered_h2d_gbps":
            round(nbytes / registered_h2d_s / 1e9, 2) if registered_h2d_s else None,
        "registered_h2d_lanes_gbps":
            round(nbytes / registered_h2d_lanes_s / 1e9, 2) if registered_h2d_lanes_s else None,
        "h2d_gbps": round(nbytes / h2d_s / 1e9, 2),
        "restore_gbps": round(nbytes / restore_s / 1e9, 2),
        "snapshot_gbps_by_threads": by_threads["direct"],
        "staged_snapshot_gbps_by_threads": by_threads["staged"],
        "restore_gbps_by_copy": restore_by_copy,
        "step_s": round(step_s, 5), "blocked_per_save_s": round(blocked_s, 6),
        "blocked_in_wait_snapshot_s": round(median(waits[1:]), 6),
        "blocked_vs_snapshot": round(blocked_s / snap_s, 4),
        "restore_s": round(restore_s, 5), "restore_vs_h2d": round(restore_s / h2d_s, 3),
        "device_mib_used_by_memento": round((free_before - free_after) / 2**20, 1),
        "targets": {"snapshot_speed_vs_pinned": ">= 0.9", "blocked_vs_snapshot": "<= 0.05",
                    "restore_vs_h2d": "<= 1.1", "restore_relaunch_vs_h2d": "<= 1.1"}})
    print("snapshot %.1f ms (%.2f GB/s, %s worker threads) vs pinned torch copy %.1f ms "
          "(%.2f GB/s): %.3f"
          % (snap_s * 1e3, out["snapshot_gbps"], out["snapshot_threads"], pinned_s * 1e3,
             out["pinned_gbps"], out["snapshot_speed_vs_pinned"]))
    if registered_s:
        print("torch's copy into registered tmpfs memory %.1f ms (%.2f GB/s)"
              % (registered_s * 1e3, out["registered_gbps"]))
    if pinned_lanes_s:
        print("the same copies on %d streams: into pinned %.2f GB/s, into registered %s GB/s"
              % (LANES, out["pinned_lanes_gbps"], out["registered_lanes_gbps"]))
    if registered_h2d_s:
        print("torch's copy from registered tmpfs memory to the device: one stream %.2f GB/s, "
              "%d streams %.2f GB/s" % (out["registered_h2d_gbps"], LANES,
                                        out["registered_h2d_lanes_gbps"]))
    for copy, runs in by_threads.items():
        if runs:
            print("snapshot by worker threads (MEMENTO_THREADS), device copies %s: " % copy +
                  ", ".join("%s: %.2f GB/s" % kv for kv in runs.items()))
    if restore_by_copy:
        print("restore in the process that saved, device copies " +
              ", ".join("%s: %.2f GB/s" % kv for kv in restore_by_copy.items()))
    print("blocked per save %.3f ms (%.3f ms of it in wait_snapshot) with a %.1f ms step: "
          "%.4f of the snapshot" % (blocked_s * 1e3, out["blocked_in_wait_snapshot_s"] * 1e3,
                                    step_s * 1e3, out["blocked_vs_snapshot"]))
    print("restore %.1f ms (%.2f GB/s) vs pinned host-to-device copy %.1f ms (%.2f GB/s): "
          "%.3f (bit-exact: %s)" % (restore_s * 1e3, out["restore_gbps"], h2d_s * 1e3,
                                    out["h2d_gbps"], out["restore_vs_h2d"], exact))
    print("the first save() into each slot (registering its pages): %s ms; engine "
          "warnings: %s" % (", ".join("%.1f" % (t * 1e3) for t in saves[:2]),
                            "; ".join(grab.warnings[:20]) or "none"))
    print("restore after a relaunch %.1f ms (%.2f GB/s, through pinned buffers: %s; the "
          "same checkpointer's next restore %.1f ms): %.3f (bit-exact: %s)"
          % (relaunch_s * 1e3, out["restore_relaunch_gbps"], out["restore_relaunch_staged"],
             out["restore_relaunch_again_s"] * 1e3, out["restore_relaunch_vs_h2d"], exact))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    choices=["cuda", "cpu"])
    ap.add_argument("--mib", type=int, default=1100)
    ap.add_argument("--tensors", type=int, default=320)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="2,4,8",
                    help="snapshot worker counts to measure the snapshot with ('' for none)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    try:
        args.threads = [int(n) for n in args.threads.split(",") if n.strip()]
    except ValueError:
        ap.error("--threads: comma-separated integers, got %r" % args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu: --device cuda, but torch sees no GPU")
    out = run(args)
    line = json.dumps(out, sort_keys=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    print("BENCH_GPU " + line)
    return 0 if out.get("restore_bit_exact") else 1


if __name__ == "__main__":
    sys.exit(main())
