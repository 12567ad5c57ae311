#!/usr/bin/env bash
# A hung rank under real mpirun (labels mpi;fault): the job must end within the
# timeout plus a margin, non-zero, with a line naming the timeout; a peer that
# comes back late must not write into freed memory.
# Usage: mpi_hang_test.sh WORKER SCENARIO   (SCENARIO: abort | abort-create | late-peer)
# Environment: MPIRUN (the mpirun command line, ctest sets it).
set -uo pipefail
worker=$1
scenario=$2
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}"
export MEMENTO_TIMEOUT_S=2
# Generous for a loaded 2-core machine; the old behaviour waited 300 s or forever.
limit=${HANG_LIMIT:-45}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout -s KILL $((limit + 30)) "${mpirun[@]}" -np 3 "$worker" "$scenario" >"$out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
grep -v -e '^\s*$' "$out" | tail -n 25
echo "--- exit code $rc after ${elapsed}s (MEMENTO_TIMEOUT_S=$MEMENTO_TIMEOUT_S, limit ${limit}s)"
fail() { echo "FAIL: $*"; exit 1; }
if [[ $scenario == late-peer ]]; then
  grep -q "stack corrupted" "$out" && fail "MPI wrote into the stack of a timed out collective"
  [[ $(grep -c "stack intact" "$out") -eq 2 ]] || fail "the survivors did not both check their stack"
fi
[[ $rc -ne 0 ]] || fail "the job exited 0 although a rank hung"
[[ $rc -ne 137 ]] || fail "the job had to be killed: it hung"
((elapsed <= limit)) || fail "the job took ${elapsed}s to end"
grep -q "aborting the job (MPI_Abort" "$out" || fail "no line saying why the job was aborted"
grep -q "MEMENTO_TIMEOUT_S" "$out" || fail "the abort line does not name MEMENTO_TIMEOUT_S"
echo PASS
