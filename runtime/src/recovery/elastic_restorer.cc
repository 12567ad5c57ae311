#include "recovery/elastic_restorer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/placement/topology.h"
#include "memento/runtime/log.h"
#include "protect/reduce_chain.h"
#include "recovery/inventory.h"
#include "recovery/partial_decode.h"
#include "recovery/shard_io.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string V(uint64_t version) { return "v" + std::to_string(version); }
std::string OldRankName(int node, int lane) {
  return "old rank (node " + std::to_string(node) + ", lane " + std::to_string(lane) + ")";
}

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

ElasticRestorer::ElasticRestorer(Parts parts) : parts_(std::move(parts)), pl_(*parts_.layout) {}

Status ElasticRestorer::RunHook(Stage stage, uint64_t version) const {
  if (!parts_.hook) return Status::Ok();
  return parts_.hook(stage, version);
}

Result<RestoreReport> ElasticRestorer::Run() {
  report_.elastic = true;
  auto t0 = Clock::now();
  MEMENTO_RETURN_IF_ERROR(OpenAside());
  MEMENTO_RETURN_IF_ERROR(TakeInventory());
  report_.stats.inventory_s = SecondsSince(t0);
  MEMENTO_ASSIGN_OR_RETURN(auto plans, PlanVerified());
  plan_ = std::move(plans.first);
  eplan_ = std::move(plans.second);
  report_.plan_json = plan_.ToJson();
  report_.elastic_plan = eplan_.Summary();
  MEMENTO_RETURN_IF_ERROR(RunHook(Stage::kRecover, plan_.version));
  t0 = Clock::now();
  Status local = GatherSeals();
  // Every rank takes part in every exchange, whatever failed before.
  Status decoded = RunDecodes();
  if (local.ok()) local = decoded.WithContext("elastic restore: decode");
  Status moved = MovePieces();
  if (local.ok()) local = moved;
  MEMENTO_RETURN_IF_ERROR(Finish(local));
  report_.stats.transfer_s = SecondsSince(t0);
  report_.version = plan_.version;
  *parts_.lineage = lineage_;
  Log(LogLevel::kInfo, "elastic restore: " + report_.elastic_plan + " [sent " +
                           std::to_string(sent_) + " B, received " + std::to_string(received_) +
                           " B]");
  return std::move(report_);
}

// ---- 1. inventory --------------------------------------------------------------------------

Result<std::unique_ptr<ElasticRestorer::OldStore>> ElasticRestorer::OpenOld(
    const std::string& name) {
  MEMENTO_ASSIGN_OR_RETURN(NodeStore store, NodeStore::AttachAside(name));
  auto catalog = wire::DecodeJobCatalog(store.catalog());
  const auto& regions = store.layout().regions;
  if (!catalog.ok()) {
    return Status::FailedPrecondition(name + ": no job catalog (written by an older memento?): " +
                                      catalog.status().ToString());
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
        "topologies (" + std::to_string(jc.nodes) + "x" + std::to_string(jc.lanes) + " " +
        jc.scheme + " and " + std::to_string(old_nodes_) + "x" + std::to_string(old_lanes_) + " " +
        old_scheme_ + "); remove the stale ones with `memento clean`");
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
  if (!choice.newest) return Status::NotFound("nothing to restore: no old store and no remote version");
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
    MEMENTO_ASSIGN_OR_RETURN(auto entries,
                             parts_.remote->ListEntries(plan.version, s.node * old_lanes_ + s.lane));
    o.catalog.node = s.node;
    o.catalog.lane = s.lane;
    o.catalog.entries.clear();
    for (const RemoteEntryInfo& e : entries) {
      o.catalog.entries.push_back({e.name, e.bytes,
                                   {e.layout.dtype, e.layout.global_shape, e.layout.shape,
                                    e.layout.offsets}});
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
  for (int l = 0; l < pl_.lanes(); ++l) same_node = same_node || pl_.rank_of(pl_.node(), l) == o.server;
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
    Status ok = Status::NotFound(V(plan.version) + " is not in the store of " +
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
        const int entries =
            static_cast<int>(old_pl_->entry_count(in.node, dec.lane));
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
        const bool same = it.node == b.node && it.lane == b.lane && it.version == b.version &&
                          it.kind == b.kind && it.owner == b.owner &&
                          (it.kind != placement::ItemKind::kParity ||
                           (it.stripe == b.stripe && it.row == b.row));
        if (same && it.crc_ok) {
          it.crc_ok = false;
          changed = true;
        }
      }
    }
  }
  return changed;
}

