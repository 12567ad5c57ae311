// Bytewise XOR kernels over ISA-L. xor_gen needs 32-byte aligned pointers, so
// each kernel uses it when every pointer is aligned and otherwise ISA-L's
// GF(2^8) kernels with coefficient 1 (multiplying by 1 is the identity, so the
// result is the same XOR). Lengths here fit in an int (see byte_ranges.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace memento::erasure::internal {

// Most sources XorRows accepts.
inline constexpr int kMaxXorSources = 256;

// dst = srcs[0] ^ ... ^ srcs[count-1]; 1 <= count <= kMaxXorSources.
void XorRows(const uint8_t* const* srcs, int count, uint8_t* dst, size_t len);

// dst ^= src.
void XorInto(const uint8_t* src, uint8_t* dst, size_t len);

// dst ^= a ^ b.
void XorTwoInto(const uint8_t* a, const uint8_t* b, uint8_t* dst, size_t len);

// The expanded ISA-L table (32 bytes) of the GF(2^8) constant 1, repeated
// kMaxXorSources times; for ec_encode_data / ec_encode_data_update.
unsigned char* OnesTables();

}  // namespace memento::erasure::internal
