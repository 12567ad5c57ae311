// The deterministic contents that multi-rank tests write and verify: byte i of
// entry `entry` of `rank` at checkpoint `step` (a mix of all four, so that a
// byte restored from the wrong rank, step, entry or offset is caught).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memento::runtime::testing {

inline uint8_t Pattern(int rank, uint64_t step, size_t entry, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank + 1) << 48) ^ (step << 24) ^ (entry << 20) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

}  // namespace memento::runtime::testing