// ---- 4. decode -----------------------------------------------------------------------------

Status ElasticRestorer::GatherSeals() {
  if (eplan_.decode_hosts.empty()) return Status::Ok();
  std::vector<uint8_t> mine;
  for (const auto& s : mine_) {
    auto slot = s->store.FindVersion(plan_.version, lineage_);
    if (!slot || !s->layout->protects()) continue;
    AppendHeldSeals(s->store, *slot, *s->layout, s->lane, &mine);
  }
  MEMENTO_ASSIGN_OR_RETURN(seals_of_, ExchangeSeals(parts_.transport, mine));
  return Status::Ok();
}

Status ElasticRestorer::RunDecodes() {
  if (eplan_.decode_hosts.empty()) return Status::Ok();
  const int me = parts_.transport->rank();
  std::vector<ReduceChain> all_chains, chains;
  std::vector<DecodeChainInfo> all_info, info;
  MEMENTO_RETURN_IF_ERROR(BuildDecodeChains(plan_, *old_pl_, &all_chains, &all_info));
  for (size_t c = 0; c < all_chains.size(); ++c) {
    const placement::StripeDecode& dec = plan_.decodes[all_info[c].decode];
    const placement::StripeRow& rb = dec.rebuilt[all_info[c].rebuilt];
    const placement::DecodeHost* host = nullptr;
    for (const auto& h : eplan_.decode_hosts) {
      if (h.old_node == rb.node && h.old_lane == dec.lane) host = &h;
    }
    if (host == nullptr) continue;  // no new slice needs this shard
    ReduceChain chain = all_chains[c];
    chain.dst_rank = NewRank(host->node, host->lane);
    for (ReduceTerm& t : chain.terms) {
      const int server = Old(t.rank / old_lanes_, t.rank % old_lanes_).server;
      if (server < 0) return Status::Internal("a decode input has no serving rank");
      t.rank = server;
    }
    // A host that holds an input folds it in last and hands the row to itself.
    auto at = std::find_if(chain.terms.begin(), chain.terms.end(),
                           [&](const ReduceTerm& t) { return t.rank == chain.dst_rank; });
    if (at != chain.terms.end()) std::rotate(at, at + 1, chain.terms.end());
    chains.push_back(std::move(chain));
    info.push_back(all_info[c]);
  }
  // The entry sizes of every old shard this rank reads data rows of.
  std::map<std::pair<int, int>, std::vector<uint64_t>> entry_bytes;
  for (const auto& s : mine_) {
    for (const auto& e : Old(s->node, s->lane).catalog.entries) {
      entry_bytes[{s->node, s->lane}].push_back(e.bytes);
    }
  }
  auto reader = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len,
                    uint8_t* dst) -> Status {
    const placement::StripeDecode& dec = plan_.decodes[info[c].decode];
    const placement::StripeRow& in = dec.inputs[term.row_id];
    OldStore* s = StoreOf(in.node, dec.lane);
    if (s == nullptr) return Status::Internal("decode input not on this rank");
    auto slot = s->store.FindVersion(plan_.version, lineage_);
    if (!slot) return Status::NotFound(V(plan_.version) + " not in " + s->name);
    if (!in.parity) {
      return ReadShardRange(s->store, *slot, entry_bytes.at({in.node, dec.lane}),
                            static_cast<uint64_t>(in.row) * dec.piece_bytes + off, len, dst);
    }
    const int region = s->layout->ParityRegion(dec.stripe, in.row);
    if (region < 0) return Status::Internal("no parity region for the plan's row");
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, s->store.ReadRegion(*slot, region));
    if (off + len > view.length) return Status::Corruption("parity region too short");
    std::memcpy(dst, view.data + off, len);
    return Status::Ok();
  };
  std::vector<std::vector<uint8_t>> rows;
  ReduceBytes bytes;
  Status s = RunReduceChains(parts_.transport, chains, 0, parts_.chunk_bytes, reader, &rows, &bytes);
  sent_ += bytes.sent;
  received_ += bytes.received;
  MEMENTO_RETURN_IF_ERROR(s);
  for (size_t c = 0; c < chains.size(); ++c) {
    if (chains[c].dst_rank != me) continue;
    const placement::StripeDecode& dec = plan_.decodes[info[c].decode];
    const placement::StripeRow& rb = dec.rebuilt[info[c].rebuilt];
    std::vector<uint8_t>& shard = decoded_[{rb.node, dec.lane}];
    shard.resize(old_pl_->shard_bytes(rb.node, dec.lane));
    const uint64_t at = static_cast<uint64_t>(rb.row) * dec.piece_bytes;
    MEMENTO_CHECK_LE(at + rows[c].size(), shard.size());
    std::memcpy(shard.data() + at, rows[c].data(), rows[c].size());
  }
  // End to end: every decoded shard against its owner's entry seals.
  for (const auto& [key, shard] : decoded_) {
    auto it = seals_of_.find(key);
    if (it == seals_of_.end()) {
      return Status::Corruption("no entry seals of " + OldRankName(key.first, key.second) +
                                " survive: cannot check its decoded shard");
    }
    const placement::RankCatalog& rc = Old(key.first, key.second).catalog;
    std::vector<uint64_t> sizes;
    std::vector<std::string> names;
    for (const auto& e : rc.entries) {
      sizes.push_back(e.bytes);
      names.push_back(e.name);
    }
    MEMENTO_RETURN_IF_ERROR(VerifyShardAgainstSeals(shard, sizes, names, it->second)
                                .WithContext("decoded " + OldRankName(key.first, key.second)));
  }
  return Status::Ok();
}

