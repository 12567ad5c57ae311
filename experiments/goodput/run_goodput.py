#!/usr/bin/env python3
"""Goodput vs job size: runs `memento advise --json` for 1,000 to 100,000 nodes under the
assumptions of README.md (Llama 3 failure rates), writes results_goodput.jsonl and plots:

  goodput_vs_nodes.png           best goodput per scheme and remote-only (relaunch 300 s, 60 s)
  interval_vs_nodes.png          the optimal save interval (and persist interval) per scheme,
                                 where its goodput exceeds 1 %

usage: experiments/goodput/run_goodput.py [--memento build/bindings/cli/memento] [--out DIR]
Needs matplotlib: run with .venv/bin/python (scripts/setup installs it there).
"""
import argparse
import json
import os
import subprocess
import sys

NODES = [1000, 2048, 4096, 8192, 16384, 32768, 65536, 100000]
SCHEMES = ["replica:2", "xor:4", "xor:8", "rs:8+2", "none"]
RELAUNCH_S = [300, 60]

# Llama 3 (Meta, 2024): 419 unexpected interruptions in 54 days on 16,384 GPUs = 2,048 nodes
# of 8 GPUs: one interruption per node every 54 * 2048 / 419 days = 6,334 h. Assumed split:
# 75 % lose the node (GPU, HBM, host hardware, host maintenance), 25 % only the process
# (software bugs, NCCL timeouts, network flaps).
NODE_INTERRUPT_H = 54 * 24 * 2048 / 419
BASE = {
    "shard": "32G",  # 8 GPUs x up to 4 GB of checkpoint per GPU (Llama 3)
    "step-s": 5,
    "node-mtbf-h": NODE_INTERRUPT_H / 0.75,
    "process-mtbf-h": NODE_INTERRUPT_H / 0.25,
    "rack-mtbf-h": 50000,  # assumed: one whole-rack loss per rack every ~5.7 years
    "nodes-per-rack": 16,
    "multi-per-day": 0.1,  # assumed: job-wide events losing 2 nodes at once
    "multi-nodes": 2,
    "snapshot-gibps": 100,  # GPU -> host copies of 8 GPUs
    "link-gibps": 25,  # 200 Gb/s front-end NIC per node
    "node-remote-gibps": 2,
    "fs-write-gibps": 1863,  # Tectonic for Llama 3: 2 TB/s sustained
    "fs-read-gibps": 1863,
    "memory-budget": 2,
}


def advise(memento, nodes, relaunch_s):
    args = [memento, "advise", "--nodes", str(nodes), "--relaunch-s", str(relaunch_s),
            "--schemes", ",".join(SCHEMES), "--json"]
    for k, v in BASE.items():
        args += ["--" + k, str(v)]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memento", default="build/bindings/cli/memento")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    rows = []
    for relaunch in RELAUNCH_S:
        for n in NODES:
            j = advise(a.memento, n, relaunch)
            for s in j["schemes"] + [j["remote_only"]]:
                rows.append({
                    "nodes": n, "relaunch_s": relaunch,
                    "scheme": "remote-only" if s["remote_only"] else s["scheme"],
                    "memory_factor": s["memory_factor"],
                    "goodput": s["estimate"]["goodput"],
                    "goodput_mtbf_halved": s["mtbf_halved"]["goodput"],
                    "save_interval_s": s["save_interval_s"],
                    "persist_interval_s": s["persist_interval_s"],
                    "failures_per_day": s["estimate"]["failures_per_day"],
                    "lost_s_per_day": s["estimate"]["lost_s_per_day"],
                    "recovery_s_per_day": s["estimate"]["recovery_s_per_day"],
                    "stall_s_per_day": s["estimate"]["stall_s_per_day"],
                    "serve_node": s["serve"]["node"], "serve_multi": s["serve"]["multi"],
                    "persist_s": s["costs"]["persist_s"], "recover_remote_s": s["costs"]["recover_remote_s"],
                })
            print(f"relaunch {relaunch:4d} s  N={n:6d}: " + ", ".join(
                f"{r['scheme']} {100 * r['goodput']:.2f}%" for r in rows
                if r["nodes"] == n and r["relaunch_s"] == relaunch))
    with open(os.path.join(a.out, "results_goodput.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = SCHEMES + ["remote-only"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, relaunch in zip(axes, RELAUNCH_S):
        for name in names:
            pts = [(r["nodes"], 100 * r["goodput"]) for r in rows
                   if r["scheme"] == name and r["relaunch_s"] == relaunch]
            label = "none (local + async persist)" if name == "none" else name
            ax.plot(*zip(*pts), marker="o", ms=3, label=label,
                    ls="--" if name in ("remote-only", "none") else "-")
        ax.set_xscale("log")
        ax.set_xlabel("nodes (8 GPUs each)")
        ax.set_title(f"relaunch {relaunch} s")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("goodput at the optimal intervals (%)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Goodput vs job size (Llama 3 failure rates, 32 GiB/node, 2 TB/s storage)")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "goodput_vs_nodes.png"), dpi=90)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    relaunch = RELAUNCH_S[0]
    for name in names:
        # Where goodput is ~0 the optimum is meaningless: leave those points out.
        pts = [(r["nodes"], r["save_interval_s"]) for r in rows
               if r["scheme"] == name and r["relaunch_s"] == relaunch and r["goodput"] > 0.01]
        ax.plot(*zip(*pts), marker="o", ms=3, label=f"save, {name}",
                ls="--" if name == "remote-only" else "-")
    pts = [(r["nodes"], r["persist_interval_s"]) for r in rows
           if r["scheme"] == "xor:8" and r["relaunch_s"] == relaunch]
    ax.plot(*zip(*pts), marker="s", ms=3, color="k", ls=":", label="persist, xor:8")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("optimal interval (s)")
    ax.set_title(f"Optimal save / persist interval (relaunch {relaunch} s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "interval_vs_nodes.png"), dpi=90)
    return 0


if __name__ == "__main__":
    sys.exit(main())
