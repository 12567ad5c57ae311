#!/usr/bin/env python3
"""`memento launch --recovery in-job` with a Python DDP job (ctest labels fault, python),
with the C++ demo job (label fault), and with a C++ job that repairs its own MPI world over
ULFM (`--launcher ulfm`, label fault).

usage: launch_injob_test.py SCENARIO

The job is experiments/torch/gpt_train.py (a small GPT, DDP over gloo, AdamW, an LR
schedule, a stateful loader, a batch carried across steps), whose training runs inside
memento.resilient; 4 nodes of one rank, replica:2. Each rank appends "rank pid attempt"
to a file every time its training (re)starts.

spares_mpirun: 5 warm spares; a node at a step (1@4), the spare that takes its place while
   it restores (1@recovery), nodes at the snapshot and protect stages (2@9:snapshot,
   0@12:protect) and a survivor while the job recovers from that (3@recovery).
fresh_torchrun: no spares (fresh replacements); rank 0's node at a step (0@4), two nodes at
   once, one of each replica pair, at the commit stage (1+3@8:commit).
fallback_mpirun: 1 spare for two losses (1@4, 2@8): the first in-job, the second, with no
   spare left, by a full relaunch.
remote_mpirun: both nodes of a replica pair at once (0+1@6): memory cannot serve them; the
   in-job recovery restores them from the remote tier (persisted every save).
demo_replica: the C++ demo (launch::Resilient, gloo collectives), replica:2, 4 warm
   spares: nodes at a step (1@3), at the snapshot (2@8:snapshot) and protect
   (0@11:protect) stages, and a survivor during the recovery from that (3@recovery).
demo_xor: the demo, xor:3, fresh replacements: a node at a step (2@3), one at the commit
   stage (1@8:commit), and its replacement while it takes over (1@recovery).
demo_rs: the demo, rs:2+2, 3 warm spares: two nodes at once (0+2@3), then one at the
   protect stage (3@9:protect).
demo_unrecoverable: the demo, xor:3, no remote tier: two nodes of the one XOR group at
   once (0+1@3). Nothing can serve them: the launcher stops the job at once (exit 1,
   outcome unrecoverable) instead of leaving its ranks waiting for a membership.
ulfm_xor: tests/runtime/ulfm/ulfm_worker (runtime::RunResilient: its world repaired over
   ULFM, spares that are ranks of the one mpirun) under `--launcher ulfm`, xor:3, 3 spares:
   a node at a step (2@4), one at the protect stage (1@8:protect), and the spare that took
   its place while it restores (1@recovery).
ulfm_rs: the same job, rs:2+2, 4 spares: two nodes at once at the snapshot stage
   (0+2@3:snapshot: the first kills the second, then itself), then one at the commit stage
   (3@9:commit).
ulfm_fallback: the same job, replica:2, 1 spare for two losses (1@4, 2@8): the first in-job,
   the second, with no spare left, by a full relaunch (which starts a spare again).
unplanned_torchrun: the Python job under torchrun, replica:2, fresh replacements: rank 1's
   process killed the same way (its node's torchrun agent then fails, which is not the
   job's failure), then node 2 at step 12; both recovered in-job, one launch.
demo_unplanned: the demo, xor:3, 2 spares: rank 1's process is killed by a shell around it
   once step 3 was reported, then node 2 is lost at step 9 (2@9): the first, nobody having
   injected it, is recovered in-job as a lost node (a spare takes it); one launch.
ulfm_unplanned: the same job, xor:3, 2 spares: rank 1 ends at step 5 on its own
   (MEMENTO_TEST_KILL, as a machine that fails), then node 2 is lost at step 10 (2@10):
   the launcher follows the world's own repair of the first as an in-job recovery (a
   failure nobody injected) instead of relaunching a job that recovers; one launch.
demo_ulfm_xor: the demo built against Open MPI 5 (memento_demo_ulfm: its world repaired over
   ULFM, MPI collectives, warm spares that are ranks of the one mpirun) under
   `--launcher ulfm`, xor:3, 3 spares: a node at a step (2@4), one at the protect stage
   (1@8:protect), and the spare that took its place while it restores (1@recovery).
demo_ulfm_rs: the same, rs:2+2, 3 spares: two nodes at once at the snapshot stage
   (0+2@3:snapshot), one at the commit stage (3@9:commit), and one more with no spare left
   (1@12): a full relaunch.
demo_unplanned_node: demo_unplanned on 4 nodes of 2 ranks, 4 spares: rank 3 is killed
   alone; the launcher replaces its node whole (rank 2 killed with it, two spares take
   both places), then node 2 is lost at step 9; one launch.
demo_ulfm_node: demo_ulfm_xor's job on 4 nodes of 2 ranks, xor:3, 4 spares (two nodes of
   them): rank 3 is killed alone once step 3 was reported (a process that crashed, its
   machine up), then node 1 is lost at step 30 of 48 (1@30). The world replaces node 1
   whole each time (rank 2 retires at the first and leaves the job: a node's ranks share
   its memory), so every restore sees nodes of two ranks; one launch.
Required: every event fired, one launch (two for fallback), an in-job record per
recovery, the survivors' process ids unchanged across in-job recoveries and every lost
rank's changed, every restore from memory with the steps lost counted, and the final
digest and state hash equal to the failure-free run's ($REFERENCE, written by the
launch_python reference run; for the demo, a failure-free launch over MPI that the test
runs first: the gloo collectives of in-job mode compute the same bits).
For the ULFM job, the process ids are those every rank records per generation of its world
(pid.aA.rR in the status folder), and the reference state is the one the job computes alone
and prints with its own bit-exact check ("ulfm: OK ..., failure-free state H").
Environment: MEMENTO_TEST_CLI, MEMENTO_TEST_PYTHON, MEMENTO_TEST_TORCHRUN, PYTHONPATH,
REFERENCE (Python scenarios); MEMENTO_TEST_CLI, MEMENTO_TEST_DEMO (demo);
MEMENTO_TEST_CLI, MEMENTO_TEST_ULFM_WORKER (ulfm); MEMENTO_TEST_CLI, MEMENTO_TEST_DEMO,
MEMENTO_TEST_DEMO_ULFM (demo_ulfm).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "experiments", "torch", "gpt_train.py")
CLI = os.environ["MEMENTO_TEST_CLI"]
PYTHON = os.environ.get("MEMENTO_TEST_PYTHON", "python3")
TORCHRUN = os.environ.get("MEMENTO_TEST_TORCHRUN", "torchrun")
# torch's store client looks up the name of every address it connects to,
# and a resolver that drops the query (as the development VM's does under a
# burst of them) costs its timeout, 5 s by default, in the rejoin; the in-job
# deadline the launcher gives a recovery is what these runs check, not the
# machine's DNS (README, "In-job recovery").
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
STEPS = {"python": 20, "demo": 16, "demo_ulfm": 16, "ulfm": 16}
# Scenarios that run longer: demo_ulfm_node's world repairs the first loss before the
# launcher sees it (it looks 4 times a second) and the demo's steps take ~15 ms, so the
# step of its second loss must come well after that.
SCENARIO_STEPS = {"demo_ulfm_node": 48}
ULFM_STEP_MS = 40  # each step of the ULFM job also sleeps this long
DEMO_ARGS = ["--dim", "32", "--blocks", "1", "--context", "16", "--quiet"]
SCENARIOS = {
    # job, launcher, scheme, spares, inject, in-job recoveries, launches, failure stages
    "spares_mpirun": ("python", "mpirun", "replica:2", 5,
                      "1@4,1@recovery,2@9:snapshot,0@12:protect,3@recovery", 5, 1,
                      ["step", "recovery", "snapshot", "protect", "recovery"]),
    "fresh_torchrun": ("python", "torchrun", "replica:2", 0, "0@4,1+3@8:commit", 2, 1,
                       ["step", "commit"]),
    "fallback_mpirun": ("python", "mpirun", "replica:2", 1, "1@4,2@8", 1, 2, ["step", "step"]),
    "remote_mpirun": ("python", "mpirun", "replica:2", 2, "0+1@6", 1, 1, ["step"]),
    "demo_replica": ("demo", "mpirun", "replica:2", 4,
                     "1@3,2@8:snapshot,0@11:protect,3@recovery", 4, 1,
                     ["step", "snapshot", "protect", "recovery"]),
    "demo_xor": ("demo", "mpirun", "xor:3", 0, "2@3,1@8:commit,1@recovery", 3, 1,
                 ["step", "commit", "recovery"]),
    "demo_rs": ("demo", "mpirun", "rs:2+2", 3, "0+2@3,3@9:protect", 2, 1, ["step", "protect"]),
    # Two losses at one step: the second fires once the new generation reached it.
    "demo_same_step": ("demo", "mpirun", "replica:2", 2, "1@3,2@3", 2, 1, ["step", "step"]),
    # A fresh replacement lost again: it must run as the rank it replaced.
    "demo_fresh_twice": ("demo", "mpirun", "xor:3", 0, "1@3,1@6", 2, 1, ["step", "step"]),
    "demo_unrecoverable": ("demo", "mpirun", "xor:3", 2, "0+1@3", 1, 1, ["step"]),
    "demo_ulfm_xor": ("demo_ulfm", "ulfm", "xor:3", 3, "2@4,1@8:protect,1@recovery", 3, 1,
                      ["step", "protect", "recovery"]),
    "demo_ulfm_rs": ("demo_ulfm", "ulfm", "rs:2+2", 3, "0+2@3:snapshot,3@9:commit,1@12", 2, 2,
                     ["snapshot", "commit", "step"]),
    "ulfm_xor": ("ulfm", "ulfm", "xor:3", 3, "2@4,1@8:protect,1@recovery", 3, 1,
                 ["step", "protect", "recovery"]),
    "ulfm_rs": ("ulfm", "ulfm", "rs:2+2", 4, "0+2@3:snapshot,3@9:commit", 2, 1,
                ["snapshot", "commit"]),
    "ulfm_fallback": ("ulfm", "ulfm", "replica:2", 1, "1@4,2@8", 1, 2, ["step", "step"]),
    # Rank 1 ends at step 5 on its own (MEMENTO_TEST_KILL; a failure stage None: nobody
    # injected it): its world repairs it, and the launcher follows in-job.
    "ulfm_unplanned": ("ulfm", "ulfm", "xor:3", 2, "2@10", 2, 1, [None, "step"]),
    # Rank 1's process is killed once step 3 was reported, by nobody the launcher knows
    # (DIES_AFTER_STEP_3): its node is replaced in-job, as a lost one.
    "demo_unplanned": ("demo", "mpirun", "xor:3", 2, "2@9", 2, 1, [None, "step"]),
    # Nodes of two ranks: rank 3 dies alone, its node is replaced whole (two spares).
    "demo_unplanned_node": ("demo", "mpirun", "xor:3", 4, "2@9", 2, 1, [None, "step"]),
    # The same under ULFM, the injected loss on the node that lost a rank.
    "demo_ulfm_node": ("demo_ulfm", "ulfm", "xor:3", 4, "1@30", 2, 1, [None, "step"]),
    # The same under torchrun, fresh replacements: the node's agent ends with its worker.
    "unplanned_torchrun": ("python", "torchrun", "replica:2", 0, "2@12", 2, 1, [None, "step"]),
}
# Scenarios whose command runs under DIES_AFTER_STEP_3, and the rank that dies (default 1).
DIES = ("demo_unplanned", "unplanned_torchrun", "demo_unplanned_node", "demo_ulfm_node")
DIES_RANK = {"demo_unplanned_node": 3, "demo_ulfm_node": 3}
# Ranks and ranks per node, where not 4 nodes of one rank.
SHAPE = {"demo_unplanned_node": (8, 2), "demo_ulfm_node": (8, 2)}
# A loss the job brings about itself (ulfm_worker's MEMENTO_TEST_KILL), by scenario.
JOB_KILLS = {"ulfm_unplanned": "step:5:1"}
# The job's command under a shell that SIGKILLs the first launch's rank DIES_RANK (not a spare,
# not a replacement) once rank 0 reported step 3: a process that dies on its own. The
# shell's pid (the job's, after the exec) is its child's parent: torchrun reads "$$" in its
# arguments as an escaped "$".
DIES_AFTER_STEP_3 = r"""
me=$(exec sh -c 'echo $PPID')
if [ "$MEMENTO_LAUNCH_ATTEMPT" = 0 ] && [ "$RANK" = "$DIES_RANK" ] && [ -z "$MEMENTO_LAUNCH_SPARE" ]; then
  (until grep -q '"step":3,' "$MEMENTO_LAUNCH_DIR/events.jsonl" 2>/dev/null; do sleep 0.02; done
   kill -9 "$me") &
