// GF(2^8) arithmetic (polynomial 0x11d, ISA-L's field) for callers that run a
// decode in pieces: e.g. each surviving node multiplies its own row by its
// decode coefficient (RsCodec::DecodeCoefficients) and the products are
// XOR-reduced toward the node that rebuilds the lost row.
//
// Thread-safety: reentrant. Cost: GfMultiplyAdd runs at memory speed (ISA-L
// SIMD / GFNI kernels), any alignment, any length (cut into 1 GiB pieces).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memento::erasure {

// a * b in GF(2^8).
uint8_t GfMultiply(uint8_t a, uint8_t b);

// Multiplicative inverse; GfInverse(0) is 0 (0 has none).
uint8_t GfInverse(uint8_t a);

// dst[i] ^= coef * src[i] for i in [0, len). coef 0: nothing; coef 1: a plain
// XOR. src and dst must not overlap. With len > 0 both pointers must be
// non-null (a null pointer is a caller bug: throws memento::CheckError).
void GfMultiplyAdd(uint8_t coef, const uint8_t* src, uint8_t* dst, size_t len);

// dst[i] = coef * src[i] for i in [0, len): one pass, where zeroing dst and
// GfMultiplyAdd would take two. coef 0 zeroes dst, coef 1 copies. Same
// pointer rules as GfMultiplyAdd.
void GfScale(uint8_t coef, const uint8_t* src, uint8_t* dst, size_t len);

}  // namespace memento::erasure
