#!/usr/bin/env python3
"""Recovery-rate experiment on `memento launch` with the demo training job.

For every (scheme, N, f): T trials. A trial runs the demo under `memento launch`,
loses f distinct random nodes at once at a random step and stage (--inject
randF@LO-HI:rand, seeded per trial), lets the launcher relaunch, and classifies
the trial from the launcher's records:
  memory  the restore after the failure came from memory only (local copies,
          replicas, decodes) and its state is bit-identical to the failure-free
          reference at the restored step, and the job finished bit-identically;
  remote  the restore fell back to the remote tier, bit-identical at the
          persisted step, and the job finished bit-identically;
  failed  anything else (nothing to restore, a restore error, a wrong state).
The measured memory rate (95 % Wilson interval) is printed beside
`memento rate`'s exact probability of rebuilding from memory after f random
node losses. With --goodput it also measures goodput (useful compute time /
wall time) per scheme with G failures per run, against the same job
checkpointing synchronously to the remote directory only.

Writes RESULTS/NAME.jsonl (one record per trial and run, appended as each
ends: --resume reuses them and runs only the missing ones), RESULTS/NAME.md and,
unless --no-plots, RESULTS/NAME.png (rate vs f per scheme, with memory per
node) and RESULTS/NAME_time_lost.png (time lost per failure by source). Plots
need matplotlib: run with .venv/bin/python (scripts/setup installs it there).

  experiments/recovery_rate/run_recovery_rate.py --trials 10 --goodput
  experiments/recovery_rate/run_recovery_rate.py --schemes replica:2 --nodes 4 \
      --failures 2 --trials 6 --name check --no-plots
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = ("detection", "relaunch", "restore", "reprotect", "recompute")


def parse_counts(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += list(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def wilson(successes, n, z=1.959964):
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def group_fits(scheme, nodes):
    """True when the scheme's group fits in N nodes (rs:6+2 needs 8)."""
    kind = scheme.split(":")[0]
    if kind == "replica":
        return int(scheme.split(":")[1]) <= nodes
    if kind == "xor":
        return int(scheme.split(":")[1]) + 1 <= nodes
    if kind == "rs":
        k, m = scheme.split(":")[1].split("+")
        return int(k) + int(m) <= nodes
    return True


