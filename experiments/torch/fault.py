"""Test hook shared by the plain and the memento example: SIGKILL this rank at a step.

EXAMPLE_KILL_STEP=s and EXAMPLE_KILL_RANKS=r1,r2: ranks r1, r2 kill themselves
right after step s. Unset: does nothing.
"""
import os
import signal


def maybe_die(step, rank):
    at = os.environ.get("EXAMPLE_KILL_STEP")
    ranks = os.environ.get("EXAMPLE_KILL_RANKS", "")
    if at and int(at) == step and str(rank) in ranks.split(","):
        print("rank %d: killed at step %d" % (rank, step), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
