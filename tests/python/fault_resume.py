#!/usr/bin/env python3
"""Kill one virtual node mid-training, relaunch, and require a bit-identical result.

1. a failure-free reference run (the plain DDP script for --program python,
   the same binary under another job for --program cpp) writes the final
   parameters, optimizer state and next random draws of every rank;
2. the memento run: every rank of virtual node 1 SIGKILLs itself after step
   --kill-step (the launcher then ends the others) -> must exit non-zero;
3. node 1's shared-memory segments are unlinked (its memory is lost);
4. relaunch: memento restores from memory (node 1's shards from node 0's
   replicas) and trains to --steps;
5. every rank's final state must be bit-identical to the reference.
Exit 0 = pass. Used by ctest (labels mpi;fault).

With --reference DIR the reference lives in DIR: --reference-only writes it there
and stops (a ctest fixture), and a run without it compares against what is there,
so that the launchers' tests of one program share one failure-free run (the same
script ends in the same bits under either launcher).
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid

from rank_jobs import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "experiments", "torch")


def segment_prefix(job, node):
    """/dev/shm name prefix of `node`'s segments (runtime NodeStore::SegmentName)."""
    host = socket.gethostname()
    ident = "%s/%d" % (host, node)
    sanitized = "".join(c if (c.isalnum() and c.isascii()) or c in "_-" else "_"
                        for c in ident[:64])
    return "/dev/shm/memento.%s.%s-" % (job, sanitized)


def remove_job(job):
    for path in glob.glob("/dev/shm/memento.%s.*" % job):
        os.unlink(path)


