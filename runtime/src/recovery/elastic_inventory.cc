// ElasticRestorer, steps 1-3 (elastic_restorer.h): the inventory of the set-aside
// stores, the plans over the old topology and the new one, and the check of every
// region the restore will read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <set>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/placement/topology.h"
#include "recovery/elastic_restorer.h"
#include "recovery/inventory.h"
#include "recovery/report_text.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The protection layout of the old job as old rank (node, lane) saw it,
// rebuilt from a store's catalog: node indices are the old ones, world ranks
// are node-major.
Result<ProtectionLayout> OldLayout(const wire::JobCatalog& c, int node, int lane,
                                   const std::vector<uint64_t>& entry_bytes) {
  std::vector<RankRecord> records;
  for (int n = 0; n < c.nodes; ++n) {
    char id[32];
    std::snprintf(id, sizeof(id), "old-node-%08d", n);
    for (int l = 0; l < c.lanes; ++l) {
      RankRecord r;
      r.identity = id;
      r.lane = l;
      r.old_index = n;
      r.shard_bytes = c.shard_bytes.at(static_cast<size_t>(n) * c.lanes + l);
      r.entries = c.entry_count.at(static_cast<size_t>(n) * c.lanes + l);
      records.push_back(std::move(r));
    }
  }
  return ProtectionLayout::Build(c.scheme, records, node * c.lanes + lane, entry_bytes);
}

}  // namespace

// ---- 1. inventory --------------------------------------------------------------------------

Result<std::unique_ptr<ElasticRestorer::OldStore>> ElasticRestorer::OpenOld(
    const std::string& name) {
  MEMENTO_ASSIGN_OR_RETURN(NodeStore store, NodeStore::AttachAside(name));
  auto catalog = wire::DecodeJobCatalog(store.catalog());
  const auto& regions = store.layout().regions;
  if (!catalog.ok()) {
    return Status::FailedPrecondition(
        name + ": no job catalog (written by an older memento?): " + catalog.status().ToString());
  }
  if (regions.empty() || regions[0].kind != RegionKind::kShard) {
    return Status::FailedPrecondition(name +
                                      ": its first region is not a shard entry, so the "
                                      "node and lane it belonged to are unknown");
  }
  auto old = std::make_unique<OldStore>();
  old->node = static_cast<int>(regions[0].owner_node);
  old->lane = static_cast<int>(regions[0].owner_lane);
  if (old->node >= catalog->nodes || old->lane >= catalog->lanes) {
    return Status::Corruption(name + ": its shard is outside the topology it records");
  }
  const uint32_t count =
      catalog->entry_count[static_cast<size_t>(old->node) * catalog->lanes + old->lane];
  if (count > regions.size()) return Status::Corruption(name + ": fewer regions than entries");
  StoreLayout rebuilt;
  std::vector<uint64_t> bytes;
  for (uint32_t i = 0; i < count; ++i) {
    rebuilt.regions.push_back(regions[i]);
    bytes.push_back(regions[i].capacity);
  }
  MEMENTO_ASSIGN_OR_RETURN(ProtectionLayout layout,
                           OldLayout(*catalog, old->node, old->lane, bytes));
  // The held regions' indices must be the ones the store was made with.
  if (layout.protects()) layout.ExtendStoreLayout(&rebuilt);
  bool same = rebuilt.regions.size() == regions.size();
  for (size_t i = 0; same && i < regions.size(); ++i) {
    same = rebuilt.regions[i].kind == regions[i].kind && rebuilt.regions[i].name == regions[i].name;
  }
  if (!same) return Status::Corruption(name + ": its regions do not match the topology it records");
  old->name = name;
  old->store = std::move(store);
  old->layout.emplace(std::move(layout));
  return old;
}

Status ElasticRestorer::OpenAside() {
  for (const std::string& name : parts_.aside) {
    auto old = OpenOld(name);
    if (old.ok()) {
      mine_.push_back(std::move(old).value());
    } else {
      report_.notes.push_back(old.status().ToString());  // its node counts as lost
    }
  }
  return Status::Ok();
}