fi
exec "$@"
"""


STATUS = []  # the status folder of the launch under test, once it ran


def fail(msg):
    """Fails the test; the tail of every log the launched job left goes with it."""
    for folder in STATUS:
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.startswith("attempt") and name.endswith(".log"):
                with open(os.path.join(folder, name), errors="replace") as f:
                    lines = f.readlines()
                print("--- %s (last 40 of %d lines)" % (name, len(lines)))
                print("".join(lines[-40:]), end="", flush=True)
            elif name.startswith("stall."):  # a survivor that never left train() (injob.py)
                with open(os.path.join(folder, name), errors="replace") as f:
                    print("--- %s\n%s" % (name, f.read()), end="", flush=True)
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def of(recs, kind):
    return [r for r in recs if r["record"] == kind]


def steps(scenario):
    """The training steps of the scenario's job."""
    return SCENARIO_STEPS.get(scenario, STEPS[SCENARIOS[scenario][0]])


def shape(scenario):
    """(ranks, ranks per node) of the scenario's job."""
    return SHAPE.get(scenario, (4, 1))


def demo_reference(scenario, job, work):
    """The demo's failure-free run over MPI (no in-job recovery): its final state hash."""
    records = os.path.join(work, "reference-records")
    np, per_node = shape(scenario)
    cmd = [CLI, "launch", "-n", str(np), "--ranks-per-node", str(per_node), "--scheme",
           "replica:2", "--job",
           job + "-ref", "--records", records, "--quiet", "--", os.environ["MEMENTO_TEST_DEMO"],
           "--steps", str(steps(scenario))] + DEMO_ARGS
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    if p.returncode != 0:
        print(p.stdout)
        fail("the reference run exited %d" % p.returncode)
    with open(records) as f:
        summary = of([json.loads(line) for line in f if line.strip()], "summary")[-1]
    return summary["state_hash"]


