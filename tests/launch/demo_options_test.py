"""The demo refuses a bad option by name, at once and before it trains or starts MPI:
out-of-range sizes (a negative --steps once wrapped around to 2^64 - 3 steps, a negative
--dim crashed in libtorch), a learning rate that is not a positive finite number, --dim
not a multiple of --heads; memento_demo_ulfm also its --spares and the remote baseline.

  demo_options_test.py MEMENTO_DEMO [MEMENTO_DEMO_ULFM]
"""
import subprocess
import sys

DEMO = [
    (["--steps", "-3"], "--steps: Value -3 not in range 1 to"),
    (["--steps", "0"], "--steps: Value 0 not in range 1 to"),
    (["--dim", "-4"], "--dim: Value -4 not in range 1 to 65536"),
    (["--heads", "0"], "--heads: Value 0 not in range 1 to 1024"),
    (["--blocks", "-1"], "--blocks: Value -1 not in range 1 to 1024"),
    (["--context", "0"], "--context: Value 0 not in range 1 to 65536"),
    (["--batch", "0"], "--batch: Value 0 not in range 1 to 65536"),
    (["--ckpt-every", "0"], "--ckpt-every: Value 0 not in range 1 to"),
    (["--lr", "-1"], "--lr -1 must be a positive, finite learning rate"),
    (["--lr", "nan"], "--lr nan must be a positive, finite learning rate"),
    (["--dim", "30", "--heads", "4"], "--dim 30 must be a multiple of --heads 4"),
    (["--heads", "128"], "--dim 64 must be a multiple of --heads 128"),
    (["--bogus"], "--bogus"),
]
ULFM = [
    (["--spares", "-1"], "--spares: Value -1 not in range 0 to"),
    (["--baseline-remote", "/tmp/x"], "--baseline-remote"),
]


def check(binary, cases):
    failures = []
    for args, want in cases:
        r = subprocess.run([binary] + args + ["--quiet"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        if r.returncode == 0 or want not in r.stdout or "step " in r.stdout:
            failures.append("%s %s: exit %d, wanted %r in:\n%s" % (
                binary, " ".join(args), r.returncode, want, r.stdout[-2000:]))
    return failures


def main():
    failures = check(sys.argv[1], DEMO)
    if len(sys.argv) > 2:
        failures += check(sys.argv[2], ULFM)
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("PASS: %d bad options refused by name" % (len(DEMO) + (len(ULFM) if len(sys.argv) > 2
                                                                     else 0)))


if __name__ == "__main__":
    main()