// ---- 5. pieces -----------------------------------------------------------------------------

uint64_t ElasticRestorer::EntryOffset(int node, int lane, int entry) const {
  uint64_t at = 0;
  const auto& entries = Old(node, lane).catalog.entries;
  for (int i = 0; i < entry; ++i) at += entries.at(i).bytes;
  return at;
}

Result<const uint8_t*> ElasticRestorer::SourceOf(const placement::ElasticPiece& p) {
  const std::string who = OldRankName(p.old_node, p.old_lane);
  switch (p.source) {
    case placement::PieceSource::kShard:
    case placement::PieceSource::kReplica: {
      const bool shard = p.source == placement::PieceSource::kShard;
      const int holder = shard ? p.old_node : old_node_of_new_.at(p.serve_node);
      OldStore* s = StoreOf(holder, p.old_lane);
      if (s == nullptr) return Status::Internal("the store holding " + who + " is not here");
      auto slot = s->store.FindVersion(plan_.version, lineage_);
      if (!slot) return Status::NotFound(V(plan_.version) + " vanished from " + s->name);
      const int region = shard ? p.old_entry : s->layout->ReplicaRegion(p.old_node);
      if (region < 0) return Status::Internal("no replica region of " + who + " in " + s->name);
      MEMENTO_ASSIGN_OR_RETURN(RegionView view, s->store.ReadRegion(*slot, region));
      const uint64_t at = shard ? 0 : EntryOffset(p.old_node, p.old_lane, p.old_entry);
      const uint64_t need = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry).bytes;
      if (at + need > view.length) return Status::Corruption(s->name + ": region too short");
      return view.data + at;
    }
    case placement::PieceSource::kDecoded: {
      auto it = decoded_.find({p.old_node, p.old_lane});
      if (it == decoded_.end()) return Status::Internal(who + " was not decoded here");
      return it->second.data() + EntryOffset(p.old_node, p.old_lane, p.old_entry);
    }
    case placement::PieceSource::kRemote:
      break;
  }
  return Status::Internal("remote pieces are read by their target");
}

namespace {

// Calls fn(src_offset, dst_offset, length) for each run of piece `p` between
// its old slice `src` and the new slice `dst` of `bytes` bytes.
void RunsOf(const placement::ElasticPiece& p, const placement::CatalogEntry& src,
            const placement::CatalogEntry& dst,
            const std::function<void(uint64_t, uint64_t, uint64_t)>& fn) {
  uint64_t elem = 0;
  if (!dst.slice.opaque()) {
    auto e = placement::ElementBytes(dst.name, dst.slice, dst.bytes);
    elem = e.ok() ? *e : 0;
  }
  placement::ForEachRun(src.slice, dst.slice, p.offsets, p.shape, elem, dst.bytes, fn);
}

}  // namespace