Status ElasticRestorer::TakeInventory() {
  wire::ElasticInventory mine;
  if (parts_.remote != nullptr) {
    auto complete = parts_.remote->ListComplete();
    if (!complete.ok()) report_.notes.push_back("remote: " + complete.status().ToString());
    for (uint64_t v : complete.ok() ? *complete : std::vector<uint64_t>()) {
      auto manifest = parts_.remote->ReadManifest(v);
      if (!manifest.ok()) continue;  // gone meanwhile
      mine.remote.remote_complete.push_back(v);
      mine.remote.remote_lineage.push_back(manifest->lineage);
    }
  }
  for (const auto& old : mine_) {
    mine.stores.push_back({old->node, old->lane, old->name, old->store.catalog(),
                           StoreItems(old->store, *old->layout, &report_.notes)});
  }
  const std::vector<uint8_t> blob = wire::EncodeElasticInventory(mine);
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(blob.data(), blob.size()));
  std::vector<wire::ElasticInventory> theirs;
  for (size_t r = 0; r < all.size(); ++r) {
    MEMENTO_ASSIGN_OR_RETURN(wire::ElasticInventory inv, wire::DecodeElasticInventory(all[r]));
    theirs.push_back(std::move(inv));
  }
  std::vector<const wire::Inventory*> remote, items;
  for (const wire::ElasticInventory& inv : theirs) {
    remote.push_back(&inv.remote);
    for (const wire::ElasticStoreRecord& s : inv.stores) items.push_back(&s.items);
  }
  const LineageChoice choice = ChooseNewestLineage(remote, items);
  MEMENTO_RETURN_IF_ERROR(CheckRemoteListingsAgree(choice, report_.notes));
  // Only the newest run's stores give the old topology, who serves which old
  // rank and the catalogs: a store an older run left under this job id (of
  // another topology, maybe) is passed over, and its node counts as lost.
  old_node_of_new_.assign(pl_.num_nodes(), -1);
  uint64_t passed_over = 0;
  for (size_t r = 0; r < theirs.size(); ++r) {
    for (wire::ElasticStoreRecord& s : theirs[r].stores) {
      const auto& lineages = s.items.item_lineage;
      if (!choice.newest ||
          std::find(lineages.begin(), lineages.end(), *choice.newest) == lineages.end()) {
        ++passed_over;
        continue;
      }
      MEMENTO_RETURN_IF_ERROR(AbsorbStore(static_cast<int>(r), &s));
    }
  }
  if (passed_over > 0) {
    report_.notes.push_back(std::to_string(passed_over) +
                            " old node store(s) hold no version of the newest run under this "
                            "job id and are passed over");
  }
  return KeepNewestLineage(theirs, choice);
}

Status ElasticRestorer::AbsorbStore(int rank, wire::ElasticStoreRecord* s) {
  MEMENTO_ASSIGN_OR_RETURN(wire::JobCatalog jc, wire::DecodeJobCatalog(s->catalog));
  if (!old_pl_) {
    MEMENTO_RETURN_IF_ERROR(AdoptTopology(jc));
  } else if (jc.nodes != old_nodes_ || jc.lanes != old_lanes_ || jc.scheme != old_scheme_) {
    return Status::FailedPrecondition(
        "elastic restore: the surviving node stores were written by jobs of different "
        "topologies (" +
        std::to_string(jc.nodes) + "x" + std::to_string(jc.lanes) + " " + jc.scheme + " and " +
        std::to_string(old_nodes_) + "x" + std::to_string(old_lanes_) + " " + old_scheme_ +
        "); remove the stale ones with `memento clean`");
  }
  if (s->node < 0 || s->node >= old_nodes_ || s->lane < 0 || s->lane >= old_lanes_) {
    return Status::Corruption("elastic inventory: old rank out of range");
  }
  OldRank& o = old_ranks_[static_cast<size_t>(s->node) * old_lanes_ + s->lane];
  o.server = rank;
  o.name = s->name;
  for (placement::RankCatalog& rc : jc.ranks) {
    if (rc.node < 0 || rc.node >= old_nodes_ || rc.lane < 0 || rc.lane >= old_lanes_) continue;
    OldRank& owner = old_ranks_[static_cast<size_t>(rc.node) * old_lanes_ + rc.lane];
    if (!owner.has_catalog) {
      owner.catalog = std::move(rc);
      owner.has_catalog = true;
    }
  }
  // The new node of this rank was old node s->node.
  for (int n = 0; n < pl_.num_nodes(); ++n) {
    for (int l = 0; l < pl_.lanes(); ++l) {
      if (pl_.rank_of(n, l) == rank) old_node_of_new_[n] = s->node;
    }
  }
  return Status::Ok();
}

