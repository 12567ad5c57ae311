// bench_remote_compress: does ISA-L igzip compression pay for the remote tier?
//
// For checkpoint-like data it measures, in one run on one machine:
//   - the time to persist S bytes raw through DirectoryRemoteStore (temp file,
//     fsync, rename: what the persist stage does),
//   - igzip compression ratio and single-thread throughput per level, and
//     decompression throughput (restore path),
// and reports whether compress + write-compressed beats write-raw. Compression
// pays only when C > W / (1 - r) (C compress throughput, W write bandwidth,
// r compressed/raw ratio) — with r close to 1, as for trained float weights,
// it essentially never does.
//
//   bench_remote_compress [--mib 256] [--dir /tmp] [--reps 3]
// Prints one JSON object (--help for the flags).
#include <isa-l/igzip_lib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "decimal_validator.h"
#include "memento/runtime/directory_remote_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using memento::runtime::DirectoryRemoteStore;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Float32 weights ~ N(0, 0.02): what a trained transformer layer looks like.
std::vector<uint8_t> Float32Weights(size_t bytes, uint32_t seed) {
  std::vector<float> v(bytes / 4);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (auto& x : v) x = d(rng);
  std::vector<uint8_t> out(bytes);
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

// bfloat16 of the same distribution (the upper half of each float32).
std::vector<uint8_t> Bf16Weights(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> f = Float32Weights(bytes * 2, seed);
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes / 2; ++i) std::memcpy(&out[2 * i], &f[4 * i + 2], 2);
  return out;
}

// Adam's exp_avg_sq: small positive values spanning a few decades.
std::vector<uint8_t> AdamSecondMoment(size_t bytes, uint32_t seed) {
  std::vector<float> v(bytes / 4);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (auto& x : v) {
    float g = d(rng);
    x = g * g * 0.001f;
  }
  std::vector<uint8_t> out(bytes);
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

struct CompressResult {
  double ratio = 0;
  double compress_mbps = 0;
  double decompress_mbps = 0;
};

// Compresses in independent 4 MiB chunks (how a chunked persist stream would),
// single thread, with igzip level `level`.
CompressResult Compress(const std::vector<uint8_t>& in, int level, int reps) {
  const size_t chunk = 4u << 20;
  std::vector<uint8_t> out(chunk + chunk / 8 + 65536);
  std::vector<uint8_t> level_buf(ISAL_DEF_LVL3_DEFAULT);
  std::vector<std::vector<uint8_t>> compressed;
  CompressResult r;
  double best_c = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    compressed.clear();
    uint64_t total = 0;
    auto t0 = Clock::now();
    for (size_t off = 0; off < in.size(); off += chunk) {
      const size_t n = std::min(chunk, in.size() - off);
      isal_zstream s;
      isal_deflate_stateless_init(&s);
      s.level = static_cast<uint32_t>(level);
      s.level_buf = level_buf.data();
      s.level_buf_size = static_cast<uint32_t>(level_buf.size());
      s.next_in = const_cast<uint8_t*>(in.data() + off);
      s.avail_in = static_cast<uint32_t>(n);
      s.next_out = out.data();
      s.avail_out = static_cast<uint32_t>(out.size());
      s.end_of_stream = 1;
      if (isal_deflate_stateless(&s) != COMP_OK) {
        std::fprintf(stderr, "isal_deflate_stateless failed\n");
        std::exit(1);
      }
      total += s.total_out;
      compressed.emplace_back(out.data(), out.data() + s.total_out);
    }
    best_c = std::min(best_c, Seconds(t0, Clock::now()));
    r.ratio = static_cast<double>(total) / static_cast<double>(in.size());
  }
  double best_d = 1e30;
  std::vector<uint8_t> back(chunk);
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    size_t off = 0;
    for (auto& c : compressed) {
      inflate_state st;
      isal_inflate_init(&st);
      st.next_in = c.data();
      st.avail_in = static_cast<uint32_t>(c.size());
      st.next_out = back.data();
      st.avail_out = static_cast<uint32_t>(back.size());
      if (isal_inflate_stateless(&st) != ISAL_DECOMP_OK ||
          std::memcmp(back.data(), in.data() + off, st.total_out) != 0) {
        std::fprintf(stderr, "inflate failed or differs\n");
        std::exit(1);
      }
      off += st.total_out;
    }
    best_d = std::min(best_d, Seconds(t0, Clock::now()));
  }
  r.compress_mbps = in.size() / best_c / 1e6;
  r.decompress_mbps = in.size() / best_d / 1e6;
  return r;
}

