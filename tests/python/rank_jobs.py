"""What the multi-rank tests share: a free TCP port, and a script run on N ranks under
torchrun or mpirun (MEMENTO_TEST_MPIRUN or mpirun on PATH) with the build tree's package."""
import os
import shutil
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script, n, args, env, launcher="torchrun", tail=8000):
    """Runs `script` with `args` on n ranks under `launcher` ("torchrun", "mpirun", or
    None: one process on its own), with os.environ and `env` over it; the rendezvous is on
    a free local port, and the memento package comes from MEMENTO_TEST_PYTHON_PATH when
    it names one (else the installed one). Prints the last `tail` characters of the
    output, asserts that it exited 0 and returns the output."""
    port = free_port()
    e = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
             OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    e.update(env)
    e.pop("MEMENTO_RANKS_PER_NODE", None)  # every rank is a node of its own
    build = os.environ.get("MEMENTO_TEST_PYTHON_PATH")
    if build:
        e["PYTHONPATH"] = build
    if launcher is None:
        assert n == 1, "one process runs without a launcher, not %d" % n
        cmd = [sys.executable, script]
    elif launcher == "mpirun":
        cmd = [os.environ.get("MEMENTO_TEST_MPIRUN") or shutil.which("mpirun"),
               "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable, script]
    else:
        assert launcher == "torchrun", "unknown launcher %r" % launcher
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
               "--master_port", str(port), "--max_restarts", "0", script]
    r = subprocess.run(cmd + list(args), env=e, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    print(r.stdout[-tail:])
    assert r.returncode == 0, "%s %s %s on %d ranks exited %d" % (
        launcher or "alone", os.path.basename(script), " ".join(map(str, args)), n,
        r.returncode)
    return r.stdout
