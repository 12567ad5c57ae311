#!/usr/bin/env python3
"""Writes the Markdown report of a scripts/gpu-check run from its output folder.

    python experiments/torch/gpu_report.py --out DIR [--output FILE]

Reads DIR/env.txt (key=value), DIR/summary.txt (one "<step> rc=N s=S ..." line per
step), DIR/roundtrip.json and DIR/bench.json (the last lines of
experiments/torch/gpu_roundtrip.py and bench_gpu.py); every figure comes from
those files. Exits 1 when env.txt or summary.txt is missing.
"""
import argparse
import json
import os
import sys

TARGETS = [  # (key in bench.json, what it is, target, whether higher is better)
    ("snapshot_speed_vs_pinned", "snapshot speed / torch copy into pinned host tensors",
     0.9, True),
    ("blocked_vs_snapshot", "training blocked per save / snapshot duration", 0.05, False),
    ("restore_vs_h2d", "restore / torch copy from pinned host tensors", 1.1, False),
    ("restore_relaunch_vs_h2d", "restore after a relaunch / torch copy from pinned host "
     "tensors", 1.1, False),
]


def read_kv(path):
    out = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                out[k] = v
    return out


def gbps(v):
    return "%.2f GB/s" % v if v else "not measured"


def ms(seconds):
    return "%.3f" % (seconds * 1e3) if seconds is not None else "?"


def by_threads(runs):
    """'2 threads 18.75 GB/s, 4 threads ...' from {"2": 18.75, ...}."""
    return ", ".join("%s threads %s" % (n, gbps(v)) for n, v in (runs or {}).items()) \
        or "not measured"


