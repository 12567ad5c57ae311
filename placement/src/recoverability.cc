#include "memento/placement/recoverability.h"

#include "memento/common/check.h"

namespace memento::placement {

const char* ShardStateName(ShardState state) {
  switch (state) {
    case ShardState::kIntact:
      return "intact";
    case ShardState::kRebuildable:
      return "rebuildable";
    case ShardState::kLost:
      return "lost";
  }
  return "?";
}

FailureAssessment AssessFailures(const GroupLayout& layout, const std::vector<int>& failed) {
  const int n = layout.num_nodes();
  std::vector<char> mask(n, 0);
  for (int f : failed) {
    MEMENTO_CHECK(f >= 0 && f < n);
    mask[f] = 1;
  }
  FailureAssessment out;
  out.shards.resize(n);
  for (int gi = 0; gi < static_cast<int>(layout.groups().size()); ++gi) {
    const ProtectionGroup& g = layout.group(gi);
    int lost_in_group = 0;
    std::vector<int> survivors;
    for (int m : g.members) {
      if (mask[m]) {
        ++lost_in_group;
      } else {
        survivors.push_back(m);
      }
    }
    for (int owner : g.members) {
      ShardFate& fate = out.shards[owner];
      fate.owner = owner;
      if (!mask[owner]) continue;  // kIntact
      switch (g.kind) {
        case GroupKind::kUnprotected:
          fate.state = ShardState::kLost;
          break;
        case GroupKind::kReplica:
          for (int h : layout.ReplicaHolders(owner)) {
            if (!mask[h]) fate.sources.push_back(h);
          }
          fate.state = fate.sources.empty() ? ShardState::kLost : ShardState::kRebuildable;
          break;
        case GroupKind::kErasure:
          if (lost_in_group <= g.parity) {
            fate.state = ShardState::kRebuildable;
            fate.sources = survivors;
          } else {
            fate.state = ShardState::kLost;
          }
          break;
      }
    }
  }
  for (int owner = 0; owner < n; ++owner) {
    if (out.shards[owner].state == ShardState::kLost) out.lost.push_back(owner);
    if (out.shards[owner].state == ShardState::kRebuildable) out.rebuildable.push_back(owner);
  }
  out.recoverable = out.lost.empty();
  return out;
}

bool IsRecoverable(const GroupLayout& layout, const std::vector<char>& failed_mask) {
  MEMENTO_CHECK_EQ(static_cast<int>(failed_mask.size()), layout.num_nodes());
  for (const ProtectionGroup& g : layout.groups()) {
    const int size = g.size();
    switch (g.kind) {
      case GroupKind::kUnprotected:
        if (failed_mask[g.members[0]]) return false;
        break;
      case GroupKind::kErasure: {
        int lost = 0;
        for (int m : g.members) lost += failed_mask[m] ? 1 : 0;
        if (lost > g.parity) return false;
        break;
      }
      case GroupKind::kReplica: {
        // A shard is lost iff `copies` cyclically consecutive members failed.
        int first_alive = -1;
        for (int p = 0; p < size; ++p) {
          if (!failed_mask[g.members[p]]) {
            first_alive = p;
            break;
          }
        }
        if (first_alive < 0) return false;
        int run = 0;
        for (int i = 1; i <= size; ++i) {
          const int p = (first_alive + i) % size;
          if (failed_mask[g.members[p]]) {
            if (++run >= g.copies) return false;
          } else {
            run = 0;
          }
        }
        break;
      }
    }
  }
  return true;
}

}  // namespace memento::placement
