#!/usr/bin/env python3
"""`memento launch` driving a Python training job (ctest labels fault, python).

usage: launch_python_test.py reference|mpirun|torchrun

The job is experiments/torch/gpt_train.py: a small GPT, data-parallel over gloo, with
tied weights, dropout, AdamW, an LR schedule, a stateful loader and a batch prefetched
across steps. It writes no launcher records itself: memento reports them.

reference: a failure-free launch (mpirun): its records must show every step (the job's
   own progress events), "nothing to restore" on every rank and a done event; the job's
   final digest and the done event's state hash go to $REFERENCE.
mpirun: a launch with every injection form, on 4 nodes of one rank, replica:2 (groups
   {0,1} and {2,3}): a node at the snapshot, protect and commit stages (1@3:snapshot,
   2@5:protect, 3@7:commit), a node at a step and another while the job recovers from
   it (1@9, 2@recovery), and two nodes at once (0+2@12).
torchrun: the same with one of the stage forms (2@5:protect): the stage faults are the
   same self-kill inside memento under either launcher, and each relaunch costs every
   rank's interpreter start-up again.
   Required: every event fired, the job finished with the failure-free run's digest
   (parameters, AdamW state, the carried batch, the loader's generator and the next
   random draws), every restore came from memory at the version the timeline
   names, and the steps lost are those between the restored version and the last step
   reported before each failure.
The same job under either launcher ends in the same bits, so one reference serves both.
Environment: MEMENTO_TEST_CLI (the memento tool), MEMENTO_TEST_PYTHON (the interpreter
with torch), MEMENTO_TEST_TORCHRUN, PYTHONPATH (the package), REFERENCE (a file).
"""
import json
import os
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "experiments", "torch", "gpt_train.py")
CLI = os.environ["MEMENTO_TEST_CLI"]
PYTHON = os.environ["MEMENTO_TEST_PYTHON"]
TORCHRUN = os.environ.get("MEMENTO_TEST_TORCHRUN", "torchrun")
REFERENCE = os.environ["REFERENCE"]
STEPS = 20
# scenario -> (--inject, the failures' stages in order, the stage faults' versions)
SCENARIOS = {
    "mpirun": ("1@3:snapshot,2@5:protect,3@7:commit,1@9,2@recovery,0+2@12",
               ["snapshot", "protect", "commit", "step", "recovery", "step"], [3, 5, 7]),
    "torchrun": ("2@5:protect,1@9,2@recovery,0+2@12",
                 ["protect", "step", "recovery", "step"], [5]),
}


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def of(recs, kind):
    return [r for r in recs if r["record"] == kind]


def launch(launcher, job, inject, out):
    records = tempfile.mktemp(prefix="memento-lpt-records-")
    cmd = [CLI, "launch", "-n", "4", "--ranks-per-node", "1", "--scheme", "replica:2",
           "--job", job, "--records", records, "--quiet", "--backoff", "0.1",
           "--launcher", launcher, "--torchrun", TORCHRUN]
    if inject:
        cmd += ["--inject", inject]
    cmd += ["--", PYTHON, SCRIPT, "--steps", str(STEPS), "--out", out]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=540)
    print(p.stdout, flush=True)
    recs = []
    if os.path.exists(records):
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        os.unlink(records)
    if p.returncode != 0:
        fail("launch exited %d" % p.returncode)
    with open(out) as f:
        digest = f.read().split()[0]
    return recs, digest


def check_reference(recs):
    summary = of(recs, "summary")[-1]
    if summary["outcome"] != "finished" or summary["final_step"] != STEPS:
        fail("failure-free run: %s" % summary)
    if not summary["state_hash"]:
        fail("the done event carried no state hash: %s" % summary)
    restores = of(recs, "restore")
    if len(restores) != 1 or not restores[0]["nothing_to_restore"]:
        fail("failure-free run: expected one 'nothing to restore' record, got %s" % restores)
    if restores[0]["ranks_reported"] != 4:
        fail("not every rank reported its restore: %s" % restores[0])