def job_env(scheme, ranks_per_node, python_path):
    """The environment of the example jobs: memento's settings for the test,
    the bindings and examples on PYTHONPATH, Open MPI for this container, and
    none of the settings the drivers set per launch."""
    env = dict(os.environ)
    env.update({
        "MEMENTO_RANKS_PER_NODE": str(ranks_per_node),
        "MEMENTO_SCHEME": scheme,
        "MEMENTO_TIMEOUT_S": "120",
        "MEMENTO_CHUNK_BYTES": "64K",
        "PYTHONPATH": os.pathsep.join([python_path, EXAMPLES]),
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    })
    for k in ("EXAMPLE_KILL_STEP", "EXAMPLE_KILL_RANKS", "EXAMPLE_NODE_IDS", "MEMENTO_REMOTE",
              "MEMENTO_NODE", "MEMENTO_ELASTIC"):
        env.pop(k, None)
    return env


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launcher", choices=["mpirun", "torchrun"], required=True)
    p.add_argument("--program", choices=["python", "fsdp2", "cpp"], required=True)
    p.add_argument("--cpp-binary", default="")
    p.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe")
    p.add_argument("--python-path", required=True, help="directory holding the memento package")
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--kill-step", type=int, default=5)
    p.add_argument("--scheme", default="replica:2")
    p.add_argument("--reference", default="", help="directory of the failure-free run")
    p.add_argument("--reference-only", action="store_true",
                   help="write the failure-free run to --reference and stop")
    args = p.parse_args()
    if args.reference_only and not args.reference:
        p.error("--reference-only needs --reference DIR")

    # pid plus a nonce: pids are reused within a long test run.
    job = "fr-%s-%s-%d-%s" % (args.launcher, args.program, os.getpid(), uuid.uuid4().hex[:6])
    lost_node = 1
    lost_ranks = [r for r in range(args.np) if r // args.ranks_per_node == lost_node]
    env = job_env(args.scheme, args.ranks_per_node, args.python_path)

    def launch(program, out, job_id, extra_env=None):
        e = dict(env, MEMENTO_JOB=job_id, MASTER_PORT=str(free_port()))
        e.update(extra_env or {})
        if program == "cpp":
            cmd = [args.cpp_binary, "--steps", str(args.steps), "--out", out]
        else:
            script, *flags = program.split()
            cmd = [sys.executable, os.path.join(EXAMPLES, script), "--steps", str(args.steps),
                   "--out", out] + flags
        if args.launcher == "mpirun":
            full = shlex.split(args.mpirun) + ["-np", str(args.np)] + cmd
        else:
            full = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.np), "--master_port", e["MASTER_PORT"],
                    "--max_restarts", "0"]
            full += (["--no_python"] + cmd) if program == "cpp" else cmd[1:]
        print("--- %s (job %s%s)" % (" ".join(full), job_id,
                                      ", " + str(extra_env) if extra_env else ""), flush=True)
        r = subprocess.run(full, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=900)
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        # A failed run shows more: its first error is often far above the launcher's report.
        print("\n".join(lines[-25:] if r.returncode == 0 else lines[-200:]), flush=True)
        return r.returncode, r.stdout

    tmp = tempfile.mkdtemp(prefix="memento-fr-")
    ref, res = args.reference or os.path.join(tmp, "ref"), os.path.join(tmp, "res")
    done = os.path.join(ref, "complete")  # written last: a cut-short reference has none
    os.makedirs(res)
    try:
        reference, program = {"python": ("ddp_train_plain.py", "ddp_train.py"),
                              "fsdp2": ("fsdp2_train.py --plain", "fsdp2_train.py"),
                              "cpp": ("cpp", "cpp")}[args.program]
        if args.reference_only or not args.reference:
            shutil.rmtree(ref, ignore_errors=True)
            os.makedirs(ref)
            rc, _ = launch(reference, ref, job + "-ref")
            if rc != 0:
                print("FAIL: the failure-free reference run exited %d" % rc)
                return 1
            open(done, "w").close()
            if args.reference_only:
                print("PASS: failure-free reference of %d ranks in %s" % (args.np, ref))
                return 0
        elif not os.path.exists(done):
            print("FAIL: no complete failure-free reference in %s (its fixture test "
                  "did not pass)" % ref)
            return 1
        rc, _ = launch(program, os.path.join(tmp, "unused"), job,
                       {"EXAMPLE_KILL_STEP": str(args.kill_step),
                        "EXAMPLE_KILL_RANKS": ",".join(map(str, lost_ranks))})
        if rc == 0:
            print("FAIL: the run whose node %d was to be killed exited 0" % lost_node)
            return 1
        segments = glob.glob(segment_prefix(job, lost_node) + "*")
        if len(segments) != len(lost_ranks):
            print("FAIL: expected %d segments of node %d, found %s (all: %s)"
                  % (len(lost_ranks), lost_node, segments,
                     glob.glob("/dev/shm/memento.%s.*" % job)))
            return 1
        for s in segments:
            os.unlink(s)
        print("node %d lost: unlinked %s" % (lost_node, segments), flush=True)
        rc, out = launch(program, res, job)
        if rc != 0:
            print("FAIL: the relaunch exited %d" % rc)
            return 1
        versions = set(int(v) for v in re.findall(r"restored v(\d+)", out))
        if len(versions) != 1 or min(versions) < 1:
            print("FAIL: every rank must report one restored version >= 1, got %s" % versions)
            return 1
        if "replica" not in out:
            print("FAIL: the lost node's entries were not rebuilt from a replica")
            return 1
        if args.program != "cpp":
            # Restore returned before what node %d held was protected again;
            # by the end every rank's checkpoints are protected.
            if "; re-protecting" not in out:
                print("FAIL: no rank resumed while its re-protect ran in the background")
                return 1
            if out.count("checkpoints protected") != args.np:
                print("FAIL: not every rank ended with its checkpoints protected")
                return 1
        print("resumed from memory at step %d" % versions.pop(), flush=True)
        for rank in range(args.np):
            if args.program == "cpp":
                a = open(os.path.join(ref, "rank%d.bin" % rank), "rb").read()
                b = open(os.path.join(res, "rank%d.bin" % rank), "rb").read()
                if a != b or not a:
                    print("FAIL: rank %d final state differs (%d vs %d bytes)"
                          % (rank, len(a), len(b)))
                    return 1
            else:
                diff = compare_python(os.path.join(ref, "rank%d.pt" % rank),
                                      os.path.join(res, "rank%d.pt" % rank))
                if diff:
                    print("FAIL: rank %d: %s" % (rank, diff))
                    return 1
        print("PASS: %d ranks bit-identical to the failure-free run" % args.np)
        return 0
    finally:
        remove_job(job)
        remove_job(job + "-ref")
        shutil.rmtree(tmp, ignore_errors=True)


def compare_python(path_a, path_b):
    import numpy as np
    import torch

    # weights_only=False: the dumps hold numpy arrays and Python's random state.
    a, b = torch.load(path_a, weights_only=False), torch.load(path_b, weights_only=False)

    def same(x, y):
        if torch.is_tensor(x):
            return (torch.is_tensor(y) and x.dtype == y.dtype and x.shape == y.shape
                    and torch.equal(x.reshape(-1).view(torch.uint8),
                                    y.reshape(-1).view(torch.uint8)))
        if isinstance(x, np.ndarray):
            return isinstance(y, np.ndarray) and x.tobytes() == y.tobytes()
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(
                same(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y))
        return x == y

    for key in ("params", "optimizer", "draws"):
        if not same(a[key], b[key]):
            return "%s differ" % key
    return ""


if __name__ == "__main__":
    sys.exit(main())
