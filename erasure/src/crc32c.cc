#include "memento/erasure/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

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

// Bytes copied and hashed per step of UpdateCopy: small enough that the
// piece just read from src is still in the core's cache when it is hashed.
constexpr size_t kCopyPiece = size_t{256} << 10;

#if defined(__x86_64__)
// memcpy with non-temporal 16-byte stores wherever dst is 16-byte aligned
// (the head up to that alignment and the tail under 64 bytes by memcpy). No
// fence: the caller fences once after all its pieces.
void StreamingCopy(unsigned char* d, const unsigned char* s, size_t n) {
  const size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
}
#endif
}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  return ~Advance(0xFFFFFFFFu, static_cast<const unsigned char*>(data), size);
}

void Crc32cStream::Update(const void* data, size_t size) {
  state_ = Advance(state_, static_cast<const unsigned char*>(data), size);
}

void Crc32cStream::UpdateCopy(void* dst, const void* src, size_t size) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
#if defined(__x86_64__)
  for (size_t done = 0; done < size; done += kCopyPiece) {
    const size_t n = std::min(kCopyPiece, size - done);
    StreamingCopy(d + done, s + done, n);
    state_ = Advance(state_, s + done, n);
  }
  _mm_sfence();
#else
  for (size_t done = 0; done < size; done += kCopyPiece) {
    const size_t n = std::min(kCopyPiece, size - done);
    std::memcpy(d + done, s + done, n);
    state_ = Advance(state_, d + done, n);
  }
#endif
}

}  // namespace memento::erasure
