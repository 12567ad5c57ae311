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
  r.threads = config.threads;
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

Result<uint64_t> ParseSize(const std::string& s) { return ParseByteSize(s); }

// A finite number > 0, or an error naming the flag and the value.
bool PositiveNumber(const std::string& flag, const std::string& text, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    std::fprintf(stderr, "%s '%s': need a number > 0\n", flag.c_str(), text.c_str());
    return false;
  }
  *out = v;
  return true;
}

int Main(int argc, char** argv) {
  double number = 0;
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--json") {
      opt.json = true;
    } else if (a == "--sizes") {
      opt.sizes.clear();
      std::string list = next();
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        auto v = ParseSize(list.substr(pos, comma - pos));
        if (!v.ok()) {
          std::fprintf(stderr, "--sizes: %s\n", v.status().ToString().c_str());
          return 2;
        }
        opt.sizes.push_back(*v);
        pos = comma + 1;
      }
    } else if (a == "--iters") {
      if (!PositiveNumber(a, next(), &number)) return 2;
      opt.iters = static_cast<int>(std::min(number, 1e9));
    } else if (a == "--compute-factor") {
      if (!PositiveNumber(a, next(), &opt.compute_factor)) return 2;
    } else if (a == "--dir") {
      opt.dir = next();
    } else if (a == "--max-seconds") {
      if (!PositiveNumber(a, next(), &opt.max_seconds)) return 2;
    } else {
      std::fprintf(stderr,
                   "usage: bench_runtime [--json] [--sizes 256M,1G] [--iters N] "
                   "[--compute-factor F] [--dir D] [--max-seconds S]\n");
      return 2;
    }
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
  if (opt.json)
    std::printf(
        "{\"benchmark\": \"bench_runtime\", \"scheme\": \"none\", \"nodes\": 1, \"runs\": [\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result1& r = results[i];
    const double memcpy_gbps = r.bytes / r.memcpy_s / gib;
    const double snap_gbps = r.bytes / r.snapshot_s / gib;
    const double ratio = r.stall_mean_s / r.sync_write_s;
    if (opt.json) {
      std::printf(
          "  {\"bytes\": %llu, \"threads\": %d, \"chunk_bytes\": %llu, \"iters\": %d,\n"
          "   \"memcpy_s\": %.6f, \"memcpy_gibps\": %.3f, \"snapshot_s\": %.6f, "
          "\"snapshot_gibps\": %.3f, \"snapshot_vs_memcpy\": %.3f,\n"
          "   \"sync_write_fsync_s\": %.6f, \"compute_between_saves_s\": %.6f,\n"
          "   \"stall_mean_s\": %.6f, \"stall_max_s\": %.6f, \"stall_vs_sync_write\": %.4f, "
          "\"target_stall_vs_sync_write\": 0.05, \"target_met\": %s}%s\n",
          static_cast<unsigned long long>(r.bytes), r.threads,
          static_cast<unsigned long long>(r.chunk), r.iters, r.memcpy_s, memcpy_gbps, r.snapshot_s,
          snap_gbps, snap_gbps / memcpy_gbps, r.sync_write_s, r.compute_s, r.stall_mean_s,
          r.stall_max_s, ratio, ratio <= 0.05 ? "true" : "false",
          i + 1 < results.size() ? "," : "");
    } else {
      std::printf(
          "S=%llu MiB: memcpy %.2f GiB/s, snapshot %.2f GiB/s (%.2fx memcpy), sync write %.3f s, "
          "stall mean %.5f s max %.5f s = %.4fx sync write (target <= 0.05)\n",
          static_cast<unsigned long long>(r.bytes >> 20), memcpy_gbps, snap_gbps,
          snap_gbps / memcpy_gbps, r.sync_write_s, r.stall_mean_s, r.stall_max_s, ratio);
    }
  }
  if (opt.json) std::printf("]}\n");
  return 0;
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
