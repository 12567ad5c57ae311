// Reduce chains: a row computed as a GF(2^8) linear combination of rows held
// by different ranks, reduced along the holders so that the destination
// receives the result once instead of every input.
//
// A chain lists terms (rank, row, coefficient) and a destination rank. The
// rank of term 0 multiplies its row by its coefficient and sends the product
// to the rank of term 1, which folds in its own product (GfMultiplyAdd) and
// forwards the sum, and so on; the last term's rank sends the finished row to
// the destination. The row is cut into pieces of `piece_bytes`, so the hops
// are pipelined: the destination gets the first piece after ~K piece times,
// not K row times. The destination receives all its chains at once, one
// thread each, so their pipelines fill together. Bytes into the destination: the row's length; bytes into
// every other rank: one row per chain it takes part in after the first term;
// total traffic: K rows per chain (as gathering the K inputs, but spread over
// the survivors instead of converging on the destination).
//
// Used for erasure decode (coefficients from DecodeCoefficients, chain ->
// owner of the rebuilt row; recovery_executor.cc) and for recomputing a lost
// parity piece (generator coefficients over the stripe's data rows, chain ->
// the new parity holder; reprotector.cc).
//
// Wire: per piece, a wire::PayloadHeader {length, crc32c of the payload, ok} then,
// if ok, the payload, both with the chain's tag. A rank that cannot read its
// row (or got a failed / corrupt piece) sends ok = 0 for every remaining
// piece, so the destination learns the chain failed without a timeout and
// every message count stays the same on both sides.
//
// Deadlock freedom: each (chain, term) of this rank runs on its own thread
// and only waits for its predecessor, which waits only for its own; the chain
// is acyclic, and each result is received on a thread of its own. Tags: chain c uses
// `tag_base + c` (mod the recover tag span); ranks of one chain are distinct.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::runtime {

// One contribution: `coef` x row `row_id` of rank `rank` (row_id is opaque
// here; the reader callback interprets it).
struct ReduceTerm {
  int rank = -1;
  int row_id = -1;
  uint8_t coef = 0;
};

struct ReduceChain {
  std::vector<ReduceTerm> terms;  // >= 1, distinct ranks, none == dst_rank
  int dst_rank = -1;
  uint64_t length = 0;  // bytes of the result row, > 0
};

// Reads bytes [offset, offset + len) of row `row_id` of term `term` (this
// rank's) of chain `chain` into dst; bytes beyond a row's real data are zero.
using RowReader = std::function<Status(int chain, const ReduceTerm& term, uint64_t offset,
                                       uint64_t len, uint8_t* dst)>;

// Takes a finished piece [offset, offset + len) of chain `chain`'s row at the
// destination (pieces of one chain arrive in order; different chains'
// pieces from different threads at once). A failure fails that chain.
using RowWriter = std::function<Status(int chain, uint64_t offset, const uint8_t* data,
                                       uint64_t len)>;

// Byte counts of one RunReduceChains call on this rank (payload only).
struct ReduceBytes {
  uint64_t sent = 0;
  uint64_t received = 0;  // as intermediate hop and as destination
};

// Runs every chain this rank takes part in. `results[c]` (resized here) gets
// the finished row of every chain whose dst_rank is this rank; other entries
// stay empty. With `writer`, the finished pieces go to it instead and
// `results` is left empty (the caller lands them where they belong, with no
// row-sized buffer in between). Returns the first failure of a chain this rank is the
// destination of, or of a hop it ran (named), else Ok. Every rank of the job
// must call it with the same `chains` and `tag_base`.
Status RunReduceChains(Transport* transport, const std::vector<ReduceChain>& chains, int tag_base,
                       uint64_t piece_bytes, const RowReader& reader,
                       std::vector<std::vector<uint8_t>>* results, ReduceBytes* bytes,
                       const RowWriter* writer = nullptr);

}  // namespace memento::runtime
