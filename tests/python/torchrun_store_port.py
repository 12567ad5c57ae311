"""memento's gloo transport under torchrun binds no port besides MASTER_PORT.

Two torchrun launches of 2 ranks, each with MASTER_PORT + 1 held by another
socket for the whole job:
  agent   torchrun's static rendezvous: TORCHELASTIC_USE_AGENT_STORE=True, the
          agent serves the store at MASTER_PORT (the driver holds MASTER_PORT + 1);
  nostore the c10d rendezvous with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1:
          TORCHELASTIC_USE_AGENT_STORE=False, MASTER_PORT is a free port the agent
          picked for rank 0 to serve (rank 0 holds MASTER_PORT + 1 itself). memento's
          store and the application's own init_process_group share rank 0's server
          at MASTER_PORT, whichever comes first.
Each rank commits a checkpoint (its replica sent to the other rank over gloo)
through a Checkpointer opened before the application's init_process_group and
through one opened after, and runs a collective of the application's group.

    torchrun_store_port.py --python-path DIR    (launches itself under torchrun)
"""
import argparse
import glob
import os
import socket
import subprocess
import sys
import uuid


def hold(port):
    """A listening socket on 127.0.0.1:port, or None when something else holds it."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen()
        return s
    except OSError:
        s.close()
        return None


def worker():
    import torch
    import torch.distributed as dist

    import memento

    rank = int(os.environ["RANK"])
    mode = os.environ["TEST_MODE"]
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE")
    assert agent == ("True" if mode == "agent" else "False"), agent
    port = int(os.environ["MASTER_PORT"])
    if rank == 0 and mode == "nostore":
        held = hold(port + 1)  # noqa: F841 (held until the process exits)
    job = os.environ["MEMENTO_JOB"]
    t = torch.arange(4096, dtype=torch.float32) * (rank + 1)
    # memento first: under "nostore" its rank 0 serves the store at MASTER_PORT,
    # and the application's process group joins that server.
    with memento.Checkpointer(job=job, scheme="replica:2") as ck:
        ck.register("t", t)
        ck.save(1)
        ck.wait()  # committed: the replica went to the other rank over gloo
        assert ck.latest_committed() == 1
        dist.init_process_group("gloo")
    # Now the application's group came first.
    with memento.Checkpointer(job=job + "-2", scheme="replica:2") as ck:
        ck.register("t", t)
        ck.save(2)
        ck.wait()
        assert ck.latest_committed() == 2
    total = torch.tensor([rank + 1])
    dist.all_reduce(total)
    assert total.item() == 3, total
    dist.destroy_process_group()
    print("rank %d ok (%s, MASTER_PORT %d)" % (rank, mode, port), flush=True)


def launch(mode, python_path):
    job = "port-%s-%d-%s" % (mode, os.getpid(), uuid.uuid4().hex[:6])
    env = dict(os.environ, PYTHONPATH=python_path, OMP_NUM_THREADS="1", MEMENTO_JOB=job,
               MEMENTO_RANKS_PER_NODE="1", MEMENTO_TIMEOUT_S="60", TEST_MODE=mode)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--max_restarts", "0"]
    held = None
    if mode == "agent":
        for _ in range(20):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            held = hold(port + 1)
            if held is not None:
                break
        env["MASTER_ADDR"] = "127.0.0.1"
        cmd += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            endpoint = "127.0.0.1:%d" % s.getsockname()[1]
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        cmd += ["--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint,
                "--local_addr", "127.0.0.1"]
    cmd += [os.path.abspath(__file__), "--worker"]
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=240)
    finally:
        if held is not None:
            held.close()
        for path in glob.glob("/dev/shm/memento.%s*" % job):
            os.unlink(path)
    ok = r.stdout.count(" ok (%s" % mode)
    if r.returncode != 0 or ok != 2:
        print(r.stdout[-6000:])
        print("FAIL (%s): torchrun exited %d, %d of 2 ranks ok" % (mode, r.returncode, ok))
        return False
    print("\n".join(line for line in r.stdout.splitlines() if " ok (" in line))
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python-path", required=True)
    args = p.parse_args()
    results = [launch(mode, args.python_path) for mode in ("agent", "nostore")]
    if not all(results):
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        sys.exit(main())