Status ElasticRestorer::MovePieces() {
  const int me = parts_.transport->rank();
  const std::vector<RegisteredEntry>& entries = *parts_.entries;
  staging_.assign(entries.size(), {});
  dst_.assign(entries.size(), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].device()) {
      staging_[i].resize(entries[i].bytes);
      dst_[i] = staging_[i].data();
    } else {
      dst_[i] = entries[i].data;
    }
  }
  // Who serves each piece.
  std::map<std::pair<int, int>, int> host_rank;
  for (const auto& h : eplan_.decode_hosts) host_rank[{h.old_node, h.old_lane}] = NewRank(h.node, h.lane);
  pieces_.clear();
  for (const placement::ElasticTarget& t : eplan_.targets) {
    const int target = NewRank(t.node, t.lane);
    for (size_t e = 0; e < t.pieces.size(); ++e) {
      for (const placement::ElasticPiece& p : t.pieces[e]) {
        PieceRef ref{target, static_cast<int>(e), &p, target,
                     static_cast<size_t>(t.node) * pl_.lanes() + t.lane};
        if (p.source == placement::PieceSource::kDecoded) {
          ref.server = host_rank.at({p.old_node, p.old_lane});
        } else if (p.source != placement::PieceSource::kRemote && p.serve_node != t.node) {
          ref.server = NewRank(p.serve_node, p.serve_lane);
        }
        pieces_.push_back(ref);
      }
    }
  }
  std::map<int, std::vector<int>> outgoing, incoming;  // peer -> piece indices, in plan order
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const PieceRef& r = pieces_[i];
    if (r.server == r.target) continue;
    if (r.server == me) outgoing[r.target].push_back(static_cast<int>(i));
    if (r.target == me) incoming[r.server].push_back(static_cast<int>(i));
  }
  std::vector<std::thread> senders;
  std::vector<Status> send_status(outgoing.size());
  size_t k = 0;
  for (const auto& [to, list] : outgoing) {
    senders.emplace_back([this, &send_status, k, to = to, &list = list] {
      send_status[k] = SendStream(to, list);
    });
    ++k;
  }
  Status got = CopyLocalAndRemote();
  for (const auto& [from, list] : incoming) {
    Status s = ReceiveStream(from, list);
    if (got.ok() && !s.ok()) got = s;
  }
  for (auto& th : senders) th.join();
  for (const Status& s : send_status) {
    if (got.ok() && !s.ok()) got = s.WithContext("elastic restore: sending");
  }
  return got;
}

Status ElasticRestorer::SendStream(int to, const std::vector<int>& list) {
  // The runs, as source pointers; a source that cannot be read fails the stream.
  struct Run {
    const uint8_t* src;
    uint64_t len;
  };
  std::vector<Run> runs;
  uint64_t total = 0;
  Status bad;
  for (int i : list) {
    const PieceRef& r = pieces_[i];
    const placement::ElasticPiece& p = *r.piece;
    Result<const uint8_t*> base = SourceOf(p);
    if (!base.ok() && bad.ok()) bad = base.status();
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    const auto& dst = parts_.new_catalogs->at(r.catalog).entries.at(r.entry);
    RunsOf(p, src, dst, [&](uint64_t s_off, uint64_t, uint64_t len) {
      runs.push_back({base.ok() ? *base + s_off : nullptr, len});
      total += len;
    });
  }
  const uint64_t chunk = parts_.chunk_bytes;
  std::vector<uint8_t> buf(std::min(chunk, total));
  size_t run = 0;
  uint64_t in_run = 0;
  for (uint64_t off = 0; off < total; off += chunk) {
    const uint64_t len = std::min(chunk, total - off);
    wire::PayloadHeader h;
    h.ok = bad.ok() ? 1 : 0;
    h.length = len;
    if (h.ok) {
      uint64_t filled = 0;
      while (filled < len) {
        const uint64_t n = std::min(len - filled, runs[run].len - in_run);
        std::memcpy(buf.data() + filled, runs[run].src + in_run, n);
        filled += n;
        in_run += n;
        if (in_run == runs[run].len) {
          ++run;
          in_run = 0;
        }
      }
      h.crc = erasure::Crc32c(buf.data(), len);
    }
    MEMENTO_RETURN_IF_ERROR(parts_.transport->Send(to, wire::kTagElastic, &h, sizeof(h)));
    if (h.ok) {
      MEMENTO_RETURN_IF_ERROR(parts_.transport->Send(to, wire::kTagElastic, buf.data(), len));
      sent_ += len;
    }
  }
  return bad;
}

