#!/usr/bin/env python3
"""The recovery-rate driver's classification on a small run (ctest label fault).

N=4 virtual nodes, replica:2 (groups {0,1} and {2,3}), f=2 nodes lost at once:
a trial must be served from memory exactly when the two lost nodes are in
different groups, and from the remote tier when they form a whole group. The
seed is chosen so that both classes occur; every trial's class is checked
against that prediction, and the rate row against `memento rate` (exact 2/3).
Then --resume with other settings is refused, and --resume with a sixth trial
must reuse the five records and run one.
Environment: MEMENTO_TEST_CLI, MEMENTO_TEST_DEMO.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "..", "..", "experiments", "recovery_rate", "run_recovery_rate.py")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run_driver(cmd, results, what):
    """Runs the driver; its records."""
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=1500)
    print(p.stdout)
    if p.returncode != 0:
        fail("%s exited %d" % (what, p.returncode))
    with open(os.path.join(results, "check.jsonl")) as f:
        return [json.loads(line) for line in f]


def main():
    results = tempfile.mkdtemp(prefix="memento-rr-test-")
    cmd = [sys.executable, DRIVER, "--schemes", "replica:2", "--nodes", "4", "--failures", "2",
           "--trials", "5", "--steps", "8", "--window", "5-7", "--persist-every", "2",
           "--seed", os.environ.get("RR_SEED", "3"), "--name", "check", "--no-plots",
           "--results", results, "--cli", os.environ["MEMENTO_TEST_CLI"],
           "--demo", os.environ["MEMENTO_TEST_DEMO"]]
    recs = run_driver(cmd, results, "driver")
    trials = [r for r in recs if r["record"] == "trial"]
    if len(trials) != 5:
        fail("expected 5 trials, got %d" % len(trials))
    for t in trials:
        lost = t.get("lost_nodes")
        if not lost or len(lost) != 2:
            fail("trial %d lost %s, expected 2 nodes" % (t["trial"], lost))
        same_group = lost[0] // 2 == lost[1] // 2
        want = "remote" if same_group else "memory"
        if t["class"] != want:
            fail("trial %d lost nodes %s: classified %s, expected %s (%s)"
                 % (t["trial"], lost, t["class"], want, t.get("why", "")))
    classes = {t["class"] for t in trials}
    if classes != {"memory", "remote"}:
        fail("the run must land in both classes, got %s (change RR_SEED)" % classes)
    row = [r for r in recs if r["record"] == "rate"][0]
    if abs(row["exact"] - 2 / 3) > 1e-9:
        fail("exact probability %s, expected 2/3" % row["exact"])
    if not os.path.exists(os.path.join(results, "check.md")):
        fail("no report written")
    if os.path.exists(os.path.join(results, "check.jsonl.partial")):
        fail("the finished run left its partial records file")
    # --resume with other settings (the steps a trial runs) is refused, and
    # leaves the records as they are.
    at = cmd.index("--steps")
    p = subprocess.run(cmd[:at + 1] + ["9"] + cmd[at + 2:] + ["--resume"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode == 0 or "was run with" not in p.stdout:
        fail("--resume with other --steps: exit %d, %s" % (p.returncode, p.stdout))
    # --resume with one trial more: the five are reused as they are, one runs.
    at = cmd.index("--trials")
    again = run_driver(cmd[:at + 1] + ["6"] + cmd[at + 2:] + ["--resume"], results,
                       "resumed driver")
    trials6 = [r for r in again if r["record"] == "trial"]
    if trials6[:5] != trials or len(trials6) != 6:
        fail("--resume did not keep the 5 trials and add one: %d trials" % len(trials6))
    rows = [r for r in again if r["record"] == "rate"]
    if len(rows) != 1 or rows[0]["trials"] != 6:
        fail("--resume: expected one rate row over 6 trials, got %s" % rows)
    subprocess.run(["rm", "-rf", results])
    print("PASS: %d trials classified as predicted by the lost nodes' groups: %s"
          % (len(trials), [(t["lost_nodes"], t["class"]) for t in trials]))


if __name__ == "__main__":
    main()
