// RsCodec: systematic Reed-Solomon over GF(2^8) (K data rows + M parity rows)
// on Intel ISA-L, protecting the stripes of an `rs:K+M` group.
//
// The generator is ISA-L's Cauchy matrix (gf_gen_cauchy1_matrix): identity on
// top, then rows of 1 / (i XOR j) in GF(2^8) with polynomial 0x11d. Every
// square submatrix of it is invertible, so ANY M lost rows (data or parity)
// can be rebuilt from any K surviving ones.
//
// Rows: a "row" is one buffer of `len` bytes. Row indices run over
// 0..k-1 (data) then k..k+m-1 (parity). Every call takes the same `len` for all
// its rows; alignment and odd lengths are handled inside (any pointer, any
// len, including len > 2 GiB: ISA-L takes int lengths, so calls are cut into
// pieces of at most 1 GiB). len == 0 is a valid no-op (no pointer is read).
// Buffers passed to one call must not overlap, except where a function says so.
//
// Supported sizes: 1 <= k <= kMaxK (128), 1 <= m <= kMaxM (32); k + m <= 160
// stays well inside ISA-L's Cauchy limit (k + m <= 255).
//
// Errors: bad arguments (null rows, out-of-range or duplicate row indices) are
// InvalidArgument; more erasures than the code can rebuild are Unrecoverable.
// Every message names the row or count at fault. Nothing aborts.
//
// Thread-safety: after Create() the codec is immutable; any number of threads
// may call its const methods concurrently (on disjoint output buffers).
// Cost: encode and decode run at memory speed (ISA-L SIMD / GFNI); work is
// O(len * k * rows written). With CodecOptions::threads > 1, large calls are
// split across threads (see codec_options.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/erasure/codec_options.h"

namespace memento::erasure {

class RsCodec {
 public:
  static constexpr int kMaxK = 128;
  static constexpr int kMaxM = 32;

  // Builds the generator matrix and ISA-L's expanded encode tables
  // (32 * k * m bytes). InvalidArgument when k, m or the options are out of
  // range.
  static Result<RsCodec> Create(int k, int m, CodecOptions options = {});

  int k() const { return k_; }
  int m() const { return m_; }
  const CodecOptions& options() const { return options_; }

  // The (k + m) x k generator matrix, row-major: rows 0..k-1 are the identity,
  // row k + r holds the coefficients of parity row r.
  const std::vector<uint8_t>& generator() const { return generator_; }

  // Full encode: reads the k rows data[0..k-1] and overwrites the m rows
  // parity[0..m-1] (their old contents are ignored).
  Status Encode(const uint8_t* const* data, uint8_t* const* parity, size_t len) const;

  // Rebuilds in place the rows listed in `erased` from k surviving rows.
  // rows[0..k+m-1] points at data rows then parity rows. Survivors are the
  // first k rows that are neither erased nor null, so a caller may pass
  // nullptr for rows it does not have and does not want rebuilt.
  // Unrecoverable when fewer than k rows survive (e.g. more than m erased);
  // InvalidArgument for duplicate or out-of-range indices or a null erased row.
  // An empty `erased` is a no-op.
  Status Decode(uint8_t* const* rows, const std::vector<int>& erased, size_t len) const;

  // Incremental encode: folds data row `data_row` (0..k-1) into the m parity
  // rows (parity ^= coef * data). Starting from zeroed parity and folding
  // every data row once, in any order, gives the same parity as Encode(). Works
  // on any sub-range: pass pointers offset into the rows and the sub-range
  // length, so chunks may be folded as they stream in.
  Status EncodeUpdate(int data_row, const uint8_t* data, uint8_t* const* parity, size_t len) const;

  // Delta update: data row `data_row` changed from old_data to new_data; the
  // m parity rows are updated without reading any other data row. old_data
  // and new_data may be the same buffer (no change). Same sub-range rule as
  // EncodeUpdate.
  Status DeltaUpdate(int data_row, const uint8_t* old_data, const uint8_t* new_data,
                     uint8_t* const* parity, size_t len) const;

  // Coefficients for a distributed decode: for exactly k distinct surviving
  // rows and the erased rows (disjoint from them), returns the
  // erased.size() x k matrix c (row-major, erased x survivors order as given)
  // such that row_e = XOR over s of c[e][s] * row_s in GF(2^8). Each survivor
  // can multiply its own row by its column (GfMultiplyAdd) and the partial
  // products can be XOR-reduced toward the node that rebuilds row e.
  // Cost: one k x k GF inversion (O(k^3), microseconds).
  Result<std::vector<uint8_t>> DecodeCoefficients(const std::vector<int>& erased,
                                                  const std::vector<int>& survivors) const;

 private:
  RsCodec(int k, int m, CodecOptions options, std::vector<uint8_t> generator,
          std::vector<uint8_t> encode_tables);

  int k_;
  int m_;
  CodecOptions options_;
  std::vector<uint8_t> generator_;      // (k + m) x k
  std::vector<uint8_t> encode_tables_;  // ec_init_tables of the m parity rows
};

}  // namespace memento::erasure