def launch(scenario, job, work, expect=0):
    kind, launcher, scheme, spares, inject = SCENARIOS[scenario][:5]
    records, out, pids, status = (os.path.join(work, n)
                                  for n in ("records", "out", "pids", "status"))
    STATUS.append(status)
    np, per_node = shape(scenario)
    cmd = [CLI, "launch", "-n", str(np), "--ranks-per-node", str(per_node), "--scheme", scheme,
           "--job", job, "--records", records, "--status-dir", status, "--quiet",
           "--backoff", "0.1",
           "--launcher", launcher, "--torchrun", TORCHRUN, "--recovery", "in-job",
           "--spares", str(spares), "--inject", inject]
    if scenario == "remote_mpirun":
        cmd += ["--remote", os.path.join(work, "remote"), "--persist-every", "1"]
    if scenario in ("fresh_torchrun", "unplanned_torchrun"):
        # Two fresh replacements start at once, and each spends seconds of CPU before it can
        # rejoin: the interpreter, torch, and DDP's first construction (which imports
        # torch._dynamo): 7 s alone, 18-37 s on 2 busy cores, against 60 s by default.
        cmd += ["--injob-timeout", "120"]
    cmd += ["--"] + (["sh", "-c", DIES_AFTER_STEP_3, "sh"] if scenario in DIES else [])
    if kind == "demo":
        cmd += [os.environ["MEMENTO_TEST_DEMO"], "--steps", str(steps(scenario)), "--pids",
                pids] + DEMO_ARGS
    elif kind == "demo_ulfm":
        cmd += [os.environ["MEMENTO_TEST_DEMO_ULFM"], "--spares", str(spares), "--steps",
                str(steps(scenario)), "--pids", pids] + DEMO_ARGS
    elif kind == "ulfm":
        cmd += [os.environ["MEMENTO_TEST_ULFM_WORKER"], str(steps(scenario)), str(spares),
                str(ULFM_STEP_MS)]
    else:
        cmd += [PYTHON, SCRIPT, "--steps", str(steps(scenario)), "--out", out, "--pids",
                pids]
    env = dict(os.environ, DIES_RANK=str(DIES_RANK.get(scenario, 1)))
    if scenario in JOB_KILLS:
        env = dict(env, MEMENTO_TEST_KILL=JOB_KILLS[scenario])
    if kind == "demo":
        # memento launch run as one task of an outer job (srun, mpirun): its own rank
        # variables must not reach the ranks it starts (a fresh replacement took rank 0's
        # identity from them), and a reused status folder's membership file from an
        # earlier in-job run must not be taken for this one's.
        env = dict(env, PMIX_RANK="0", OMPI_COMM_WORLD_RANK="0")
        os.makedirs(status, exist_ok=True)
        with open(os.path.join(status, "injob.json"), "w") as f:
            json.dump({"attempt": 7, "port": 1, "ranks": {}}, f)
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600, env=env)
    print(p.stdout, flush=True)
    if p.returncode != expect:
        fail("launch exited %d, expected %d" % (p.returncode, expect))
    # The timeline numbers launches, not attempts (an in-job recovery is an attempt).
    numbers = [int(n) for n in re.findall(r"^ +[0-9.]+s +launch ([0-9]+)", p.stdout, re.M)]
    if numbers != list(range(1, len(numbers) + 1)):
        fail("the timeline numbers its launches %s" % numbers)
    if kind == "demo":
        # Every rank of every attempt wrote pid.aA.rR for the rank it runs as (a survivor, a
        # spare, a fresh replacement's exec wrapper): none is missing, none taken twice.
        ranks_of = {}
        for n in os.listdir(status):
            if n.startswith("pid.a"):
                attempt, rank = (int(x) for x in n[len("pid.a"):].split(".r"))
                ranks_of.setdefault(attempt, set()).add(rank)
        for attempt, ranks in sorted(ranks_of.items()):
            if ranks != set(range(np)):
                fail("attempt %d: pid files of ranks %s" % (attempt, sorted(ranks)))
        if spares > 0 and SCENARIOS[scenario][6] == 1 and SCENARIOS[scenario][5] > 0:
            # The last announcement names every place a spare took in the launch (a spare
            # that had not read an announcement before the next one replaced it must find its
            # place there): the ranks run by another process than at the start, each by the
            # spare it names.
            with open(os.path.join(status, "injob.json")) as f:
                last = json.load(f)
            pid_of = {}
            for attempt in (0, last["attempt"]):
                for rank in range(np):
                    with open(os.path.join(status, "pid.a%d.r%d" % (attempt, rank))) as f:
                        pid_of[attempt, rank] = int(f.read())
            replaced = {r for r in range(np) if pid_of[0, r] != pid_of[last["attempt"], r]}
            named = {int(r): int(p["spare_pid"]) for r, p in last["ranks"].items()}
            if set(named) != replaced or any(named[r] != pid_of[last["attempt"], r]
                                             for r in named):
                fail("the last announcement names %s, the ranks replaced by spares are %s"
                     % (named, {r: pid_of[last["attempt"], r] for r in replaced}))
    with open(records) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    digest = None  # the demo's --out is raw parameters; its state hash is compared
    if kind == "python" and expect == 0:
        with open(out) as f:
            digest = f.read().split()[0]
    starts = {}  # attempt -> {rank: pid}
    if kind == "ulfm":
        for name in os.listdir(status):  # pid.aA.rR, by the exec wrapper and by the job
            if name.startswith("pid.a"):
                attempt, rank = (int(x) for x in name[len("pid.a"):].split(".r"))
                with open(os.path.join(status, name)) as f:
                    if rank < 4:
                        starts.setdefault(attempt, {})[rank] = int(f.read())
        return recs, ulfm_reference(status), starts
    with open(pids) as f:
        for line in f:
            rank, pid, attempt = (int(x) for x in line.split())
            starts.setdefault(attempt, {})[rank] = pid
    return recs, digest, starts


