#!/usr/bin/env python3
"""Lose two of eight virtual nodes, relaunch on the six survivors, resume elastically.

1. a failure-free reference run of experiments/torch/elastic_train.py on --np
   ranks (one virtual node per rank) records the loss of every step and the
   sha256 of the assembled global model after every step;
2. the memento run: the ranks of virtual nodes --lost SIGKILL themselves once
   checkpoint --kill-step is committed -> must exit non-zero;
3. the lost nodes' shared-memory segments are unlinked (their memory is gone);
4. relaunch on the --np - len(lost) surviving node identities with elastic=True:
   every rank registers its new slices and restore() assembles them from memory.
Required: every rank restored version --kill-step, elastically, with no entry
from remote storage; the assembled global parameters and Adam state at the
restore are bit-identical to the reference's at that step; the relaunch continues
the step count, running the updates kill_step -> kill_step+1 .. steps-1 -> steps
(loss[s] is the loss of update s -> s+1), and each loss is within a relative
--loss-rtol of the reference's. Not bit-exact: the row-parallel allreduce adds one
partial product per rank, and 6 partial sums of other rows add up to other last
bits than 8 (seen: about 1e-7 relative).
Exit 0 = pass. Used by ctest (labels mpi;fault).
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "experiments", "torch")
SCRIPT = os.path.join(EXAMPLES, "elastic_train.py")

from fault_resume import job_env, remove_job, segment_prefix  # noqa: E402
from rank_jobs import free_port  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe")
    p.add_argument("--python-path", required=True, help="directory holding the memento package")
    p.add_argument("--np", type=int, default=8)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--kill-step", type=int, default=6)
    p.add_argument("--lost", default="1,4", help="virtual nodes (= ranks) to lose")
    p.add_argument("--scheme", default="xor:3")
    p.add_argument("--loss-rtol", type=float, default=1e-4)
    args = p.parse_args()

    job = "er-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    lost = sorted(int(n) for n in args.lost.split(","))
    survivors = [n for n in range(args.np) if n not in lost]
    env = job_env(args.scheme, 1, args.python_path)

    def launch(np, out, job_id, extra_env=None):
        e = dict(env, MEMENTO_JOB=job_id, MASTER_PORT=str(free_port()))
        e.update(extra_env or {})
        full = shlex.split(args.mpirun) + ["-np", str(np), sys.executable, SCRIPT,
                                           "--steps", str(args.steps), "--out", out]
        print("--- %s (job %s%s)" % (" ".join(full), job_id,
                                      ", " + str(extra_env) if extra_env else ""), flush=True)
        t0 = time.time()
        r = subprocess.run(full, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=240)
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        print("\n".join(lines[-30:]), flush=True)
        print("--- exit %d after %.1f s" % (r.returncode, time.time() - t0), flush=True)
        return r.returncode, r.stdout

    tmp = tempfile.mkdtemp(prefix="memento-er-")
    ref_json, res_json = os.path.join(tmp, "ref.json"), os.path.join(tmp, "res.json")
    try:
        rc, _ = launch(args.np, ref_json, job + "-ref")
        if rc != 0:
            print("FAIL: the failure-free reference run exited %d" % rc)
            return 1
        rc, _ = launch(args.np, os.path.join(tmp, "killed.json"), job,
                       {"EXAMPLE_KILL_STEP": str(args.kill_step),
                        "EXAMPLE_KILL_RANKS": ",".join(map(str, lost))})
        if rc == 0:
            print("FAIL: the run whose nodes %s were to be killed exited 0" % lost)
            return 1
        for node in lost:
            segments = glob.glob(segment_prefix(job, node) + "*")
            if len(segments) != 1:
                print("FAIL: expected 1 segment of node %d, found %s (all: %s)"
                      % (node, segments, glob.glob("/dev/shm/memento.%s.*" % job)))
                return 1
            os.unlink(segments[0])
            print("node %d lost: unlinked %s" % (node, segments[0]), flush=True)

        rc, _ = launch(len(survivors), res_json, job,
                       {"EXAMPLE_NODE_IDS": ",".join(map(str, survivors))})
        if rc != 0:
            print("FAIL: the elastic relaunch on %d ranks exited %d" % (len(survivors), rc))
            return 1
        with open(ref_json) as f:
            ref = json.load(f)
        with open(res_json) as f:
            res = json.load(f)
        if res["world"] != len(survivors) or len(res["ranks"]) != len(survivors):
            print("FAIL: the relaunch record is for %d ranks" % res["world"])
            return 1
        for r in res["ranks"]:
            if r["restored_step"] != args.kill_step or r["elastic"] is not True \
                    or not r["sources"] or "remote" in r["sources"]:
                print("FAIL: rank %d (node %s) restored v%s elastic=%s from %s; expected v%d, "
                      "elastic, from memory" % (r["rank"], r["node"], r["restored_step"],
                                                r["elastic"], r["sources"], args.kill_step))
                return 1
        print("all %d ranks restored v%d elastically from memory (%s)"
              % (len(survivors), args.kill_step,
                 ", ".join(sorted({s for r in res["ranks"] for s in r["sources"]}))), flush=True)
        k = str(args.kill_step)
        for key in ("sha", "state_sha"):
            if res["restored_" + key] != ref[key][k]:
                print("FAIL: the global %s at the restore differ from the reference's at step "
                      "%s: %s vs %s" % ("parameters" if key == "sha" else "parameters and Adam "
                                        "state", k, res["restored_" + key], ref[key][k]))
                return 1
        print("global parameters and Adam state at step %s bit-identical to the reference "
              "(sha256 %s...)" % (k, ref["sha"][k][:16]), flush=True)

        want = [str(s) for s in range(args.kill_step, args.steps)]
        if sorted(res["loss"], key=int) != want:
            print("FAIL: the relaunch ran steps %s, expected %s" % (sorted(res["loss"], key=int),
                                                                    want))
            return 1
        worst = 0.0
        print("step  reference loss   relaunch loss    rel. diff", flush=True)
        for s in range(max(0, args.kill_step - 2), args.steps):
            a = ref["loss"][str(s)]
            b = res["loss"].get(str(s))
            if b is None:
                print("%4d  %.9f" % (s, a))
                continue
            rel = abs(a - b) / max(abs(a), 1e-30)
            worst = max(worst, rel)
            print("%4d  %.9f  %.9f  %.2e" % (s, a, b, rel), flush=True)
        if worst > args.loss_rtol:
            print("FAIL: a relaunch loss differs from the reference by %.2e relative (> %g)"
                  % (worst, args.loss_rtol))
            return 1
        print("PASS: %d -> %d ranks, resumed at step %d, losses within %.2e of the reference"
              % (args.np, len(survivors), args.kill_step, worst))
        return 0
    finally:
        remove_job(job)
        remove_job(job + "-ref")


if __name__ == "__main__":
    sys.exit(main())
