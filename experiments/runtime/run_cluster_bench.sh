#!/usr/bin/env bash
# Cluster benchmark (docs/architecture.md §9): one mpirun of bench_cluster per
# configuration (virtual nodes, 1 rank per node). Reproduce everything with
#
#   MEMENTO_BUILD_DIR=build scripts/setup && experiments/runtime/run_cluster_bench.sh
#
# Configurations: N=4 {replica:2, xor:3} and N=8 {replica:2, xor:3, rs:4+2}
# losing node 1, and rs:4+2 on N=8 losing M = 2 nodes (1 and 2)
# (rs:4+2 needs groups of K+M = 6 nodes, so N >= 6: N=8 only; its nodes 6,7
# form the partial last group), each with S = 64 MiB and 256 MiB per rank.
# Each line of output is one JSON object (--json) or a readable table row;
# definitions of every field: the header of bench_cluster.cc.
#
#   run_cluster_bench.sh [--json] [--smoke] [--reps R] [--sizes "64M 256M"] [--link-gibps X]
#                        [--remote-gibps X] [--launches K]
#     --launches K  run the whole set K times, one configuration after the
#               other (default 1): one launch differs from the next by up to
#               2x here, so `cluster_targets.py` takes the median over them
#               and prints the targets table (`--json` output as its input)
#     --link-gibps X  emulated link of X GiB/s per direction per node for every
#               configuration (bench_cluster --link-gibps; default 0 = off):
#               protect, the MPI baseline ring and recovery all go through it
#     --remote-gibps X  emulated parallel file system of X GiB/s for the whole
#               job, against which recovery is compared (fs_s: every rank
#               reloads at once through it); default auto = each node gets
#               1/15 of its link (bench_cluster's header says why); 0 = off
#     --smoke   N=4, S=1 MiB, replica:2 and xor:3, 2 reps, plus replica:2 with
#               S=4 MiB over a 0.5 GiB/s link and rs:4+2 on N=6 losing 2 nodes
#               (1,2); checks the JSON fields, that every
#               ratio is positive and that the link is no faster than its token
#               buckets allow (ctest mpi.bench_cluster_smoke)
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
cli=${MEMENTO_BENCH_CLI:-$(dirname "$bench")/../../bindings/cli/memento}  # memento clean
json=0
smoke=0
reps=3
sizes="64M 256M"
link=0
remote_gibps=auto
launches=1
while (($#)); do
  case $1 in
    --json) json=1 ;;
    --smoke) smoke=1 ;;
    --reps) reps=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --link-gibps) link=$2; shift ;;
    --remote-gibps) remote_gibps=$2; shift ;;
    --launches) launches=$2; shift ;;
    *) sed -n '2,36p' "$0"; exit 2 ;;
  esac
  shift
done
[[ $launches =~ ^[1-9][0-9]*$ ]] || { echo "run_cluster_bench: --launches $launches: must be an integer >= 1"; exit 2; }
[[ -x $bench ]] || { echo "run_cluster_bench: $bench not built (scripts/setup)"; exit 2; }
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}"
# Open MPI: shared-memory BTL only. CMA single copy works in this container
# but made the baseline ring slower (experiments/runtime/README.md): off.
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
  if [[ -x $cli ]]; then "$cli" clean --force --job "$job" >/dev/null 2>&1; fi
  rm -rf "${remote:?}/$job"
}
trap 'cleanup_job; rm -rf "$remote" "$out" "$out.err" "$out.all"' EXIT

# Each configuration: nodes scheme size link_gibps [lost nodes, default 1].
if ((smoke)); then
  configs=("4 replica:2 1M $link" "4 xor:3 1M $link" "4 replica:2 4M 0.5" "6 rs:4+2 1M $link 1,2")
  reps=2
else
  configs=()
  for s in $sizes; do
    for c in "4 replica:2" "4 xor:3" "8 replica:2" "8 xor:3" "8 rs:4+2"; do
      configs+=("$c $s $link")
    done
    configs+=("8 rs:4+2 $s $link 1,2")  # M = 2 nodes of one group lost
  done
  one_set=("${configs[@]}")
  for ((l = 1; l < launches; ++l)); do configs+=("${one_set[@]}"); done
fi

# Where the node stores are (MEMENTO_SHM_DIR, as the runtime reads it).
shm_dir=${MEMENTO_SHM_DIR:-/dev/shm}
if ((!json)); then
  echo "# $shm_dir: $(df -h --output=size,avail "$shm_dir" | tail -1); $(grep MemAvailable /proc/meminfo)"
  printf '%-10s %2s %5s %5s | %8s %8s %8s %6s %6s | %7s %7s %6s %6s %7s %7s %7s %6s %7s %7s %6s %6s %7s %6s | %6s %6s %s\n' \
    scheme N S link protect_s prot_GB/s mpi_GB/s ratio cpu_r resume protctd res/L prt/L inv plan \
    transfer tx/ring reprot rem_cold r/warm r/cold fs_s r/fs rss/f shm/f lost