def check_injected(recs, digest, ref_digest, ref_state, want, stage_versions):
    summary = of(recs, "summary")[-1]
    if summary["outcome"] != "finished" or summary["final_step"] != STEPS:
        fail("injected run: %s" % summary)
    if of(recs, "not_fired"):
        fail("events never fired: %s" % of(recs, "not_fired"))
    failures = of(recs, "failure")
    stages = [f["stage"] for f in failures]
    if stages != want or not all(f["injected"] for f in failures):
        fail("failures %s, expected injected %s" % (stages, want))
    if failures[-1]["nodes"] != [0, 2]:
        fail("the last failure lost %s, expected nodes 0 and 2" % failures[-1]["nodes"])
    if digest != ref_digest:
        fail("final digest %s differs from the failure-free run's %s" % (digest, ref_digest))
    if summary["state_hash"] != ref_state:
        fail("done event's state %s differs from the failure-free run's %s"
             % (summary["state_hash"], ref_state))
    # Every failure is closed by the next successful restore; the interrupted
    # recovery (2@recovery) closes nothing.
    restores = [r for r in of(recs, "restore") if r["attempt"] > 0 and r.get("ok")]
    if len(restores) != len(want) - 1:
        fail("expected %d successful restores (%d failures, one during a recovery), got %s"
             % (len(want) - 1, len(want), [(r["attempt"], r.get("version")) for r in restores]))
    steps_lost = 0
    for r in restores:
        if not r["from_memory"] or "remote" in r["entries_by_source"]:
            fail("attempt %d restored from %s, expected memory" % (r["attempt"],
                                                                  r["entries_by_source"]))
        if r["ranks_reported"] != 4:
            fail("attempt %d: %d ranks reported their restore" % (r["attempt"],
                                                                 r["ranks_reported"]))
        closed = [f for f in failures if f["index"] in r["lost"]["failures"]]
        last = max(f["last_step"] for f in closed)
        if not 0 < r["version"] <= last:
            fail("attempt %d restored v%d, but the job had reached step %d"
                 % (r["attempt"], r["version"], last))
        if r["lost"]["steps_lost"] != last - r["version"]:
            fail("attempt %d: steps lost %d, expected %d - %d"
                 % (r["attempt"], r["lost"]["steps_lost"], last, r["version"]))
        if not r["lost"]["relaunch_s"] > 0:
            fail("attempt %d: no relaunch time: %s" % (r["attempt"], r["lost"]))
        steps_lost += r["lost"]["steps_lost"]
    if summary["steps_lost"] != steps_lost:
        fail("summary counts %d steps lost, the restores %d" % (summary["steps_lost"],
                                                                 steps_lost))
    # The step injection fired on the job's own progress events, the stage ones
    # inside memento at the version named.
    at_step = failures[want.index("step")]
    if at_step["last_step"] < 9:
        fail("1@9 fired at step %d" % at_step["last_step"])
    staged = [f.get("stage_version") for f in failures[:len(stage_versions)]]
    if staged != stage_versions:
        fail("stage faults fired at versions %s, expected %s" % (staged, stage_versions))
    print("PASS: %d failures, %d restores from memory %s; %d steps lost; final state %s "
          "bit-identical to the failure-free run" % (
              len(failures), len(restores), [r["version"] for r in restores], steps_lost,
              digest), flush=True)


def main():
    scenario = sys.argv[1] if len(sys.argv) == 2 else ""
    if scenario not in ("reference", "mpirun", "torchrun"):
        fail("usage: launch_python_test.py reference|mpirun|torchrun")
    work = tempfile.mkdtemp(prefix="memento-lpt-")
    job = "lpt-%s-%d-%s" % (scenario, os.getpid(), uuid.uuid4().hex[:6])
    try:
        if scenario == "reference":
            recs, digest = launch("mpirun", job, None, os.path.join(work, "out"))
            check_reference(recs)
            state = of(recs, "summary")[-1]["state_hash"]
            with open(REFERENCE, "w") as f:
                f.write("%s %s\n" % (digest, state))
            print("PASS: reference digest %s, state %s" % (digest, state), flush=True)
        else:
            with open(REFERENCE) as f:
                ref_digest, ref_state = f.read().split()
            inject, want, stage_versions = SCENARIOS[scenario]
            recs, digest = launch(scenario, job, inject, os.path.join(work, "out"))
            check_injected(recs, digest, ref_digest, ref_state, want, stage_versions)
    finally:
        subprocess.run(["rm", "-rf", work])
        subprocess.run([CLI, "clean", "--force", "--job", job], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
