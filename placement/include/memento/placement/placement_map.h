// PlacementMap: for one lane, which node holds which copy or piece of which shard, and how
// many bytes every node holds, given the shard size of every node (sizes may differ).
//
// The runtime builds one map per lane (the layout is the same for every lane; only the
// shard sizes differ). Sizes follow the stripe model in group_layout.h: a replica is the
// owner's shard bytes; a parity piece of a group has P = ceil(max shard bytes in the
// group / K') bytes. Memory per node: replica M*S, erasure S + M*P (= S(1+M/K') when the
// group's shards are equal and K' divides S), none S.
//
// Thread-safety: an immutable value. Cost: O(N * (M + K)) to build.
#pragma once

#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/group_layout.h"

namespace memento::placement {

// What a node holds for one lane of one version.
enum class ItemKind { kShard, kReplica, kParity };
const char* ItemKindName(ItemKind kind);  // "shard", "replica", "parity"

struct HeldItem {
  ItemKind kind = ItemKind::kShard;
  int owner = -1;   // kShard / kReplica: the node whose shard this is
  int stripe = -1;  // kParity: stripe of the holder's group
  int row = -1;     // kParity: parity row 0..M-1
  uint64_t bytes = 0;
};

class PlacementMap {
 public:
  // shard_bytes[n] = bytes of node n's shard in this lane; size must be layout.num_nodes().
  static Result<PlacementMap> Build(const GroupLayout& layout, std::vector<uint64_t> shard_bytes);
  // Every shard of `bytes` bytes.
  static PlacementMap Uniform(const GroupLayout& layout, uint64_t bytes);

  const GroupLayout& layout() const { return layout_; }
  uint64_t shard_bytes(int node) const { return shard_bytes_.at(node); }
  // Erasure groups: P, the bytes of one piece (data or parity) in group g; 0 otherwise.
  uint64_t piece_bytes(int g) const { return piece_bytes_.at(g); }
  // Bytes of piece `piece` of owner's shard that are real data (the rest of P is padding).
  uint64_t DataPieceBytes(int owner, int piece) const;
  // Everything `node` holds: its own shard first, then replicas by owner, then parity rows.
  const std::vector<HeldItem>& held_by(int node) const { return held_.at(node); }
  // Sum of held_by(node) bytes.
  uint64_t bytes_at(int node) const;
  uint64_t max_bytes_per_node() const;

 private:
  explicit PlacementMap(const GroupLayout& layout) : layout_(layout) {}
  GroupLayout layout_;
  std::vector<uint64_t> shard_bytes_;
  std::vector<uint64_t> piece_bytes_;
  std::vector<std::vector<HeldItem>> held_;
};

// The most any node of `layout` holds for checkpoints, as a multiple of the
// shard size S (equal shards; its own shard included). A smaller last group
// makes it larger than the scheme's nominal 1 + M/K (Scheme::NominalMemoryFactor):
// e.g. rs:6+3 on 16 nodes, whose last group of 4 holds 3 parity pieces of S.
double WorstNodeMemoryFactor(const GroupLayout& layout);

}  // namespace memento::placement
