#!/usr/bin/env python3
"""Fault tests of `memento launch` with small shell jobs that write the job protocol's files
themselves, to bring about orders of events a real job makes only now and then (ctest label
fault).

usage: launch_shell_jobs_test.py SCENARIO
  injob-stale-step
                  in-job, a survivor reports a step of the old generation after the new
                  one was announced: the next step event does not fire on it
  injob-spare-fault
                  in-job, the warm spare that took a lost node's place is lost itself at
                  the recovery stage (it kills itself, as a stage fault does): a second
                  in-job recovery, not a relaunch of the finished job
  injob-survivor-fails
                  in-job, a survivor fails on its own after a recovery: its node is
                  replaced in-job too (a spare takes it), and the failure record shows
                  its output (the launch's log, not the recovery's)
  injob-crash-loop
                  in-job without spares, rank 1 ends at every start: replaced in-job
                  --max-restarts times in a row, then the launcher gives up (a fresh
                  process per loss would otherwise replace it for ever)
  odd-events      a job whose events carry a null loss (how a NaN or infinite loss is
                  written), a line that is no object, fields of the wrong type: the
                  launcher follows it to its end and reports its last step and state, and
                  names the lines it passed over
  ulfm-stale-generation
                  --launcher ulfm: the job's world repairs itself into generation 1 (its
                  pid and restore files) while a rank's end, nobody injected it, makes the
                  launcher relaunch it as attempt 1 (a stage fault is still to come, armed
                  by generation number, so the repair is not followed in-job): the
                  relaunch reads its own files, not the old world's, and no process of
                  the first launch (its waiting spares) outlives the launch
Environment: as launch_test.py (MEMENTO_TEST_CLI; the module is imported from there).
"""
import json
import os
import subprocess

from launch_test import CLI, fail, main, of

# The shell jobs' helpers: `ev EVENT ATTEMPT STEP` appends an event as rank 0 does,
# `wait_done` ends the process once the job reported its end, `wait_attempt A` waits for the
# in-job announcement of attempt A.
SHELL_JOB_LIB = r"""#!/bin/sh
d=$MEMENTO_LAUNCH_DIR
ev() {
  printf '{"event": "%s", "attempt": %s, "step": %s, "state_hash": "0", "t": %s}\n' \
    "$1" "$2" "$3" "$(date +%s.%N)" >> "$d/events.jsonl"
}
# restored A R VERSION HASH: rank R's restore record of attempt A (written whole, as the
# reporter does)
restored() {
  t=$(date +%s.%N)
  printf '{"ok": true, "version": %s, "state_hash": "%s", "t_begin": %s, "t_end": %s}' \
    "$3" "$4" "$t" "$t" > "$d/restore.a$1.r$2.json.tmp"
  mv "$d/restore.a$1.r$2.json.tmp" "$d/restore.a$1.r$2.json"
}
wait_done() {
  for i in $(seq 400); do
    grep -q '"done"' "$d/events.jsonl" 2>/dev/null && exit 0
    sleep 0.05
  done
  exit 3
}
wait_attempt() {
  for i in $(seq 400); do
    grep -q "\"attempt\": *$1[,}]" "$d/injob.json" 2>/dev/null && return
    sleep 0.05
  done
}
"""
# injob-stale-step's job: rank 0 reports step 3 as attempt 0, waits for the in-job
# announcement of attempt 1, reports step 4 as attempt 0 and ends the job (the done event)
# half a second later; every other process (rank 1, the spare that takes its place) waits for
# that end.
STALE_STEP_JOB = SHELL_JOB_LIB + r"""
if [ "$MEMENTO_LAUNCH_SPARE" = 1 ] || [ "$RANK" != 0 ]; then wait_done; fi
ev step 0 3
wait_attempt 1
ev step 0 4
sleep 0.5
ev done 1 4
"""
# injob-spare-fault's job: rank 0 reports step 3 (node 1 is lost), waits for the second
# announcement and ends the job. The first spare handed rank 1 (attempt 1) records the
# recovery stage's fault and kills itself, as memento's stage hook does (a small shell is gone
# within a millisecond, before the launcher's next look); the second waits for the end.
SPARE_FAULT_JOB = SHELL_JOB_LIB + r"""
if [ "$MEMENTO_LAUNCH_SPARE" = 1 ]; then
  for i in $(seq 400); do
    grep -q "\"spare_pid\": *$MEMENTO_LAUNCH_SPARE_PID[,}]" "$d/injob.json" 2>/dev/null && break
    grep -q '"done"' "$d/events.jsonl" 2>/dev/null && exit 0
    sleep 0.05
  done
  if grep -q '"attempt": *1[,}]' "$d/injob.json"; then
    printf '{"stage": "recovery", "version": 3, "rank": 1, "t": %s}\n' "$(date +%s.%N)" \
      > "$d/fault.a1.tmp"
    mv "$d/fault.a1.tmp" "$d/fault.a1"
    kill -9 $$
  fi
  wait_done
fi
[ "$RANK" = 0 ] || wait_done
ev step 0 3
wait_attempt 2
ev done 2 3
sleep 0.5
"""


