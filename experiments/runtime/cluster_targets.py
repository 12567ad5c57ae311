#!/usr/bin/env python3
"""The recovery targets table from bench_cluster JSON lines.

    run_cluster_bench.sh --json --launches 3 > cpu.jsonl
    run_cluster_bench.sh --json --launches 3 --link-gibps 0.1 > link.jsonl
    cluster_targets.py cpu.jsonl link.jsonl

Groups the records by configuration (link or none, shard size, scheme, nodes,
lost nodes) and prints one markdown table per regime. Each cell is the median
over the launches of that configuration, its range, a check mark when the
median meets the target, and in how many launches the target was met. On this
kind of machine (more ranks than cores) one launch differs from the next by up
to 2x in both protect and the baseline ring, so a ratio of one launch decides
little; the median of several launches, interleaved with the other
configurations, is what the table calls met.

Targets (the definitions of the fields: the header of bench_cluster.cc):
  over a link   resume / bound <= 1.2 (replica), 1.3 (xor, rs losing one node),
                1.5 (two or more lost nodes), the bound being the lost nodes'
                shards over one link (S / link per lost node: the replacements
                share the survivors' links); re-protect / bound, the time from
                resume to protected, <= 1.2
  no link       transfer / ring >= 0.8, protect / ring >= 0.65, protect CPU /
                ring CPU <= 1.5, xor protect / XOR ring reduce-scatter >= 1
  both          resume / fs <= 0.1 at N = 8 losing one node (the emulated
                parallel file system at its default rate)
Exit status 1 when a restore was not bit-exact (the table names it), 2 on
input that is not bench_cluster JSON.
"""
import argparse
import json
import statistics
import sys

GE, LE = ">=", "<="


def fail(message):
    print("cluster_targets: " + message, file=sys.stderr)
    sys.exit(2)


def load(paths):
    records = []
    for path in paths:
        try:
            f = open(path)
        except OSError as e:
            fail("%s: cannot read it (%s)" % (path, e.strerror))
        with f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    fail("%s:%d: not JSON (%s)" % (path, n, e))
                if r.get("benchmark") != "bench_cluster":
                    fail("%s:%d: not a bench_cluster record" % (path, n))
                if r.get("skipped"):
                    continue
                records.append(r)
    return records


def key(r):
    return (r["link_gibps"], r["shard_bytes"], r["scheme"], r["nodes"],
            tuple(r["lost_nodes"]))


def resume_target(scheme, lost):
    if len(lost) > 1:
        return 1.5
    return 1.2 if scheme.startswith("replica") else 1.3


def link_metrics(r):
    """(label, value, op, target) of one record over a link."""
    # bench_cluster's ratios are over one shard's time on one link; the
    # replacements of several lost nodes share the survivors' links, so the
    # bound is that many shards.
    lost = r["lost_nodes"]
    resume = r["resume_vs_link_bound"] / len(lost)
    protected = r["protected_vs_link_bound"] / len(lost)
    out = [("resume / bound", resume, LE, resume_target(r["scheme"], lost)),
           ("re-protect / bound", protected - resume, LE, 1.2),
           ("protect / ring", r["protect_vs_mpi"], GE, None)]  # no target over a link
    return out + fs_metric(r)


def cpu_metrics(r):
    cpu = 1 / r["cpu_ratio"] if r["cpu_ratio"] > 0 else float("inf")
    out = [("transfer / ring", r["transfer_vs_ring"], GE, 0.8),
           ("protect / ring", r["protect_vs_mpi"], GE, 0.65),
           ("protect CPU / ring CPU", cpu, LE, 1.5)]
    # The replacement's new store counted in (records from before it was
    # measured lack it).
    if r.get("resume_incl_prepare_vs_transfer", 0) > 0:
        out.append(("resume incl. store / transfer", r["resume_incl_prepare_vs_transfer"], LE,
                    1.1))
    if r.get("protect_vs_xor_ring", 0) > 0:
        out.append(("xor protect / XOR ring", r["protect_vs_xor_ring"], GE, 1.0))
    return out + fs_metric(r)


