#include "memento/erasure/gf256.h"

#include <isa-l/erasure_code.h>

#include <algorithm>

#include "byte_ranges.h"
#include "memento/common/check.h"
#include "xor_kernel.h"

namespace memento::erasure {

uint8_t GfMultiply(uint8_t a, uint8_t b) { return gf_mul(a, b); }

uint8_t GfInverse(uint8_t a) { return a == 0 ? 0 : gf_inv(a); }

void GfMultiplyAdd(uint8_t coef, const uint8_t* src, uint8_t* dst, size_t len) {
  if (len == 0) return;
  MEMENTO_CHECK(src != nullptr);
  MEMENTO_CHECK(dst != nullptr);
  if (coef == 0) return;
  if (coef == 1) {
    internal::ForEachRange(len, CodecOptions{}, [&](size_t offset, size_t length) {
      internal::XorInto(src + offset, dst + offset, length);
    });
    return;
  }
  unsigned char table[32];
  ec_init_tables(1, 1, &coef, table);
  internal::ForEachRange(len, CodecOptions{}, [&](size_t offset, size_t length) {
    unsigned char* out = dst + offset;
    ec_encode_data_update(static_cast<int>(length), 1, 1, 0, table,
                          const_cast<uint8_t*>(src + offset), &out);
  });
}

void GfScale(uint8_t coef, const uint8_t* src, uint8_t* dst, size_t len) {
  if (len == 0) return;
  MEMENTO_CHECK(src != nullptr);
  MEMENTO_CHECK(dst != nullptr);
  if (coef == 0) {
    std::fill(dst, dst + len, 0);
    return;
  }
  if (coef == 1) {
    std::copy(src, src + len, dst);
    return;
  }
  unsigned char table[32];
  ec_init_tables(1, 1, &coef, table);
  internal::ForEachRange(len, CodecOptions{}, [&](size_t offset, size_t length) {
    unsigned char* out = dst + offset;
    unsigned char* in = const_cast<uint8_t*>(src + offset);
    ec_encode_data(static_cast<int>(length), 1, 1, table, &in, &out);
  });
}

}  // namespace memento::erasure