# injob-survivor-fails' job: rank 0 reports step 3 (node 1 is lost), waits for the
# announcement of the in-job recovery, then fails with a message; the spare handed its place
# ends the job, every other process waits for that end.
SURVIVOR_FAILS_JOB = SHELL_JOB_LIB + r"""
if [ "$MEMENTO_LAUNCH_SPARE" = 1 ]; then
  for i in $(seq 400); do
    if grep -q "\"0\": *{[^}]*\"spare_pid\": *$MEMENTO_LAUNCH_SPARE_PID[,}]" "$d/injob.json" \
        2>/dev/null; then
      ev done 2 3
      exit 0
    fi
    grep -q '"done"' "$d/events.jsonl" 2>/dev/null && exit 0
    sleep 0.05
  done
  exit 3
fi
[ "$RANK" = 0 ] || wait_done
ev step 0 3
wait_attempt 1
echo "rank 0: the survivor's own failure" >&2
exit 5
"""
# injob-crash-loop's job: rank 1 fails as it starts, each replacement again; rank 0 waits.
CRASH_LOOP_JOB = SHELL_JOB_LIB + r"""
if [ "$RANK" = 1 ]; then echo "rank 1 fails at its start" >&2; exit 1; fi
wait_done
"""
# odd-events' job: rank 0 reports 3 steps between records a launcher must pass over, the
# last with a null loss (the final progress line shows it), then its end; rank 1 waits.
ODD_EVENTS_JOB = r"""#!/bin/sh
d=$MEMENTO_LAUNCH_DIR
if [ "$OMPI_COMM_WORLD_RANK" != 0 ]; then sleep 1; exit 0; fi
t=$(date +%s)
cat >> "$d/events.jsonl" <<EOF
{"event": "start", "attempt": 0, "total_steps": 3, "t": $t}
{"event": "step", "attempt": 0, "step": 1, "loss": 1.25, "step_s": 0.1, "stall_s": 0, "t": $t}
[1, 2]
"step"
{"event": "step", "attempt": "0", "step": "2", "loss": "high", "step_s": null, "t": $t}
{"event": 7, "attempt": 0}
{"event": "step", "attempt": 0, "step": 3, "loss": null, "step_s": 0.1, "stall_s": 0, "t": $t}
{"event": "done", "attempt": 0, "step": 3, "state_hash": "5eed", "t": $t}
EOF
sleep 1
"""
# ulfm-stale-generation's job (2 ranks and 2 spares under the ULFM mpirun). Launch 1: rank 0
# reports step 3, then writes what a world that repaired itself into generation 1 leaves
# (attempt 1's pid files, naming a process that has ended, and restore records of version 3,
# state "stale"); rank 1 then ends with exit status 1, nobody injected it; the spares wait
# for a place that never comes. The relaunch (attempt 1) restores version 2 ("fresh") a
# second in, reports step 4 and ends.
ULFM_STALE_JOB = SHELL_JOB_LIB + r"""
r=$OMPI_COMM_WORLD_RANK
a=$MEMENTO_LAUNCH_ATTEMPT
if [ "$a" = 0 ]; then
  if [ "$r" -ge 2 ]; then sleep 60; exit 0; fi
  if [ "$r" = 1 ]; then
    for i in $(seq 400); do [ -e "$d/restore.a1.r1.json" ] && exit 1; sleep 0.05; done
    exit 3
  fi
  ev step 0 3
  gone=$(sh -c 'echo $$')
  for k in 0 1; do echo "$gone" > "$d/pid.a1.r$k"; restored 1 $k 3 stale; done
  sleep 60
  exit 0
fi
[ "$r" = 0 ] || wait_done
sleep 1
ev restore_begin "$a" 0
restored "$a" 0 2 fresh
restored "$a" 1 2 fresh
ev step "$a" 4
ev done "$a" 4
"""