Status ElasticRestorer::KeepNewestLineage(const std::vector<wire::ElasticInventory>& theirs,
                                          const LineageChoice& choice) {
  if (!choice.newest)
    return Status::NotFound("nothing to restore: no old store and no remote version");
  lineage_ = *choice.newest;
  for (const auto& [v, l] : choice.remote) {
    if (l == lineage_) input_.remote_versions.insert(v);
  }
  committed_seen_ = !input_.remote_versions.empty();
  for (const wire::ElasticInventory& inv : theirs) {
    for (const wire::ElasticStoreRecord& s : inv.stores) {
      committed_seen_ = committed_seen_ || wire::HoldsCommitted(s.items, lineage_);
    }
  }
  if (!old_pl_) {
    MEMENTO_RETURN_IF_ERROR(AllOk(*parts_.transport, RemoteOnlyTopology(),
                                  Status::Unavailable("elastic restore: reading the remote "
                                                      "version's files failed on another rank")));
  }
  std::vector<bool> alive(old_nodes_, false);
  for (const wire::ElasticInventory& inv : theirs) {
    for (const wire::ElasticStoreRecord& s : inv.stores) {
      for (size_t i = 0; i < s.items.items.size(); ++i) {
        if (s.items.item_lineage[i] != lineage_) continue;
        input_.inventory.push_back(s.items.items[i]);
        alive[s.node] = true;
      }
    }
  }
  for (int n = 0; n < old_nodes_; ++n) {
    if (!alive[n]) input_.failed_nodes.push_back(n);
  }
  input_.new_num_nodes = old_nodes_;
  report_.lost_nodes = input_.failed_nodes;
  return Status::Ok();
}

Status ElasticRestorer::AdoptTopology(const wire::JobCatalog& c) {
  old_scheme_ = c.scheme;
  old_nodes_ = c.nodes;
  old_lanes_ = c.lanes;
  old_ranks_.assign(static_cast<size_t>(old_nodes_) * old_lanes_, {});
  MEMENTO_ASSIGN_OR_RETURN(ProtectionLayout layout, OldLayout(c, 0, 0, {}));
  old_pl_.emplace(std::move(layout));
  return Status::Ok();
}

Status ElasticRestorer::RemoteOnlyTopology() {
  // No store of the old job survives: it is the newest remote version's
  // ranks, one per node, under no scheme.
  if (parts_.remote == nullptr || input_.remote_versions.empty()) {
    return Status::NotFound("nothing to restore: no old store and no remote version");
  }
  const uint64_t version = *input_.remote_versions.rbegin();
  MEMENTO_ASSIGN_OR_RETURN(RemoteManifest manifest, parts_.remote->ReadManifest(version));
  wire::JobCatalog c;
  c.scheme = "none";
  c.nodes = manifest.world_size;
  c.lanes = 1;
  for (int r = 0; r < manifest.world_size; ++r) {
    MEMENTO_ASSIGN_OR_RETURN(auto entries, parts_.remote->ListEntries(version, r));
    uint64_t bytes = 0;
    for (const auto& e : entries) bytes += e.bytes;
    c.shard_bytes.push_back(bytes);
    c.entry_count.push_back(static_cast<uint32_t>(entries.size()));
  }
  return AdoptTopology(c);
}

// ---- 2 + 3. plan, verify -------------------------------------------------------------------