Status ElasticRestorer::ReceiveStream(int from, const std::vector<int>& list) {
  const int me = parts_.transport->rank();
  const placement::RankCatalog& mine = (*parts_.new_catalogs)
      .at(static_cast<size_t>(pl_.node()) * pl_.lanes() + pl_.lane());
  struct Run {
    uint8_t* dst;
    uint64_t len;
  };
  std::vector<Run> runs;
  uint64_t total = 0;
  for (int i : list) {
    const PieceRef& r = pieces_[i];
    MEMENTO_CHECK_EQ(r.target, me);
    const placement::ElasticPiece& p = *r.piece;
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    const auto& dst = mine.entries.at(r.entry);
    uint8_t* base = dst_[r.entry];
    RunsOf(p, src, dst, [&](uint64_t, uint64_t d_off, uint64_t len) {
      runs.push_back({base + d_off, len});
      total += len;
    });
  }
  const std::string who = "rank " + std::to_string(from);
  const uint64_t chunk = parts_.chunk_bytes;
  std::vector<uint8_t> buf(std::min(chunk, total));
  size_t run = 0;
  uint64_t in_run = 0;
  Status got;
  for (uint64_t off = 0; off < total; off += chunk) {
    const uint64_t len = std::min(chunk, total - off);
    wire::PayloadHeader h;
    auto n = parts_.transport->Recv(from, wire::kTagElastic, &h, sizeof(h));
    if (!n.ok()) return n.status().WithContext("elastic restore: from " + who);
    if (!h.ok || h.length != len) {
      if (got.ok()) got = Status::Unavailable("elastic restore: " + who + " cannot serve its pieces");
      if (!h.ok) continue;
    }
    MEMENTO_ASSIGN_OR_RETURN(size_t m, parts_.transport->Recv(from, wire::kTagElastic, buf.data(), buf.size()));
    received_ += m;
    if (m != len || erasure::Crc32c(buf.data(), len) != h.crc) {
      if (got.ok()) got = Status::Corruption("elastic restore: a chunk from " + who + " fails its crc32c");
      continue;
    }
    uint64_t used = 0;
    while (used < len) {
      const uint64_t k = std::min(len - used, runs[run].len - in_run);
      std::memcpy(runs[run].dst + in_run, buf.data() + used, k);
      used += k;
      in_run += k;
      if (in_run == runs[run].len) {
        ++run;
        in_run = 0;
      }
    }
  }
  return got;
}

Status ElasticRestorer::CopyLocalAndRemote() {
  const int me = parts_.transport->rank();
  const placement::RankCatalog& mine = (*parts_.new_catalogs)
      .at(static_cast<size_t>(pl_.node()) * pl_.lanes() + pl_.lane());
  // The remote entries this rank reads, (old node, lane, entry) -> where
  // their bytes go, each old rank's file read once for all of its entries (a
  // read passes over the whole file to check it). The entries stream through
  // a few MiB at a time, each run of bytes copied where it goes as it passes:
  // a rank that takes a slice of an old entry never holds the entry whole.
  struct Run {
    uint64_t from, len;  // in the old entry
    uint8_t* to;
  };
  struct Streamed {
    std::vector<Run> runs;  // sorted by `from`
    size_t next = 0;        // the first run not wholly behind the stream
  };
  std::map<std::tuple<int, int, int>, Streamed> remote;
  std::map<int, std::vector<RemoteEntryTarget>> by_file;  // old world rank -> its entries
  for (const PieceRef& r : pieces_) {
    const placement::ElasticPiece& p = *r.piece;
    if (r.target != me || r.server != me || p.source != placement::PieceSource::kRemote) continue;
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    if (parts_.remote == nullptr) return Status::NotFound("no remote tier for " + src.name);
    auto [it, added] = remote.try_emplace(std::make_tuple(p.old_node, p.old_lane, p.old_entry));
    Streamed* streamed = &it->second;
    uint8_t* out = dst_[r.entry];
    RunsOf(p, src, mine.entries.at(r.entry), [&](uint64_t s_off, uint64_t d_off, uint64_t len) {
      streamed->runs.push_back({s_off, len, out + d_off});
    });
    if (added) {
      RemoteEntryTarget target{src.name, nullptr, src.bytes, nullptr};
      target.sink = [streamed](uint64_t at, const uint8_t* bytes, uint64_t len) {
        std::vector<Run>& runs = streamed->runs;
        while (streamed->next < runs.size() &&
               runs[streamed->next].from + runs[streamed->next].len <= at) {
          ++streamed->next;
        }
        for (size_t i = streamed->next; i < runs.size() && runs[i].from < at + len; ++i) {
          const uint64_t lo = std::max(runs[i].from, at);
          const uint64_t hi = std::min(runs[i].from + runs[i].len, at + len);
          if (lo < hi) std::memcpy(runs[i].to + (lo - runs[i].from), bytes + (lo - at), hi - lo);
        }
      };
      by_file[p.old_node * old_lanes_ + p.old_lane].push_back(std::move(target));
    }
  }
  for (auto& [key, streamed] : remote) {
    std::sort(streamed.runs.begin(), streamed.runs.end(),
              [](const Run& a, const Run& b) { return a.from < b.from; });
  }
  for (const auto& [rank, targets] : by_file) {
    MEMENTO_RETURN_IF_ERROR(parts_.remote->ReadRankFile(plan_.version, rank, targets));
  }
  for (const PieceRef& r : pieces_) {
    if (r.target != me || r.server != me) continue;
    const placement::ElasticPiece& p = *r.piece;
    if (p.source == placement::PieceSource::kRemote) continue;  // streamed in place above
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    const auto& dst = mine.entries.at(r.entry);
    const uint8_t* base = nullptr;
    MEMENTO_ASSIGN_OR_RETURN(base, SourceOf(p));
    uint8_t* out = dst_[r.entry];
    RunsOf(p, src, dst, [&](uint64_t s_off, uint64_t d_off, uint64_t len) {
      std::memcpy(out + d_off, base + s_off, len);
    });
  }
  return Status::Ok();
}