fi
status=0
skipped=0
i=0
for c in "${configs[@]}"; do
  read -r n scheme size lk lose <<<"$c"
  lose=${lose:-1}
  job="benchc-$$-$((i++))"
  fs=()
  [[ $remote_gibps == auto ]] || fs=(--remote-gibps "$remote_gibps")
  timeout 900 "${mpirun[@]}" -np "$n" "$bench" --json --scheme "$scheme" --size "$size" \
    --reps "$reps" --lose "$lose" --remote "$remote" --job "$job" --link-gibps "$lk" \
    "${fs[@]}" >"$out" 2>"$out.err"
  rc=$?
  line=$(grep '^{' "$out" | tail -1)
  cleanup_job
  if [[ $rc -ne 0 || -z $line ]]; then
    echo "run_cluster_bench: N=$n $scheme S=$size link=$lk lose=$lose failed (rc $rc):" >&2
    tail -n 20 "$out.err" >&2
    status=1
    continue
  fi
  ((smoke)) && echo "$line" >>"$out.all"
  if ((json)); then
    echo "$line"
  else
    python3 - "$line" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
if r.get("skipped"):
    print(f"{r['scheme']:<10} {r['nodes']:2d} {r['shard_bytes'] >> 20:4d}M | SKIPPED: {r['reason']}")
    sys.exit(0)
link = f"{r['link_gibps']:5.2f}" if r['link_gibps'] > 0 else "  off"
print(f"{r['scheme']:<10} {r['nodes']:2d} {int(r['shard_bytes']) >> 20:4d}M {link} | "
      f"{r['protect_s']:8.3f} {r['protect_node_gibps']:8.3f} {r['mpi_node_gibps']:8.3f} "
      f"{r['protect_vs_mpi']:6.3f} {r['cpu_ratio']:6.3f} | {r['recover_s']:7.3f} {r['protected_s']:7.3f} "
      f"{r['resume_vs_link_bound']:6.2f} {r['protected_vs_link_bound']:6.2f} {r['inventory_s']:7.4f} "
      f"{r['plan_s']:7.4f} {r['transfer_s']:7.3f} {r['transfer_vs_ring']:6.2f} {r['reprotect_s']:7.3f} "
      f"{r['remote_cold_s']:7.3f} {r['recover_vs_remote_warm']:6.2f} "
      f"{r['recover_vs_remote_cold']:6.2f} {r['remote_link_s']:7.3f} "
      f"{r['recover_vs_remote_link']:6.3f} | {r['rss_ckpt_vs_formula_max']:6.3f} "
      f"{r['shm_vs_formula_max']:6.3f} {','.join(map(str, r['lost_nodes']))}")
EOF
  fi
  if ((smoke)); then
    python3 - "$line" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
if r.get("skipped"):  # e.g. /dev/shm too small on this machine: say why, do not pass
    print("smoke SKIP:", r.get("reason"))
    sys.exit(77)
need = ["protect_s", "protect_node_gibps", "mpi_node_gibps", "protect_vs_mpi", "recover_s",
        "protected_s", "resume_vs_link_bound", "protected_vs_link_bound",
        "inventory_s", "plan_s", "transfer_s", "reprotect_s", "remote_warm_s", "remote_cold_s",
        "recover_vs_remote_warm", "recover_vs_remote_cold", "rss_ckpt_vs_formula_max",
        "shm_vs_formula_max", "vmhwm_vs_formula_max", "link_gibps", "mpi_ring_link_s",
        "mpi_raw_node_gibps", "protect_cpu_util", "mpi_cpu_util"]
positive = ["protect_cpu_s_per_gib", "mpi_cpu_s_per_gib", "cpu_ratio", "cores", "ranks",
            "remote_gibps", "remote_link_s", "recover_vs_remote_link", "recover_cpu_s",
            "recover_cpu_s_per_gib", "recover_cpu_util", "protect_after_snapshot_s",
            "lost_transfer_s", "transfer_vs_ring"]
if r.get("link_gibps", 0) > 0:
    positive += ["link_gibps", "mpi_ring_link_s"]
# xor:3 on 4 ranks without a link: the XOR ring reduce-scatter baseline runs.
if r.get("scheme", "").startswith("xor:") and r.get("link_gibps", 0) == 0:
    positive += ["xor_ring_s", "xor_ring_cpu_s_per_gib", "protect_vs_xor_ring",
                 "parity_vs_xor_ring"]
missing = [k for k in need + positive if k not in r]
bad = [k for k in need if k in r and not r[k] >= 0]
# The link bounds are 0 without a link.
ratios = [k for k in need + positive
          if ("_vs_" in k or k in positive) and k in r and not r[k] > 0
          and not (k.endswith("_vs_link_bound") and r.get("link_gibps", 0) == 0)]