Status ElasticRestorer::FillRemoteCatalogs(const placement::RecoveryPlan& plan) {
  // The old ranks' files are found by their world rank in the old topology:
  // a remote version written by another number of ranks (before an earlier
  // elastic restore of the same run) holds other slices under those numbers.
  const bool from_remote = std::any_of(
      plan.shards.begin(), plan.shards.end(),
      [](const placement::ShardSource& s) { return s.kind == placement::SourceKind::kRemote; });
  if (from_remote && parts_.remote != nullptr) {
    MEMENTO_ASSIGN_OR_RETURN(RemoteManifest manifest, parts_.remote->ReadManifest(plan.version));
    if (manifest.world_size != old_nodes_ * old_lanes_) {
      return Status::FailedPrecondition(
          "elastic restore: remote version " + std::to_string(plan.version) + " was written by " +
          std::to_string(manifest.world_size) + " ranks, the surviving node stores by " +
          std::to_string(old_nodes_) + "x" + std::to_string(old_lanes_) +
          ": their slices cannot be combined");
    }
  }
  for (const placement::ShardSource& s : plan.shards) {
    OldRank& o = old_ranks_.at(static_cast<size_t>(s.node) * old_lanes_ + s.lane);
    if (o.has_catalog || s.kind != placement::SourceKind::kRemote || parts_.remote == nullptr) {
      continue;
    }
    // The old job's world ranks are node-major (memento launch, mpirun by slot).
    MEMENTO_ASSIGN_OR_RETURN(
        auto entries, parts_.remote->ListEntries(plan.version, s.node * old_lanes_ + s.lane));
    o.catalog.node = s.node;
    o.catalog.lane = s.lane;
    o.catalog.entries.clear();
    for (const RemoteEntryInfo& e : entries) {
      o.catalog.entries.push_back(
          {e.name,
           e.bytes,
           {e.layout.dtype, e.layout.global_shape, e.layout.shape, e.layout.offsets}});
    }
    o.has_catalog = true;
  }
  return Status::Ok();
}

Result<std::pair<placement::RecoveryPlan, placement::ElasticPlan>> ElasticRestorer::PlanVerified() {
  MEMENTO_ASSIGN_OR_RETURN(auto topology, placement::Topology::Uniform(old_nodes_, old_lanes_));
  for (;;) {
    auto tp = Clock::now();
    auto planned = placement::PlanRecovery(topology, old_pl_->groups(), input_);
    if (!planned.ok()) {
      if (planned.status().code() != StatusCode::kUnrecoverable) return planned.status();
      return NothingRestorable(committed_seen_, planned.status().message(), report_.notes);
    }
    MEMENTO_RETURN_IF_ERROR(AllOk(
        *parts_.transport, FillRemoteCatalogs(*planned),
        Status::Unavailable("elastic restore: listing the remote files failed on another rank")));
    placement::ElasticInput ein;
    ein.old_nodes = old_nodes_;
    ein.old_lanes = old_lanes_;
    for (int n = 0; n < old_nodes_; ++n) {
      for (int l = 0; l < old_lanes_; ++l) {
        const OldRank& o = Old(n, l);
        if (!o.has_catalog) {
          return NothingRestorable(committed_seen_,
                                   "elastic restore: no surviving store and no remote file "
                                   "records the entries of " +
                                       OldRankName(n, l),
                                   {});
        }
        placement::RankCatalog rc = o.catalog;
        rc.node = n;
        rc.lane = l;
        ein.old_ranks.push_back(std::move(rc));
      }
    }
    ein.old_plan = *planned;
    ein.new_nodes = pl_.num_nodes();
    ein.new_lanes = pl_.lanes();
    ein.new_ranks = *parts_.new_catalogs;
    ein.old_node_of_new = old_node_of_new_;
    MEMENTO_ASSIGN_OR_RETURN(placement::ElasticPlan eplan, placement::PlanElastic(ein));
    report_.stats.plan_s += SecondsSince(tp);
    auto tv = Clock::now();
    MEMENTO_ASSIGN_OR_RETURN(bool changed, VerifyReads(*planned, eplan));
    report_.stats.inventory_s += SecondsSince(tv);
    if (!changed) return std::make_pair(std::move(planned).value(), std::move(eplan));
  }
}

ElasticRestorer::OldStore* ElasticRestorer::StoreOf(int old_node, int old_lane) {
  for (auto& s : mine_) {
    if (s->node == old_node && s->lane == old_lane) return s.get();
  }
  for (auto& s : peers_) {
    if (s->node == old_node && s->lane == old_lane) return s.get();
  }
  // Served by another lane of this node: its shared memory is readable here too.
  const OldRank& o = Old(old_node, old_lane);
  if (o.server < 0) return nullptr;
  bool same_node = false;
  for (int l = 0; l < pl_.lanes(); ++l)
    same_node = same_node || pl_.rank_of(pl_.node(), l) == o.server;
  if (!same_node) return nullptr;
  auto old = OpenOld(o.name);
  if (!old.ok()) return nullptr;
  peers_.push_back(std::move(old).value());
  return peers_.back().get();
}

