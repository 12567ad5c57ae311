#include "memento/erasure/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace memento::erasure {

namespace {
// ISA-L lengths are int; feed at most 1 GiB per call.
constexpr size_t kMaxPiece = size_t{1} << 30;

// crc32_iscsi(buf, len, init) takes and returns the un-inverted register with
// the standard init 0xFFFFFFFF and no final inversion.
uint32_t Advance(uint32_t state, const unsigned char* p, size_t size) {
  while (size > 0) {
    size_t n = std::min(size, kMaxPiece);
    state = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), state);
    p += n;
    size -= n;
  }
  return state;
}
}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  return ~Advance(0xFFFFFFFFu, static_cast<const unsigned char*>(data), size);
}

void Crc32cStream::Update(const void* data, size_t size) {
  state_ = Advance(state_, static_cast<const unsigned char*>(data), size);
}

}  // namespace memento::erasure