def ulfm_reference(status):
    """The ULFM job's own verdict: its result line, and the failure-free state it computed."""
    for name in sorted(os.listdir(status)):
        if name.startswith("attempt") and name.endswith(".log"):
            with open(os.path.join(status, name), errors="replace") as f:
                for line in f:
                    if line.startswith("ulfm: OK ") and "failure-free state " in line:
                        return line.split("failure-free state ")[1].split()[0]
    fail("the ULFM job printed no 'ulfm: OK' line (its own bit-exact check)")


def check_processes(scenario, recs, starts):
    """Across each in-job recovery the survivors keep their process, the lost ranks (every
    rank of a lost node) do not."""
    np, per_node = shape(scenario)
    for rec in of(recs, "injob"):
        attempt = rec["attempt"]
        nodes = {int(r.split()[1]) for r in rec["replaced"]}  # "node K -> identity"
        replaced = {n * per_node + lane for n in nodes for lane in range(per_node)}
        before = starts.get(attempt - 1)
        after = starts.get(attempt)
        if before is None or after is None or len(after) != np:
            fail("attempt %d: training starts %s (before: %s)" % (attempt, after, before))
        for rank in range(np):
            if rank not in before:
                continue  # that rank died in attempt - 1 before training (re)started
            same = before[rank] == after[rank]
            if rank in replaced and same:
                fail("attempt %d: lost rank %d kept process %d" % (attempt, rank, after[rank]))
            if rank not in replaced and not same:
                fail("attempt %d: surviving rank %d changed process %d -> %d"
                     % (attempt, rank, before[rank], after[rank]))


