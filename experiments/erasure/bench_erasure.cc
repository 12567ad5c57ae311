// bench_erasure: encode and decode throughput of the erasure codecs, as a
// ratio of memcpy of the same bytes measured in the same run (DESIGN §9).
//
//   bench_erasure [--json] [--bytes N] [--reps R] [--threads 1,2]
//
// bytes = total DATA bytes of one stripe (k rows of bytes/k each, rounded
// down to a multiple of 64 per row). Every throughput is bytes / time:
//   encode   Encode(): k data rows -> m parity rows
//   decode   Decode() of m lost data rows (xor: 1) from the k survivors
//   memcpy   memcpy of the same `bytes` from the data rows into a separate
//            buffer, split over as many threads as the codec splits its call
//            into (it splits only rows of >= 2 x min_bytes_per_thread)
// Buffers are 64-byte aligned and touched before timing (no first-touch page
// faults); one warm-up round, then `reps` rounds in which memcpy, encode and
// decode run back to back; each reports its median round.
// Without --json a table is printed; with --json one object per line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "decimal_validator.h"
#include "memento/erasure/rs_codec.h"
#include "memento/erasure/xor_codec.h"

namespace {

using memento::Status;
using memento::erasure::CodecOptions;
using memento::erasure::RsCodec;
using memento::erasure::XorCodec;

struct Args {
  bool json = false;
  size_t bytes = size_t{64} << 20;
  int reps = 7;
  std::vector<int> threads = {1, 2};
};

struct Config {
  const char* codec;
  int k;
  int m;
};

struct Row {
  Config config;
  size_t bytes;
  int threads;
  double encode_gbps, decode_gbps, memcpy_gbps;
};

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer Allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "bench_erasure: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  return Buffer(p);
}

double Seconds(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// memcpy split by length over `threads` threads, as the codecs split.
void ParallelMemcpy(uint8_t* dst, const uint8_t* src, size_t bytes, int threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  size_t part = ((bytes + threads - 1) / threads + 63) / 64 * 64;
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    size_t begin = std::min(bytes, t * part);
    size_t end = std::min(bytes, begin + part);
    workers.emplace_back([=] { std::memcpy(dst + begin, src + begin, end - begin); });
  }
  std::memcpy(dst, src, std::min(part, bytes));
  for (auto& w : workers) w.join();
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench_erasure: %s failed: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

template <typename Codec>
Row Measure(const Config& config, const Codec& codec, const Args& args, int threads) {
  const int k = codec.k(), m = codec.m();
  const size_t row_len = args.bytes / static_cast<size_t>(k) / 64 * 64;
  const size_t bytes = row_len * static_cast<size_t>(k);
  // Data rows back to back in one buffer (the memcpy source), parity apart.
  Buffer data = Allocate(bytes);
  Buffer parity = Allocate(row_len * static_cast<size_t>(m));
  Buffer copy = Allocate(bytes);
  for (size_t i = 0; i < bytes; ++i) data.get()[i] = static_cast<uint8_t>(i * 131 + (i >> 13));
  std::memset(parity.get(), 0, row_len * static_cast<size_t>(m));
  std::memset(copy.get(), 0, bytes);

  std::vector<uint8_t*> rows;
  for (int i = 0; i < k; ++i) rows.push_back(data.get() + static_cast<size_t>(i) * row_len);
  for (int r = 0; r < m; ++r) rows.push_back(parity.get() + static_cast<size_t>(r) * row_len);
  std::vector<int> erased;
  for (int i = 0; i < m; ++i) erased.push_back(i);  // m lost data rows

  // The codec splits a call only when each part gets min_bytes_per_thread of
  // row length; the memcpy baseline uses the same number of parts.
  const int parts = static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads),
                                           row_len / codec.options().min_bytes_per_thread)));
  std::vector<double> t_memcpy, t_encode, t_decode;
  for (int rep = -1; rep < args.reps; ++rep) {  // rep -1: warm-up
    double tm = Seconds([&] { ParallelMemcpy(copy.get(), data.get(), bytes, parts); });
    double te =
        Seconds([&] { Check(codec.Encode(rows.data(), rows.data() + k, row_len), "encode"); });
    double td = Seconds([&] { Check(codec.Decode(rows.data(), erased, row_len), "decode"); });
    if (rep >= 0) {
      t_memcpy.push_back(tm);
      t_encode.push_back(te);
      t_decode.push_back(td);
    }
  }
  // The decode rewrote the lost rows; they must hold the data again.
  for (size_t i = 0; i < bytes; i += 4099) {
    if (data.get()[i] != static_cast<uint8_t>(i * 131 + (i >> 13))) {
      std::fprintf(stderr, "bench_erasure: decode produced wrong bytes at %zu\n", i);
      std::exit(1);
    }
  }
  auto gbps = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
  return Row{config,
             bytes,
             threads,
             gbps(Median(t_encode)),
             gbps(Median(t_decode)),
             gbps(Median(t_memcpy))};
}

}  // namespace