def fs_metric(r):
    if r.get("remote_gibps", 0) <= 0 or r.get("recover_vs_remote_link", 0) <= 0:
        return []
    target = 0.1 if r["nodes"] == 8 and len(r["lost_nodes"]) == 1 and r.get(
        "remote_gibps_auto") else None
    return [("resume / fs", r["recover_vs_remote_link"], LE, target)]


def meets(v, op, target):
    return v >= target if op == GE else v <= target


def number(v, op, target):
    """Two decimals, three where two would round a miss onto its target."""
    text = "%.2f" % v
    if target is not None and float(text) == target and not meets(v, op, target):
        text = "%.3f" % v
    return text


def cell(values, op, target):
    med = statistics.median(values)
    text = number(med, op, target)
    if len(values) > 1:
        text += " (%s-%s)" % (number(min(values), op, target), number(max(values), op, target))
    if target is None:
        return text
    met = sum(meets(v, op, target) for v in values)
    text += " ✓" if meets(med, op, target) else " ✗"
    if len(values) > 1:
        text += " %d/%d" % (met, len(values))
    return text


LINK_LABELS = ["resume / bound", "re-protect / bound", "resume / fs", "protect / ring"]
CPU_LABELS = ["transfer / ring", "resume incl. store / transfer", "protect / ring", "protect CPU / ring CPU",
              "xor protect / XOR ring", "resume / fs"]


def table(groups, metrics_of, order, title):
    seen, targets = set(), {}
    for recs in groups.values():
        for r in recs:
            for label, _, op, target in metrics_of(r):
                seen.add(label)
                if target is not None:
                    targets.setdefault(label, (op, set()))[1].add(target)
    labels = [l for l in order if l in seen]
    # A target that differs by row gets a column of its own before its metric.
    by_row = [l for l in labels if l in targets and len(targets[l][1]) > 1]
    lines = ["### " + title, ""]
    head = ["scheme", "N", "lost", "S", "launches"]
    for l in labels:
        if l in by_row:
            head += ["target", "%s (%s target)" % (l, targets[l][0])]
        elif l in targets:
            head.append("%s (%s %g)" % (l, targets[l][0], min(targets[l][1])))
        else:
            head.append(l)
    head.append("bit-exact")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    bad = []
    for k, recs in groups.items():
        _, size, scheme, nodes, lost = k
        per = {}
        for r in recs:
            for label, v, op, target in metrics_of(r):
                per.setdefault(label, (op, target, []))[2].append(v)
        row = [scheme, str(nodes), ",".join(map(str, lost)), "%d MiB" % (int(size) >> 20),
               str(len(recs))]
        for label in labels:
            if label in by_row:
                row.append("%g" % per[label][1] if label in per else "")
            row.append(cell(per[label][2], per[label][0], per[label][1]) if label in per else "")
        exact = sum(r.get("restore_bit_exact") is True for r in recs)
        row.append("%d/%d" % (exact, len(recs)))
        if exact != len(recs):
            bad.append("%s N=%d lost %s S=%s" % (scheme, nodes, row[2], row[3]))
        lines.append("| " + " | ".join(row) + " |")
    return lines, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="bench_cluster --json output (JSON lines)")
    args = ap.parse_args()
    records = load(args.files)
    if not records:
        fail("no bench_cluster records in " + ", ".join(args.files))
    groups = {}
    for n, r in enumerate(records):
        try:
            groups.setdefault(key(r), []).append(r)
        except KeyError as e:
            fail("record %d lacks '%s' (from an older bench_cluster?)" % (n + 1, e.args[0]))
    bad = []
    out = []
    for link in sorted({k[0] for k in groups}):
        # In the order the configurations ran, smaller shards first.
        sub = {k: v for k, v in sorted(groups.items(), key=lambda kv: kv[0][1]) if k[0] == link}
        try:
            if link > 0:
                lines, b = table(sub, link_metrics, LINK_LABELS, "Over a %g GiB/s link" % link)
            else:
                lines, b = table(sub, cpu_metrics, CPU_LABELS, "No link (CPU-bound)")
        except KeyError as e:
            fail("a record lacks the field %s (from an older bench_cluster?)" % e)
        out += lines + [""]
        bad += b
    print("\n".join(out).rstrip())
    print("\nmedian over the launches (range), ✓ when the median meets the target, "
          "launches that met it")
    if bad:
        print("NOT BIT-EXACT: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
