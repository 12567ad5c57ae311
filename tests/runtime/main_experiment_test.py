#!/usr/bin/env python3
"""The main experiment's own arithmetic (experiments/goodput/run_main.py), on known
numbers: where its injected losses fall on each set-up's timeline, and the costs it
hands `memento advise` from a calibration."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "experiments", "goodput"))
import run_main  # noqa: E402


class Job:
    steps, failures, step_eff_s, step_s, mib, fs_mibps = 400, 4, 0.1, 0.08, 64, 256


def parse(spec):
    out = []
    for e in spec.split(","):
        node, when = e.split("@")
        step, _, delay = when.partition("+")
        out.append((int(node), int(step), float(delay[:-1]) if delay else 0.0))
    return out


class Placement(unittest.TestCase):
    def test_a_loss_in_a_write_is_after_the_last_report_plus_the_time_into_it(self):
        # Saves every 10 steps take 1 s; the report of step 10 comes after its save
        # (at 2.0 s). Time 1.5 s into the window [0, 20 steps] is 0.5 s into the first
        # save's write: the job last reported step 9 (at 0.9 s); the loss comes 0.6 s
        # later. Time 2.5 s is half a second after the write: step 15.
        a = Job()
        window = 20 * 0.1 + 2 * 1.0
        spec = run_main.inject_for(a, [(3, 0, 20, 1.5 / window), (2, 0, 20, 2.55 / window)],
                                   10, 1.0, reports_every_step=True)
        (node, step, delay), (node2, step2, delay2) = parse(spec)
        self.assertEqual((node, step), (3, 9))
        self.assertAlmostEqual(delay, 0.6, places=3)
        self.assertEqual((node2, step2), (2, 15))
        self.assertAlmostEqual(delay2, 0.05, places=3)

    def test_a_job_that_reports_at_saves_is_killed_after_its_last_save_report(self):
        a = Job()
        u = 0.55  # 11 steps into [0, 20] without writes: 1.1 s; reports at steps 5, 10, ...
        spec = run_main.inject_for(a, [(1, 0, 20, u)], 5, 0.0, reports_every_step=False)
        (node, step, delay), = parse(spec)
        self.assertEqual((node, step), (1, 10))
        self.assertAlmostEqual(delay, 0.1, places=3)

    def test_the_same_draws_give_every_set_up_the_same_nodes_and_fractions(self):
        a = Job()
        draws = run_main.draw_failures(a, 7)
        self.assertEqual(draws, run_main.draw_failures(a, 7))
        self.assertNotEqual(draws, run_main.draw_failures(a, 8))
        self.assertEqual(len(draws), 4)
        specs = [run_main.setup_inject(a, s, draws, 10) for s in run_main.SETUPS]
        for spec in specs:
            self.assertEqual([n for n, _, _ in parse(spec)], [d[0] for d in draws])
        for (_, lo, hi, _), (_, step, delay) in zip(draws, parse(specs[1])):
            self.assertTrue(lo - 10 <= step <= hi and step % 10 == 0, (lo, hi, step))
            self.assertLess(delay, 10 * a.step_eff_s + 1e-9)

    def test_mean_delay_of_a_spec(self):
        self.assertAlmostEqual(run_main.mean_delay_s("1@5+0.2s,2@9,0@14+0.4s"), 0.2)
        self.assertEqual(run_main.mean_delay_s(""), 0.0)


class Costs(unittest.TestCase):
    def test_costs_from_a_failure_free_and_a_failing_run(self):
        a = Job()  # 400 steps of 0.1 s: 40 s of steps
        free = {"train_wall_s": 44.0}  # every 10 steps: 40 saves cost 4 s, 0.1 s each
        run = {"failures": 4, "save_every": 10, "stall_s": 0.4, "saves": 40,
               "train_wall_s": 60.0, "inject": "0@5+0.1s,1@9+0.3s,2@20,3@30",
               "lost": {"detection": 0.4, "relaunch": 8.0, "rejoin": 0.0, "restore": 1.2,
                        "reprotect": 0.4, "recompute": 2.0}}
        c = run_main.costs_of(run, free, a)
        self.assertAlmostEqual(c["stall_s"], 0.1)            # (44 - 40) / 40 saves
        self.assertAlmostEqual(c["blocking_stall_s"], 0.01)  # what save() itself blocked
        self.assertAlmostEqual(c["restore_s"], 0.4)          # (1.2 + 0.4) / 4
        # (60 - 44) / 4 = 4 s per failure, less 0.5 s redone, 0.1 s of delay, 0.4 s restore.
        self.assertAlmostEqual(c["relaunch_s"], 3.0)
        self.assertAlmostEqual(c["launcher_parts_s"], 2.1)
        # A failure never costs less than the launcher's own parts of it.
        run["train_wall_s"] = 50.0
        self.assertAlmostEqual(run_main.costs_of(run, free, a)["relaunch_s"], 2.1)

    def test_calibration_pairs_and_their_mean(self):
        rows = [{"setup": "s", "tag": t, "i": i} for i, t in enumerate(
            ["calibrate-free", "calibrate", "calibrate-free#1", "calibrate#1", "calibrate#2",
             "rep0"])] + [{"setup": "other", "tag": "calibrate#1", "i": 9}]
        pairs = run_main.calibration_pairs(rows, "s")
        # pair 0 from the tags without an index; pair 2 has no failure-free run: left out
        self.assertEqual({k: (f["i"], r["i"]) for k, (f, r) in pairs.items()},
                         {0: (0, 1), 1: (2, 3)})
        # field by field: an outlier of one pair does not move it
        mid = run_main.median_costs([{"stall_s": 1.0, "relaunch_s": 2.0},
                                     {"stall_s": 2.9, "relaunch_s": 4.0},
                                     {"stall_s": 1.1, "relaunch_s": 3.0}])
        self.assertEqual(mid, {"stall_s": 1.1, "relaunch_s": 3.0})


if __name__ == "__main__":
    unittest.main()
