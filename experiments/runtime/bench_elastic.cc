// bench_elastic: elastic restore from memory vs the same reshard from the remote
// directory, under mpirun with virtual nodes. Driven by run_elastic_bench.sh,
// which runs the phases as separate launches of one job:
//
//   save     N ranks register rank-sliced rows of one global float32 tensor
//            (--bytes per rank), save version 1 and persist it remotely;
//   memory   N' ranks (the surviving node ids, --ids) restore elastically from
//            the node stores that survive (MEMENTO_ELASTIC);
//   remote   the same N' ranks restore after every node store is gone: every
//            old rank's remote file is read and resharded, as storage-based
//            tools (DeepSpeed Universal Checkpointing) do.
//
// Each restore checks every element of the rank's new slice and prints one JSON
// line (rank 0): the Restore() wall time (the slowest rank: training resumes
// then), its phases, the time until the buffers may be written (+ WaitSnapshot())
// and until the version is protected under the new topology (+ Wait(): the
// snapshot and its protect run in the background), the
// bytes each node received from other nodes' memory and the least it had to
// (the bytes of its new slices that no copy on the node held).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "memento/runtime/checkpointer.h"
#include "memento/runtime/config.h"
#include "memento/runtime/mpi_transport.h"

namespace {

using memento::runtime::Checkpointer;
using memento::runtime::Config;
constexpr int64_t kCols = 1024;

float Value(int64_t i, int64_t j) { return static_cast<float>((i * 7919 + j) % 1000003); }

int Run(int argc, char** argv) {
  std::string phase, job, scheme = "replica:2", remote, ids_text;
  uint64_t bytes = 256ull << 20;
  int old_ranks = 8;
  CLI::App app{"elastic restore from memory vs remote reshard"};
  app.add_option("--phase", phase, "save | memory | remote")->required();
  app.add_option("--job", job, "job id")->required();
  app.add_option("--scheme", scheme, "protection scheme");
  app.add_option("--remote", remote, "remote directory")->required();
  app.add_option("--bytes", bytes, "bytes per rank of the saving job");
  app.add_option("--old-ranks", old_ranks, "ranks of the saving job");
  app.add_option("--ids", ids_text, "node id of each rank, comma-separated (default 0..n-1)");
  CLI11_PARSE(app, argc, argv);

  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> ids;
  for (size_t at = 0; at < ids_text.size();) {
    size_t comma = ids_text.find(',', at);
    if (comma == std::string::npos) comma = ids_text.size();
    ids.push_back(std::stoi(ids_text.substr(at, comma - at)));
    at = comma + 1;
  }
  if (ids.empty()) {
    for (int r = 0; r < size; ++r) ids.push_back(r);
  }
  if (static_cast<int>(ids.size()) != size) {
    std::fprintf(stderr, "--ids names %zu nodes for %d ranks\n", ids.size(), size);
    return 2;
  }
  Config config;
  config.job = job;
  config.node = "bench/" + std::to_string(ids[rank]);
  config.scheme = scheme;
  config.remote_dir = remote;
  config.persist_every = 1;
  config.timeout_s = 600;
  config.elastic = phase != "save";
  auto transport = memento::runtime::CreateMpiTransport(
      memento::runtime::MpiTransportOptions{MPI_COMM_WORLD, std::chrono::milliseconds(600000)});
  if (!transport.ok()) return std::fprintf(stderr, "%s\n", transport.status().ToString().c_str()), 1;
  auto ck = Checkpointer::Create(config, *transport);
  if (!ck.ok()) return std::fprintf(stderr, "%s\n", ck.status().ToString().c_str()), 1;

  // The global tensor [rows x kCols] float32, rows split evenly over the ranks.
  const int64_t rows = static_cast<int64_t>(bytes / (kCols * 4)) * old_ranks;
  const int64_t base = rows / size, extra = rows % size;
  const int64_t r0 = rank * base + std::min<int64_t>(rank, extra);
  const int64_t r1 = r0 + base + (rank < extra ? 1 : 0);
  std::vector<float> w(static_cast<size_t>((r1 - r0) * kCols));
  auto st = (*ck)->RegisterBuffer("w", w.data(), w.size() * 4,
                                  {"float32", {rows, kCols}, {r1 - r0, kCols}, {r0, 0}});
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;

  nlohmann::ordered_json out;
  out["phase"] = phase;
  out["scheme"] = scheme;
  out["ranks"] = size;
  out["old_ranks"] = old_ranks;
  out["bytes_per_old_rank"] = bytes;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  if (phase == "save") {
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t j = 0; j < kCols; ++j) w[(i - r0) * kCols + j] = Value(i, j);
    }
    st = (*ck)->Save(1);
    if (st.ok()) st = (*ck)->WaitPersist();
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  } else {
    auto report = (*ck)->Restore();
    if (!report.ok()) return std::fprintf(stderr, "%s\n", report.status().ToString().c_str()), 1;
    double restore_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t wrong = 0;
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t j = 0; j < kCols; ++j) wrong += w[(i - r0) * kCols + j] != Value(i, j);
    }
    unsigned long long wrong_all = 0, wrong_mine = wrong;
    MPI_Reduce(&wrong_mine, &wrong_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    // The snapshot under the new topology runs in the background:
    // WaitSnapshot() returns when the buffers may be written, Wait() once it
    // is protected and committed.
    st = (*ck)->WaitSnapshot();
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
    double writable_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st = (*ck)->Wait();
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
    double protected_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double phases[3] = {report->stats.inventory_s + report->stats.plan_s, report->stats.transfer_s,
                        report->stats.reprotect_s};
    double slowest[6] = {0, 0, 0, 0, 0, 0},
           mine[6] = {restore_s, phases[0], phases[1], phases[2], protected_s, writable_s};
    MPI_Reduce(mine, slowest, 6, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    out["restore_s"] = slowest[0];
    out["inventory_plan_s"] = slowest[1];
    out["transfer_s"] = slowest[2];
    out["snapshot_s"] = slowest[3];
    out["protected_s"] = slowest[4];
    out["writable_s"] = slowest[5];
    out["wrong_elements"] = wrong_all;
    out["plan"] = report->elastic_plan;
    out["received_bytes_per_node"] = report->elastic_received_per_node;
    out["remote_bytes_per_node"] = report->elastic_remote_per_node;
    out["minimum_bytes_per_node"] = report->elastic_minimum_per_node;
  }
  if (phase == "save") {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), slow = 0;
    MPI_Reduce(&s, &slow, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    out["save_persist_s"] = slow;
  }
  if (rank == 0) std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = Run(argc, argv);
  MPI_Finalize();
  return rc;
}
