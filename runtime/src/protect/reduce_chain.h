// Reduce chains: a row computed as a GF(2^8) linear combination of rows held
// by different ranks, reduced along the holders so that the destination
// receives the result once instead of every input.
//
// A chain lists terms (rank, row, coefficient) and a destination rank. The
// rank of term 0 multiplies its row by its coefficient and sends the product
// to the rank of term 1, which folds in its own product (GfMultiplyAdd) and
// forwards the sum, and so on; the last term's rank sends the finished row to
// the destination. The row is cut into pieces of `piece_bytes` (at most
// kMaxReducePieceBytes), so the hops are pipelined: the destination gets the
// first piece after ~K piece times, not K row times. The destination
// receives all its chains at once, one thread each, so their pipelines fill
// together. Bytes into the destination: the row's length; bytes into
// every other rank: one row per chain it takes part in after the first term;
// total traffic: K rows per chain (as gathering the K inputs, but spread over
// the survivors instead of converging on the destination).
//
// Used for the parity of every xor / rs version (generator coefficients over
// the stripe's data rows, chain -> the parity holder; protect_stage.cc), for
// erasure decode (coefficients from DecodeCoefficients, chain -> owner of
// the rebuilt row; recovery_executor.cc) and for recomputing a lost parity
// piece (as protect, chain -> the new parity holder; reprotector.cc).
//
// Wire: per piece, a wire::PieceHeader {length, crc32c of the payload, ok,
// the call's stamp} then the payload (0 bytes if not ok), both with the
// chain's tag. A rank that
// cannot read its row (or got a failed / corrupt piece) sends ok = 0 for
// every remaining piece, so the destination learns the chain failed without
// a timeout, and every message count stays the same on both sides whatever
// failed, which lets every receiver post its receives ahead.
//
// Pipelining: a hop keeps 2 pieces' receives posted (Transport::StartRecv)
// and its forwarded piece in flight (StartSend) while it folds the current
// one, so each link receives and sends at once; with one piece at a time, a
// hop's receive and send took turns and a chain ran at half its links'
// speed.
//
// Threads. Where the transport's transfers can be tested without blocking
// (Transport::TestsTransfers: MPI, in-process), every hop and destination
// of this rank is a task of one loop on the calling thread: each pass posts
// what a task has buffers for and processes every piece whose transfers
// have finished; nothing blocks, so no wait can close a cycle. One thread
// per rank instead of one per hop and destination, which polled and
// yielded to each other: on the 2-core VM the benchmarks run on, rs:4+2 on
// 8 ranks protected 2-33 % faster (14 % or more in 7 of 8 pairs) with 4-31 %
// less CPU, its restores within the noise; xor:3 gained up to 10 %
// (experiments/runtime/README.md, "One thread per rank for the chains").
// The loop gives up after the transport's timeout without a finished
// transfer. Elsewhere (a transport whose receive happens inside Wait:
// Gloo), the same tasks run each on a thread of its own, blocking in Wait: a
// hop only waits for its predecessor's pieces and for its successor taking
// its own; the chain is acyclic, and each result is received on a thread of
// its own. Either way the reader and the sink are called from the threads
// RunReduceChains runs on. Tags: chain c uses `tag_base + c` (mod the
// recover tag span); ranks of one chain are distinct.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
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
using RowWriter =
    std::function<Status(int chain, uint64_t offset, const uint8_t* data, uint64_t len)>;

// Where the destination's finished pieces go, instead of a row-sized result.
//  - span(chain, offset, len): memory the piece [offset, offset + len) of
//    chain `chain`'s row is received straight into (no buffer, no copy), or
//    null. It is asked when the receive is posted, up to kPiecesAhead pieces
//    early. A piece received in place is checked (length, crc32c) there: when
//    it fails, the chain fails and the span holds garbage, so spans are for
//    memory nothing committed lives in (a slot being written, a new row).
//  - write: takes every piece whose span was null, from a buffer of the
//    chain's own. Required when span is unset or may return null.
//  - landed (optional): told of every piece received in place once it
//    passed its checks, with its crc32c (already checked against the bytes
//    in place), from the chain's thread, the pieces of a chain in order.
//  - landed_crc = false: landed gets 0 for the crc32c of a piece that
//    travelled unchecked (ReduceOptions::check_pieces = false) instead of
//    one computed as it lands: for a sink that hashes the piece itself.
struct RowSink {
  std::function<uint8_t*(int chain, uint64_t offset, uint64_t len)> span;
  RowWriter write;
  std::function<void(int chain, uint64_t offset, uint64_t len, uint32_t crc)> landed;
  bool landed_crc = true;
};

