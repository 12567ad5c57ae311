// Cutting one codec call into byte ranges: pieces small enough for ISA-L's int
// lengths, and (when the caller asked for threads) parts run concurrently.
#pragma once

#include <cstddef>
#include <functional>

#include "memento/common/status.h"
#include "memento/erasure/codec_options.h"

namespace memento::erasure::internal {

// Most bytes handed to one ISA-L call (its lengths are int). A multiple of 64,
// so that every range starts at the same alignment as the row pointers.
inline constexpr size_t kMaxKernelBytes = size_t{1} << 30;

// Calls fn(offset, length) over consecutive ranges that cover [0, len), each at
// most kMaxKernelBytes long. With options.threads > 1 and len large enough
// (each part >= options.min_bytes_per_thread), the ranges are split into parts
// on 64-byte boundaries and the parts run on short-lived threads plus the
// calling one; all are joined before returning. fn must be safe to run
// concurrently on disjoint ranges and must not throw.
void ForEachRange(size_t len, const CodecOptions& options,
                  const std::function<void(size_t offset, size_t length)>& fn);

// Checks threads and min_bytes_per_thread; InvalidArgument naming the field.
Status CheckOptions(const CodecOptions& options);

}  // namespace memento::erasure::internal