def check(scenario, recs, digest, starts, ref_digest, ref_state):  # noqa: C901
    kind = SCENARIOS[scenario][0]
    injobs, launches, stages = SCENARIOS[scenario][5:]
    summary = of(recs, "summary")[-1]
    if summary["outcome"] != "finished" or summary["final_step"] != steps(scenario):
        fail("run: %s" % summary)
    if of(recs, "not_fired"):
        fail("events never fired: %s" % of(recs, "not_fired"))
    failures = of(recs, "failure")
    # A failure nothing injected has no stage (None in `stages`: the job's own).
    if ([f.get("stage") for f in failures] != stages
            or [f.get("injected") for f in failures] != [s is not None for s in stages]):
        fail("failures %s, expected %s (None: nobody injected it); not injected: %s"
             % ([f.get("stage") for f in failures], stages,
                [f for f in failures if not f.get("injected")]))
    if summary["launches"] != launches or summary["injob_recoveries"] != injobs:
        fail("%d launch(es) and %d in-job recoveries, expected %d and %d"
             % (summary["launches"], summary["injob_recoveries"], launches, injobs))
    if len(of(recs, "injob")) != injobs:
        fail("in-job records: %s" % of(recs, "injob"))
    if launches > 1 and not of(recs, "injob_fallback"):
        fail("a relaunch without an injob_fallback record")
    # torchrun's surviving agents wait in its exit barrier for the lost nodes' agents: they
    # are stopped once the job is done, not after --teardown-grace.
    if of(recs, "mpirun_stuck"):
        fail("the launch waited out a stuck %s: %s" % (of(recs, "mpirun_stuck")[0]["launcher"],
                                                       of(recs, "mpirun_stuck")))
    check_processes(scenario, recs, starts)
    if digest != ref_digest or summary["state_hash"] != ref_state:
        fail("final digest %s / state %s differ from the failure-free run's %s / %s"
             % (digest, summary["state_hash"], ref_digest, ref_state))
    restores = [r for r in of(recs, "restore") if r.get("ok") and "lost" in r]
    steps_lost = 0
    for r in restores:
        if scenario == "remote_mpirun":
            if not r["from_remote"] or "remote" not in r["entries_by_source"]:
                fail("attempt %d: the lost replica pair was not served from the remote tier: %s"
                     % (r["attempt"], r["entries_by_source"]))
        elif not r["from_memory"] or r["ranks_reported"] != shape(scenario)[0]:
            fail("attempt %d restored from %s (%d ranks)" % (r["attempt"], r["entries_by_source"],
                                                           r["ranks_reported"]))
        closed = [f for f in failures if f["index"] in r["lost"]["failures"]]
        last = max(f["last_step"] for f in closed)
        # The version can be ahead of the last step reported: rank 0 reports a step
        # after its save and the next collective, which a loss can interrupt.
        if r["lost"]["steps_lost"] != max(0, last - r["version"]):
            fail("attempt %d: steps lost %d, expected %d - %d"
                 % (r["attempt"], r["lost"]["steps_lost"], last, r["version"]))
        steps_lost += r["lost"]["steps_lost"]
    in_job = [r for r in restores if r["lost"]["recovery"] == "in-job"]
    # A loss during a recovery is closed with it by one restore.
    want = injobs - stages.count("recovery")
    if len(in_job) != want or not all(timed_rejoin(r, failures) for r in in_job):
        fail("%d in-job restores with a rejoin time, expected %d: %s"
             % (len(in_job), want, [r["lost"] for r in in_job]))
    if summary["steps_lost"] != steps_lost:
        fail("summary counts %d steps lost, the restores %d" % (summary["steps_lost"], steps_lost))
    print("PASS: %s: %d failures, %d in-job recoveries, %d launch(es); rejoin %s s; final "
          "state %s bit-identical to the failure-free run" % (
              scenario, len(failures), injobs, launches,
              ["%.2f" % r["lost"]["rejoin_s"] for r in in_job], summary["state_hash"]), flush=True)


