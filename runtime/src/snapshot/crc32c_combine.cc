#include "snapshot/crc32c_combine.h"

#include <array>
#include <cstddef>

namespace memento::runtime {
namespace {

// CRC-32C in its reflected form: bit 31 holds the coefficient of x^0, bit 0
// that of x^31.
constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;
constexpr uint32_t kOne = 1u << 31;  // the polynomial 1

// a * b mod P, both reflected polynomials of degree < 32.
constexpr uint32_t MultiplyModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = kOne; m != 0 && a != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      a ^= m;
    }
    b = (b & 1) ? (b >> 1) ^ kCastagnoliReflected : b >> 1;  // b *= x
  }
  return product;
}

// kXPow2[k] = x^(2^k) mod P, for every bit of a 64-bit byte count times 8.
constexpr std::array<uint32_t, 67> MakePowers() {
  std::array<uint32_t, 67> t{};
  uint32_t p = kOne >> 1;  // x
  for (std::size_t k = 0; k < t.size(); ++k) {
    t[k] = p;
    p = MultiplyModP(p, p);
  }
  return t;
}
constexpr std::array<uint32_t, 67> kXPow2 = MakePowers();

}  // namespace

uint32_t Crc32cCombine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  if (len2 == 0) return crc1;
  // Appending len2 zero bytes multiplies crc1's register by x^(8 len2) mod P
  // (the pre- and post-inversions of both crcs cancel); then B's crc adds in.
  uint32_t shift = kOne;
  uint64_t bits = len2;
  for (std::size_t k = 3; bits != 0; bits >>= 1, ++k) {  // 8 len2 = len2 << 3
    if (bits & 1) shift = MultiplyModP(kXPow2[k], shift);
  }
  return MultiplyModP(shift, crc1) ^ crc2;
}

}  // namespace memento::runtime
