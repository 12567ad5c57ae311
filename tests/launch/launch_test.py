#!/usr/bin/env python3
"""Fault tests of `memento launch` with the demo job (ctest label fault).

usage: launch_test.py SCENARIO
  reference       failure-free run; writes the reference (final state hash) to $REFERENCE
  step            node 1 lost at step 3 (launcher SIGKILL + unlink)
  step-delay      node 1 lost 0.3 s after step 3 is reported, in the middle of the
                  steps after it (a longer run, against its own failure-free run)
  snapshot|protect|commit|persist
                  node 2 lost at that stage of version 4 (the job's fault hook)
  recovery        node 1 lost at step 3, node 2 lost while the job recovers
  two-nodes       nodes 0 and 2 lost together (replica:2: one per group)
  stuck-mpirun    as protect, under an mpirun that does not exit after its ranks
                  ended: the launcher kills it, relaunches, and finishes
  interrupt       SIGINT or SIGHUP while the job runs: exit 130, segments cleaned; a
                  run whose output pipe is closed finishes (SIGPIPE ignored)
  launcher-killed the launcher SIGKILLed while the job runs: the ranks end too
  stale-pid-file  a pid file naming another process: the launcher does not kill it
  interrupt-backoff
                  Ctrl-C during the backoff before a relaunch: 1 launch counted
  bad-scheme | bad-node | bad-command | bad-launcher | failing-job
                  (bad-launcher also: a bad --recovery, --spares without in-job or
                  negative, a zero --injob-timeout, --launcher ulfm without in-job, with
                  spares that are not whole nodes or without an mpirun; --remote,
                  --status-dir or --records that cannot be written, a bad --job)
                  bad input is refused with a clear error; a job that fails on its
                  own is relaunched a bounded number of times, its exit status
                  and output tail shown, bytes that are not UTF-8 included (and
                  it ran with Open MPI's kill grace set to 0)
  after-done      a loss timed after the job's last step is not injected (relaunch and
                  in-job mode): the job finishes in one launch
  wrapped         the command a wrapper script that does not exec the job: a lost node
                  takes the job process too; a warm spare run by it finds its place
  gave-up-keeps-stores
                  a job that fails after its last commit until the launch gives up keeps
                  its stores, and a rerun of its job id resumes from them
  injob-raises    in-job, a rank's training raises with no node lost: relaunched at once,
                  the error named, not after --injob-timeout
  failing-with-progress
                  a job that fails on its own but trains past every step reported
                  before starts a new row of failures, one that only passes the
                  previous launch's step does not; --status-dir keeps the user's files
Every scenario that trains requires the final state to be bit-identical to
the reference (the same hash of every rank's parameters and Adam moments).
Environment: MEMENTO_TEST_CLI, MEMENTO_TEST_DEMO (binaries), REFERENCE (file).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

CLI = os.environ["MEMENTO_TEST_CLI"]
DEMO = os.environ["MEMENTO_TEST_DEMO"]
REFERENCE = os.environ["REFERENCE"]
NP = 4
DEMO_ARGS = ["--steps", "8", "--dim", "32", "--blocks", "1", "--context", "16", "--quiet"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def job_segments(job):
    shm = os.environ.get("MEMENTO_SHM_DIR", "/dev/shm")  # where the runtime puts the stores
    return [n for n in os.listdir(shm) if n.startswith("memento." + job + ".")]


def launch(job, extra, remote=None, expect=0, timeout=240, demo_args=None, demo=True):
    records = tempfile.mktemp(prefix="memento-launch-records-")
    cmd = [CLI, "launch", "-n", str(NP), "--job", job, "--records", records, "--quiet",
           "--backoff", "0.2"] + extra
    if remote:
        cmd += ["--remote", remote]
    cmd += ["--"] + ([DEMO] if demo else []) + (demo_args or DEMO_ARGS)
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    print(p.stdout)
    if p.returncode != expect:
        fail("launch exited %d, expected %d" % (p.returncode, expect))
    recs = []
    if os.path.exists(records):
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        os.unlink(records)
    left = job_segments(job)
    if left:
        fail("segments left behind: %s" % left)
    return p, recs


def start_training(job, cmd, **popen):
    """Starts `cmd` (a launch of a long job) and returns once the job has
    created its segments and trained a second."""
    p = subprocess.Popen(cmd, **popen)
    deadline = time.time() + 120
    while not job_segments(job):
        if time.time() > deadline or p.poll() is not None:
            p.kill()
            fail("the job never created its segments")
        time.sleep(0.2)
    time.sleep(1)
    return p


def write_script(folder, name, text):
    """An executable shell script `name` in `folder` with body `text`; its path."""
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, 0o755)
    return path


def running(pid, wait_s=2.0):
    """Whether `pid` runs (a zombie has ended) after up to wait_s for it to end."""
    end = time.time() + wait_s
    while True:
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("Z", "X") or time.time() > end:
            return state not in ("Z", "X")
        time.sleep(0.05)


def of(recs, kind):
    return [r for r in recs if r["record"] == kind]


def reference_hash():
    with open(REFERENCE) as f:
        return f.read().split()[0]


def check_recovered(recs, failures, memory=True):
    summary = of(recs, "summary")[-1]
    if summary["outcome"] != "finished":
        fail("outcome %s" % summary["outcome"])
    if summary["state_hash"] != reference_hash():
        fail("final state %s differs from the failure-free run's %s"
             % (summary["state_hash"], reference_hash()))
    fl = of(recs, "failure")
    if len(fl) != failures or not all(f["injected"] for f in fl):
        fail("expected %d injected failures, got %s" % (failures, fl))
    if of(recs, "not_fired"):
        fail("an injected event never fired: %s" % of(recs, "not_fired"))
    restores = [r for r in of(recs, "restore") if r["attempt"] > 0]
    if not restores or not restores[-1]["ok"]:
        fail("no successful restore after the failures: %s" % restores)
    last = restores[-1]
    if memory and not last["from_memory"]:
        fail("restore came from %s, expected memory only" % last["entries_by_source"])
    # A node was lost: what it held for its peers is protected again.
    if memory and last.get("reprotect_mode", "none") == "none":
        fail("the restore record says nothing was re-protected after a lost node: %s" % last)
    if "lost" not in last:
        fail("restore record has no time-lost split")
    for key in ("detection_s", "relaunch_s", "restore_s", "reprotect_s", "steps_lost"):
        if key not in last["lost"]:
            fail("lost has no %s" % key)
    print("PASS: final state %s bit-identical to the failure-free run; restores %s" % (
        summary["state_hash"], [(r["version"], r["entries_by_source"]) for r in restores]))


def main(run_scenario=None):
    """Runs scenario argv[1] with `run_scenario(scenario, job, remote)` (default: run)."""
    scenario = sys.argv[1]
    # pid plus a nonce: pids are reused within a long test run.
    job = "lt-%s-%d-%s" % (scenario, os.getpid(), uuid.uuid4().hex[:6])
    remote = tempfile.mkdtemp(prefix="memento-lt-")
    try:
        (run_scenario or run)(scenario, job, remote)
    finally:
        subprocess.run(["rm", "-rf", remote])
        for name in (job, job + "-d"):
            subprocess.run([CLI, "clean", "--force", "--job", name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


def run(scenario, job, remote):
    if scenario == "reference":
        _, recs = launch(job, ["--scheme", "replica:2"])
        summary = of(recs, "summary")[-1]
        if summary["outcome"] != "finished" or not summary["state_hash"]:
            fail("reference run: %s" % summary)
        if of(recs, "failure"):
            fail("failures in the failure-free run")
        with open(REFERENCE, "w") as f:
            f.write(summary["state_hash"] + "\n")
        print("PASS: reference state", summary["state_hash"])
    elif scenario == "step":
        _, recs = launch(job, ["--scheme", "replica:2", "--inject", "1@3"])
        check_recovered(recs, 1)
        if of(recs, "failure")[0]["segments_unlinked"] == []:
            fail("the lost node's segment was not unlinked")
    elif scenario == "step-delay":
        longer = ["--steps", "60", "--quiet"]  # the demo's own sizes: about 30 ms a step
        _, free = launch(job, ["--scheme", "replica:2"], demo_args=longer)
        _, recs = launch(job + "-d", ["--scheme", "replica:2", "--inject", "1@3+0.3s"],
                         demo_args=longer)
        failure = of(recs, "failure")
        summary = of(recs, "summary")[-1]
        if len(failure) != 1 or failure[0]["event"] != "1@3+0.3s":
            fail("expected the one delayed failure: %s" % failure)
        if not 0.3 <= failure[0]["after_report_s"] < 5:
            fail("the loss came %.3f s after step 3 was reported, not 0.3 s" %
                 failure[0]["after_report_s"])
        if not 3 <= failure[0]["last_step"] < 60 or summary["outcome"] != "finished":
            fail("failure %s, outcome %s" % (failure[0], summary["outcome"]))
        if summary["state_hash"] != of(free, "summary")[-1]["state_hash"]:
            fail("final state differs from the failure-free run of the same length")
        print("PASS: lost %.3f s after step 3 was reported (the job was at step %d), "
              "recovered bit-identically" % (failure[0]["after_report_s"], failure[0]["last_step"]))
    elif scenario in ("snapshot", "protect", "commit"):
        _, recs = launch(job, ["--scheme", "rs:2+1", "--inject", "2@4:" + scenario])
        check_recovered(recs, 1)
        if of(recs, "failure")[0]["stage"] != scenario:
            fail("failure stage %s" % of(recs, "failure")[0]["stage"])
    elif scenario == "persist":
        _, recs = launch(job, ["--scheme", "xor:3", "--persist-every", "2", "--inject",
                               "2@4:persist"], remote=remote)
        check_recovered(recs, 1, memory=False)
    elif scenario == "recovery":
        _, recs = launch(job, ["--scheme", "replica:2", "--inject", "1@3,2@recovery"])
        check_recovered(recs, 2)
        if of(recs, "failure")[1]["stage"] != "recovery":
            fail("second failure not during recovery")
        restores = of(recs, "restore")
        if any(r["attempt"] == 1 for r in restores if r.get("ok")):
            fail("the recovery that was interrupted reported success")
        if restores[-1]["lost"]["failures"] != [1, 2]:
            fail("the last restore should close both failures: %s" % restores[-1]["lost"])
    elif scenario == "stuck-mpirun":
        # An mpirun that lives on after its ranks ended (Open MPI 4.1 can hang
        # in its teardown after an MPI_Abort): the launcher kills it and goes on.
        wrapper = os.path.join(remote, "stuck_mpirun.sh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nmpirun \"$@\"\nsleep 3600\n")
        os.chmod(wrapper, 0o755)
        start = time.time()
        _, recs = launch(job, ["--scheme", "rs:2+1", "--inject", "2@4:protect",
                               "--teardown-grace", "2", "--mpirun", wrapper])
        took = time.time() - start
        check_recovered(recs, 1)
        stuck = of(recs, "mpirun_stuck")
        if [r["attempt"] for r in stuck] != [0, 1]:
            fail("expected the stuck mpirun of both launches killed, got %s" % stuck)
        if any(r["after_s"] > 10 for r in stuck):
            fail("a stuck mpirun lived on too long: %s" % stuck)
        print("PASS: both stuck mpiruns killed; the job recovered and finished in %.1f s" % took)
    elif scenario == "two-nodes":
        _, recs = launch(job, ["--scheme", "replica:2", "--inject", "0+2@4"])
        check_recovered(recs, 1)
    elif scenario == "interrupt":
        # Ctrl-C, and a closed terminal (SIGHUP), stop the job the same way.
        for sig in (signal.SIGINT, signal.SIGHUP):
            records = tempfile.mktemp(prefix="memento-launch-records-")
            cmd = [CLI, "launch", "-n", str(NP), "--job", job, "--scheme", "replica:2",
                   "--records", records, "--quiet", "--", DEMO] + DEMO_ARGS[2:] + [
                       "--steps", "100000"]
            p = start_training(job, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            p.send_signal(sig)
            out, _ = p.communicate(timeout=60)
            print(out)
            if p.returncode != 130:
                fail("exit %d after %s, expected 130" % (p.returncode, sig.name))
            with open(records) as f:
                summary = [json.loads(line) for line in f if line.strip()][-1]
            os.unlink(records)
            if summary.get("outcome") != "interrupted":
                fail("summary outcome %s, expected interrupted" % summary.get("outcome"))
            # It trained a second before the signal: the step it reached, not 0.
            if summary.get("final_step", 0) < 1:
                fail("interrupted at step %s, after a second of training"
                     % summary.get("final_step"))
            if job_segments(job):
                fail("segments left after %s: %s" % (sig.name, job_segments(job)))
            ps = subprocess.run(["pgrep", "-f", "memento_demo.*100000"], stdout=subprocess.PIPE,
                                text=True).stdout.split()
            if ps:
                fail("ranks still running after %s: %s" % (sig.name, ps))
        # A reader of the launcher's output that went away (`memento launch ... | head`)
        # does not end it: the run finishes, its records written, its segments cleaned.
        records = tempfile.mktemp(prefix="memento-launch-records-")
        cmd = [CLI, "launch", "-n", str(NP), "--job", job, "--scheme", "replica:2", "--json",
               "--records", records, "--", DEMO] + DEMO_ARGS
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        p.stdout.close()
        if p.wait(timeout=120) != 0:
            fail("exit %d with its output closed, expected 0" % p.returncode)
        with open(records) as f:
            summary = [json.loads(line) for line in f if line.strip()][-1]
        os.unlink(records)
        if summary.get("outcome") != "finished" or job_segments(job):
            fail("with its output closed: %s, segments %s" % (summary, job_segments(job)))
        print("PASS: interrupted (SIGINT, SIGHUP), segments cleaned, no rank left; a closed "
              "output does not end the launch")
    elif scenario == "interrupt-backoff":
        # Ctrl-C while the launcher waits out the backoff before a relaunch:
        # the summary counts the launches that ran, not the one it waited for.
        script = os.path.join(remote, "fails.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho 'failing on purpose' >&2\nexit 7\n")
        os.chmod(script, 0o755)
        status = os.path.join(remote, "status")
        records = os.path.join(remote, "records.jsonl")
        cmd = [CLI, "launch", "-n", "2", "--job", job, "--backoff", "30", "--status-dir", status,
               "--records", records, "--quiet", "--", script]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = os.path.join(status, "attempt0.log")
        deadline = time.time() + 60
        while not (os.path.exists(log) and "failing on purpose" in open(log).read()):
            if time.time() > deadline or p.poll() is not None:
                p.kill()
                fail("the first launch never ran")
            time.sleep(0.1)
        time.sleep(3)  # mpirun has ended; the launcher sleeps in its 30 s backoff
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        print(out)
        if p.returncode != 130:
            fail("exit %d after SIGINT, expected 130" % p.returncode)
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        if not of(recs, "failure"):
            fail("the first launch had not ended before the interrupt: %s" % recs)
        summary = of(recs, "summary")[-1]
        if summary["launches"] != len(of(recs, "launch")) or summary["launches"] != 1:
            fail("summary says %d launches; %d ran" % (summary["launches"],
                                                      len(of(recs, "launch"))))
        print("PASS: 1 launch counted")
    elif scenario == "stale-pid-file":
        # A rank's pid file can outlive the rank, and its pid then belongs to
        # another process: here rank 0 points its pid file at an unrelated
        # process before it ends. The launcher, which SIGKILLs what is left
        # of every attempt, must leave that process alone.
        bystander = subprocess.Popen(["sleep", "300"])
        try:
            script = os.path.join(remote, "stale.sh")
            with open(script, "w") as f:
                f.write("#!/bin/sh\n"
                        "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then\n"
                        "  echo %d > \"$MEMENTO_LAUNCH_DIR/pid.a0.r0\"\n"
                        "fi\nexit 0\n" % bystander.pid)
            os.chmod(script, 0o755)
            cmd = [CLI, "launch", "-n", "2", "--job", job, "--quiet", "--", script]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
            print(p.stdout)
            if p.returncode != 0:
                fail("exit %d, expected 0" % p.returncode)
            time.sleep(0.2)
            if bystander.poll() is not None:
                fail("the launcher killed an unrelated process named by a stale pid file")
        finally:
            bystander.kill()
            bystander.wait()
        print("PASS: the unrelated process was left alone")
    elif scenario == "launcher-killed":
        # The launcher itself SIGKILLed (no handler runs): mpirun must not
        # outlive it, and neither may the ranks.
        cmd = [CLI, "launch", "-n", str(NP), "--job", job, "--scheme", "replica:2", "--quiet",
               "--", DEMO] + DEMO_ARGS[2:] + ["--steps", "100001"]
        p = start_training(job, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p.kill()
        p.wait()
        deadline = time.time() + 30
        while True:
            ps = subprocess.run(["pgrep", "-f", "memento_demo.*100001"], stdout=subprocess.PIPE,
                                text=True).stdout.split()
            if not ps:
                break
            if time.time() > deadline:
                subprocess.run(["pkill", "-9", "-f", "memento_demo.*100001"])
                fail("ranks still running 30 s after the launcher was killed: %s" % ps)
            time.sleep(0.2)
        print("PASS: the job ended with its launcher")
    elif scenario == "bad-scheme":
        p, _ = launch(job, ["--scheme", "raid:5"], expect=2)
        if "raid:5" not in p.stdout:
            fail("the error does not name the scheme")
        print("PASS")
    elif scenario == "bad-node":
        p, _ = launch(job, ["--scheme", "replica:2", "--inject", "7@3"], expect=2)
        if "node 7 does not exist" not in p.stdout:
            fail("the error does not name the node")
        # Numbers are decimal digits, as everywhere in the CLI.
        for flag, value in (("-n", "+2"), ("--seed", "0x10"), ("--backoff", "nan")):
            cmd = [CLI, "launch", "--job", job] + (["-n", "2"] if flag != "-n" else []) + \
                [flag, value, "--", "true"]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 2 or value not in p.stdout:
                fail("%s %s: exit %d, expected 2 and an error naming it: %s"
                     % (flag, value, p.returncode, p.stdout))
        print("PASS")
    elif scenario == "bad-command":
        cmd = [CLI, "launch", "-n", "2", "--job", job, "--", "no-such-command-xyz"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(p.stdout)
        if p.returncode != 2 or "command not found: 'no-such-command-xyz'" not in p.stdout:
            fail("exit %d; expected 2 and 'command not found'" % p.returncode)
        print("PASS")
    elif scenario == "bad-launcher":
        cases = [(["--launcher", "srun"], "--launcher"),
                 (["--launcher", "torchrun", "--torchrun", "/no/such/torchrun"],
                  "torchrun not found: '/no/such/torchrun'"),
                 (["--recovery", "in-place"], "--recovery 'in-place'"),
                 (["--spares", "2"], "--spares 2 needs --recovery in-job"),
                 (["--recovery", "in-job", "--spares", "-1"], "--spares must be >= 0"),
                 (["--recovery", "in-job", "--injob-timeout", "0"], "--injob-timeout"),
                 (["--launcher", "ulfm"], "--launcher ulfm recovers in-job"),
                 (["--launcher", "ulfm", "--recovery", "in-job", "--ranks-per-node", "2",
                   "--spares", "1"], "--spares 1 must be a multiple of --ranks-per-node 2"),
                 (["--recovery", "in-job", "--ranks-per-node", "2", "--spares", "3"],
                  "--spares 3 must be a multiple of --ranks-per-node 2"),
                 (["--launcher", "ulfm", "--recovery", "in-job", "--mpirun", "/no/such/mpirun"],
                  "ulfm not found: '/no/such/mpirun' (an mpirun with ULFM")]
        # Paths the launch writes into, and the job id, are checked before anything runs.
        a_file = os.path.join(remote, "a-file")
        with open(a_file, "w") as f:
            f.write("x\n")
        missing = os.path.join(remote, "no", "such", "folder", "records.jsonl")
        cases += [(["--remote", a_file], "--remote '%s': " % a_file),
                  (["--status-dir", a_file], "--status-dir '%s': " % a_file),
                  (["--records", missing], "--records '%s': No such file or directory" % missing),
                  (["--records", remote], "--records '%s': is a directory" % remote),
                  (["--job", job + ".x"], "--job '%s.x': a job id is 1..48 characters" % job),
                  # Numbers as the README says: decimal digits, in range, named by flag.
                  (["--seed", "-1"], "--seed: '-1': expected an integer 0..18446744073709551615"),
                  (["--seed", "99999999999999999999"], "expected an integer 0..1844674407"),
                  (["--recovery", "in-job", "--injob-timeout", "0x10"],
                   "--injob-timeout: '0x10': expected a decimal number"),
                  (["--recovery", "in-job", "--injob-timeout", "inf"], "'inf': expected a decimal"),
                  (["--backoff", "1e400"], "--backoff: '1e400': expected seconds >= 0"),
                  (["--ranks-per-node", "0"], "--ranks-per-node: '0': expected an integer >= 1"),
                  (["--max-restarts", "-1"], "--max-restarts: '-1': expected an integer >= 0"),
                  (["--inject", "1@3+0x10s"], "delay '0x10s' must be seconds"),
                  (["--inject", ""], "--inject: '': expected a value"),
                  (["--job", ""], "--job: '': expected a value"),
                  (["--persist-every", "4"],
                   "--persist-every 4: there is no remote tier to persist to (give --remote")]
        for extra, want in cases:
            cmd = [CLI, "launch", "-n", "2"] + ([] if "--job" in extra else ["--job", job]) + \
                extra + ["--", DEMO]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(p.stdout)
            if p.returncode == 0 or want not in p.stdout:
                fail("%s: exit %d; expected an error naming %r" % (extra, p.returncode, want))
        print("PASS")
    elif scenario == "gave-up-keeps-stores":
        # A job that fails after committing (its last step reached, then exit 7) until the
        # launch gives up keeps its node stores: a rerun of the same job id resumes from
        # memory at the step reached, the reference run's final state.
        script = write_script(remote, "fails-after.sh", "MEMENTO_KEEP_FINISHED=1 "
                              "MEMENTO_RESUME_FINISHED=1 \"$@\"\nexit 7\n")
        cmd = [CLI, "launch", "-n", str(NP), "--job", job, "--scheme", "replica:2",
               "--max-restarts", "1", "--backoff", "0.1", "--quiet", "--", script, DEMO
               ] + DEMO_ARGS
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=180)
        print(p.stdout)
        if p.returncode != 1:
            fail("exit %d, expected 1" % p.returncode)
        kept = ("node store segment(s) are kept with its committed versions: a rerun with "
                "--job %s resumes from them" % job)
        if kept not in p.stdout:
            fail("the launch did not say that the stores are kept")
        if len(job_segments(job)) != NP:
            fail("expected the %d stores kept, found %s" % (NP, job_segments(job)))
        os.environ["MEMENTO_RESUME_FINISHED"] = "1"  # the kept run's finished mark
        _, recs = launch(job, ["--scheme", "replica:2"])
        first = of(recs, "restore")[0]
        if not first["ok"] or first["version"] != 8 or not first["from_memory"]:
            fail("the rerun did not resume v8 from memory: %s" % first)
        if of(recs, "summary")[-1]["state_hash"] != reference_hash():
            fail("the resumed state differs from the reference run's")
        print("PASS: the stores of a launch that gave up kept; the rerun resumed v8 from memory")
    elif scenario == "after-done":
        # A loss timed for after the job's last step (8, 2 s later: the job has reported
        # its end, and its processes linger 5 s longer, as a Python job's teardown does)
        # is not injected, in relaunch and in in-job mode: one launch, finished, the event
        # named as not fired because the job ended first.
        script = write_script(remote, "lingers.sh", "\"$@\" || exit $?\nsleep 5\n")
        for mode in ([], ["--recovery", "in-job", "--spares", "1"]):
            _, recs = launch(job, ["--scheme", "replica:2", "--inject", "1@8+2s"] + mode,
                             demo_args=[script, DEMO] + DEMO_ARGS, demo=False)
            summary = of(recs, "summary")[-1]
            if summary["outcome"] != "finished" or summary["launches"] != 1:
                fail("%s: %s" % (mode, summary))
            if of(recs, "failure"):
                fail("%s: a failure injected after the job ended: %s" % (
                    mode, of(recs, "failure")))
            nf = of(recs, "not_fired")
            if len(nf) != 1 or nf[0]["why"] != "the job ended first":
                fail("%s: not_fired records %s" % (mode, nf))
            if summary["state_hash"] != reference_hash():
                fail("%s: the final state differs from the reference run's" % mode)
        print("PASS: a loss after the job's end is not injected (relaunch and in-job)")
    elif scenario == "wrapped":
        # The command is a wrapper script that runs the job without exec (as a site's
        # launch script does). A node loss takes the rank's job process too, not only its
        # shell, and a warm spare run by the same script finds its place: in-job, the lost
        # rank's job process is replaced while the survivors keep theirs; relaunched, the
        # lost rank's process is gone before the relaunch. Both bit-exact.
        script = write_script(remote, "wrapper.sh", "\"$@\"\n")
        for mode in (["--recovery", "in-job", "--spares", "1"], []):
            pids = os.path.join(remote, "pids%d" % len(mode))
            _, recs = launch(job, ["--scheme", "replica:2", "--inject", "1@3"] + mode,
                             demo_args=[script, DEMO, "--pids", pids] + DEMO_ARGS, demo=False,
                             timeout=150)
            summary = of(recs, "summary")[-1]
            launches = 1 if mode else 2
            if summary["outcome"] != "finished" or summary["launches"] != launches or \
                    summary["failures"] != 1:
                fail("%s: %s" % (mode, summary))
            if summary["state_hash"] != reference_hash():
                fail("%s: the final state differs from the reference run's" % mode)
            started = {}
            with open(pids) as f:
                for line in f:
                    rank, pid, _ = line.split()
                    started.setdefault(int(rank), []).append(int(pid))
            lost = started[1][0]
            if lost in started[1][1:]:
                fail("%s: the lost rank's job process %d went on: %s" % (mode, lost, started))
            if mode and any(len(set(started[r])) != 1 for r in (0, 2, 3)):
                fail("in-job: a survivor's process changed: %s" % started)
            if running(lost):
                fail("%s: the lost rank's job process %d still runs" % (mode, lost))
        print("PASS: a wrapper script's job process goes with its node; a spare finds its "
              "place through the wrapper")
    elif scenario == "injob-raises":
        # In-job mode, rank 1's training raises (it writes raised.aA.r1, as
        # memento.resilient and launch::Resilient do) and every rank then waits 30 s for a
        # membership: no node was lost, so the launcher relaunches at once (a second's
        # grace) instead of after --injob-timeout, naming the error, and gives up after
        # --max-restarts 0.
        script = write_script(remote, "raises.sh", "if [ \"$RANK\" = 1 ]; then\n"
                              "  echo 'RuntimeError: a bug on purpose' > "
                              "\"$MEMENTO_LAUNCH_DIR/raised.a$MEMENTO_LAUNCH_ATTEMPT.r1\"\n"
                              "fi\nsleep 30\n")
        records = os.path.join(remote, "records.jsonl")
        cmd = [CLI, "launch", "-n", "4", "--job", job, "--recovery", "in-job",
               "--max-restarts", "0", "--records", records, "--quiet", "--", script]
        t0 = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        wall = time.time() - t0
        print(p.stdout)
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        if p.returncode != 1:
            fail("exit %d, expected 1" % p.returncode)
        reasons = [r["reason"] for r in of(recs, "injob_fallback")]
        if reasons != ["rank 1 failed (RuntimeError: a bug on purpose) with no node lost"]:
            fail("fallbacks %s" % reasons)
        if wall > 20:
            fail("the launch took %.1f s: the ranks waited for a membership" % wall)
        print("PASS: a rank that raised without a lost node ended the attempt in %.1f s" % wall)
    elif scenario == "failing-job":
        script = os.path.join(remote, "failing.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho 'bad things on rank' $OMPI_COMM_WORLD_RANK >&2\n"
                    "echo 'sigkill grace' \"$OMPI_MCA_odls_base_sigkill_timeout\" >&2\n"
                    "printf 'not UTF-8: \\377\\n' >&2\n"
                    "echo \"job id $MEMENTO_JOB\" >&2\nexit 7\n")
        os.chmod(script, 0o755)
        records = tempfile.mktemp(prefix="memento-launch-records-")
        # No --job: the launcher picks a job id of its own.
        cmd = [CLI, "launch", "-n", "2", "--max-restarts", "2", "--backoff", "0.1",
               "--records", records, "--quiet", "--", script]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=120)
        print(p.stdout)
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        os.unlink(records)
        if p.returncode != 1:
            fail("exit %d, expected 1" % p.returncode)
        # A byte of the job's output that is not UTF-8 reaches the records as
        # U+FFFD (it ended the launcher with an exception).
        tails = [r.get("output_tail", "") for r in of(recs, "failure")]
        if not any("not UTF-8: \ufffd" in t for t in tails):
            fail("the output tail lost its non-UTF-8 line: %s" % tails)
        if len(of(recs, "launch")) != 3:
            fail("expected 3 launches (1 + --max-restarts 2), got %d" % len(of(recs, "launch")))
        if "exit status 7" not in p.stdout or "bad things on rank" not in p.stdout:
            fail("the job's exit status or output tail is not shown")
        # Open MPI kills the other ranks of a failed job without its 1 s grace.
        if "sigkill grace 0" not in p.stdout:
            fail("the job did not run with OMPI_MCA_odls_base_sigkill_timeout=0")
        # The default job id is the launcher's pid plus a random suffix (a pid
        # alone is reused, and a killed launch's segments outlive it).
        default_job = of(recs, "job")[0]["job"]
        if not re.fullmatch(r"launch-\d+-[0-9a-f]{6}", default_job):
            fail("default job id %r is not launch-<pid>-<6 hex digits>" % default_job)
        if "job id " + default_job not in p.stdout:
            fail("the ranks did not run under the recorded job id %s" % default_job)
        print("PASS: gave up after 3 launches, exit status and output shown")
    elif scenario == "failing-with-progress":
        # A job that fails on its own but trains further at every launch is
        # not failing "in a row": the first four launches each report a new
        # step (1-4), so the launcher gives up only after --max-restarts 2
        # launches without progress (4 + 2 = 6 launches). Those two report
        # steps 2 and 3: further than the launch before them, not than every
        # launch (a job restored to an older step that crashes again is no
        # progress). The job changes directory
        # first, so it reports only if the relative --status-dir reached it
        # as an absolute path; the launcher runs with SIGCHLD ignored (a
        # parent's setting it inherits) and must still see the job fail.
        # The status folder keeps the user's own file; an earlier launch's
        # log in it goes.
        script = os.path.join(remote, "progress.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\ncd /\n"
                    "a=$MEMENTO_LAUNCH_ATTEMPT\n"
                    "if [ $a -lt 4 ]; then s=$((a + 1)); else s=$((2 + a % 2)); fi\n"
                    "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then\n"
                    "  echo \"{\\\"event\\\": \\\"step\\\", "
                    "\\\"step\\\": $s, "
                    "\\\"t\\\": $(date +%s)}\" >> \"$MEMENTO_LAUNCH_DIR/events.jsonl\"\n"
                    "fi\nsleep 0.5\nexit 7\n")
        os.chmod(script, 0o755)
        status = os.path.join(remote, "status")
        os.makedirs(status)
        with open(os.path.join(status, "keep.txt"), "w") as f:
            f.write("the user's\n")
        with open(os.path.join(status, "attempt9.log"), "w") as f:
            f.write("an earlier launch's\n")
        records = os.path.join(remote, "records.jsonl")
        cmd = [CLI, "launch", "-n", "2", "--job", job, "--max-restarts", "2", "--backoff",
               "0.1", "--status-dir", "status", "--records", records, "--quiet", "--", script]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=180, cwd=remote,
                           preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))
        print(p.stdout)
        with open(records) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        if p.returncode != 1:
            fail("exit %d, expected 1" % p.returncode)
        launches = len(of(recs, "launch"))
        if launches != 6:
            fail("expected 6 launches (4 with progress + --max-restarts 2), got %d" % launches)
        if of(recs, "summary")[-1].get("outcome") == "finished":
            fail("a failing job was reported finished")
        if "exit status 7" not in p.stdout:
            fail("the job's exit status is not shown")
        if not os.path.exists(os.path.join(status, "keep.txt")):
            fail("--status-dir removed a file the launcher did not write")
        if os.path.exists(os.path.join(status, "attempt9.log")):
            fail("an earlier launch's log was left in the status folder")
        print("PASS: 6 launches, the user's file kept")
    else:
        fail("unknown scenario " + scenario)


if __name__ == "__main__":
    main()
