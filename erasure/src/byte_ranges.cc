#include "byte_ranges.h"

#include <algorithm>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace memento::erasure::internal {

namespace {

void RunSerial(size_t begin, size_t end, const std::function<void(size_t, size_t)>& fn) {
  for (size_t offset = begin; offset < end;) {
    size_t length = std::min(end - offset, kMaxKernelBytes);
    fn(offset, length);
    offset += length;
  }
}

}  // namespace

void ForEachRange(size_t len, const CodecOptions& options,
                  const std::function<void(size_t, size_t)>& fn) {
  if (len == 0) return;
  size_t parts = 1;
  if (options.threads > 1 && options.min_bytes_per_thread > 0) {
    parts = std::min(static_cast<size_t>(options.threads), len / options.min_bytes_per_thread);
    parts = std::max<size_t>(parts, 1);
  }
  if (parts == 1) {
    RunSerial(0, len, fn);
    return;
  }
  // Part boundaries on 64-byte multiples keep each part's pointers as aligned
  // as the caller's (xor_gen's fast path needs 32-byte alignment).
  size_t part = ((len + parts - 1) / parts + 63) & ~size_t{63};
  std::vector<std::thread> workers;
  workers.reserve(parts - 1);
  for (size_t i = 1; i < parts; ++i) {
    size_t begin = i * part;
    if (begin >= len) break;
    size_t end = std::min(len, begin + part);
    try {
      workers.emplace_back(RunSerial, begin, end, std::cref(fn));
    } catch (const std::system_error&) {
      // No thread to be had (resource limits): do that part here instead.
      RunSerial(begin, end, fn);
    }
  }
  RunSerial(0, std::min(part, len), fn);
  for (auto& w : workers) w.join();
}

Status CheckOptions(const CodecOptions& options) {
  if (options.threads < 1 || options.threads > CodecOptions::kMaxThreads) {
    return Status::InvalidArgument("CodecOptions::threads = " + std::to_string(options.threads) +
                                   " is outside 1.." + std::to_string(CodecOptions::kMaxThreads));
  }
  if (options.min_bytes_per_thread == 0) {
    return Status::InvalidArgument("CodecOptions::min_bytes_per_thread must be >= 1");
  }
  return Status::Ok();
}

}  // namespace memento::erasure::internal
