"""A job under torchrun opens memento's gloo transport three times in each
process (save, close, then two restores, each by a Checkpointer of its own)
and restores bit-exactly every time: a later transport must never meet the
store keys an earlier one left.

    reopen_torchrun.py --python-path DIR    (launches itself under torchrun)
"""
import argparse
import glob
import os
import socket
import subprocess
import sys
import uuid


def worker():
    import torch
    import memento

    rank = int(os.environ["RANK"])
    want = torch.arange(64, dtype=torch.float32) * (rank + 1)
    t = want.clone()
    with memento.Checkpointer(job=os.environ["MEMENTO_JOB"]) as ck:
        ck.register("t", t)
        ck.save(1)
        ck.wait()
    for _ in range(2):
        t.zero_()
        with memento.Checkpointer(job=os.environ["MEMENTO_JOB"]) as ck:
            ck.register("t", t)
            assert ck.restore() == 1
        assert torch.equal(t, want), "rank %d restored other bytes" % rank
    print("rank %d restored through three transports" % rank, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python-path", required=True)
    args = p.parse_args()
    job = "reopen-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=args.python_path, OMP_NUM_THREADS="1", MEMENTO_JOB=job,
               MEMENTO_RANKS_PER_NODE="1", MEMENTO_TIMEOUT_S="60", MASTER_ADDR="127.0.0.1",
               # each close() ends a run normally; the next Checkpointer continues it
               MEMENTO_KEEP_FINISHED="1", MEMENTO_RESUME_FINISHED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port), "--max_restarts", "0",
           os.path.abspath(__file__), "--worker"]
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=600)
    finally:
        for path in glob.glob("/dev/shm/memento.%s.*" % job):
            os.unlink(path)
    print(r.stdout[-6000:])
    restored = r.stdout.count("restored through three transports")
    if r.returncode != 0 or restored != 2:
        print("FAIL: torchrun exited %d, %d of 2 ranks restored" % (r.returncode, restored))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        sys.exit(main())