using memento::experiments::kDecimal;

int main(int argc, char** argv) {
  Args args;
  CLI::App app(
      "Encode and decode throughput of the erasure codecs, as a ratio of memcpy of the same\n"
      "bytes measured in the same run. Without --json a table, with --json one JSON object\n"
      "per line.",
      "bench_erasure");
  app.add_flag("--json", args.json, "one JSON object per line");
  app.add_option("--bytes", args.bytes, "total data bytes per stripe (>= 512)")
      ->type_name("N")
      ->check(kDecimal)
      ->check(CLI::Range(size_t{512}, size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--reps", args.reps, "timed rounds; each result is the median")
      ->type_name("R")
      ->check(kDecimal)
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--threads", args.threads, "codec threads to measure, comma-separated")
      ->type_name("T,..")
      ->delimiter(',')
      ->check(kDecimal)
      ->check(CLI::Range(1, 256));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "bench_erasure: %s\n(see bench_erasure --help)\n", e.what());
    return 2;
  }
  const std::vector<Config> configs = {
      {"xor", 4, 1}, {"xor", 8, 1}, {"rs", 4, 2}, {"rs", 6, 2}, {"rs", 8, 3}};
  if (!args.json) {
    std::printf("erasure codecs vs memcpy of the same data bytes (median of %d reps)\n", args.reps);
    std::printf("%-8s %5s %12s %7s %10s %10s %10s %9s %9s\n", "codec", "k+m", "data bytes",
                "threads", "memcpy", "encode", "decode", "enc/cpy", "dec/cpy");
    std::printf("%-8s %5s %12s %7s %10s %10s %10s %9s %9s\n", "", "", "", "", "GB/s", "GB/s",
                "GB/s", "", "");
  }
  for (const Config& config : configs) {
    for (int threads : args.threads) {
      CodecOptions options;
      options.threads = threads;
      Row row;
      if (std::string(config.codec) == "xor") {
        auto codec = XorCodec::Create(config.k, options);
        Check(codec.status(), "create");
        row = Measure(config, codec.value(), args, threads);
      } else {
        auto codec = RsCodec::Create(config.k, config.m, options);
        Check(codec.status(), "create");
        row = Measure(config, codec.value(), args, threads);
      }
      double enc = row.encode_gbps / row.memcpy_gbps, dec = row.decode_gbps / row.memcpy_gbps;
      if (args.json) {
        const nlohmann::ordered_json line = {{"codec", config.codec},
                                             {"k", config.k},
                                             {"m", config.m},
                                             {"bytes", row.bytes},
                                             {"threads", threads},
                                             {"reps", args.reps},
                                             {"encode_gbps", row.encode_gbps},
                                             {"decode_gbps", row.decode_gbps},
                                             {"memcpy_gbps", row.memcpy_gbps},
                                             {"encode_vs_memcpy", enc},
                                             {"decode_vs_memcpy", dec}};
        std::printf("%s\n", line.dump().c_str());
      } else {
        std::string km = std::to_string(config.k) + "+" + std::to_string(config.m);
        std::printf("%-8s %5s %12zu %7d %10.2f %10.2f %10.2f %8.2fx %8.2fx\n", config.codec,
                    km.c_str(), row.bytes, threads, row.memcpy_gbps, row.encode_gbps,
                    row.decode_gbps, enc, dec);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