def launch_processes(status):
    """The processes still running with the launch's status folder in their environment."""
    found = []
    for pid in (int(n) for n in os.listdir("/proc") if n.isdigit()):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("MEMENTO_LAUNCH_DIR=" + status).encode() in env:
            found.append("%d: %s" % (pid, cmd))
    return found


def launch_script(remote, job, name, text, extra):
    """`memento launch -n 2` of the shell job `text` (written to REMOTE/name) with `extra`
    flags; its output printed, returns it and the records."""
    script = os.path.join(remote, name)
    with open(script, "w") as f:
        f.write(text)
    os.chmod(script, 0o755)
    records = os.path.join(remote, "records.jsonl")
    cmd = [CLI, "launch", "-n", "2", "--job", job, "--records", records] + extra + ["--", script]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    print(p.stdout)
    with open(records) as f:
        return p, [json.loads(line) for line in f if line.strip()]


def expect_in_job(recs, injected, why):
    """One launch that finished, its failures injected or not as `injected` lists, each
    recovered in-job; returns the failures. `why`: what a failure here would show."""
    failures, injob = of(recs, "failure"), of(recs, "injob")
    summary = of(recs, "summary")[-1]
    if ([f.get("injected") for f in failures] != injected or len(injob) != len(injected)
            or len(of(recs, "launch")) != 1 or summary.get("outcome") != "finished"):
        fail("failures %s, %d in-job recoveries, %d launch(es), outcome %s: expected injected "
             "%s, %d, 1 and finished (%s)"
             % ([f.get("what") for f in failures], len(injob), len(of(recs, "launch")),
                summary.get("outcome"), injected, len(injected), why))
    return failures


# In-job with two warm spares and the injections `inject` (the shell-job scenarios).
def injob_flags(remote, inject):
    return ["--recovery", "in-job", "--spares", "2", "--inject", inject, "--backoff", "0.1",
            "--injob-timeout", "20", "--status-dir", os.path.join(remote, "status"), "--quiet"]


