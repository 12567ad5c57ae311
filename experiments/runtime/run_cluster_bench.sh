#!/usr/bin/env bash
# Cluster benchmark of issue 5 / DESIGN §9: one mpirun of bench_cluster per
# configuration (virtual nodes, 1 rank per node). Reproduce everything with
#
#   MEMENTO_BUILD_DIR=build scripts/setup && experiments/runtime/run_cluster_bench.sh
#
# Configurations: N=4 {replica:2, xor:3} and N=8 {replica:2, xor:3, rs:4+2}
# (rs:4+2 needs groups of K+M = 6 nodes, so N >= 6: N=8 only; its nodes 6,7
# form the partial last group), each with S = 64 MiB and 256 MiB per rank.
# Each line of output is one JSON object (--json) or a readable table row;
# definitions of every field: the header of bench_cluster.cc.
#
#   run_cluster_bench.sh [--json] [--smoke] [--reps R] [--sizes "64M 256M"]
#     --smoke   N=4, S=1 MiB, replica:2 and xor:3, 2 reps; checks the JSON
#               fields and that every ratio is positive (ctest mpi.bench_cluster)
# Environment: BUILD (build dir, default build), MPIRUN (launcher command),
# REMOTE_ROOT (parent of the remote directory, default /tmp: a real disk here,
# so the cold read after posix_fadvise(DONTNEED) really reads the disk).
# Every configuration's segments and remote folder are removed afterwards, also
# on failure or timeout (by job name).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
bench=${BENCH_CLUSTER:-$build/experiments/runtime/bench_cluster}
cli=${MEMENTO_CLI:-$(dirname "$bench")/../../bindings/cli/memento}  # memento clean
json=0
smoke=0
reps=3
sizes="64M 256M"
while (($#)); do
  case $1 in
    --json) json=1 ;;
    --smoke) smoke=1 ;;
    --reps) reps=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
  shift
done
[[ -x $bench ]] || { echo "run_cluster_bench: $bench not built (scripts/setup)"; exit 2; }
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}"
# Open MPI in this container: shared-memory BTL only, no CMA single copy.
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export MEMENTO_RANKS_PER_NODE=1
export MEMENTO_TIMEOUT_S=${MEMENTO_TIMEOUT_S:-300}

remote=$(mktemp -d "${REMOTE_ROOT:-/tmp}/memento-bench-XXXXXX")
out=$(mktemp "${TMPDIR:-/tmp}/memento-bench-out-XXXXXX")
job=""
cleanup_job() {
  [[ -n $job ]] || return 0
  if [[ -x $cli ]]; then "$cli" clean --job "$job" >/dev/null 2>&1; fi
  rm -rf "${remote:?}/$job"
}
trap 'cleanup_job; rm -rf "$remote" "$out" "$out.err"' EXIT

if ((smoke)); then
  configs=("4 replica:2 1M" "4 xor:3 1M")
  reps=2
else
  configs=()
  for s in $sizes; do
    for c in "4 replica:2" "4 xor:3" "8 replica:2" "8 xor:3" "8 rs:4+2"; do configs+=("$c $s"); done
  done
fi

if ((!json)); then
  echo "# /dev/shm: $(df -h --output=size,avail /dev/shm | tail -1); $(grep MemAvailable /proc/meminfo)"
  printf '%-10s %2s %5s | %8s %8s %8s %6s | %7s %7s %7s %7s %7s %7s %6s %6s | %6s %6s\n' \
    scheme N S protect_s prot_GB/s mpi_GB/s ratio recover inv plan transfer reprot rem_cold \
    r/warm r/cold rss/f shm/f
fi
status=0
i=0
for c in "${configs[@]}"; do
  read -r n scheme size <<<"$c"
  job="benchc-$$-$((i++))"
  timeout 900 "${mpirun[@]}" -np "$n" "$bench" --json --scheme "$scheme" --size "$size" \
    --reps "$reps" --lose 1 --remote "$remote" --job "$job" >"$out" 2>"$out.err"
  rc=$?
  line=$(grep '^{' "$out" | tail -1)
  cleanup_job
  if [[ $rc -ne 0 || -z $line ]]; then
    echo "run_cluster_bench: N=$n $scheme S=$size failed (rc $rc):" >&2
    tail -n 20 "$out.err" >&2
    status=1
    continue
  fi
  if ((json)); then
    echo "$line"
  else
    python3 - "$line" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
if r.get("skipped"):
    print(f"{r['scheme']:<10} {r['nodes']:2d} {r['shard_bytes'] >> 20:4d}M | SKIPPED: {r['reason']}")
    sys.exit(0)
g = 1 << 30
print(f"{r['scheme']:<10} {r['nodes']:2d} {int(r['shard_bytes']) >> 20:4d}M | "
      f"{r['protect_s']:8.3f} {r['protect_node_gibps']:8.3f} {r['mpi_node_gibps']:8.3f} "
      f"{r['protect_vs_mpi']:6.3f} | {r['recover_s']:7.3f} {r['inventory_s']:7.4f} "
      f"{r['plan_s']:7.4f} {r['transfer_s']:7.3f} {r['reprotect_s']:7.3f} "
      f"{r['remote_cold_s']:7.3f} {r['recover_vs_remote_warm']:6.2f} "
      f"{r['recover_vs_remote_cold']:6.2f} | {r['rss_ckpt_vs_formula_max']:6.3f} "
      f"{r['shm_vs_formula_max']:6.3f}")
EOF
  fi
  if ((smoke)); then
    python3 - "$line" <<'EOF' || status=1
import json, sys
r = json.loads(sys.argv[1])
need = ["protect_s", "protect_node_gibps", "mpi_node_gibps", "protect_vs_mpi", "recover_s",
        "inventory_s", "plan_s", "transfer_s", "reprotect_s", "remote_warm_s", "remote_cold_s",
        "recover_vs_remote_warm", "recover_vs_remote_cold", "rss_ckpt_vs_formula_max",
        "shm_vs_formula_max", "vmhwm_vs_formula_max"]
missing = [k for k in need if k not in r]
bad = [k for k in need if k in r and not r[k] >= 0]
ratios = [k for k in need if ("_vs_" in k) and k in r and not r[k] > 0]
if missing or bad or ratios or r.get("restore_bit_exact") is not True:
    print("smoke FAIL: missing", missing, "negative", bad, "non-positive ratios", ratios,
          "bit-exact", r.get("restore_bit_exact"))
    sys.exit(1)
EOF
  fi
done
job=""
leftover=$(ls /dev/shm 2>/dev/null | grep -c "benchc-$$-" || true)
if [[ $leftover -ne 0 ]]; then
  echo "run_cluster_bench: $leftover segments left in /dev/shm" >&2
  status=1
fi
if ((!json)); then
  echo "# ratio = protect_node_GB/s / mpi_node_GB/s (target >= 0.8); r/warm, r/cold = recover_s /"
  echo "# remote read of all shards (page-cached / after fadvise DONTNEED); rss/f = (VmHWM - RSS"
  echo "# before the checkpointer) / formula, shm/f = segment bytes / formula (max over nodes)"
fi
((smoke && status == 0)) && echo "PASS: bench_cluster smoke"
exit $status
