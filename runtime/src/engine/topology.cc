// Prepare's first steps (Checkpointer::Impl): the settings and node
// identities, this node's stores of another topology set aside (elastic), the
// topology records with rank 0's draw of the run's lineage, the protection
// layout, and every rank's entries (the job catalog).
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpointer_impl.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/shm_segment.h"
#include "transport/wire.h"

namespace memento::runtime {

Status Checkpointer::Impl::LearnTopology(int* lane_out) {
  const int rank = transport_->rank();
  // Node identities of every rank: this rank's lane and node index. When
  // this rank's lane is known without them (ranks per node set, or the
  // launcher's LOCAL_RANK) and no elastic set-aside comes first, its
  // topology record travels with the settings; when every rank's did, no
  // allgather of the records follows.
  node_ = NodeIdentity(config_, rank);
  int lane = LocalRank(config_, rank);
  std::vector<std::vector<uint8_t>> records_raw;
  MEMENTO_ASSIGN_OR_RETURN(
      const std::vector<std::string> identities,
      AgreeOnSettings(node_,
                      lane >= 0 && !config_.elastic ? TopologyBlob(lane) : std::vector<uint8_t>(),
                      &records_raw));
  for (size_t r = 0; r < identities.size(); ++r) {
    // The store names carry it (NodeStore::SegmentName); refused here, on
    // every rank alike, with the settings that made it.
    if (identities[r].size() > 200) {
      return Status::InvalidArgument(
          "rank " + std::to_string(r) + "'s node identity has " +
          std::to_string(identities[r].size()) + " bytes, more than 200: " +
          (config_.ranks_per_node > 0
               ? "MEMENTO_NODE (or the host name) plus the '/<virtual node>' that "
                 "MEMENTO_RANKS_PER_NODE appends"
               : "MEMENTO_NODE") +
          " is too long");
    }
  }
  if (lane < 0) lane = LocalRankAmong(identities, rank);
  *lane_out = lane;
  if (config_.elastic) {
    std::map<std::string, int> per_node;
    for (const auto& id : identities) ++per_node[id];
    const int nodes = static_cast<int>(per_node.size());
    const int lanes = per_node.begin()->second;
    // Agreed on before the collective below: a rank whose stores could not be
    // listed or renamed must not leave the others waiting in it.
    MEMENTO_RETURN_IF_ERROR(
        AllOk(*transport_, SetAsideOtherTopology(nodes, lanes, lane),
              Status::Unavailable("another rank could not set aside its node stores of "
                                  "another topology")));
    MEMENTO_ASSIGN_OR_RETURN(int64_t any, transport_->AllReduceMax(elastic_aside_.empty() ? 0 : 1));
    elastic_ = any != 0;
  }

  if (records_raw.empty()) {
    const std::vector<uint8_t> blob = TopologyBlob(lane);
    MEMENTO_ASSIGN_OR_RETURN(records_raw, transport_->Allgather(blob.data(), blob.size()));
  }
  std::vector<RankRecord> records;
  gathered_catalogs_.clear();
  for (size_t i = 0; i < records_raw.size(); ++i) {
    const std::vector<uint8_t>& raw = records_raw[i];
    uint64_t drawn = 0;
    uint32_t n = 0;
    constexpr size_t kHead = sizeof(drawn) + sizeof(n);
    if (raw.size() >= kHead) {
      std::memcpy(&drawn, raw.data(), sizeof(drawn));
      std::memcpy(&n, raw.data() + sizeof(drawn), sizeof(n));
    }
    if (raw.size() < kHead || raw.size() - kHead < n) {
      return Status::Corruption("rank " + std::to_string(i) + "'s topology record is cut short");
    }
    // The run's lineage: rank 0's draw, unless this Checkpointer continues a run.
    if (i == 0) lineage_ = continued_ && continued_->lineage != 0 ? continued_->lineage : drawn;
    const auto begin = raw.begin() + kHead;
    MEMENTO_ASSIGN_OR_RETURN(RankRecord r,
                             wire::DecodeRankRecord(std::vector<uint8_t>(begin, begin + n)));
    records.push_back(std::move(r));
    gathered_catalogs_.emplace_back(begin + n, raw.end());
  }
  MEMENTO_ASSIGN_OR_RETURN(ProtectionLayout protection,
                           ProtectionLayout::Build(config_.scheme, records, rank, EntryBytes()));
  protection_.emplace(std::move(protection));
  return Status::Ok();
}

std::vector<uint8_t> Checkpointer::Impl::TopologyBlob(int lane) const {
  // What a surviving store of this rank says about the topology it was
  // written for (node index, node count); see protection_layout.h.
  RankRecord record;
  record.identity = node_;
  record.lane = lane;
  for (const auto& e : entries_) record.shard_bytes += e.bytes;
  record.entries = static_cast<uint32_t>(entries_.size());
  {
    StoreId old_id{config_.job, node_, static_cast<uint32_t>(lane)};
    auto old = NodeStore::Attach(old_id, ShmSegment::Access::kReadOnly);
    if (old.ok()) {
      const auto& regions = old->layout().regions;
      if (!regions.empty() && regions[0].kind == RegionKind::kShard) {
        record.old_index = static_cast<int32_t>(regions[0].owner_node);
      }
      const int topo = old->layout().Find("topology");
      if (topo >= 0 && regions[topo].kind == RegionKind::kParity) {
        record.old_nodes = regions[topo].owner_node;
        record.old_lanes = regions[topo].owner_lane;
      }
    }
  }
  // This rank's entries ride along (GatherCatalogs), and its draw of the
  // run's lineage (rank 0's is taken): the lineage, the record's length, the
  // record, the catalog.
  const std::vector<uint8_t> rec = wire::EncodeRankRecord(record);
  const std::vector<uint8_t> cat = EncodeOwnCatalog(lane);
  const uint64_t draw = DrawLineage();
  const uint32_t length = static_cast<uint32_t>(rec.size());
  std::vector<uint8_t> blob(sizeof(draw) + sizeof(length));
  std::memcpy(blob.data(), &draw, sizeof(draw));
  std::memcpy(blob.data() + sizeof(draw), &length, sizeof(length));
  blob.insert(blob.end(), rec.begin(), rec.end());
  blob.insert(blob.end(), cat.begin(), cat.end());
  return blob;
}

Status Checkpointer::Impl::SetAsideOtherTopology(int nodes, int lanes, int lane) {
  // Set aside by an earlier elastic relaunch whose restore did not finish:
  // still the newest memory of the old topology.
  const std::string prefix = NodeStore::JobPrefix(config_.job);
  MEMENTO_ASSIGN_OR_RETURN(std::vector<std::string> names, ShmSegment::List(prefix));
  for (const std::string& name : names) {
    if (!NodeStore::IsElasticAside(name)) continue;
    auto old = NodeStore::AttachAside(name);
    if (!old.ok() || old->id().job != config_.job || old->id().node != node_) continue;
    if (placement::ServingLane(static_cast<int>(old->id().local_rank), lanes) != lane) continue;
    elastic_aside_.push_back(name);
  }
  // This node's stores of another topology: every lane this rank serves.
  for (int old_lane = lane; old_lane < 4096; old_lane += lanes) {
    StoreId id{config_.job, node_, static_cast<uint32_t>(old_lane)};
    auto old = NodeStore::Attach(id, ShmSegment::Access::kReadOnly);
    if (!old.ok()) {
      if (old_lane >= lanes) break;  // the old lanes end here
      continue;
    }
    const int topo = old->layout().Find("topology");
    int old_nodes = 0, old_lanes = 0;
    if (topo >= 0) {
      old_nodes = static_cast<int>(old->layout().regions[topo].owner_node);
      old_lanes = static_cast<int>(old->layout().regions[topo].owner_lane);
    } else if (!old->catalog().empty()) {
      auto catalog = wire::DecodeJobCatalog(old->catalog());
      if (catalog.ok()) {
        old_nodes = catalog->nodes;
        old_lanes = catalog->lanes;
      }
    }
    if (old_nodes == 0 || (old_nodes == nodes && old_lanes == lanes)) continue;
    old = NodeStore();  // unmap before the rename
    MEMENTO_ASSIGN_OR_RETURN(std::string aside, NodeStore::SetAsideForElastic(id));
    elastic_aside_.push_back(aside);
  }
  return Status::Ok();
}

std::vector<uint8_t> Checkpointer::Impl::EncodeOwnCatalog(int lane) const {
  placement::RankCatalog mine;
  mine.node = 0;  // the receivers know it (GatherCatalogs)
  mine.lane = lane;
  for (const auto& e : entries_) {
    mine.entries.push_back(
        {e.name,
         e.bytes,
         {e.layout.dtype, e.layout.global_shape, e.layout.shape, e.layout.offsets}});
  }
  return wire::EncodeRankCatalog(mine);
}

Status Checkpointer::Impl::GatherCatalogs(int lane) {
  const std::vector<std::vector<uint8_t>> all = std::move(gathered_catalogs_);
  gathered_catalogs_.clear();
  const ProtectionLayout& pl = *protection_;
  new_catalogs_.assign(static_cast<size_t>(pl.num_nodes()) * pl.lanes(), {});
  for (int node = 0; node < pl.num_nodes(); ++node) {
    for (int l = 0; l < pl.lanes(); ++l) {
      MEMENTO_ASSIGN_OR_RETURN(placement::RankCatalog rc,
                               wire::DecodeRankCatalog(all.at(pl.rank_of(node, l))));
      rc.node = node;
      rc.lane = l;
      new_catalogs_[static_cast<size_t>(node) * pl.lanes() + l] = std::move(rc);
    }
  }
  // What this store records: the topology, and the entries of every rank
  // whose bytes it holds (its own, and the owners of its replicas and parity).
  wire::JobCatalog catalog;
  catalog.scheme = config_.scheme;
  catalog.nodes = pl.num_nodes();
  catalog.lanes = pl.lanes();
  for (int node = 0; node < pl.num_nodes(); ++node) {
    for (int l = 0; l < pl.lanes(); ++l) {
      catalog.shard_bytes.push_back(pl.shard_bytes(node, l));
      catalog.entry_count.push_back(pl.entry_count(node, l));
    }
  }
  std::set<int> owners{pl.node()};
  if (pl.protects()) {
    for (int owner : pl.SealOwners()) owners.insert(owner);
  }
  for (int owner : owners) {
    catalog.ranks.push_back(new_catalogs_[static_cast<size_t>(owner) * pl.lanes() + lane]);
  }
  store_catalog_ = wire::EncodeJobCatalog(catalog);
  return Status::Ok();
}

}  // namespace memento::runtime
