#include "protect/protection_layout.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "protect/entry_seals.h"
#include "memento/common/check.h"
#include "memento/placement/topology.h"

namespace memento::runtime {

Result<ProtectionLayout> ProtectionLayout::Build(const std::string& scheme_text,
                                                 const std::vector<RankRecord>& records, int me,
                                                 const std::vector<uint64_t>& entry_bytes) {
  ProtectionLayout pl;
  MEMENTO_ASSIGN_OR_RETURN(pl.scheme_, placement::Scheme::Parse(scheme_text));
  // Distinct identities in natural order (gpu-9 before gpu-10); their ranks.
  std::map<std::string, std::vector<int>, placement::NodeOrder> ranks_of;
  for (size_t r = 0; r < records.size(); ++r) ranks_of[records[r].identity].push_back(int(r));
  const int n = static_cast<int>(ranks_of.size());
  pl.num_nodes_ = n;
  pl.lanes_ = static_cast<int>(ranks_of.begin()->second.size());
  for (const auto& [id, ranks] : ranks_of) {
    if (static_cast<int>(ranks.size()) != pl.lanes_) {
      return Status::InvalidArgument("node '" + id + "' runs " + std::to_string(ranks.size()) +
                                     " ranks, node '" + ranks_of.begin()->first + "' runs " +
                                     std::to_string(pl.lanes_) +
                                     ": memento needs the same number of ranks on every node");
    }
  }
  for (const auto& r : records) {
    if ((r.old_nodes != 0 && static_cast<int>(r.old_nodes) != n) ||
        (r.old_lanes != 0 && static_cast<int>(r.old_lanes) != pl.lanes_)) {
      return Status::ElasticRestoreNeeded(
          "elastic restore needed: the node store of '" + r.identity + "' was written for " +
          std::to_string(r.old_nodes) + " nodes x " + std::to_string(r.old_lanes) +
          " ranks, the job now runs on " + std::to_string(n) + " x " +
          std::to_string(pl.lanes_) +
          "; set MEMENTO_ELASTIC=1 to restore onto the new topology from memory");
    }
  }
  // Survivors keep their old index; the others fill the holes in sorted order.
  std::vector<std::string> at(n);
  std::vector<std::string> unplaced;
  for (const auto& [id, ranks] : ranks_of) {
    int old = -1;
    for (int r : ranks) {
      if (records[r].old_index >= 0 && records[r].old_index < n) {
        old = records[r].old_index;
        break;
      }
    }
    if (old >= 0 && at[old].empty()) {
      at[old] = id;
    } else {
      unplaced.push_back(id);
    }
  }
  size_t next = 0;
  for (int i = 0; i < n; ++i) {
    if (at[i].empty()) at[i] = unplaced[next++];
  }
  MEMENTO_CHECK_EQ(next, unplaced.size());
  pl.rank_of_.assign(n, std::vector<int>(pl.lanes_, -1));
  pl.shard_bytes_.assign(n, std::vector<uint64_t>(pl.lanes_, 0));
  pl.entry_count_.assign(n, std::vector<uint32_t>(pl.lanes_, 0));
  for (int i = 0; i < n; ++i) {
    for (int r : ranks_of[at[i]]) {
      const int lane = records[r].lane;
      if (lane < 0 || lane >= pl.lanes_ || pl.rank_of_[i][lane] >= 0) {
        return Status::InvalidArgument("node '" + at[i] + "': lane " + std::to_string(lane) +
                                       " out of range or used twice");
      }
      pl.rank_of_[i][lane] = r;
      pl.shard_bytes_[i][lane] = records[r].shard_bytes;
      pl.entry_count_[i][lane] = records[r].entries;
      if (r == me) {
        pl.node_ = i;
        pl.lane_ = lane;
      }
    }
  }
  uint64_t base = 0;
  for (uint64_t b : entry_bytes) {
    pl.entry_base_.push_back(base);
    base += b;
  }
  // Groups exist for every scheme (under "none" each node is its own
  // unprotected group), so that every restore goes through the planner.
  if (pl.protects()) MEMENTO_RETURN_IF_ERROR(pl.scheme_.ValidateFor(n));
  MEMENTO_ASSIGN_OR_RETURN(auto topo, placement::Topology::Uniform(n, pl.lanes_));
  MEMENTO_ASSIGN_OR_RETURN(auto groups, placement::GroupLayout::Build(topo, pl.scheme_));
  pl.groups_.emplace(std::move(groups));
  if (!pl.protects()) return pl;
  for (int lane = 0; lane < pl.lanes_; ++lane) {
    std::vector<uint64_t> sizes(n);
    for (int i = 0; i < n; ++i) sizes[i] = pl.shard_bytes_[i][lane];
    MEMENTO_ASSIGN_OR_RETURN(auto map, placement::PlacementMap::Build(*pl.groups_, sizes));
    pl.maps_.push_back(std::move(map));
  }
  return pl;
}

void ProtectionLayout::ExtendStoreLayout(StoreLayout* layout) {
  MEMENTO_CHECK(protects());
  for (const placement::HeldItem& item : maps_.at(lane_).held_by(node_)) {
    if (item.kind == placement::ItemKind::kShard) continue;
    RegionSpec spec;
    spec.capacity = item.bytes;
    if (item.kind == placement::ItemKind::kReplica) {
      spec.kind = RegionKind::kReplica;
      spec.name = "replica/n" + std::to_string(item.owner);
      spec.owner_node = static_cast<uint32_t>(item.owner);
      spec.owner_lane = static_cast<uint32_t>(lane_);
    } else {
      spec.kind = RegionKind::kParity;
      spec.name = "parity/s" + std::to_string(item.stripe) + "/r" + std::to_string(item.row);
      spec.owner_node = static_cast<uint32_t>(groups_->group_of(node_));
      spec.owner_lane = static_cast<uint32_t>(item.row);
      spec.piece = static_cast<uint32_t>(item.stripe);
    }
    held_.push_back({item, static_cast<int>(layout->regions.size()), item.bytes});
    layout->regions.push_back(std::move(spec));
  }
  for (int owner : SealOwners()) {
    RegionSpec spec;
    spec.kind = RegionKind::kSeals;
    spec.name = "seals/n" + std::to_string(owner);
    spec.capacity = EntrySealsBytes(entry_count_.at(owner).at(lane_));
    spec.owner_node = static_cast<uint32_t>(owner);
    spec.owner_lane = static_cast<uint32_t>(lane_);
    seals_.push_back({owner, static_cast<int>(layout->regions.size()), spec.capacity});
    layout->regions.push_back(std::move(spec));
  }
  RegionSpec topo;
  topo.kind = RegionKind::kParity;
  topo.name = "topology";
  topo.capacity = 0;
  topo.owner_node = static_cast<uint32_t>(num_nodes_);
  topo.owner_lane = static_cast<uint32_t>(lanes_);
  topology_region_ = static_cast<int>(layout->regions.size());
  layout->regions.push_back(std::move(topo));
}

std::vector<int> ProtectionLayout::SealOwners() const {
  std::set<int> owners;
  if (!protects()) return {};
  for (const placement::HeldItem& item : maps_.at(lane_).held_by(node_)) {
    if (item.kind == placement::ItemKind::kReplica) {
      owners.insert(item.owner);
    } else if (item.kind == placement::ItemKind::kParity) {
      const int g = groups_->group_of(node_);
      for (int r = 0; r < groups_->group(g).data; ++r) {
        owners.insert(groups_->DataRowNode(g, item.stripe, r));
      }
    }
  }
  return {owners.begin(), owners.end()};
}

int ProtectionLayout::ReplicaRegion(int owner) const {
  for (const auto& h : held_) {
    if (h.item.kind == placement::ItemKind::kReplica && h.item.owner == owner) return h.region;
  }
  return -1;
}

int ProtectionLayout::SealsRegionOf(int owner) const {
  for (const auto& s : seals_) {
    if (s.owner == owner) return s.region;
  }
  return -1;
}

std::vector<int> ProtectionLayout::SealHolders() const {
  std::set<int> holders;
  if (scheme_.is_replica()) {
    for (int h : groups_->ReplicaHolders(node_)) holders.insert(h);
  } else if (scheme_.is_erasure()) {
    const int g = groups_->group_of(node_);
    for (int piece = 0; piece < groups_->group(g).data; ++piece) {
      const int stripe = groups_->StripeOfPiece(node_, piece);
      for (int t = 0; t < groups_->group(g).parity; ++t) {
        holders.insert(groups_->ParityHolder(g, stripe, t));
      }
    }
  }
  return {holders.begin(), holders.end()};
}

int ProtectionLayout::ParityRegion(int stripe, int row) const {
  for (const auto& h : held_) {
    if (h.item.kind == placement::ItemKind::kParity && h.item.stripe == stripe &&
        h.item.row == row) {
      return h.region;
    }
  }
  return -1;
}

}  // namespace memento::runtime