// Persists `bytes` of data through DirectoryRemoteStore (fsync on); MB/s.
double WriteMbps(const std::string& dir, const std::vector<uint8_t>& data, uint64_t bytes,
                 int reps) {
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    DirectoryRemoteStore store(dir, "bench-compress");
    auto t0 = Clock::now();
    auto info = store.WriteRankFile(rep, 0, {{"w", data.data(), bytes, {}, std::nullopt}});
    if (!info.ok()) {
      std::fprintf(stderr, "%s\n", info.status().ToString().c_str());
      std::exit(1);
    }
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  std::filesystem::remove_all(dir + "/bench-compress");
  return bytes / best / 1e6;
}

}  // namespace

using memento::experiments::kDecimal;

int main(int argc, char** argv) {
  size_t mib = 256;
  std::string dir = "/tmp";
  int reps = 3;
  CLI::App app("Does ISA-L igzip compression pay for the remote tier? Prints one JSON object.",
               "bench_remote_compress");
  app.add_option("--mib", mib, "MiB of each data set")
      ->type_name("N")
      ->check(kDecimal)
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--dir", dir, "directory the raw writes go to (fsync)")
      ->type_name("D")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--reps", reps, "repetitions; each result is the best")
      ->type_name("R")
      ->check(kDecimal)
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "bench_remote_compress: %s\n(see bench_remote_compress --help)\n",
                 e.what());
    return 2;
  }
  const size_t bytes = mib << 20;
  struct Data {
    const char* name;
    std::vector<uint8_t> bytes;
  };
  std::vector<Data> sets = {{"float32_weights_N(0,0.02)", Float32Weights(bytes, 1)},
                            {"bf16_weights_N(0,0.02)", Bf16Weights(bytes, 2)},
                            {"float32_adam_exp_avg_sq", AdamSecondMoment(bytes, 3)}};
  const double write_mbps = WriteMbps(dir, sets[0].bytes, bytes, reps);
  nlohmann::ordered_json out = {
      {"bytes", bytes}, {"dir", dir}, {"write_raw_fsync_MBps", write_mbps}};
  nlohmann::ordered_json& sets_json = out["sets"] = nlohmann::ordered_json::array();
  for (const Data& set : sets) {
    nlohmann::ordered_json levels = nlohmann::ordered_json::array();
    for (int level : {0, 1, 3}) {
      CompressResult c = Compress(set.bytes, level, reps);
      // Persist time per byte: raw 1/W; compressed 1/C + r/W (compression and
      // writing overlapped would give max(1/C, r/W): report both).
      const double raw_s = 1.0 / write_mbps;
      const double serial_s = 1.0 / c.compress_mbps + c.ratio / write_mbps;
      const double overlap_s = std::max(1.0 / c.compress_mbps, c.ratio / write_mbps);
      levels.push_back({{"level", level},
                        {"ratio", c.ratio},
                        {"compress_MBps", c.compress_mbps},
                        {"decompress_MBps", c.decompress_mbps},
                        {"persist_time_vs_raw_serial", serial_s / raw_s},
                        {"persist_time_vs_raw_overlapped", overlap_s / raw_s},
                        {"breakeven_compress_MBps_serial",
                         c.ratio < 1 ? nlohmann::ordered_json(write_mbps / (1 - c.ratio))
                                     : nlohmann::ordered_json(nullptr)}});
    }
    sets_json.push_back({{"data", set.name}, {"levels", std::move(levels)}});
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