Result<bool> ElasticRestorer::VerifyReads(const placement::RecoveryPlan& plan,
                                          const placement::ElasticPlan& eplan) {
  const int me = parts_.transport->rank();
  std::vector<placement::InventoryItem> bad;
  std::set<std::tuple<int, int, int>> checked;  // (old node, old lane, region) of the holder
  auto check = [&](int holder, int lane, int region, placement::InventoryItem item) {
    if (!checked.insert({holder, lane, region}).second) return;
    OldStore* s = StoreOf(holder, lane);
    Status ok = Status::NotFound(VersionText(plan.version) + " is not in the store of " +
                                 OldRankName(holder, lane));
    if (s != nullptr) {
      if (auto slot = s->store.FindVersion(plan.version, lineage_)) {
        ok = s->store.VerifyRegion(*slot, region);
      }
    }
    if (ok.ok()) return;
    report_.notes.push_back(ok.ToString());
    item.version = plan.version;
    item.node = holder;
    item.lane = lane;
    bad.push_back(item);
  };
  for (const placement::ElasticTarget& t : eplan.targets) {
    const int target = NewRank(t.node, t.lane);
    for (const auto& pieces : t.pieces) {
      for (const placement::ElasticPiece& p : pieces) {
        if (p.source != placement::PieceSource::kShard &&
            p.source != placement::PieceSource::kReplica) {
          continue;
        }
        const int reader = p.serve_node == t.node ? target : NewRank(p.serve_node, p.serve_lane);
        if (reader != me) continue;
        placement::InventoryItem item;
        item.owner = p.old_node;
        if (p.source == placement::PieceSource::kShard) {
          item.kind = placement::ItemKind::kShard;
          check(p.old_node, p.old_lane, p.old_entry, item);
        } else {
          const int holder = old_node_of_new_.at(p.serve_node);
          OldStore* s = StoreOf(holder, p.old_lane);
          item.kind = placement::ItemKind::kReplica;
          const int region = s ? s->layout->ReplicaRegion(p.old_node) : -1;
          check(holder, p.old_lane, region, item);
        }
      }
    }
  }
  // Decode inputs of the shards that have a decode host.
  for (const placement::StripeDecode& dec : plan.decodes) {
    bool hosted = false;
    for (const placement::StripeRow& rb : dec.rebuilt) {
      for (const placement::DecodeHost& h : eplan.decode_hosts) {
        hosted = hosted || (h.old_node == rb.node && h.old_lane == dec.lane);
      }
    }
    if (!hosted) continue;
    for (const placement::StripeRow& in : dec.inputs) {
      if (Old(in.node, dec.lane).server != me) continue;
      OldStore* s = StoreOf(in.node, dec.lane);
      placement::InventoryItem item;
      if (in.parity) {
        item.kind = placement::ItemKind::kParity;
        item.owner = -1;  // as the inventory's parity items: a parity row has no owner
        item.stripe = dec.stripe;
        item.row = in.row;
        check(in.node, dec.lane, s ? s->layout->ParityRegion(dec.stripe, in.row) : -1, item);
      } else {
        item.kind = placement::ItemKind::kShard;
        item.owner = in.node;
        const int entries = static_cast<int>(old_pl_->entry_count(in.node, dec.lane));
        for (int e = 0; e < entries; ++e) check(in.node, dec.lane, e, item);
      }
    }
  }
  const std::vector<uint8_t> mine = wire::EncodeLocatedBadItems(bad);
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(mine.data(), mine.size()));
  bool changed = false;
  for (const auto& blob : all) {
    MEMENTO_ASSIGN_OR_RETURN(auto items, wire::DecodeLocatedBadItems(blob));
    for (const placement::InventoryItem& b : items) {
      for (placement::InventoryItem& it : input_.inventory) {
        const bool same =
            it.node == b.node && it.lane == b.lane && it.version == b.version &&
            it.kind == b.kind && it.owner == b.owner &&
            (it.kind != placement::ItemKind::kParity || (it.stripe == b.stripe && it.row == b.row));
        if (same && it.crc_ok) {
          it.crc_ok = false;
          changed = true;
        }
      }
    }
  }
  return changed;
}

}  // namespace memento::runtime
