// RowSet: n rows of `len` bytes for codec tests, each starting at a chosen
// misalignment from a 64-byte boundary and surrounded by guard bytes, so that
// tests can hand codecs unaligned pointers and catch writes out of bounds.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace memento::erasure::testing {

class RowSet {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;

  // misalign[i] in [0, 64): byte offset of row i from a 64-byte boundary.
  RowSet(int n, size_t len, const std::vector<size_t>& misalign)
      : n_(n), len_(len), stride_(((len + 2 * kGuard + 63) / 64 + 1) * 64) {
    storage_.assign(static_cast<size_t>(n) * stride_ + 128, kGuardByte);
    uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data());
    size_t lead = (64 - base % 64) % 64;
    for (int i = 0; i < n; ++i) {
      size_t off = lead + static_cast<size_t>(i) * stride_ + kGuard + misalign[i];
      ptrs_.push_back(storage_.data() + off);
    }
  }
  // All rows 64-byte aligned.
  RowSet(int n, size_t len) : RowSet(n, len, std::vector<size_t>(static_cast<size_t>(n), 0)) {}

  static std::vector<size_t> RandomMisalign(int n, std::mt19937& rng) {
    std::vector<size_t> v;
    for (int i = 0; i < n; ++i) v.push_back(rng() % 64);
    return v;
  }

  uint8_t* row(int i) { return ptrs_[static_cast<size_t>(i)]; }
  uint8_t* const* rows() { return ptrs_.data(); }
  const uint8_t* const* const_rows() const { return ptrs_.data(); }
  uint8_t* const* rows_from(int i) { return ptrs_.data() + i; }
  size_t len() const { return len_; }

  void Randomize(std::mt19937& rng) {
    for (int i = 0; i < n_; ++i) Randomize(i, rng);
  }
  void Randomize(int i, std::mt19937& rng) {
    for (size_t b = 0; b < len_; ++b) row(i)[b] = static_cast<uint8_t>(rng());
  }
  void Fill(int i, uint8_t value) { std::memset(row(i), value, len_); }
  std::vector<uint8_t> Copy(int i) const {
    return std::vector<uint8_t>(ptrs_[static_cast<size_t>(i)],
                                ptrs_[static_cast<size_t>(i)] + len_);
  }

  // True when every guard byte before and after every row is intact.
  bool GuardsIntact() const {
    for (int i = 0; i < n_; ++i) {
      const uint8_t* p = ptrs_[static_cast<size_t>(i)];
      for (size_t g = 1; g <= kGuard / 2; ++g) {
        if (p[-static_cast<ptrdiff_t>(g)] != kGuardByte || p[len_ + g - 1] != kGuardByte) {
          return false;
        }
      }
    }
    return true;
  }

 private:
  int n_;
  size_t len_;
  size_t stride_;
  std::vector<uint8_t> storage_;
  std::vector<uint8_t*> ptrs_;
};

inline bool RowEquals(const uint8_t* a, const std::vector<uint8_t>& b) {
  return b.empty() || std::memcmp(a, b.data(), b.size()) == 0;
}

// Every subset of {0..n-1} with exactly `size` elements, in lexicographic order.
inline std::vector<std::vector<int>> Subsets(int n, int size) {
  std::vector<std::vector<int>> out;
  std::vector<int> cur;
  auto rec = [&](auto&& self, int start) -> void {
    if (static_cast<int>(cur.size()) == size) {
      out.push_back(cur);
      return;
    }
    for (int i = start; i < n; ++i) {
      cur.push_back(i);
      self(self, i + 1);
      cur.pop_back();
    }
  };
  rec(rec, 0);
  return out;
}

}  // namespace memento::erasure::testing
