#include "store/shard_landing.h"

#include <algorithm>
#include <cstring>

#include "memento/common/check.h"

namespace memento::runtime {

ShardLanding ShardLanding::InSlot(NodeStore* store, int slot,
                                  const std::vector<uint64_t>& entry_bytes) {
  ShardLanding l;
  l.slot_ = slot;
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    l.entries_.push_back(store->MutableRegion(slot, static_cast<int>(i)));
    l.bytes_.push_back(entry_bytes[i]);
    l.base_.push_back(l.size_);
    l.size_ += entry_bytes[i];
  }
  return l;
}

ShardLanding ShardLanding::InMemory(const std::vector<uint64_t>& entry_bytes) {
  ShardLanding l;
  for (uint64_t n : entry_bytes) {
    l.bytes_.push_back(n);
    l.base_.push_back(l.size_);
    l.size_ += n;
  }
  l.memory_.resize(l.size_);
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    l.entries_.push_back(l.memory_.data() + l.base_[i]);
  }
  return l;
}

ShardLanding ShardLanding::InBuffers(const std::vector<uint8_t*>& data,
                                     const std::vector<uint64_t>& entry_bytes) {
  MEMENTO_CHECK_EQ(data.size(), entry_bytes.size());
  ShardLanding l;
  l.in_buffers_ = true;
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    l.entries_.push_back(data[i]);
    l.bytes_.push_back(entry_bytes[i]);
    l.base_.push_back(l.size_);
    l.size_ += entry_bytes[i];
  }
  return l;
}

template <typename Fn>
void ShardLanding::ForEachPart(uint64_t off, uint64_t len, Fn fn) const {
  const uint64_t end = off + len;
  // The first entry that ends past `off`.
  size_t i = static_cast<size_t>(std::upper_bound(base_.begin(), base_.end(), off) - base_.begin());
  i = i > 0 ? i - 1 : 0;
  for (; i < entries_.size() && base_[i] < end; ++i) {
    const uint64_t lo = std::max(base_[i], off), hi = std::min(base_[i] + bytes_[i], end);
    if (lo < hi) fn(i, lo - base_[i], lo - off, hi - lo);
  }
}

uint8_t* ShardLanding::Span(uint64_t off, uint64_t len) {
  if (off + len > size_) return nullptr;
  if (slot_ < 0 && !in_buffers_) return memory_.data() + off;
  uint8_t* span = nullptr;
  ForEachPart(off, len, [&](size_t i, uint64_t at, uint64_t, uint64_t n) {
    if (n == len) span = entries_[i] + at;
  });
  return span;
}

void ShardLanding::Write(uint64_t off, const uint8_t* src, uint64_t len) {
  MEMENTO_CHECK_LE(off + len, size_);
  ForEachPart(off, len, [&](size_t i, uint64_t at, uint64_t from, uint64_t n) {
    std::memcpy(entries_[i] + at, src + from, n);
  });
}

void ShardLanding::Read(uint64_t off, uint64_t len, uint8_t* dst) const {
  std::memset(dst, 0, len);
  ForEachPart(off, len, [&](size_t i, uint64_t at, uint64_t to, uint64_t n) {
    std::memcpy(dst + to, entries_[i] + at, n);
  });
}

}  // namespace memento::runtime
