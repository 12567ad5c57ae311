#!/usr/bin/env python3
"""Runs experiments/runtime/cluster_targets.py on records with known values and
checks its medians, ranges, marks, counts and errors."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments",
                      "runtime", "cluster_targets.py")


def record(scheme="replica:2", nodes=8, lost=(1,), link=0.0, **fields):
    r = {"benchmark": "bench_cluster", "scheme": scheme, "nodes": nodes,
         "shard_bytes": float(64 << 20), "link_gibps": link, "lost_nodes": list(lost),
         "transfer_vs_ring": 1.0, "protect_vs_mpi": 1.0, "cpu_ratio": 1.0,
         "protect_vs_xor_ring": 0.0, "remote_gibps": 0.3, "remote_gibps_auto": True,
         "recover_vs_remote_link": 0.05, "restore_bit_exact": True}
    r.update(fields)
    # As bench_cluster reports them: over one shard's time on one link.
    bound = 0.625 if link > 0 else 0.0
    r["resume_vs_link_bound"] = r.get("recover_s", 0.7) / bound if bound else 0.0
    r["protected_vs_link_bound"] = r.get("protected_s", 0.8) / bound if bound else 0.0
    return r


def run(*records, raw=None):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("# a comment line is skipped\n")
        for r in records:
            f.write(json.dumps(r) + "\n")
        if raw is not None:
            f.write(raw + "\n")
        path = f.name
    try:
        p = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    return p


def row(output, prefix):
    rows = [l for l in output.splitlines() if l.startswith("| " + prefix + " |")]
    assert len(rows) == 1, output
    return [c.strip() for c in rows[0].strip("|").split("|")]


class ClusterTargetsTest(unittest.TestCase):
    def test_median_range_mark_and_count_over_launches(self):
        launches = [record(transfer_vs_ring=t, protect_vs_mpi=p, cpu_ratio=1 / c)
                    for t, p, c in ((0.7, 0.6, 1.4), (0.9, 0.64, 1.6), (1.0, 0.7, 1.45))]
        p = run(*launches)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("### No link (CPU-bound)", p.stdout)
        cells = row(p.stdout, "replica:2")
        self.assertEqual(cells[:5], ["replica:2", "8", "1", "64 MiB", "3"])
        self.assertEqual(cells[5], "0.90 (0.70-1.00) ✓ 2/3")
        self.assertEqual(cells[6], "0.64 (0.60-0.70) ✗ 1/3")
        self.assertEqual(cells[7], "1.45 (1.40-1.60) ✓ 2/3")
        self.assertEqual(cells[8], "0.05 (0.05-0.05) ✓ 3/3")  # resume / fs, N = 8 losing one
        self.assertEqual(cells[9], "3/3")

    def test_resume_including_the_store_only_where_it_was_measured(self):
        p = run(record(resume_incl_prepare_vs_transfer=1.05),
                record("xor:3", nodes=4, resume_incl_prepare_vs_transfer=1.2),
                record("rs:4+2"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("resume incl. store / transfer (<= 1.1)", p.stdout)
        self.assertIn("1.05 ✓", row(p.stdout, "replica:2"))
        self.assertIn("1.20 ✗", row(p.stdout, "xor:3"))
        self.assertNotIn("✓", " ".join(row(p.stdout, "rs:4+2")[6:7]))

    def test_a_miss_is_never_rounded_onto_its_target(self):
        p = run(record(protect_vs_mpi=0.6499))
        self.assertEqual(row(p.stdout, "replica:2")[6], "0.650 ✗")

    def test_link_bound_counts_every_lost_node(self):
        # Two lost nodes: the bound is 2 S / link = 1.25 s; resume 1.75 s = 1.4 x it
        # (target 1.5), re-protect 0.5 s after = 0.4 x it.
        two = record("rs:4+2", lost=(1, 2), link=0.1, recover_s=1.75, protected_s=2.25)
        # One lost xor node: 0.875 / 0.625 = 1.4 x the bound, over its target of 1.3.
        one = record("xor:3", nodes=4, link=0.1, recover_s=0.875, protected_s=1.0)
        p = run(two, one)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("### Over a 0.1 GiB/s link", p.stdout)
        self.assertNotIn("transfer / ring", p.stdout)
        # The resume target differs by row: a column of its own.
        self.assertIn("| target | resume / bound (<= target) | re-protect / bound (<= 1.2) |",
                      p.stdout)
        cells = row(p.stdout, "rs:4+2")
        self.assertEqual(cells[2], "1,2")
        self.assertEqual(cells[5:8], ["1.5", "1.40 ✓", "0.40 ✓"])
        self.assertEqual(cells[8], "0.05")  # resume / fs has a target at N = 8 losing one only
        self.assertEqual(cells[9], "1.00")  # protect / ring, shown without a target
        cells = row(p.stdout, "xor:3")
        self.assertEqual(cells[5:8], ["1.3", "1.40 ✗", "0.20 ✓"])

    def test_xor_column_only_where_the_xor_ring_ran(self):
        p = run(record("xor:3", nodes=4, protect_vs_xor_ring=1.2), record())
        self.assertIn("xor protect / XOR ring (>= 1)", p.stdout)
        self.assertEqual(row(p.stdout, "xor:3")[8], "1.20 ✓")
        self.assertEqual(row(p.stdout, "replica:2")[8], "")

    def test_a_restore_that_is_not_bit_exact_fails_and_is_named(self):
        p = run(record(), record(restore_bit_exact=False))
        self.assertEqual(p.returncode, 1)
        self.assertEqual(row(p.stdout, "replica:2")[-1], "1/2")
        self.assertIn("NOT BIT-EXACT: replica:2 N=8 lost 1 S=64 MiB", p.stderr)

    def test_bad_input_is_named(self):
        p = run(record(), raw="{not json")
        self.assertEqual(p.returncode, 2)
        self.assertRegex(p.stderr, r"\.jsonl:3: not JSON")
        p = run(raw='{"benchmark": "bench_runtime"}')
        self.assertIn(".jsonl:2: not a bench_cluster record", p.stderr)
        old = record()
        del old["transfer_vs_ring"]
        p = run(old)
        self.assertEqual(p.returncode, 2)
        self.assertIn("lacks the field 'transfer_vs_ring'", p.stderr)
        older = record()
        del older["lost_nodes"]  # as bench_cluster wrote them before it lost several nodes
        p = run(older)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("record 1 lacks 'lost_nodes'", p.stderr)
        p = subprocess.run([sys.executable, SCRIPT, "/nonexistent/results.jsonl"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("/nonexistent/results.jsonl: cannot read it (No such file or directory)",
                      p.stderr)
        p = run()
        self.assertEqual(p.returncode, 2)
        self.assertIn("no bench_cluster records", p.stderr)


if __name__ == "__main__":
    unittest.main()
