// bench_cluster's options, what one launch measures (per rank, and gathered on
// rank 0), and its report: the readable block or one JSON record
// (bench_cluster_report.cc). What is measured and how: bench_cluster.cc's header.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace memento::runtime::bench_cluster {

struct Options {
  bool json = false;
  std::string scheme = "replica:2";
  uint64_t size = 64ull << 20;
  int reps = 3;
  std::vector<int> lose = {1};  // nodes lost before the recovery (--lose 1 or 1,2)
  std::string remote = "/tmp";
  std::string job;
  double link_gibps = 0;  // emulated link per direction per node; 0: off
  // Emulated parallel file system for the whole job, GiB/s; < 0: auto
  // (1/kStorageShare of each node's link), 0: off.
  double remote_gibps = -1;
};

// Per-rank measurements, gathered to rank 0 as doubles.
struct RankStats {
  double protect_bytes = 0;  // sent + received in one protected version (median rep)
  double rss_before = 0, hwm = 0, shm_bytes = 0;
  double recover_sent = 0, recover_received = 0;
  double restored_ok = 0;
  // CPU seconds of the process and bytes sent + received, summed over the
  // timed protect reps / the timed reps of the ring used as MPI baseline.
  double protect_cpu_s = 0, protect_bytes_total = 0;
  double ring_cpu_s = 0, ring_bytes_total = 0;
  double xor_ring_cpu_s = 0, xor_ring_bytes_total = 0;  // the XOR ring's, likewise
  double recover_cpu_s = 0;  // the process's CPU seconds inside Restore()
  static constexpr int kFields = 14;
};

// Everything one launch measures on rank 0 (the gathered view).
struct Report {
  int nodes = 0, ranks = 0, ranks_per_node = 1, slots = 0, threads = 0, cores = 0;
  uint64_t chunk = 0;
  double protect_s = 0, snapshot_s = 0;
  double after_snapshot_s = 0;                   // WaitSnapshot -> Wait, slowest rank, median
  double ring_chunked_s = 0, ring_single_s = 0;  // raw MPI (never throttled)
  double ring_link_s = 0;                        // over the emulated link; 0 when off
  double xor_ring_s = 0;  // XOR ring reduce-scatter (xor:K without a link); 0 when not run
  double protect_wall_s = 0, ring_wall_s = 0;  // summed over the timed reps
  double remote_warm_s = 0, remote_cold_s = 0;
  double remote_gibps = 0, remote_link_s = 0;         // emulated file system; 0 when off
  double prepare_s = 0, recover_s = 0, resume_s = 0;  // recovery (5.): resume_s = both
  double protected_s = 0;  // until Wait() after it returned: protected again
  std::string reprotect_mode;
  double inventory_s = 0, plan_s = 0, transfer_s = 0, reprotect_s = 0;
  double lost_transfer_s = 0;  // the transfer phase of the lost nodes' ranks (slowest)
  uint64_t restored_version = 0;
  std::string source_detail;
  std::vector<RankStats> per_rank;
};

// "1,2" for nodes {1, 2}.
std::string LostNodesText(const std::vector<int>& nodes);

// The first fields of every JSON record of the benchmark (results and skips).
nlohmann::ordered_json JsonHead(const std::string& scheme, int nodes);

// Prints the gathered report (rank 0): `factor` is the scheme's memory factor,
// `node_factor` each node's in the groups formed.
void Print(const Options& opt, const Report& r, double factor,
           const std::vector<double>& node_factor);

}  // namespace memento::runtime::bench_cluster
