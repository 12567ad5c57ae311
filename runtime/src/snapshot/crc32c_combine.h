// crc32c of a concatenation from the crcs of its parts (zlib's crc32_combine
// over the Castagnoli polynomial): lets the snapshot workers hash chunks of
// one entry in any order and on any thread, and seal the entry without a
// second pass over its bytes.
//
// Thread-safety: pure function. Cost: O(log len2) products of 32-bit
// polynomials mod P (x^(2^k) mod P precomputed at compile time).
#pragma once

#include <cstdint>

namespace memento::runtime {

// Given crc1 = crc32c(A) and crc2 = crc32c(B) with |B| = len2 bytes, returns
// crc32c(A || B).
uint32_t Crc32cCombine(uint32_t crc1, uint32_t crc2, uint64_t len2);

}  // namespace memento::runtime
