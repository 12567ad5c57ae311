// crc32c (Castagnoli, iSCSI polynomial) over ISA-L's crc32_iscsi.
//
// Every sealed region in memento (shard entries, replicas, parity blocks,
// remote files) carries a crc32c so that a flipped bit makes that copy unusable
// instead of restoring wrong bytes. Throughput is memory-speed (ISA-L uses the
// SSE4.2 crc32 instruction with three-way interleaving).
//
// Thread-safety: the free function is reentrant; a Crc32c object is not
// shared-safe (one per stream).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memento::erasure {

// Standard crc32c of `size` bytes ("123456789" -> 0xE3069283). Any length,
// including sizes over 2 GiB and size 0 (-> 0).
uint32_t Crc32c(const void* data, size_t size);

// Streaming crc32c: Update() with consecutive pieces in order, then value().
// The result equals Crc32c() of the concatenation.
class Crc32cStream {
 public:
  Crc32cStream() = default;
  void Update(const void* data, size_t size);
  uint32_t value() const { return ~state_; }
  void Reset() { state_ = 0xFFFFFFFFu; }

 private:
  uint32_t state_ = 0xFFFFFFFFu;  // pre-inverted running register
};

}  // namespace memento::erasure