// ---- 6. agree ------------------------------------------------------------------------------

Status ElasticRestorer::Finish(const Status& local) {
  const std::vector<RegisteredEntry>& entries = *parts_.entries;
  Status mine = local;
  std::vector<uint32_t> crcs(entries.size(), 0);
  if (mine.ok()) {
    for (size_t i = 0; i < entries.size() && mine.ok(); ++i) {
      crcs[i] = erasure::Crc32c(dst_[i], entries[i].bytes);
      if (entries[i].device()) {
        mine = CopyDeviceBytes(entries[i].data, dst_[i], entries[i].bytes, entries[i].gpu);
      }
    }
  }
  const uint8_t outcome = mine.ok() ? 0 : 1;
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(&outcome, 1));
  std::vector<int> failed;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != 1 || all[r][0] != 0) failed.push_back(static_cast<int>(r));
  }
  if (!mine.ok()) return mine.WithContext("elastic restore of " + V(plan_.version));
  if (!failed.empty()) {
    return Status::Unavailable("elastic restore of " + V(plan_.version) + " failed on rank " +
                               std::to_string(failed[0]) + " (of " +
                               std::to_string(failed.size()) + "); the old stores are kept");
  }
  // Where each entry came from: the farthest source among its pieces.
  const placement::ElasticTarget* target = nullptr;
  for (const auto& t : eplan_.targets) {
    if (t.node == pl_.node() && t.lane == pl_.lane()) target = &t;
  }
  MEMENTO_CHECK(target != nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    RestoreSource src = RestoreSource::kLocalMemory;
    for (const placement::ElasticPiece& p : target->pieces.at(i)) {
      RestoreSource s = RestoreSource::kLocalMemory;
      if (p.source == placement::PieceSource::kRemote) {
        s = RestoreSource::kRemote;
      } else if (p.source == placement::PieceSource::kDecoded) {
        s = RestoreSource::kDecode;
      } else if (p.serve_node != pl_.node()) {
        s = RestoreSource::kReplica;
      }
      auto rank = [](RestoreSource x) {
        switch (x) {
          case RestoreSource::kLocalMemory: return 0;
          case RestoreSource::kReplica: return 1;
          case RestoreSource::kDecode: return 2;
          case RestoreSource::kRemote: return 3;
        }
        return 0;
      };
      if (rank(s) > rank(src)) src = s;
    }
    report_.entries.push_back({entries[i].name, entries[i].bytes, crcs[i], src});
  }
  report_.source_detail = "elastic: " + report_.elastic_plan;
  report_.stats.bytes_sent = sent_;
  report_.stats.bytes_received = received_;
  report_.elastic_received_per_node = eplan_.received_bytes_per_node;
  report_.elastic_remote_per_node = eplan_.remote_bytes_per_node;
  report_.elastic_minimum_per_node = eplan_.minimum_bytes_per_node;
  report_.elastic_served_per_node = eplan_.served_bytes_per_node;
  return Status::Ok();
}

}  // namespace memento::runtime
