// CodecOptions: how an RsCodec or XorCodec spreads one call over threads.
//
// erasure/ is a pure module: it starts no thread unless the caller asks for
// more than one here. With threads > 1, a large Encode / Decode / EncodeUpdate /
// DeltaUpdate call is cut by byte range into at most `threads` parts (each at
// least `min_bytes_per_thread` bytes, boundaries on 64-byte multiples); the
// calling thread works on one part and short-lived std::threads on the others,
// joined before the call returns. Small buffers therefore stay single-threaded.
//
// Thread-safety: a plain value.
#pragma once

#include <cstddef>

namespace memento::erasure {

struct CodecOptions {
  // Most threads one call may use, the caller's included. 1 (default) = never
  // start a thread. Accepted range: 1..kMaxThreads.
  int threads = 1;

  // A call is only split when every part gets at least this many bytes of row
  // length (per row, not in total). Starting a thread costs tens of
  // microseconds; 4 MiB per part keeps that under 1 % at memory speed.
  // Must be >= 1.
  size_t min_bytes_per_thread = size_t{4} << 20;

  static constexpr int kMaxThreads = 256;
};

}  // namespace memento::erasure