def run(scenario, job, remote):
    if scenario == "injob-stale-step":
        # In-job recovery with a survivor that reports a step of the old generation after the
        # new one was announced (it had not seen the announcement yet): that step is not the
        # new generation's, so the pending event "1@4" must not fire on it. Rank 0 reports
        # step 3 (node 1 is lost), waits for the announcement, reports step 4 as attempt 0,
        # and ends the job half a second later; the spare that took rank 1 waits for the end.
        p, recs = launch_script(remote, job, "stale.sh", STALE_STEP_JOB,
                                injob_flags(remote, "1@3,1@4"))
        failures, injob = of(recs, "failure"), of(recs, "injob")
        if len(failures) != 1 or len(injob) != 1 or len(of(recs, "launch")) != 1:
            fail("%d failure(s), %d in-job recoveries, %d launch(es): expected 1, 1 and 1 (the "
                 "old generation's step 4 fired the event)"
                 % (len(failures), len(injob), len(of(recs, "launch"))))
        if of(recs, "summary")[-1].get("final_step") != 4:
            fail("the job did not end at step 4: %s" % of(recs, "summary")[-1])
        print("PASS: the old generation's step did not fire the next event")
    elif scenario == "injob-spare-fault":
        p, recs = launch_script(remote, job, "spare_fault.sh", SPARE_FAULT_JOB,
                                injob_flags(remote, "1@3,1@recovery"))
        expect_in_job(recs, [True, True], "the spare's own SIGKILL taken for the job's")
        print("PASS: the spare lost at the recovery stage recovered in-job")
    elif scenario == "injob-survivor-fails":
        p, recs = launch_script(remote, job, "survivor.sh", SURVIVOR_FAILS_JOB,
                                injob_flags(remote, "1@3"))
        failures = expect_in_job(recs, [True, False], "the survivor's end relaunched the job")
        if (failures[1].get("nodes") != [0]
                or "the survivor's own failure" not in failures[1].get("output_tail", "")):
            fail("the failure names nodes %s, its output tail %r: expected node 0 and the "
                 "rank's message" % (failures[1].get("nodes"), failures[1].get("output_tail")))
        print("PASS: the survivor's failure recovered in-job, its output shown")
    elif scenario == "injob-crash-loop":
        p, recs = launch_script(remote, job, "crash_loop.sh", CRASH_LOOP_JOB,
                                ["--recovery", "in-job", "--max-restarts", "2", "--backoff",
                                 "0.1", "--injob-timeout", "20", "--status-dir",
                                 os.path.join(remote, "status"), "--quiet"])
        failures = of(recs, "failure")
        ended = [f for f in failures if f.get("what") == "rank 1 ended, nobody injected it"]
        summary = of(recs, "summary")[-1]
        if (p.returncode != 1 or summary.get("outcome") != "failed" or len(ended) != 2
                or len(failures) != 3 or len(of(recs, "injob")) != 2
                or len(of(recs, "launch")) != 1):
            fail("exit %d, outcome %s, failures %s, %d in-job recoveries, %d launch(es): "
                 "expected 1, failed, two of rank 1 recovered in-job and the third given up on "
                 "(--max-restarts 2), 2 and 1"
                 % (p.returncode, summary.get("outcome"), [f.get("what") for f in failures],
                    len(of(recs, "injob")), len(of(recs, "launch"))))
        if "giving up after --max-restarts 2" not in p.stdout:
            fail("the launcher did not say it gave up after --max-restarts 2")
        # The timeline does not promise a relaunch that the launch then gives up.
        if "relaunched" in p.stdout or "recovery abandoned: rank 1 ended without an injected " \
                "failure; the job is stopped" not in p.stdout:
            fail("the timeline does not say the job was stopped, or names a relaunch")
        if any("rank 1 fails at its start" not in f.get("output_tail", "") for f in failures):
            fail("a failure's output tail lacks rank 1's message")
        print("PASS: a rank failing at every start replaced twice in-job, then given up on")
    elif scenario == "odd-events":
        # The launcher reads what the job writes while the job runs: a record it cannot use
        # is passed over, never the end of the launcher (and with it of the job).
        p, recs = launch_script(remote, job, "odd.sh", ODD_EVENTS_JOB, [])
        if p.returncode != 0:
            fail("exit %d, expected 0" % p.returncode)
        summary = of(recs, "summary")[-1]
        if (summary.get("outcome") != "finished" or summary.get("final_step") != 3
                or summary.get("state_hash") != "5eed" or len(of(recs, "launch")) != 1):
            fail("expected one launch finished at step 3 with state 5eed: %s" % summary)
        if "loss nan" not in p.stdout:
            fail("the null loss of step 3 was not shown as nan")
        for line in ("[1, 2]", '"step"'):
            if "passed over a line of events.jsonl that is no JSON object: " + line not in p.stdout:
                fail("no warning names the line %s" % line)
        print("PASS: the odd records passed over and named, the job followed to its end")
    elif scenario == "ulfm-stale-generation":
        status = os.path.join(remote, "status")
        p, recs = launch_script(remote, job, "ulfm_stale.sh", ULFM_STALE_JOB,
                                ["--launcher", "ulfm", "--recovery", "in-job",
                                 "--spares", "2", "--backoff", "0.1", "--injob-timeout", "20",
                                 "--inject", "1@9:protect", "--status-dir", status, "--quiet"])
        left = launch_processes(status)
        failures, launches = of(recs, "failure"), of(recs, "launch")
        summary = of(recs, "summary")[-1]
        if p.returncode != 0 or summary.get("outcome") != "finished" or len(launches) != 2:
            fail("exit %d, outcome %s, %d launch(es): expected 0, finished and 2"
                 % (p.returncode, summary.get("outcome"), len(launches)))
        if [f.get("injected") for f in failures] != [False]:
            fail("failures %s, expected one nobody injected (the relaunch read the old world's "
                 "pid files as its ranks)" % [f.get("what") for f in failures])
        restore = [r for r in of(recs, "restore") if r["attempt"] == 1]
        if (len(restore) != 1 or restore[0].get("version") != 2
                or restore[0].get("state_hash") != "fresh"
                or restore[0]["t_begin"] < launches[1]["t"]):
            fail("attempt 1's restore %s, expected version 2, state fresh, begun after the "
                 "relaunch at %.2f s" % (restore, launches[1]["t"]))
        if left:
            fail("processes of the launch outlived it: %s" % left)
        print("PASS: the relaunch read its own files; nothing of the first launch outlived it")
    else:
        fail("unknown scenario " + scenario)


if __name__ == "__main__":
    main(run)
