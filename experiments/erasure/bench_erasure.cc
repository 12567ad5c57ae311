// bench_erasure: encode and decode throughput of the erasure codecs, as a
// ratio of memcpy of the same bytes measured in the same run (docs/architecture.md §9).
//
//   bench_erasure [--json] [--bytes N] [--reps R] [--threads 1,2] [--copy-crc]
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
//
// --copy-crc measures instead what a snapshot (and a restore into the
// buffers) does per byte: copy `bytes` and compute their crc32c, in 256 KiB
// pieces, each of `threads` threads on a part of its own (as ranks sharing
// the cores copy their own shards), against memcpy of the same bytes:
//   memcpy       memcpy alone
//   then_crc     memcpy, then Crc32cStream::Update of the destination piece
//   update_copy  Crc32cStream::UpdateCopy (streaming stores, the source
//                hashed while in cache: what the runtime uses)
// The crcs of both kinds are checked against each other.
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
#include "memento/erasure/crc32c.h"
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
  bool copy_crc = false;
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
  // Once more with the lost rows scribbled over (the timed decodes rebuilt
  // rows that still held the data): every byte must be the data again.
  for (int e : erased) std::memset(rows[e], 0xA5, row_len);
  Check(codec.Decode(rows.data(), erased, row_len), "decode");
  for (size_t i = 0; i < bytes; ++i) {
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

// Copy + crc32c of `bytes` by `threads` threads, each on a part of its own.
struct CopyRow {
  size_t bytes;
  int threads;
  double memcpy_gbps, then_crc_gbps, update_copy_gbps;
};

CopyRow MeasureCopyCrc(const Args& args, int threads) {
  constexpr size_t kPiece = size_t{256} << 10;  // as the snapshot's pieces
  const size_t part = std::max<size_t>(64, args.bytes / threads / 64 * 64);
  const size_t bytes = part * threads;
  Buffer src = Allocate(bytes), dst = Allocate(bytes);
  for (size_t i = 0; i < bytes; ++i) src.get()[i] = static_cast<uint8_t>(i * 131 + (i >> 13));
  std::memset(dst.get(), 0, bytes);
  std::vector<uint32_t> crc_then(threads), crc_update(threads);
  // fn(t) on thread t (t = 0 on this one), all at once.
  auto on_threads = [&](const std::function<void(int)>& fn) {
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) workers.emplace_back(fn, t);
    fn(0);
    for (auto& w : workers) w.join();
  };
  auto copy_only = [&](int t) { std::memcpy(dst.get() + t * part, src.get() + t * part, part); };
  auto then_crc = [&](int t) {
    memento::erasure::Crc32cStream crc;
    for (size_t done = 0; done < part; done += kPiece) {
      const size_t n = std::min(kPiece, part - done);
      uint8_t* d = dst.get() + t * part + done;
      std::memcpy(d, src.get() + t * part + done, n);
      crc.Update(d, n);
    }
    crc_then[t] = crc.value();
  };
  auto update_copy = [&](int t) {
    memento::erasure::Crc32cStream crc;
    crc.UpdateCopy(dst.get() + t * part, src.get() + t * part, part);
    crc_update[t] = crc.value();
  };
  std::vector<double> t_copy, t_then, t_update;
  for (int rep = -1; rep < args.reps; ++rep) {  // rep -1: warm-up
    const double tc = Seconds([&] { on_threads(copy_only); });
    const double tt = Seconds([&] { on_threads(then_crc); });
    const double tu = Seconds([&] { on_threads(update_copy); });
    if (rep >= 0) {
      t_copy.push_back(tc);
      t_then.push_back(tt);
      t_update.push_back(tu);
    }
  }
  if (crc_then != crc_update || std::memcmp(dst.get(), src.get(), bytes) != 0) {
    std::fprintf(stderr, "bench_erasure: UpdateCopy differs from memcpy + crc32c\n");
    std::exit(1);
  }
  auto gbps = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
  return CopyRow{bytes, threads, gbps(Median(t_copy)), gbps(Median(t_then)),
                 gbps(Median(t_update))};
}

void PrintCopyCrc(const Args& args) {
  if (!args.json) {
    std::printf("copy + crc32c vs memcpy of the same bytes (median of %d reps)\n", args.reps);
    std::printf("%12s %7s %10s %10s %12s %9s %9s %11s\n", "bytes", "threads", "memcpy", "then_crc",
                "update_copy", "then/cpy", "upd/cpy", "upd/then");
    std::printf("%12s %7s %10s %10s %12s %9s %9s %11s\n", "", "", "GB/s", "GB/s", "GB/s", "", "",
                "");
  }
  for (int threads : args.threads) {
    const CopyRow row = MeasureCopyCrc(args, threads);
    const double then = row.then_crc_gbps / row.memcpy_gbps;
    const double update = row.update_copy_gbps / row.memcpy_gbps;
    const double gain = row.update_copy_gbps / row.then_crc_gbps;
    if (args.json) {
      const nlohmann::ordered_json line = {{"measure", "copy_crc32c"},
                                           {"bytes", row.bytes},
                                           {"threads", threads},
                                           {"reps", args.reps},
                                           {"memcpy_gbps", row.memcpy_gbps},
                                           {"then_crc_gbps", row.then_crc_gbps},
                                           {"update_copy_gbps", row.update_copy_gbps},
                                           {"then_crc_vs_memcpy", then},
                                           {"update_copy_vs_memcpy", update},
                                           {"update_copy_vs_then_crc", gain}};
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("%12zu %7d %10.2f %10.2f %12.2f %8.2fx %8.2fx %10.2fx\n", row.bytes, threads,
                  row.memcpy_gbps, row.then_crc_gbps, row.update_copy_gbps, then, update, gain);
    }
    std::fflush(stdout);
  }
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
  app.add_flag("--copy-crc", args.copy_crc,
               "measure copy + crc32c (the snapshot's per-byte work) instead of the codecs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "bench_erasure: %s\n(see bench_erasure --help)\n", e.what());
    return 2;
  }
  if (args.copy_crc) {
    PrintCopyCrc(args);
    return 0;
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
