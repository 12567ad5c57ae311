// bench_runtime: what a checkpoint costs the training loop (docs/architecture.md §9).
//
// One rank (in-process transport), scheme none. Per shard size S:
//   memcpy       S bytes into a warmed buffer                -> memcpy GB/s
//   sync write   S bytes to a file with write + fsync        -> the synchronous
//                checkpoint a job would otherwise pay (torch.save-like)
//   snapshot     Save + WaitSnapshot with nothing overlapped -> snapshot GB/s
//   loop         `iters` iterations of: compute (simulated: the training
//                thread sleeps, as while the GPU runs forward/backward, for
//                `compute_factor` x the snapshot time), WaitSnapshot, touch
//                the buffers (the optimizer step), Save. The stall per
//                checkpoint is the time blocked in Save + WaitSnapshot.
// Reported: stall / sync write (target <= 0.05) and snapshot / memcpy
// bandwidth. All ratios come from the same run on the same machine.
//
//   bench_runtime [--json] [--sizes 256M,1G] [--iters 5] [--compute-factor 2]
//                 [--dir /tmp] [--max-seconds 120]
// MEMENTO_THREADS / MEMENTO_CHUNK_BYTES apply (Config::FromEnv).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "memento/runtime/checkpointer.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/store_admin.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  bool json = false;
  std::vector<uint64_t> sizes = {256ull << 20};
  int iters = 5;
  double compute_factor = 2.0;
  std::string dir = "/tmp";
  double max_seconds = 120;
};

struct Result1 {
  uint64_t bytes = 0;
  double memcpy_s = 0, sync_write_s = 0, snapshot_s = 0;
  double stall_mean_s = 0, stall_max_s = 0, compute_s = 0;
  int iters = 0;
  int threads = 0;
  uint64_t chunk = 0;
};

double TimeMemcpy(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src) {
  std::memcpy(dst.data(), src.data(), src.size());  // warm (page faults)
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    best = std::min(best, Since(t0));
  }
  return best;
}

Result<double> TimeSyncWrite(const std::string& dir, const std::vector<uint8_t>& src) {
  const std::string path = dir + "/bench_runtime." + std::to_string(getpid()) + ".bin";
  double best = 1e9;
  for (int i = 0; i < 2; ++i) {
    auto t0 = Clock::now();
    int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0) return Status::IoError("open " + path + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < src.size()) {
      ssize_t n = write(fd, src.data() + done, std::min<size_t>(src.size() - done, 64 << 20));
      if (n <= 0) {
        close(fd);
        return Status::IoError("write " + path);
      }
      done += static_cast<size_t>(n);
    }
    fsync(fd);
    close(fd);
    best = std::min(best, Since(t0));
    unlink(path.c_str());
  }
  return best;
}

Result<Result1> RunOne(const Options& opt, uint64_t bytes, int index) {
  Result1 r;
  r.bytes = bytes;
  std::vector<uint8_t> buf(bytes);
  for (size_t i = 0; i < bytes; i += 4096) buf[i] = static_cast<uint8_t>(i >> 12);
  {
    std::vector<uint8_t> dst(bytes);
    r.memcpy_s = TimeMemcpy(dst, buf);
  }
  MEMENTO_ASSIGN_OR_RETURN(r.sync_write_s, TimeSyncWrite(opt.dir, buf));

  MEMENTO_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.job = "bench-" + std::to_string(getpid()) + "-" + std::to_string(index);
  config.ranks_per_node = 1;
  config.scheme = "none";
  config.persist_every = 0;
  config.remote_dir.clear();
  r.threads = config.SnapshotThreads(/*device_state=*/false, 0, 0, 1);  // host buffers
  r.chunk = config.chunk_bytes;
  auto group = InProcessGroup::Create(1);
  std::unique_ptr<Checkpointer> ck;
  // Every exit, early error returns included, closes the engine and unlinks
  // this job's segment (stores outlive their process by design).
  struct Cleanup {
    std::unique_ptr<Checkpointer>* ck;
    const std::string job;
    ~Cleanup() {
      ck->reset();
      (void)CleanJob(job);
    }
  } cleanup{&ck, config.job};
  MEMENTO_ASSIGN_OR_RETURN(ck, Checkpointer::Create(config, group->transport(0)));
  MEMENTO_RETURN_IF_ERROR(ck->RegisterBuffer("model", buf.data(), buf.size()));
  MEMENTO_RETURN_IF_ERROR(ck->Prepare());  // allocation, outside the measured loop

  uint64_t step = 1;
  // Warm both slots (first-touch page faults of the fresh segment), then time
  // a snapshot with nothing to overlap it.
  for (int i = 0; i < 2; ++i) {
    MEMENTO_RETURN_IF_ERROR(ck->Save(step++));
    MEMENTO_RETURN_IF_ERROR(ck->Wait());
  }
  double snap = 1e9;
  for (int i = 0; i < 2; ++i) {
    auto t0 = Clock::now();
    MEMENTO_RETURN_IF_ERROR(ck->Save(step++));
    MEMENTO_RETURN_IF_ERROR(ck->WaitSnapshot());
    snap = std::min(snap, Since(t0));
    MEMENTO_RETURN_IF_ERROR(ck->Wait());
  }
  r.snapshot_s = snap;
  r.compute_s = opt.compute_factor * snap;

  const auto loop_start = Clock::now();
  std::vector<double> stalls;
  for (int i = 0; i < opt.iters; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(r.compute_s));  // forward/backward
    auto t0 = Clock::now();
    MEMENTO_RETURN_IF_ERROR(ck->WaitSnapshot());
    double blocked = Since(t0);
    buf[(i * 7919) % bytes] ^= 1;  // the optimizer step modifies the buffers
    t0 = Clock::now();
    MEMENTO_RETURN_IF_ERROR(ck->Save(step++));
    blocked += Since(t0);
    stalls.push_back(blocked);
    if (Since(loop_start) > opt.max_seconds) break;
  }
  MEMENTO_RETURN_IF_ERROR(ck->Wait());
  r.iters = static_cast<int>(stalls.size());
  double sum = 0;
  for (double s : stalls) sum += s;
  r.stall_mean_s = sum / stalls.size();
  r.stall_max_s = *std::max_element(stalls.begin(), stalls.end());
  return r;
}