def read_json(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def steps_table(summary_path):
    rows = ["| step | rc | s | detail |", "| --- | --- | --- | --- |"]
    with open(summary_path) as f:
        for line in f:
            parts = line.split(" ", 3)
            if len(parts) < 3 or not parts[1].startswith("rc="):
                continue
            detail = parts[3].strip() if len(parts) > 3 else ""
            if detail.startswith("{"):
                detail = "(below)"
            rows.append("| %s | %s | %s | %s |" % (parts[0], parts[1][3:], parts[2][2:],
                                                   detail.replace("|", "/")))
    return rows


def bench_section(b, title):
    lines = ["", "## " + title, ""]
    if b is None:
        return lines + ["No result (the step failed before its last line; see the log)."]
    lines += [
        "%s tensors, %s MiB on %s, same run. Snapshot %.1f ms (%.2f GB/s), torch's copy "
        "into pinned host tensors %.1f ms (%.2f GB/s); a step of %.1f ms, save() alone "
        "%s ms, blocked %s ms per save of which %s ms in wait_snapshot(); restore %.1f ms "
        "(bit-exact: %s), torch's pinned host-to-device copy %.1f ms. Device memory "
        "memento used beyond the tensors: %s MiB."
        % (b["tensors"], b["state_mib"], b["device"], b["snapshot_s"] * 1e3,
           b["snapshot_gbps"], b["pinned_copy_s"] * 1e3, b["pinned_gbps"],
           b["step_s"] * 1e3, ms(b.get("save_call_s")), ms(b.get("blocked_per_save_s")),
           ms(b.get("blocked_in_wait_snapshot_s")), b["restore_s"] * 1e3,
           b["restore_bit_exact"], b["h2d_copy_s"] * 1e3, b["device_mib_used_by_memento"]),
        "", "Torch's copy of the same tensors into host memory like the node store's "
        "(a tmpfs mapping registered with cudaHostRegister): %s. Shared memory in huge "
        "pages while the store was up: %s MiB."
        % ("%.1f ms (%.2f GB/s)" % (b["registered_copy_s"] * 1e3, b["registered_gbps"])
           if b.get("registered_copy_s") else "not measured", b.get("shmem_huge_mib", "?")),
        "", "The same copies round-robin over %s streams, as the engine queues them: into "
        "pinned host tensors %s, into the registered mapping %s."
        % (b.get("lanes", "?"), gbps(b.get("pinned_lanes_gbps")),
           gbps(b.get("registered_lanes_gbps"))),
        "", "Torch's copies from the registered mapping back to the device (what a restore "
        "reads from): on one stream %s, on %s streams %s; memento's restore %s, torch's from "
        "pinned host tensors %s."
        % (gbps(b.get("registered_h2d_gbps")), b.get("lanes", "?"),
           gbps(b.get("registered_h2d_lanes_gbps")), gbps(b.get("restore_gbps")),
           gbps(b.get("h2d_gbps"))),
        "", "Restore after a relaunch (a new Checkpointer of the job: the store's pages were "
        "never registered by it): %s ms (%s); its next restore, with the pinned buffer pairs "
        "made: %s ms; device bytes through the restore threads' pinned buffers: %s."
        % (ms(b.get("restore_relaunch_s")), gbps(b.get("restore_relaunch_gbps")),
           ms(b.get("restore_relaunch_again_s")), b.get("restore_relaunch_staged", "?")),
        "", "The first save() into each of the store's slots (it registers the slot's "
        "pages with the driver): %s ms. The engine's warnings: %s."
        % (", ".join(ms(t) for t in b.get("first_save_calls_s") or []) or "?",
           "; ".join(b.get("engine_warnings") or []).replace("|", "/") or "none"),
        "", "Snapshot worker threads: %s (MEMENTO_THREADS=auto). The snapshot with each "
        "count set: %s. The same with MEMENTO_DEVICE_COPY=staged: %s."
        % (b.get("snapshot_threads", "?"), by_threads(b.get("snapshot_gbps_by_threads")),
           by_threads(b.get("staged_snapshot_gbps_by_threads"))),
        "", "The restore in the process that saved, with each MEMENTO_DEVICE_COPY: %s."
        % (", ".join("%s %s" % (k, gbps(v))
                     for k, v in (b.get("restore_gbps_by_copy") or {}).items())
           or "not measured"),
        "", "| ratio | measured | target | met |", "| --- | --- | --- | --- |"]
    for key, what, target, higher in TARGETS:
        v = b.get(key)
        met = v is not None and (v >= target if higher else v <= target)
        lines.append("| %s | %s | %s %s | %s |" % (what, v, ">=" if higher else "<=",
                                                   target, "yes" if met else "**no**"))
    return lines


def report(out_dir):
    env = read_kv(os.path.join(out_dir, "env.txt"))
    on_gpu = env.get("torch_sees_gpu") == "True" and env.get("gpu", "none") != "none"
    lines = ["# memento on a GPU (scripts/gpu-check)", ""]
    if not on_gpu:
        lines += ["**No GPU was visible: the CUDA tests were skipped and the figures below "
                  "come from a small CPU check of the scripts; they say nothing about a GPU.**",
                  ""]
    lines += ["| machine | |", "| --- | --- |"]
    for key in ("gpu", "gpus", "driver", "compute_capability", "nvcc", "torch", "torch_cuda",
                "cpus", "host_memory_gib", "shm_dir", "dev_shm_free_mib", "thp_shmem", "commit",
                "date"):
        lines.append("| %s | %s |" % (key, env.get(key, "?")))
    lines += ["", "Command: `scripts/gpu-check` (one run; each step's output is in its log).",
              "", "## Steps", ""] + steps_table(os.path.join(out_dir, "summary.txt"))

    rt = read_json(os.path.join(out_dir, "roundtrip.json"))
    lines += ["", "## Round trip: transformer + AdamW (experiments/torch/gpu_roundtrip.py)", ""]
    if rt is None:
        lines.append("No result (the step failed before its last line; see the log).")
    else:
        lines += [
            "%s M parameters on %s; %d tensors, %.1f MB of state; train, save every step, "
            "invert every byte of every tensor, restore: **%s**%s."
            % (rt.get("parameters_m"), rt.get("device"), rt.get("tensors", 0),
               rt.get("state_mb", 0.0), rt.get("status"),
               "" if not rt.get("problems") else " (" + "; ".join(rt["problems"][:3]) + ")"),
            "", "| save() ms | snapshot ms | committed ms | restore ms |",
            "| --- | --- | --- | --- |",
            "| %s | %s | %s | %s |" % (rt.get("save_ms"), rt.get("snapshot_ms"),
                                      rt.get("commit_ms"), rt.get("restore_ms"))]

    lines += bench_section(read_json(os.path.join(out_dir, "bench.json")),
                           "Device state against torch's own copies "
                           "(experiments/torch/bench_gpu.py)")
    huge = read_json(os.path.join(out_dir, "bench_huge.json"))
    if huge is not None:
        lines += bench_section(huge, "The same with the node stores on a tmpfs of 2 MiB pages "
                               "(huge=always)")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the folder gpu-check wrote")
    ap.add_argument("--output", help="the Markdown file (default: stdout)")
    args = ap.parse_args()
    for name in ("env.txt", "summary.txt"):
        if not os.path.isfile(os.path.join(args.out, name)):
            sys.exit("gpu_report: %s has no %s (not a gpu-check output folder)" % (args.out, name))
    text = report(args.out)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
