#!/usr/bin/env bash
# Elastic restore from memory vs the same reshard from the remote directory.
#
#   experiments/runtime/run_elastic_bench.sh [--bytes 256M] [--scheme replica:2]
#
# 8 virtual nodes (one rank each) save one version of --bytes per rank, sharded by
# rows of one global tensor, and persist it; nodes 1 and 4 are lost; 6 ranks on
# the survivors restore elastically from memory; then every node store is removed
# (and the page cache dropped when allowed) and the same 6 ranks reshard the
# remote files. Prints both JSON records and the ratio memory / remote.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${MEMENTO_BUILD_DIR:-build}
BYTES=256M
SCHEME=replica:2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bytes) BYTES=$2; shift 2 ;;
    --scheme) SCHEME=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$BYTES" in
  *G) BYTES=$(( ${BYTES%G} << 30 )) ;;
  *M) BYTES=$(( ${BYTES%M} << 20 )) ;;
  *K) BYTES=$(( ${BYTES%K} << 10 )) ;;
esac
BIN=$BUILD/experiments/runtime/bench_elastic
[[ -x $BIN ]] || { echo "build $BIN first (cmake --build $BUILD --target bench_elastic)" >&2; exit 2; }
JOB=elastic-$$
SHM=${MEMENTO_SHM_DIR:-/dev/shm}  # where the node stores are (the runtime's rule)
REMOTE=$(mktemp -d /tmp/memento-elastic-XXXXXX)
cleanup() { rm -f "$SHM"/memento."$JOB".* /tmp/"$JOB".*; rm -rf "$REMOTE"; }
trap cleanup EXIT
MPI=(mpirun --allow-run-as-root --oversubscribe)
ARGS=(--job "$JOB" --scheme "$SCHEME" --remote "$REMOTE" --bytes "$BYTES" --old-ranks 8)

"${MPI[@]}" -np 8 "$BIN" --phase save "${ARGS[@]}" | tee /tmp/"$JOB".save
rm -f "$SHM"/memento."$JOB".bench_1-* "$SHM"/memento."$JOB".bench_4-*
"${MPI[@]}" -np 6 "$BIN" --phase memory --ids 0,2,3,5,6,7 "${ARGS[@]}" | tee /tmp/"$JOB".memory
rm -f "$SHM"/memento."$JOB".*
sync
if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then COLD=cold; else COLD=warm; fi
"${MPI[@]}" -np 6 "$BIN" --phase remote --ids 0,2,3,5,6,7 "${ARGS[@]}" | tee /tmp/"$JOB".remote
python3 - "$JOB" "$COLD" <<'PY'
import json, sys
job, cold = sys.argv[1], sys.argv[2]
m = json.load(open(f"/tmp/{job}.memory"))
r = json.load(open(f"/tmp/{job}.remote"))
assert m["wrong_elements"] == 0 and r["wrong_elements"] == 0, "a restore is not bit-exact"
mib = lambda v: [round(x / 2**20, 1) for x in v]
print(f"scheme {m['scheme']}, 8 -> 6 nodes, {m['bytes_per_old_rank'] / 2**20:.0f} MiB per old rank "
      f"(remote files read {cold})")
for name, x in (("memory", m), ("remote", r)):
    print(f"  {name}: Restore() {x['restore_s']:.3f} s (inventory+plan {x['inventory_plan_s']:.3f}, "
          f"assemble {x['transfer_s']:.3f}); buffers writable after {x['writable_s']:.3f} s, "
          f"protected under 6 nodes after {x['protected_s']:.3f} s")
print(f"  memory / remote: {m['restore_s'] / r['restore_s']:.3f} until training resumes (Restore()), "
      f"{m['writable_s'] / r['writable_s']:.3f} until the buffers are writable, "
      f"{m['protected_s'] / r['protected_s']:.3f} until protected under 6 nodes")
print(f"  MiB received per node from other nodes' memory {mib(m['received_bytes_per_node'])}, "
      f"minimum {mib(m['minimum_bytes_per_node'])}, remote {mib(m['remote_bytes_per_node'])}")
PY
rm -f /tmp/"$JOB".*