# Over a link of L GiB/s per direction with buckets of depth B bytes, a node
# moves at most L*t + B bytes each way in t seconds.
fast = []
if r.get("link_gibps", 0) > 0 and not missing:
    L, B = r["link_gibps"], r["link_burst_bytes"] / (1 << 30)
    for rate, t in (("protect_node_gibps", r["protect_s"]), ("mpi_node_gibps", r["mpi_ring_link_s"])):
        if r[rate] > 1.01 * (2 * L + 2 * B / t):
            fast.append(f"{rate} {r[rate]:.3f} > {2 * L + 2 * B / t:.3f}")
# The whole job's read through the emulated file system takes at least its
# bytes over the link's rate.
if not missing and r["remote_gibps"] > 0:
    floor = r["remote_bytes"] / (r["remote_gibps"] * (1 << 30))
    if r["remote_link_s"] < 0.99 * floor:
        fast.append(f"remote_link_s {r['remote_link_s']:.4f} < {floor:.4f}")
# The part of protect after the snapshot is part of protect, on every rank.
if not missing and r["protect_after_snapshot_s"] > r["protect_s"] * 1.0001:
    bad.append(f"protect_after_snapshot_s {r['protect_after_snapshot_s']:.4f} > protect_s")
# The lost nodes' transfer is part of the slowest rank's, and of their restore.
if not missing and r["lost_transfer_s"] > min(r["transfer_s"], r["recover_s"]) * 1.0001:
    bad.append(f"lost_transfer_s {r['lost_transfer_s']:.4f} > transfer_s or recover_s")
# The restores of all ranks run at once on this machine's cores: together
# they cannot use more CPU than the cores give in the slowest one's time
# (getrusage ticks and the ranks' few ms of skew allowed for).
if not missing and r["recover_cpu_util"] > 1.1:
    bad.append(f"recover_cpu_util {r['recover_cpu_util']:.2f} > 1.1")
# Every smoke configuration is recoverable from memory (rs:4+2 losing 2 nodes
# of its group too): the lost node must come back from a replica or a decode.
source = r.get("recover_source", "")
memory = source.startswith("replica from node") or source.startswith("decode of")
# Which pages the stores had: a huge= value of the tmpfs, read from /proc/mounts.
if r.get("shm_huge") not in ("never", "always", "within_size", "advise"):
    bad.append("shm_huge=%r" % r.get("shm_huge"))
if missing or bad or ratios or fast or r.get("restore_bit_exact") is not True or not memory:
    print("smoke FAIL: missing", missing, "negative", bad, "non-positive", ratios,
          "faster than the link", fast, "bit-exact", r.get("restore_bit_exact"),
          "recovered from", repr(source))
    sys.exit(1)
EOF
    rc=$?
    if ((rc == 77)); then
      skipped=1
    elif ((rc != 0)); then
      status=1
    fi
  fi
done
job=""
leftover=$(ls "$shm_dir" 2>/dev/null | grep -c "benchc-$$-" || true)
if [[ $leftover -ne 0 ]]; then
  echo "run_cluster_bench: $leftover segments left in $shm_dir" >&2
  status=1
fi
if ((!json)); then
  echo "# ratio = protect_node_GB/s / mpi_node_GB/s (target >= 0.8); mpi = the ring over the link when"
  echo "# link is set (GiB/s per direction per node), else raw MPI; cpu_r = mpi_cpu_s_per_gib /"
  echo "# protect_cpu_s_per_gib (CPU seconds of all ranks per GiB moved); resume = until Restore returned"
  echo "# (training resumes), protctd = until the background re-protect committed; res/L, prt/L = those"
  echo "# over the time a lost node needs to receive its shards over its link (0 without a link);"
  echo "# tx/ring = bytes per second restored into a lost node during its transfer / the ring's per direction;"
  echo "# r/warm, r/cold = resume /"
  echo "# remote read of all shards (page-cached / after fadvise DONTNEED); fs_s = every rank reloads"
  echo "# at once through the emulated file system (--remote-gibps), r/fs = recover / fs_s; rss/f = (VmHWM - RSS"
  echo "# before the checkpointer) / formula, shm/f = segment bytes / formula (max over nodes)"
fi
# The smoke's records make a targets table (whether they meet the targets at
# 1 MiB says nothing; that every field it reads is there does).
if ((smoke && status == 0 && !skipped)); then
  if ! python3 "$here/cluster_targets.py" "$out.all" >"$out.err" 2>&1; then
    echo "smoke FAIL: cluster_targets.py on the smoke's records:"
    cat "$out.err"
    status=1
  fi
fi
if ((smoke && status == 0 && skipped)); then
  echo "SKIPPED: bench_cluster smoke (see the reasons above)"
  exit 77
fi
((smoke && status == 0)) && echo "PASS: bench_cluster smoke"
exit $status
