#include "memento/placement/placement_map.h"

#include <algorithm>

#include "memento/common/check.h"

namespace memento::placement {

const char* ItemKindName(ItemKind kind) {
  switch (kind) {
    case ItemKind::kShard:
      return "shard";
    case ItemKind::kReplica:
      return "replica";
    case ItemKind::kParity:
      return "parity";
  }
  return "?";
}

Result<PlacementMap> PlacementMap::Build(const GroupLayout& layout,
                                         std::vector<uint64_t> shard_bytes) {
  const int n = layout.num_nodes();
  if (static_cast<int>(shard_bytes.size()) != n) {
    return Status::InvalidArgument("placement map: " + std::to_string(shard_bytes.size()) +
                                   " shard sizes for " + std::to_string(n) + " nodes");
  }
  PlacementMap map(layout);
  map.shard_bytes_ = std::move(shard_bytes);
  map.piece_bytes_.assign(layout.groups().size(), 0);
  map.held_.assign(n, {});
  for (int node = 0; node < n; ++node) {
    map.held_[node].push_back({ItemKind::kShard, node, -1, -1, map.shard_bytes_[node]});
  }
  for (int gi = 0; gi < static_cast<int>(layout.groups().size()); ++gi) {
    const ProtectionGroup& g = layout.group(gi);
    if (g.kind == GroupKind::kReplica) {
      for (int owner : g.members) {
        for (int holder : layout.ReplicaHolders(owner)) {
          map.held_[holder].push_back({ItemKind::kReplica, owner, -1, -1, map.shard_bytes_[owner]});
        }
      }
    } else if (g.kind == GroupKind::kErasure) {
      uint64_t max_bytes = 0;
      for (int m : g.members) max_bytes = std::max(max_bytes, map.shard_bytes_[m]);
      const uint64_t piece = (max_bytes + g.data - 1) / g.data;
      map.piece_bytes_[gi] = piece;
      for (int m : g.members) {
        for (auto [stripe, row] : layout.ParityRowsHeldBy(m)) {
          map.held_[m].push_back({ItemKind::kParity, -1, stripe, row, piece});
        }
      }
    }
  }
  for (auto& items : map.held_) {
    std::stable_sort(items.begin() + 1, items.end(), [](const HeldItem& a, const HeldItem& b) {
      if (a.kind != b.kind) return a.kind < b.kind;
      if (a.owner != b.owner) return a.owner < b.owner;
      return a.stripe < b.stripe;
    });
  }
  return map;
}

PlacementMap PlacementMap::Uniform(const GroupLayout& layout, uint64_t bytes) {
  auto map = Build(layout, std::vector<uint64_t>(layout.num_nodes(), bytes));
  MEMENTO_CHECK(map.ok());
  return std::move(map).value();
}

uint64_t PlacementMap::DataPieceBytes(int owner, int piece) const {
  const int gi = layout_.group_of(owner);
  const uint64_t p = piece_bytes_.at(gi);
  const uint64_t start = p * static_cast<uint64_t>(piece);
  const uint64_t s = shard_bytes_.at(owner);
  if (start >= s) return 0;
  return std::min(p, s - start);
}

uint64_t PlacementMap::bytes_at(int node) const {
  uint64_t total = 0;
  for (const HeldItem& h : held_.at(node)) total += h.bytes;
  return total;
}

uint64_t PlacementMap::max_bytes_per_node() const {
  uint64_t m = 0;
  for (int n = 0; n < static_cast<int>(held_.size()); ++n) m = std::max(m, bytes_at(n));
  return m;
}

double WorstNodeMemoryFactor(const GroupLayout& layout) {
  // A shard size every K <= 16 divides, so the factor is exact for the common schemes.
  constexpr uint64_t kShard = 720720ull * 4096;
  return static_cast<double>(PlacementMap::Uniform(layout, kShard).max_bytes_per_node()) /
         static_cast<double>(kShard);
}

}  // namespace memento::placement
