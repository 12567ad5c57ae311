// StripeLayout: where the rows of an `xor:K` / `rs:K+M` group live, with
// rotating parity (RAID-5/6 style, docs/architecture.md §5), so that no node is a hotspot.
//
// A group has G = K + M nodes, numbered 0..G-1 within the group. Each node
// keeps its own shard and cuts it into K pieces of P bytes, where
//   P = ceil(S_max / K),  S_max = the largest shard in the group.
// Piece p of node n covers bytes [p*P, min((p+1)*P, S_n)) of its shard; the
// last one is usually shorter (the partial piece) and, for a shard much
// shorter than S_max, trailing pieces may even be empty. In a stripe a short
// piece is read as if zero-padded to P bytes; the padding is never stored.
//
// There are G stripes; each has K data rows and M parity rows of P bytes.
//   stripe j's parity row K+r (r = 0..M-1) lives on node (j + r) mod G,
//   stripe j's data row d (d = 0..K-1) is piece d of node (j + M + d) mod G.
// Hence node n holds parity row K+r of stripe (n - r) mod G (its "parity
// slot" r, at byte offset r*P of its parity area of M*P bytes), and its piece
// p is data row p of stripe (n - M - p) mod G. Every node contributes exactly
// K data pieces (one to each stripe it holds no parity of) and holds M parity
// rows: memory per node S + M*P ~ S * (1 + M/K).
//
// Works for any K >= 1, M >= 1 with K + M <= 255 (the runtime also uses a
// smaller K for a last partial group). Shard sizes of 0 are allowed (then P
// may be 0).
//
// Errors: Create() and the lookups return InvalidArgument naming the index
// that is out of range. Thread-safety: immutable after Create(); all methods
// are const and may be called concurrently. Cost: O(1) per lookup, O(G) memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"

namespace memento::erasure {

// A row of a stripe: stripe in 0..G-1, row in 0..K+M-1 (data rows first).
struct StripeRow {
  int stripe = 0;
  int row = 0;
  bool operator==(const StripeRow& o) const { return stripe == o.stripe && row == o.row; }
};

// Where a stripe row is stored.
struct RowLocation {
  int node = 0;         // group-local node that holds the row
  bool parity = false;  // true: a parity row, stored in the node's parity area
  int index = 0;        // data: the piece index (== row); parity: the slot (== row - K)
  size_t offset = 0;    // data: byte offset in the node's shard; parity: offset in its parity area
  size_t length = 0;    // bytes actually stored (data: <= P, rest is zero padding; parity: P)
};

// A byte range [offset, offset + length) within a buffer.
struct ByteRange {
  size_t offset = 0;
  size_t length = 0;
};

class StripeLayout {
 public:
  // A group of k + m nodes whose shards all have `shard_bytes` bytes.
  static Result<StripeLayout> Create(int k, int m, size_t shard_bytes);
  // A group whose node n has shard_bytes[n] bytes (k + m entries).
  static Result<StripeLayout> Create(int k, int m, std::vector<size_t> shard_bytes);

  int k() const { return k_; }
  int m() const { return m_; }
  int group_size() const { return k_ + m_; }   // G
  int num_stripes() const { return k_ + m_; }  // also G
  // P: the length of every stripe row (the codec's `len`).
  size_t piece_bytes() const { return piece_bytes_; }
  // Bytes of parity each node holds: M * P.
  size_t parity_bytes_per_node() const { return piece_bytes_ * static_cast<size_t>(m_); }
  // S_n, the shard size of node n (0 when n is out of range).
  size_t shard_bytes(int node) const;

  // Node n's piece p -> (stripe, data row).
  Result<StripeRow> DataRowOf(int node, int piece) const;
  // Node n's parity slot r (0..M-1) -> (stripe, parity row K + r).
  Result<StripeRow> ParityRowOf(int node, int slot) const;
  // (stripe, row) -> the node, piece or slot, and byte range that hold it.
  Result<RowLocation> Locate(int stripe, int row) const;
  // The M nodes holding stripe j's parity rows K..K+M-1, in row order.
  Result<std::vector<int>> ParityNodes(int stripe) const;
  // Byte range of node n's piece p within its shard (length may be < P, or 0;
  // an empty piece has offset S_n).
  Result<ByteRange> PieceRange(int node, int piece) const;

 private:
  StripeLayout(int k, int m, std::vector<size_t> shard_bytes, size_t piece_bytes);
  Status CheckNode(int node) const;

  int k_;
  int m_;
  std::vector<size_t> shard_bytes_;
  size_t piece_bytes_;
};

}  // namespace memento::erasure