// A finite number > 0; the error names the value (CLI11 adds the flag).
const CLI::Validator kPositive(
    [](std::string& text) {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
        return "'" + text + "': need a number > 0";
      }
      return std::string();
    },
    "> 0");

int Main(int argc, char** argv) {
  Options opt;
  CLI::App app{"bench_runtime: what a checkpoint costs the training loop (stall per Save + "
               "WaitSnapshot vs a synchronous write + fsync, snapshot vs memcpy)"};
  app.add_flag("--json", opt.json, "one JSON object on stdout instead of text lines");
  std::vector<std::string> sizes;
  app.add_option("--sizes", sizes, "shard sizes, comma-separated (K/M/G suffixes), e.g. 256M,1G")
      ->delimiter(',')
      ->check([](const std::string& text) {
        auto v = ParseByteSize(text);
        return v.ok() ? std::string() : v.status().ToString();
      });
  app.add_option("--iters", opt.iters, "checkpoints per size")->check(kPositive);
  app.add_option("--compute-factor", opt.compute_factor,
                 "simulated compute between Saves, as a multiple of the snapshot time")
      ->check(kPositive);
  app.add_option("--dir", opt.dir, "folder for the synchronous write (its file system matters)");
  app.add_option("--max-seconds", opt.max_seconds, "stop a size's loop after this long")
      ->check(kPositive);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!sizes.empty()) {
    opt.sizes.clear();
    for (const std::string& text : sizes) opt.sizes.push_back(*ParseByteSize(text));
  }
  std::vector<Result1> results;
  for (size_t i = 0; i < opt.sizes.size(); ++i) {
    auto r = RunOne(opt, opt.sizes[i], static_cast<int>(i));
    if (!r.ok()) {
      std::fprintf(stderr, "bench_runtime: %s\n", r.status().ToString().c_str());
      return 1;
    }
    results.push_back(*r);
  }
  const double gib = 1024.0 * 1024 * 1024;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const Result1& r : results) {
    const double memcpy_gbps = r.bytes / r.memcpy_s / gib;
    const double snap_gbps = r.bytes / r.snapshot_s / gib;
    const double ratio = r.stall_mean_s / r.sync_write_s;
    if (opt.json) {
      runs.push_back({{"bytes", r.bytes},
                      {"threads", r.threads},
                      {"chunk_bytes", r.chunk},
                      {"iters", r.iters},
                      {"memcpy_s", r.memcpy_s},
                      {"memcpy_gibps", memcpy_gbps},
                      {"snapshot_s", r.snapshot_s},
                      {"snapshot_gibps", snap_gbps},
                      {"snapshot_vs_memcpy", snap_gbps / memcpy_gbps},
                      {"sync_write_fsync_s", r.sync_write_s},
                      {"compute_between_saves_s", r.compute_s},
                      {"stall_mean_s", r.stall_mean_s},
                      {"stall_max_s", r.stall_max_s},
                      {"stall_vs_sync_write", ratio},
                      {"target_stall_vs_sync_write", 0.05},
                      {"target_met", ratio <= 0.05}});
    } else {
      std::printf(
          "S=%llu MiB: memcpy %.2f GiB/s, snapshot %.2f GiB/s (%.2fx memcpy), sync write %.3f s, "
          "stall mean %.5f s max %.5f s = %.4fx sync write (target <= 0.05)\n",
          static_cast<unsigned long long>(r.bytes >> 20), memcpy_gbps, snap_gbps,
          snap_gbps / memcpy_gbps, r.sync_write_s, r.stall_mean_s, r.stall_max_s, ratio);
    }
  }
  if (opt.json) {
    const nlohmann::ordered_json out = {
        {"benchmark", "bench_runtime"}, {"scheme", "none"}, {"nodes", 1}, {"runs", runs}};
    std::printf("%s\n", out.dump(1).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
