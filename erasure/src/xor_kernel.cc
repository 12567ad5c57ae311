#include "xor_kernel.h"

#include <isa-l/erasure_code.h>
#include <isa-l/raid.h>

#include <array>
#include <cstring>

#include "memento/common/check.h"

namespace memento::erasure::internal {

namespace {

constexpr uintptr_t kXorGenAlignment = 32;

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kXorGenAlignment == 0; }

// Runs xor_gen over `count` >= 3 pointers (sources, then the destination)
// when all are aligned; false (nothing done) otherwise. xor_gen only refuses
// fewer than two sources, which would be a bug here.
bool TryXorGen(int count, size_t len, void** array) {
  for (int i = 0; i < count; ++i) {
    if (!Aligned(array[i])) return false;
  }
  int rc = xor_gen(count, static_cast<int>(len), array);
  MEMENTO_CHECK_EQ(rc, 0);
  return true;
}

}  // namespace

unsigned char* OnesTables() {
  static std::array<unsigned char, 32 * kMaxXorSources> tables = [] {
    std::array<unsigned char, 32 * kMaxXorSources> t{};
    std::array<unsigned char, kMaxXorSources> ones;
    ones.fill(1);
    ec_init_tables(kMaxXorSources, 1, ones.data(), t.data());
    return t;
  }();
  return tables.data();
}

void XorRows(const uint8_t* const* srcs, int count, uint8_t* dst, size_t len) {
  MEMENTO_CHECK(count >= 1 && count <= kMaxXorSources);
  if (len == 0) return;
  if (count == 1) {
    std::memcpy(dst, srcs[0], len);
    return;
  }
  std::array<void*, kMaxXorSources + 1> array;
  for (int i = 0; i < count; ++i) array[i] = const_cast<uint8_t*>(srcs[i]);
  array[count] = dst;
  if (TryXorGen(count + 1, len, array.data())) return;
  std::array<unsigned char*, kMaxXorSources> in;
  for (int i = 0; i < count; ++i) in[i] = const_cast<uint8_t*>(srcs[i]);
  unsigned char* out = dst;
  ec_encode_data(static_cast<int>(len), count, 1, OnesTables(), in.data(), &out);
}

void XorInto(const uint8_t* src, uint8_t* dst, size_t len) {
  if (len == 0) return;
  // xor_gen reads every source of a block before it writes the destination,
  // so the destination may double as a source.
  void* array[3] = {const_cast<uint8_t*>(src), dst, dst};
  if (TryXorGen(3, len, array)) return;
  unsigned char* out = dst;
  ec_encode_data_update(static_cast<int>(len), 1, 1, 0, OnesTables(), const_cast<uint8_t*>(src),
                        &out);
}

void XorTwoInto(const uint8_t* a, const uint8_t* b, uint8_t* dst, size_t len) {
  if (len == 0) return;
  void* array[4] = {const_cast<uint8_t*>(a), const_cast<uint8_t*>(b), dst, dst};
  if (TryXorGen(4, len, array)) return;
  XorInto(a, dst, len);
  XorInto(b, dst, len);
}

}  // namespace memento::erasure::internal
