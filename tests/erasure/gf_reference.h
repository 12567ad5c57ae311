// A plain GF(2^8) reference for the codec tests, written independently of
// ISA-L: log / antilog tables over the polynomial x^8+x^4+x^3+x^2+1 (0x11d,
// ISA-L's field), the Cauchy generator built from its definition, and
// byte-at-a-time encode. Slow and obvious on purpose.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace memento::erasure::testing {

class GfReference {
 public:
  static const GfReference& Get() {
    static const GfReference field;
    return field;
  }

  uint8_t Mul(uint8_t a, uint8_t b) const {
    if (a == 0 || b == 0) return 0;
    return exp_[log_[a] + log_[b]];
  }
  uint8_t Inv(uint8_t a) const { return a == 0 ? 0 : exp_[255 - log_[a]]; }

 private:
  GfReference() {
    unsigned x = 1;
    for (int i = 0; i < 255; ++i) {
      exp_[i] = static_cast<uint8_t>(x);
      exp_[i + 255] = static_cast<uint8_t>(x);
      log_[x] = i;
      x <<= 1;
      if (x & 0x100) x ^= 0x11d;
    }
  }

  std::array<uint8_t, 510> exp_{};
  std::array<int, 256> log_{};
};

// The (k + m) x k systematic Cauchy generator: identity, then
// row i (k <= i < k+m), column j: 1 / (i XOR j).
inline std::vector<uint8_t> ReferenceCauchy(int k, int m) {
  const GfReference& gf = GfReference::Get();
  std::vector<uint8_t> g(static_cast<size_t>((k + m) * k), 0);
  for (int i = 0; i < k + m; ++i) {
    for (int j = 0; j < k; ++j) {
      g[static_cast<size_t>(i * k + j)] =
          i < k ? (i == j ? 1 : 0) : gf.Inv(static_cast<uint8_t>(i ^ j));
    }
  }
  return g;
}

// parity[r][b] = sum_j coef[r][j] * data[j][b] with coef the rows of `g`
// after the k identity rows.
inline std::vector<std::vector<uint8_t>> ReferenceEncode(const std::vector<uint8_t>& g, int k,
                                                         int m, const uint8_t* const* data,
                                                         size_t len) {
  const GfReference& gf = GfReference::Get();
  std::vector<std::vector<uint8_t>> parity(static_cast<size_t>(m), std::vector<uint8_t>(len, 0));
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < k; ++j) {
      uint8_t c = g[static_cast<size_t>((k + r) * k + j)];
      for (size_t b = 0; b < len; ++b) parity[r][b] ^= gf.Mul(c, data[j][b]);
    }
  }
  return parity;
}

}  // namespace memento::erasure::testing