// Piece buffers kept from one RunReduceChains call to the next, for a caller
// that runs chains again and again (protect, every version): the hops take
// their buffers from here and give them back, so that their pages are
// faulted in once instead of once per call. Thread-safe; holds at most what
// one call used at once.
//
// limit_bytes (0: none) caps the bytes handed out and not yet given back; a
// Take past it fails as a failed mapping does. A hop or destination whose
// buffers cannot be had (either way) still takes every message of its
// stream, into no buffer, and forwards failed pieces: the call fails with
// ResourceExhausted on that rank and Unavailable at the chain's destination,
// and no rank waits for a message that never comes.
class PieceArena {
 public:
  explicit PieceArena(size_t limit_bytes = 0) : limit_(limit_bytes) {}
  ~PieceArena();
  PieceArena(const PieceArena&) = delete;
  PieceArena& operator=(const PieceArena&) = delete;
  // A block of exactly `bytes` bytes: a kept one, else freshly mapped; null
  // when the mapping fails or the limit would be passed.
  uint8_t* Take(size_t bytes);
  void Put(uint8_t* p, size_t bytes);
  // Blocks kept now (none is in use by a call).
  size_t kept() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<size_t, uint8_t*>> free_;
  const size_t limit_;
  size_t out_ = 0;  // bytes taken and not given back
};

// Optional behaviour of RunReduceChains.
//  - tag(chain): the tag of chain `chain`'s messages, instead of
//    wire::RecoverTag(tag_base + chain). For a caller with a tag range of
//    its own (protect runs beside a background re-protect's chains).
//  - span(chain, term, offset, len): bytes [offset, offset + len) of this
//    rank's row of `term` where they already lie in memory (and stay
//    unchanged until RunReduceChains returns), or null (then the reader
//    copies them). A hop folds straight from the span, and a first term
//    with coefficient 1 sends straight from it: no copy of the row.
//  - check_pieces = false: pieces travel without a crc32c (hops neither
//    compute nor check one); the destination's `landed` still gets each
//    piece's crc32c, computed as it lands (unless RowSink::landed_crc is
//    false). Protect and the restore's decodes run this way (the decoded
//    shard is checked end to end against its seals); the re-protect keeps
//    the checks, as its rebuilt regions are sealed with the pieces' crcs.
//  - arena: where the piece buffers come from (else mapped per call).
//  - stamp: carried by every piece of this call. A piece with another stamp
//    was left on the stream by an earlier call that broke off (a transport
//    error in the middle of it): the receiving hop or destination fails the
//    chain ("out of step") instead of taking it for a piece of this call.
//    For a caller that runs chains on the same tags again and again
//    (protect: one call per version); every rank must pass the same stamp.
struct ReduceOptions {
  std::function<int(size_t chain)> tag;
  bool check_pieces = true;
  PieceArena* arena = nullptr;
  uint64_t stamp = 0;
  std::function<const uint8_t*(int chain, const ReduceTerm& term, uint64_t offset, uint64_t len)>
      span;
};

// Pieces are at most this long, whatever piece_bytes the caller passes. A
// chain's latency is its hops times one piece's wire time, and every hop
// holds 4 pieces (3 in flight and its own row's): with 4 MiB pieces (the
// snapshot chunk) the pipeline took ~3 x 40 ms to fill behind a 0.1 GiB/s
// link and each hop first-touched 16 MiB of fresh buffers, which cost more
// than the transfer on the 2-core VM the benchmarks run on (page faults at
// ~5-13 us each). 512 KiB gave the lowest resume time there (256 KiB to
// 4 MiB measured; experiments/runtime/README.md).
inline constexpr uint64_t kMaxReducePieceBytes = 512 * 1024;

// Byte counts of one RunReduceChains call on this rank (payload only).
struct ReduceBytes {
  uint64_t sent = 0;
  uint64_t received = 0;  // as intermediate hop and as destination
};

// Runs every chain this rank takes part in. `results[c]` (resized here) gets
// the finished row of every chain whose dst_rank is this rank; other entries
// stay empty. With `sink`, the finished pieces go to it instead and
// every entry of `results` stays empty (the caller lands them where they belong, with no
// row-sized buffer in between). Returns the first failure of a chain this
// rank is the destination of, or of a hop it ran (named), else Ok. Every rank
// of the job must call it with the same `chains` and `tag_base`.
Status RunReduceChains(Transport* transport, const std::vector<ReduceChain>& chains, int tag_base,
                       uint64_t piece_bytes, const RowReader& reader,
                       std::vector<std::vector<uint8_t>>* results, ReduceBytes* bytes,
                       const RowSink* sink = nullptr, const ReduceOptions* options = nullptr);

}  // namespace memento::runtime