class Runner:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="memento-rr-")
        self.jobs = 0

    def job_name(self, prefix):
        self.jobs += 1
        return "%s-%d-%d" % (prefix, os.getpid(), self.jobs)

    def launch(self, job, nodes, scheme, inject=None, seed=1, remote=None, demo_extra=(),
               timeout=900):
        a = self.a
        rec_path = os.path.join(self.tmp, job + ".jsonl")
        cmd = [a.cli, "launch", "-n", str(nodes * a.ranks_per_node), "--ranks-per-node",
               str(a.ranks_per_node), "--scheme", scheme, "--job", job, "--records", rec_path,
               "--quiet", "--backoff", "0.2", "--seed", str(seed), "--max-restarts", "1"]
        if inject:
            cmd += ["--inject", inject]
        if remote:
            cmd += ["--remote", remote, "--persist-every", str(a.persist_every)]
        cmd += ["--", a.demo, "--steps", str(a.steps), "--quiet"] + a.demo_args.split() + list(
            demo_extra)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            # A hung launch is a failed trial, recorded as such, not the end
            # of the run (the launcher was killed; its mpirun follows it).
            out = e.stdout or ""
            if isinstance(out, bytes):
                out = out.decode(errors="replace")
            p = subprocess.CompletedProcess(cmd, -9, out + "\n[killed after %d s]" % timeout)
        finally:
            # Also when this driver is stopped (SIGTERM, Ctrl-C): the job's
            # segments outlive its processes.
            subprocess.run([a.cli, "clean", "--force", "--job", job], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        wall = time.time() - t0
        recs = []
        if os.path.exists(rec_path):
            with open(rec_path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
            os.unlink(rec_path)
        return p, recs, wall

    def reference(self, nodes):
        """Failure-free run: the state hash after every step."""
        log = os.path.join(self.tmp, "ref-%d.txt" % nodes)
        p, recs, _ = self.launch("rr-ref-%d-%d" % (nodes, os.getpid()), nodes, "none",
                                 demo_extra=["--hash-log", log])
        if p.returncode != 0:
            sys.exit("reference run failed:\n" + p.stdout)
        hashes = {}
        with open(log) as f:
            for line in f:
                step, h = line.split()
                hashes[int(step)] = h
        return hashes

    def exact(self, scheme, nodes, failures):
        out = subprocess.run([self.a.cli, "rate", "--nodes", str(nodes), "--scheme", scheme,
                              "--failures", ",".join(map(str, failures)), "--trials", "0",
                              "--json"], stdout=subprocess.PIPE, text=True, check=True).stdout
        j = json.loads(out)
        s = j["schemes"][0]
        return s["memory_per_node"], {r["failures"]: r["exact"] for r in s["node_failures"]}

    def trial(self, scheme, nodes, f, t, ref):
        """Trial t of a cell. A launch whose injected failure never fired
        (the job finished first) measured nothing about the cell: it is run
        again with the next seed, up to ATTEMPTS times, and recorded as
        "void" if it never fires."""
        a = self.a
        for attempt in range(ATTEMPTS):
            key = "%s/%d/%d/%d/%d" % (scheme, nodes, f, t, a.seed)
            if attempt:
                key += "/%d" % attempt
            seed = int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)
            remote = os.path.join(self.tmp, "remote")
            shutil.rmtree(remote, ignore_errors=True)
            inject = "rand%d@%s:rand" % (f, a.window)
            job = self.job_name("rr")
            p, recs, wall = self.launch(job, nodes, scheme, inject=inject, seed=seed,
                                        remote=remote)
            shutil.rmtree(remote, ignore_errors=True)
            rec = {"record": "trial", "scheme": scheme, "nodes": nodes, "f": f, "trial": t,
                   "seed": seed, "attempts": attempt + 1, "inject": inject, "wall_s": wall,
                   "launch_exit": p.returncode}
            rec.update(classify(recs, ref, a.steps))
            if rec["class"] == "failed" and p.returncode not in (0, 1):
                rec["output_tail"] = p.stdout[-2000:]
            if rec["class"] != "void":
                break
        return rec

    def goodput(self, scheme, nodes, ref_compute_s):
        a = self.a
        inject = ",".join("rand@%d" % s for s in goodput_steps(a.steps, a.goodput_failures))
        remote = os.path.join(self.tmp, "remote-gp")
        shutil.rmtree(remote, ignore_errors=True)
        job = self.job_name("rr-gp")
        extra = []
        launch_scheme = scheme
        if scheme == "baseline":
            launch_scheme = "none"
            extra = ["--baseline-remote", remote]
            p, recs, wall = self.launch(job, nodes, launch_scheme, inject=inject, seed=a.seed,
                                        demo_extra=extra)
        else:
            p, recs, wall = self.launch(job, nodes, launch_scheme, inject=inject, seed=a.seed,
                                        remote=remote)
        shutil.rmtree(remote, ignore_errors=True)
        summary = ([r for r in recs if r["record"] == "summary"] or [{}])[-1]
        ok = summary.get("outcome") == "finished"
        useful = a.steps * ref_compute_s
        return {"record": "goodput", "scheme": scheme, "nodes": nodes,
                "failures": a.goodput_failures, "ok": ok, "wall_s": summary.get("wall_s", wall),
                "useful_s": useful,
                "goodput": useful / summary["wall_s"] if ok and summary.get("wall_s") else 0.0,
                "time_lost_s": summary.get("time_lost_s"), "steps_lost": summary.get("steps_lost")}


ATTEMPTS = 3
CLASSES = ("memory", "remote", "failed", "void")


def classify(recs, ref, steps):
    """A trial's class from its launcher records: memory, remote, failed, or
    void (no failure happened at all: the job finished bit-identically and
    the launcher reports the injected event as never fired). A failure
    nobody injected, a job that did not finish, or any restore that is not
    bit-exact is failed. Returns the fields to add to the trial record."""
    out = {}
    fails = [r for r in recs if r["record"] == "failure"]
    summary = ([r for r in recs if r["record"] == "summary"] or [{}])[-1]
    restores = [r for r in recs if r["record"] == "restore" and r["attempt"] > 0]
    not_fired = [r for r in recs if r["record"] == "not_fired"]
    finished = (summary.get("outcome") == "finished"
                and summary.get("state_hash") == ref.get(steps))
    cls, why = "failed", ""
    if fails:
        out["lost_nodes"] = fails[0]["nodes"]
        out["stage"] = fails[0].get("stage")  # none when nobody injected it
        out["last_step"] = fails[0]["last_step"]
    if not fails and not_fired and finished:
        cls = "void"
        why = "the injected failure never fired (%s)" % not_fired[0].get("what")
    elif not fails or not fails[0].get("injected"):
        why = "the injected failure did not happen"
        if fails:
            why = "a failure nobody injected came first"
    elif not restores:
        why = "no restore after the failure"
    else:
        r = restores[0]
        out["restore"] = {k: r.get(k) for k in ("ok", "version", "entries_by_source",
                                                "from_memory", "from_remote", "lost")}
        if not r.get("ok"):
            why = "restore: " + ("nothing to restore" if r.get("nothing_to_restore")
                                 else "; ".join(r.get("errors", [])))
        elif r.get("state_hash") != ref.get(r.get("version")):
            why = "restored state of v%s differs from the reference" % r.get("version")
        elif not finished:
            why = "the job did not finish bit-identically (%s)" % summary.get("outcome")
        elif r.get("from_remote"):
            cls = "remote"
        elif r.get("from_memory"):
            cls = "memory"
        else:
            why = "restore read no entries"
    out["class"] = cls
    if why:
        out["why"] = why
    return out


def tally(log, cells, trials):
    """The rate row of every cell over its first `trials` trials. Void trials
    (no failure happened) are no sample of the cell: the measured rate and
    its interval are over the others."""
    rows = []
    for scheme, nodes, f, mem, exact in cells:
        counts = dict.fromkeys(CLASSES, 0)
        for t in range(trials):
            counts[log.find("trial", scheme=scheme, nodes=nodes, f=f, trial=t)["class"]] += 1
        n = trials - counts["void"]
        lo, hi = wilson(counts["memory"], n)
        rows.append({"record": "rate", "scheme": scheme, "nodes": nodes, "f": f,
                     "trials": trials, "samples": n, "memory_per_node": mem, "exact": exact,
                     "measured": counts["memory"] / n if n else 0.0, "ci95": [lo, hi],
                     "agree": n > 0 and lo - 1e-9 <= exact <= hi + 1e-9, **counts})
    return rows


def cell_trials(records, cells, trials):
    """The trial records of this run's cells (a resumed log may hold others)."""
    keys = {(scheme, nodes, f) for scheme, nodes, f, _, _ in cells}
    return [r for r in records if r["record"] == "trial" and r["trial"] < trials
            and (r["scheme"], r["nodes"], r["f"]) in keys]


def goodput_steps(steps, failures):
    return [max(2, steps * (i + 1) // (failures + 1)) for i in range(failures)]


def main():
    # A run stopped with SIGTERM still records its session and cleans up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default="replica:2,replica:2:ring,xor:3,rs:4+2,rs:6+2")
    ap.add_argument("--nodes", default="8,16")
    ap.add_argument("--failures", default="1-4")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--window", default="7-11", help="steps at which the failure may fall")
    ap.add_argument("--persist-every", type=int, default=3)
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--demo-args", default="--dim 32 --blocks 1 --context 16")
    ap.add_argument("--goodput", action="store_true", help="also measure goodput")
    ap.add_argument("--goodput-failures", type=int, default=2)
    ap.add_argument("--goodput-nodes", type=int, default=8)
    ap.add_argument("--results", default=os.path.join(ROOT, "experiments", "results"))
    ap.add_argument("--name", default="recovery_rate")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the trials already in RESULTS/NAME.jsonl and run the rest")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "bindings", "cli", "memento"))
    ap.add_argument("--demo", default=os.path.join(ROOT, "build", "experiments", "demo",
                                                    "memento_demo"))
    a = ap.parse_args()
    os.environ.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    os.environ.setdefault("MEMENTO_TIMEOUT_S", "60")
    for tool in (a.cli, a.demo):
        if not os.access(tool, os.X_OK):
            sys.exit("not found: %s (build first, or pass --cli / --demo)" % tool)
    os.makedirs(a.results, exist_ok=True)
    run = Runner(a)
    # What a trial's outcome depends on besides its cell: resumed trials must share it.
    settings = {"steps": a.steps, "window": a.window, "persist_every": a.persist_every,
                "ranks_per_node": a.ranks_per_node, "seed": a.seed, "demo_args": a.demo_args}
    log = RecordLog(os.path.join(a.results, a.name + ".jsonl"), a.resume, settings)
    schemes = a.schemes.split(",")
    failures = parse_counts(a.failures)
    rows = []
    goodput = []
    refs = {}
    t_start = time.time()
    try:
        cells = []
        for nodes in parse_counts(a.nodes):
            for scheme in schemes:
                if not group_fits(scheme, nodes):
                    print("skip %s on %d nodes (group does not fit)" % (scheme, nodes))
                    continue
                mem, exact = run.exact(scheme, nodes, [f for f in failures if f <= nodes])
                cells += [(scheme, nodes, f, mem, exact[f]) for f in failures if f <= nodes]
        # Trial t of every cell before trial t+1 of any: a run cut short
        # leaves the same number of trials everywhere (--resume --trials K).
        for t in range(a.trials):
            for scheme, nodes, f, _, _ in cells:
                rec = log.find("trial", scheme=scheme, nodes=nodes, f=f, trial=t)
                if rec is None:
                    if nodes not in refs:
                        refs[nodes] = run.reference(nodes)
                    rec = run.trial(scheme, nodes, f, t, refs[nodes])
                    log.append(rec)
                print("%-15s N=%-2d f=%d trial %2d: %-6s %s" % (
                    scheme, nodes, f, t, rec["class"], rec.get("why", "")), flush=True)
        for row in tally(log, cells, a.trials):
            rows.append(row)
            log.append(row)
            print("%-15s N=%-2d f=%d => memory %d/%d = %.3f [%.3f, %.3f] vs exact %.4f (%s); "
                  "remote %d, failed %d, void %d" % (
                      row["scheme"], row["nodes"], row["f"], row["memory"], row["samples"],
                      row["measured"], row["ci95"][0], row["ci95"][1], row["exact"],
                      "agree" if row["agree"] else "DISAGREE", row["remote"], row["failed"],
                      row["void"]), flush=True)
        if a.goodput:
            nodes = a.goodput_nodes
            compute_s = None
            for scheme in [s for s in schemes if group_fits(s, nodes)] + ["baseline"]:
                g = log.find("goodput", scheme=scheme, nodes=nodes, failures=a.goodput_failures)
                if g is None:
                    # Useful time per step: the median step time of a
                    # failure-free run that checkpoints only at its last step.
                    if compute_s is None:
                        compute_s = median_step(run, nodes)
                    g = run.goodput(scheme, nodes, compute_s)
                    log.append(g)
                goodput.append(g)
                print("goodput %-15s N=%d %d failures: %.3f (wall %.1f s)" % (
                    scheme, nodes, a.goodput_failures, g["goodput"], g["wall_s"]), flush=True)
    finally:
        shutil.rmtree(run.tmp, ignore_errors=True)
        log.append({"record": "session", "elapsed_s": time.time() - t_start})
    log.finish()
    trials = cell_trials(log.records, cells, a.trials)
    write_report(a, rows, trials, goodput, log.elapsed())
    if not a.no_plots:
        plot(a, rows, trials)
    bad = [r for r in rows if not r["agree"]]
    print("wrote %s/%s.md (%d rows, %d outside the CI)" % (a.results, a.name, len(rows), len(bad)))


class RecordLog:
    """NAME.jsonl.partial, written one record at a time so that an interrupted
    run keeps its trials, and renamed to NAME.jsonl when the run completes (an
    interrupted run never replaces the published results); with resume, the
    records already there (the partial file first) are reused, if they were
    run with the same settings."""

    def __init__(self, path, resume, settings):
        self.final = path
        self.path = path + ".partial"
        self.records = []
        source = self.path if os.path.exists(self.path) else path
        if resume and os.path.exists(source):
            with open(source) as f:
                self.records = [json.loads(line) for line in f if line.strip()]
            self.records = [r for r in self.records if r["record"] != "rate"]
            before = [r for r in self.records if r["record"] == "settings"]
            if before and before[-1]["settings"] != settings:
                sys.exit("--resume: %s was run with %s, not %s; run without --resume or with "
                         "the same settings" % (source, before[-1]["settings"], settings))
        self.records = [r for r in self.records if r["record"] != "settings"]
        self.records.insert(0, {"record": "settings", "settings": settings})
        with open(self.path, "w") as f:
            for r in self.records:
                f.write(json.dumps(r) + "\n")

    def finish(self):
        os.replace(self.path, self.final)

    def find(self, kind, **key):
        for r in self.records:
            if r["record"] == kind and all(r.get(k) == v for k, v in key.items()):
                return r
        return None

    def append(self, rec):
        self.records.append(rec)
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def elapsed(self):
        return sum(r["elapsed_s"] for r in self.records if r["record"] == "session")


def median_step(run, nodes):
    """Median step time (s) of a failure-free run that checkpoints only at its end."""
    times = []
    tmpdir = tempfile.mkdtemp(prefix="memento-rr-st-")
    a = run.a
    cmd = [a.cli, "launch", "-n", str(nodes * a.ranks_per_node), "--ranks-per-node",
           str(a.ranks_per_node), "--job", "rr-st2-%d" % os.getpid(), "--quiet",
           "--status-dir", tmpdir, "--", a.demo, "--steps", str(a.steps), "--quiet",
           "--ckpt-every", str(a.steps + 1)] + a.demo_args.split()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(tmpdir, "events.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "step":
                times.append(e["step_s"])
    shutil.rmtree(tmpdir, ignore_errors=True)
    return statistics.median(times) if times else 0.0


def write_report(a, rows, trials, goodput, elapsed):
    """RESULTS/NAME.md from the rate rows and this run's trial records."""
    path = os.path.join(a.results, a.name + ".md")
    with open(path, "w") as f:
        f.write("# Recovery rate under injected node failures\n\n")
        f.write("Produced by `experiments/recovery_rate/run_recovery_rate.py %s`; its %d trials' "
                "launches took %.0f s in all (driver time recorded: %.0f s).\n\n"
                % (" ".join(x for x in sys.argv[1:] if x != "--resume"), len(trials),
                   sum(t["wall_s"] for t in trials), elapsed))
        f.write("Each trial runs the demo (%d steps, `%s`) under `memento launch`, loses f "
                "random nodes at once at a random step in %s and a random stage, relaunches "
                "and classifies the trial (memory / remote / failed; bit-exact against the "
                "failure-free run; void: the failure never fired, %d launches in a row). "
                "Remote tier: persist every %d steps. "
                "Measured memory rate (over the trials that are not void) with its 95 %% Wilson "
                "interval beside `memento rate`'s exact probability.\n\n"
                % (a.steps, a.demo_args, a.window, ATTEMPTS, a.persist_every))
        f.write("| scheme | N | f | memory/node | trials | memory | remote | failed | void | "
                "measured | 95 % CI | exact | agree |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| %s | %d | %d | %.2f x | %d | %d | %d | %d | %d | %.3f | [%.3f, %.3f] | "
                    "%.4f | %s |\n"
                    % (r["scheme"], r["nodes"], r["f"], r["memory_per_node"], r["trials"],
                       r["memory"], r["remote"], r["failed"], r["void"], r["measured"],
                       r["ci95"][0], r["ci95"][1], r["exact"], "yes" if r["agree"] else "**no**"))
        by = {}
        for t in trials:
            lost = (t.get("restore") or {}).get("lost")
            if t["class"] in ("memory", "remote") and lost:
                by.setdefault((t["scheme"], t["class"]), []).append(lost)
        if by:
            f.write("\n## Time lost per failure (mean seconds, by source)\n\n| scheme | restored from | "
                    "failures | steps lost | detection | relaunch | restore | re-protect | "
                    "recompute | total |\n|---|---|---|---|---|---|---|---|---|---|\n")
            for (scheme, cls), ls in sorted(by.items()):
                mean = {s: statistics.mean(l[s + "_s"] for l in ls) for s in SOURCES}
                f.write("| %s | %s | %d | %.2f | %s | %.2f |\n" % (
                    scheme, cls, len(ls), statistics.mean(l["steps_lost"] for l in ls),
                    " | ".join("%.2f" % mean[s] for s in SOURCES), sum(mean.values())))
        if goodput:
            f.write("\n## Goodput (useful compute time / wall time), %d failures per run of %d "
                    "steps, N=%d\n\n| checkpointing | finished | wall s | goodput |\n"
                    "|---|---|---|---|\n" % (a.goodput_failures, a.steps, a.goodput_nodes))
            for g in goodput:
                name = ("synchronous remote only (baseline)" if g["scheme"] == "baseline"
                        else "memento " + g["scheme"])
                f.write("| %s | %s | %.1f | %.3f |\n" % (name, "yes" if g["ok"] else "no",
                                                         g["wall_s"], g["goodput"]))
        failed = [t for t in trials if t["class"] in ("failed", "void")]
        if failed:
            f.write("\n## Failed and void trials\n\n")
            for t in failed:
                f.write("- %s N=%d f=%d trial %d (nodes %s, %s): %s\n" % (
                    t["scheme"], t["nodes"], t["f"], t["trial"], t.get("lost_nodes"),
                    t.get("stage"), t.get("why")))
        if not a.no_plots:
            f.write("\n![recovery rate](%s.png)\n\n![time lost](%s_time_lost.png)\n"
                    % (a.name, a.name))


def plot(a, rows, trials):
    """RESULTS/NAME.png (rate vs f) and NAME_time_lost.png, when there is a
    row to draw."""
    if not rows:
        print("no rate rows: no plots")
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available (use .venv/bin/python): no plots")
        return
    nodes_list = sorted({r["nodes"] for r in rows})
    fig, axes = plt.subplots(1, len(nodes_list), figsize=(6 * len(nodes_list), 4.5), squeeze=False)
    for ax, nodes in zip(axes[0], nodes_list):
        for scheme in dict.fromkeys(r["scheme"] for r in rows if r["nodes"] == nodes):
            rs = [r for r in rows if r["nodes"] == nodes and r["scheme"] == scheme]
            fs = [r["f"] for r in rs]
            line = ax.errorbar(fs, [r["measured"] for r in rs],
                               # (clamped: Wilson's bound at 0 or 1 trials rounds a hair
                               # inside the measured value)
                               yerr=[[max(0.0, r["measured"] - r["ci95"][0]) for r in rs],
                                     [max(0.0, r["ci95"][1] - r["measured"]) for r in rs]],
                               marker="o", capsize=3,
                               label="%s (%.2fx memory/node)" % (scheme, rs[0]["memory_per_node"]))
            ax.plot(fs, [r["exact"] for r in rs], linestyle=":", color=line[0].get_color())
        ax.set_title("N = %d nodes (dotted: exact)" % nodes)
        ax.set_xlabel("simultaneous node failures f")
        ax.set_ylabel("recovered from memory")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xticks(sorted({r["f"] for r in rows}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.results, a.name + ".png"), dpi=110)
    plt.close(fig)

    trials = [t for t in trials if t["class"] in ("memory", "remote")
              and (t.get("restore") or {}).get("lost")]
    keys = sorted({(t["scheme"], t["class"]) for t in trials})
    if not keys:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys) + 2), 4.5))
    bottom = [0.0] * len(keys)
    for s in SOURCES:
        vals = []
        for k in keys:
            ls = [t["restore"]["lost"][s + "_s"] for t in trials if (t["scheme"], t["class"]) == k]
            vals.append(statistics.mean(ls))
        ax.bar(range(len(keys)), vals, bottom=bottom, label=s)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(["%s\n%s" % k for k in keys], fontsize=8)
    ax.set_ylabel("seconds lost per failure (mean)")
    ax.set_title("Time lost per failure by source")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(a.results, a.name + "_time_lost.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
