// XorCodec: K data rows + 1 parity row (their XOR), protecting the stripes of
// an `xor:K` group. Same method shapes as RsCodec with m() == 1, so the
// runtime can drive either through the same code.
//
// Rows: indices 0..k-1 are data, k is the parity row. Any pointer alignment and
// any len (including len > 2 GiB, cut into 1 GiB pieces for ISA-L's int
// lengths); len == 0 is a valid no-op. When every row of a call is 32-byte
// aligned the XOR runs on ISA-L xor_gen; otherwise on ISA-L's GF(2^8) kernels
// with coefficient 1 (the same bytes, somewhat slower).
// Buffers of one call must not overlap, except where a function says so.
//
// Supported sizes: 1 <= k <= kMaxK (128). With k == 1 the parity is a copy.
//
// Errors: InvalidArgument for bad arguments, Unrecoverable for more than one
// erasure; messages name the row or count. Nothing aborts.
//
// Thread-safety: immutable after Create(); const methods may run concurrently
// (on disjoint output buffers). Cost: memory speed, O(len * k).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/erasure/codec_options.h"

namespace memento::erasure {

class XorCodec {
 public:
  static constexpr int kMaxK = 128;

  // InvalidArgument when k or the options are out of range.
  static Result<XorCodec> Create(int k, CodecOptions options = {});

  int k() const { return k_; }
  int m() const { return 1; }
  const CodecOptions& options() const { return options_; }

  // parity[0] = data[0] ^ ... ^ data[k-1] (old parity contents ignored).
  Status Encode(const uint8_t* const* data, uint8_t* const* parity, size_t len) const;

  // Rebuilds in place the (at most one) row listed in `erased` from the other
  // k rows of rows[0..k]. A null row that is not erased counts as lost:
  // Unrecoverable when fewer than k rows survive. An empty `erased` is a no-op.
  Status Decode(uint8_t* const* rows, const std::vector<int>& erased, size_t len) const;

  // parity[0] ^= data (row `data_row` folded in; any order; sub-ranges fine).
  Status EncodeUpdate(int data_row, const uint8_t* data, uint8_t* const* parity, size_t len) const;

  // parity[0] ^= old_data ^ new_data, without reading other rows.
  Status DeltaUpdate(int data_row, const uint8_t* old_data, const uint8_t* new_data,
                     uint8_t* const* parity, size_t len) const;

  // As RsCodec::DecodeCoefficients; for XOR every coefficient is 1 (after the
  // same validation: exactly k distinct survivors, disjoint from `erased`,
  // at most one erased row).
  Result<std::vector<uint8_t>> DecodeCoefficients(const std::vector<int>& erased,
                                                  const std::vector<int>& survivors) const;

 private:
  XorCodec(int k, CodecOptions options, std::vector<uint8_t> generator);

  int k_;
  CodecOptions options_;
  std::vector<uint8_t> generator_;  // (k + 1) x k: identity, then a row of ones
};

}  // namespace memento::erasure