def timed_rejoin(restore, failures):
    """The launcher saw the restore begin, and detection and rejoin add up to
    the time from the first fault it closes to that begin. Under ULFM the job
    can begin its restore before the launcher saw the loss: the rejoin is then
    0, its detection the whole time; a loss nobody injected is timed from when
    the launcher saw it, which can be after the restore began: both are 0."""
    lost = restore["lost"]
    if "t_restore_begin" not in lost or lost["rejoin_s"] < 0:
        return False
    first = min(f["t_fail"] for f in failures if f["index"] in lost["failures"])
    return abs(lost["detection_s"] + lost["rejoin_s"]
               - max(0.0, lost["t_restore_begin"] - first)) < 1e-4


def check_unrecoverable(recs):
    summary = of(recs, "summary")[-1]
    failed = [r for r in of(recs, "restore") if r["attempt"] == 1 and not r.get("ok")]
    if summary["outcome"] != "unrecoverable" or not failed or summary["launches"] != 1:
        fail("expected one launch ending unrecoverable after a failed restore: %s" % summary)
    # Left alone, the ranks would wait 30 s for a membership and the transport 60 s.
    if summary["wall_s"] > 20:
        fail("the launcher took %.1f s to stop an unrecoverable in-job run" % summary["wall_s"])
    print("PASS: demo_unrecoverable: stopped %.1f s into the run, outcome unrecoverable"
          % summary["wall_s"], flush=True)


def main():
    scenario = sys.argv[1] if len(sys.argv) == 2 else ""
    if scenario not in SCENARIOS:
        fail("usage: launch_injob_test.py %s" % "|".join(SCENARIOS))
    work = tempfile.mkdtemp(prefix="memento-injob-")
    job = "injob-%s-%d-%s" % (scenario, os.getpid(), uuid.uuid4().hex[:6])
    try:
        if scenario == "demo_unrecoverable":
            recs, _, _ = launch(scenario, job, work, expect=1)
            check_unrecoverable(recs)
            return
        if SCENARIOS[scenario][0] == "ulfm":
            recs, ref_state, starts = launch(scenario, job, work)
            check(scenario, recs, None, starts, None, ref_state)
            return
        if SCENARIOS[scenario][0] in ("demo", "demo_ulfm"):
            ref_digest, ref_state = None, demo_reference(scenario, job, work)
        else:
            with open(os.environ["REFERENCE"]) as f:
                ref_digest, ref_state = f.read().split()
        recs, digest, starts = launch(scenario, job, work)
        check(scenario, recs, digest, starts, ref_digest, ref_state)
    finally:
        subprocess.run(["rm", "-rf", work])
        subprocess.run([CLI, "clean", "--force", "--job", job], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
