#include "recovery/recovery_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/log.h"
#include "recovery/inventory.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string V(uint64_t version) { return "v" + std::to_string(version); }

}  // namespace

RecoveryExecutor::RecoveryExecutor(Parts parts) : parts_(std::move(parts)), pl_(*parts_.layout) {}

Status RecoveryExecutor::RunHook(Stage stage, uint64_t version) const {
  if (!parts_.hook) return Status::Ok();
  return parts_.hook(stage, version);
}

Result<RestoreReport> RecoveryExecutor::Run() {
  auto t0 = Clock::now();
  MEMENTO_RETURN_IF_ERROR(TakeInventory());
  report_.stats.inventory_s = SecondsSince(t0);
  for (int attempt = 0;; ++attempt) {
    MEMENTO_ASSIGN_OR_RETURN(plan_, PlanVerified());  // its errors name the problem already
    report_.plan_json = plan_.ToJson();
    report_.stats.plan_read_bytes_per_node = plan_.read_bytes_per_node;
    MEMENTO_RETURN_IF_ERROR(RunHook(Stage::kRecover, plan_.version));
    t0 = Clock::now();
    MEMENTO_RETURN_IF_ERROR(GatherEntrySeals());
    const Status local = TransferAndRestore();
    MEMENTO_ASSIGN_OR_RETURN(Agreement agreed, Agree(local));
    report_.stats.transfer_s += SecondsSince(t0);
    if (agreed.everyone) {
      report_.version = plan_.version;
      break;
    }
    if (!local.ok()) report_.notes.push_back(V(plan_.version) + " from memory failed: " + local.ToString());
    // Every failure an end-to-end mismatch: the inputs of the mismatched
    // shards are bad copies; plan again without them.
    if (!agreed.other_failure && MarkMismatchedSources(agreed, attempt)) continue;
    // A remote version that failed its checks on some rank is no candidate
    // any more; the planner picks the next one (memory or remote).
    if (DropRemoteVersionOfPlan()) continue;
    MEMENTO_RETURN_IF_ERROR(FallBackToRemote());
    break;
  }
  report_.stats.bytes_sent = sent_.load();
  report_.stats.bytes_received = received_;
  const std::vector<RegisteredEntry>& entries = parts_.io->entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    report_.entries.push_back({entries[i].name, entries[i].bytes, crcs_[i], source_});
  }
  t0 = Clock::now();
  if (parts_.background) {
    // Before the re-protect: its collectives run on the commit thread from now on.
    MEMENTO_RETURN_IF_ERROR(GatherByteCounts());
    MEMENTO_RETURN_IF_ERROR(Reprotect());
  } else {
    MEMENTO_RETURN_IF_ERROR(Reprotect());
    MEMENTO_RETURN_IF_ERROR(GatherByteCounts());
  }
  report_.stats.reprotect_s = SecondsSince(t0);
  report_.protection = parts_.background && report_.stats.reprotect_mode != "none"
                           ? "re-protecting"
                           : "protected";
  Log(LogLevel::kInfo, report_.ToString() + " [" + report_.source_detail + "; lost nodes " +
                           std::to_string(report_.lost_nodes.size()) + "; sent " +
                           std::to_string(report_.stats.bytes_sent) + " B, received " +
                           std::to_string(report_.stats.bytes_received) + " B]");
  Log(LogLevel::kDebug, "recovery report " + report_.ToJson());
  return std::move(report_);
}

// ---- 1. inventory --------------------------------------------------------------------------

Status RecoveryExecutor::TakeInventory() {
  const std::vector<uint8_t> blob = wire::EncodeInventory(MyInventory());
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(blob.data(), blob.size()));
  std::vector<wire::Inventory> theirs(all.size());
  for (int node = 0; node < pl_.num_nodes(); ++node) {
    for (int lane = 0; lane < pl_.lanes(); ++lane) {
      const int rank = pl_.rank_of(node, lane);
      MEMENTO_ASSIGN_OR_RETURN(theirs.at(rank), wire::DecodeInventory(all.at(rank), node, lane));
    }
  }
  ChooseLineage(theirs);
  return Status::Ok();
}

wire::Inventory RecoveryExecutor::MyInventory() {
  wire::Inventory mine = StoreItems(*parts_.store, pl_, &report_.notes);
  for (const auto& [version, lineage] : parts_.io->CompleteRemoteVersions(&report_.notes)) {
    mine.remote_complete.push_back(version);
    mine.remote_lineage.push_back(lineage);
  }
  return mine;
}

void RecoveryExecutor::ChooseLineage(const std::vector<wire::Inventory>& theirs) {
  std::vector<const wire::Inventory*> all;
  for (const wire::Inventory& inv : theirs) all.push_back(&inv);
  const LineageChoice choice = ChooseNewestLineage(all, all);
  const uint64_t newest = choice.newest.value_or(0);
  // Only the newest run's versions are candidates (lineage ids grow with the
  // time a run started); another run's are passed over, whatever their numbers.
  lineage_ = newest;
  if (choice.newest) *parts_.lineage = newest;
  uint64_t passed_over = 0;
  bool other_run = false;
  input_.new_num_nodes = pl_.num_nodes();
  for (int node = 0; node < pl_.num_nodes(); ++node) {
    bool reported = false;
    for (int lane = 0; lane < pl_.lanes(); ++lane) {
      const wire::Inventory& inv = theirs.at(pl_.rank_of(node, lane));
      for (size_t i = 0; i < inv.items.size(); ++i) {
        if (inv.item_lineage[i] != newest) {
          other_run = true;
          passed_over = std::max(passed_over, inv.items[i].version);
          continue;
        }
        input_.inventory.push_back(inv.items[i]);
        reported = true;
      }
    }
    if (!reported) input_.failed_nodes.push_back(node);
  }
  for (const auto& [v, l] : choice.remote) {
    if (l == newest) {
      input_.remote_versions.insert(v);
    } else {
      other_run = true;
      passed_over = std::max(passed_over, v);
    }
  }
  if (other_run) {
    report_.notes.push_back("versions of an older run under this job id (up to v" +
                            std::to_string(passed_over) + ") are not restored");
  }
  report_.lost_nodes = input_.failed_nodes;
}

// ---- 2 + 3. plan, verify -------------------------------------------------------------------

Result<placement::RecoveryPlan> RecoveryExecutor::PlanVerified() {
  MEMENTO_ASSIGN_OR_RETURN(auto topology,
                           placement::Topology::Uniform(pl_.num_nodes(), pl_.lanes()));
  for (;;) {
    auto tp = Clock::now();
    auto planned = placement::PlanRecovery(topology, pl_.groups(), input_);
    report_.stats.plan_s += SecondsSince(tp);
    if (!planned.ok()) {
      if (planned.status().code() != StatusCode::kUnrecoverable) return planned.status();
      std::string why = "nothing to restore: " + planned.status().message();
      for (const auto& n : report_.notes) why += "; " + n;
      return Status::NotFound(why);
    }
    auto tv = Clock::now();
    MEMENTO_ASSIGN_OR_RETURN(bool changed, VerifyPlanReads(*planned));
    report_.stats.inventory_s += SecondsSince(tv);
    if (!changed) return planned;
  }
}

bool RecoveryExecutor::RegionOk(int slot, int region) {
  auto [it, fresh] = region_ok_.try_emplace({slot, region}, false);
  if (fresh) {
    Status s = parts_.store->VerifyRegion(slot, region);
    it->second = s.ok();
    if (!s.ok()) report_.notes.push_back(s.ToString());
  }
  return it->second;
}

bool RecoveryExecutor::PlanReadsMine(const placement::RecoveryPlan& plan,
                                     const placement::HeldItem& item) const {
  const int node = pl_.node(), lane = pl_.lane();
  if (item.kind == placement::ItemKind::kReplica) {
    for (const placement::ShardSource& s : plan.shards) {
      if (s.kind == placement::SourceKind::kReplica && s.from_node == node && s.lane == lane &&
          s.node == item.owner) {
        return true;
      }
    }
    return false;
  }
  for (const placement::StripeDecode& dec : plan.decodes) {
    if (dec.lane != lane || dec.stripe != item.stripe) continue;
    for (const placement::StripeRow& in : dec.inputs) {
      if (in.parity && in.node == node && in.row == item.row) return true;
    }
  }
  return false;
}

Result<bool> RecoveryExecutor::VerifyPlanReads(const placement::RecoveryPlan& plan) {
  // This rank's shard of the plan's version, and what the plan reads from it.
  std::vector<placement::InventoryItem> bad;
  auto add = [&](placement::ItemKind kind, int owner, int stripe, int row) {
    placement::InventoryItem item;
    item.version = plan.version;
    item.kind = kind;
    item.owner = owner;
    item.stripe = stripe;
    item.row = row;
    bad.push_back(item);
  };
  if (const std::optional<int> slot = parts_.store->FindVersion(plan.version, lineage_)) {
    bool shard_ok = true;
    const size_t entries = parts_.io->entries().size();
    for (size_t i = 0; i < entries && shard_ok; ++i) shard_ok = RegionOk(*slot, static_cast<int>(i));
    if (!shard_ok) add(placement::ItemKind::kShard, pl_.node(), -1, -1);
    for (const HeldRegion& h : pl_.held()) {
      if (PlanReadsMine(plan, h.item) && !RegionOk(*slot, h.region)) {
        add(h.item.kind, h.item.owner, h.item.stripe, h.item.row);
      }
    }
  }
  // Every rank's failures, so that every rank plans again alike.
  const std::vector<uint8_t> blob = wire::EncodeBadItems(bad);
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(blob.data(), blob.size()));
  bool changed = false;
  for (int node = 0; node < pl_.num_nodes(); ++node) {
    for (int lane = 0; lane < pl_.lanes(); ++lane) {
      MEMENTO_ASSIGN_OR_RETURN(
          auto items, wire::DecodeBadItems(all.at(pl_.rank_of(node, lane)), node, lane));
      for (const placement::InventoryItem& it : items) changed = MarkBad(it) || changed;
    }
  }
  return changed;
}

bool RecoveryExecutor::MarkBad(const placement::InventoryItem& b) {
  bool changed = false;
  for (placement::InventoryItem& it : input_.inventory) {
    if (it.node != b.node || it.lane != b.lane || it.version != b.version || it.kind != b.kind ||
        !it.crc_ok) {
      continue;
    }
    const bool same = b.kind == placement::ItemKind::kParity
                          ? it.stripe == b.stripe && it.row == b.row
                          : it.owner == b.owner;
    if (same) {
      it.crc_ok = false;
      changed = true;
    }
  }
  return changed;
}

// ---- 4. transfer ---------------------------------------------------------------------------

Status RecoveryExecutor::GatherEntrySeals() {
  // The seals of `version` this rank can vouch for: its own verified entries,
  // the verified seals regions it keeps for peers.
  seals_of_.clear();
  std::vector<uint8_t> mine;
  NodeStore* store = parts_.store;
  if (const std::optional<int> slot = store->FindVersion(plan_.version, lineage_)) {
    std::vector<EntrySeal> own;
    const size_t entries = parts_.io->entries().size();
    for (size_t i = 0; i < entries; ++i) {
      auto view = store->ReadRegion(*slot, static_cast<int>(i));
      if (!view.ok()) break;
      own.push_back({view->length, view->crc});
    }
    if (own.size() == entries) {
      wire::AppendSealsRecord({pl_.node(), pl_.lane(), EncodeEntrySeals(own)}, &mine);
    }
    AppendHeldSeals(*store, *slot, pl_, pl_.lane(), &mine);
  }
  MEMENTO_ASSIGN_OR_RETURN(seals_of_, ExchangeSeals(parts_.transport, mine));
  return Status::Ok();
}

Status RecoveryExecutor::TransferAndRestore() {
  mine_ = nullptr;
  all_local_ = true;
  transfers_.clear();
  for (const placement::ShardSource& s : plan_.shards) {
    if (s.node == pl_.node() && s.lane == pl_.lane()) mine_ = &s;
    if (s.kind != placement::SourceKind::kLocal) all_local_ = false;
    if (s.kind == placement::SourceKind::kReplica) {
      transfers_.push_back(
          {pl_.rank_of(s.from_node, s.lane), pl_.rank_of(s.node, s.lane), s.node});
    }
  }
  MEMENTO_CHECK(mine_ != nullptr);
  crcs_.clear();
  restored_shard_.clear();
  mismatch_ = false;
  source_ = RestoreSource::kLocalMemory;
  my_slot_ = parts_.store->FindVersion(plan_.version, lineage_);
  // Every rank takes part in every exchange, whatever failed before.
  std::map<size_t, std::vector<uint8_t>> received;
  Status got = ExchangeReplicas(&received);
  Status decoded = RunDecodes();
  if (got.ok()) got = decoded.WithContext("restore: decode");
  if (!got.ok()) return got;
  return RestoreMyShard(&received);
}

Status RecoveryExecutor::SendReplica(size_t i) {
  const Transfer& t = transfers_[i];
  const int tag = wire::RecoverTag(2 * i);
  // Its replica of the owner's shard, straight from the slot, with the crc32c
  // it was sealed with (verified against these bytes for this plan).
  Result<RegionView> view = Status::NotFound(V(plan_.version) + " not in this store");
  if (my_slot_) {
    const int region = pl_.ReplicaRegion(t.owner);
    view = region < 0 ? Result<RegionView>(Status::Internal("no replica region for node " +
                                                            std::to_string(t.owner)))
                      : parts_.store->ReadRegion(*my_slot_, region);
  }
  wire::PayloadHeader h;
  h.ok = view.ok() ? 1 : 0;
  h.length = view.ok() ? view->length : 0;
  h.crc = view.ok() ? view->crc : 0;
  Status w = parts_.transport->Send(t.dst, tag, &h, sizeof(h));
  // Pieces of one chunk: the MPI count limit is 2 GiB, a shard may be larger.
  const uint64_t piece = parts_.chunk_bytes;
  for (uint64_t off = 0; w.ok() && h.ok && off < h.length; off += piece) {
    const uint64_t n = std::min(piece, h.length - off);
    w = parts_.transport->Send(t.dst, tag + 1, view->data + off, n);
    if (w.ok()) sent_ += n;
  }
  return view.ok() ? w : view.status();
}

Status RecoveryExecutor::ReceiveReplica(size_t i, std::vector<uint8_t>* buf) {
  const Transfer& t = transfers_[i];
  const int tag = wire::RecoverTag(2 * i);
  const std::string from = "rank " + std::to_string(t.src);
  wire::PayloadHeader h;
  auto n = parts_.transport->Recv(t.src, tag, &h, sizeof(h));
  if (!n.ok()) return n.status().WithContext("restore: header from " + from);
  if (!h.ok) return Status::Unavailable("restore: " + from + " cannot serve its part");
  buf->resize(h.length);
  erasure::Crc32cStream crc;
  const uint64_t piece = parts_.chunk_bytes;
  for (uint64_t off = 0; off < h.length; off += piece) {
    const uint64_t want = std::min(piece, h.length - off);
    MEMENTO_ASSIGN_OR_RETURN(size_t got, parts_.transport->Recv(t.src, tag + 1, buf->data() + off, want));
    if (got != want) {
      return Status::Corruption("restore: piece of " + std::to_string(got) + " bytes from " +
                                from + ", expected " + std::to_string(want));
    }
    crc.Update(buf->data() + off, want);
  }
  if (crc.value() != h.crc) {
    return Status::Corruption("restore: part from " + from + " fails its crc32c");
  }
  return Status::Ok();
}

Status RecoveryExecutor::ExchangeReplicas(std::map<size_t, std::vector<uint8_t>>* received) {
  const int me = parts_.transport->rank();
  std::vector<std::thread> senders;
  std::vector<Status> send_status(transfers_.size());
  for (size_t i = 0; i < transfers_.size(); ++i) {
    if (transfers_[i].src == me) senders.emplace_back([&, i] { send_status[i] = SendReplica(i); });
  }
  Status got = Status::Ok();
  for (size_t i = 0; i < transfers_.size(); ++i) {  // in list order
    if (transfers_[i].dst != me) continue;
    std::vector<uint8_t> buf;
    Status s = ReceiveReplica(i, &buf);
    if (!s.ok()) {
      if (got.ok()) got = s;
      continue;
    }
    received_ += buf.size();
    (*received)[i] = std::move(buf);
  }
  for (auto& th : senders) th.join();
  for (const Status& s : send_status) {
    if (!s.ok() && got.ok()) got = s.WithContext("restore: sending");
  }
  return got;
}

Status RecoveryExecutor::RunDecodes() {
  chains_.clear();
  chain_info_.clear();
  chain_rows_.clear();
  MEMENTO_RETURN_IF_ERROR(BuildDecodeChains(plan_, pl_, &chains_, &chain_info_));
  // Input rows: a survivor's data row is a piece of its shard, a parity row
  // its parity region.
  auto reader = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len,
                    uint8_t* dst) -> Status {
    if (!my_slot_) return Status::NotFound(V(plan_.version) + " not in this store");
    const placement::StripeDecode& dec = plan_.decodes[chain_info_[c].decode];
    const placement::StripeRow& in = dec.inputs[term.row_id];
    if (!in.parity) {
      return parts_.io->ReadRange(*my_slot_, nullptr,
                                  static_cast<uint64_t>(in.row) * dec.piece_bytes + off, len, dst);
    }
    const int region = pl_.ParityRegion(dec.stripe, in.row);
    if (region < 0) return Status::Internal("no parity region for the plan's row");
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, parts_.store->ReadRegion(*my_slot_, region));
    if (off + len > view.length) return Status::Corruption("parity region too short");
    std::memcpy(dst, view.data + off, len);
    return Status::Ok();
  };
  ReduceBytes bytes;
  Status s = RunReduceChains(parts_.transport, chains_,
                             static_cast<int>(2 * (transfers_.size() % wire::kRecoverTagSpan)),
                             parts_.chunk_bytes, reader, &chain_rows_, &bytes);
  sent_ += bytes.sent;
  received_ += bytes.received;
  return s;
}

Status RecoveryExecutor::CheckAndScatter(const std::vector<uint8_t>& shard) {
  auto it = seals_of_.find({pl_.node(), pl_.lane()});
  if (it == seals_of_.end()) {
    return Status::Corruption("no entry seals of this shard survive: cannot check it end to end");
  }
  Status s = parts_.io->VerifyAgainstSeals(shard, it->second);
  if (!s.ok()) {
    mismatch_ = true;
    return s;
  }
  return parts_.io->ScatterToBuffers(shard, &crcs_);
}

Status RecoveryExecutor::RestoreMyShard(std::map<size_t, std::vector<uint8_t>>* received) {
  const uint64_t my_shard_bytes = pl_.shard_bytes(pl_.node(), pl_.lane());
  switch (mine_->kind) {
    case placement::SourceKind::kLocal:
      report_.source_detail = "local";
      if (!my_slot_) return Status::NotFound("local copy vanished");
      return parts_.io->CopySlotToBuffers(*my_slot_, plan_.version, &crcs_);
    case placement::SourceKind::kRemote:
      source_ = RestoreSource::kRemote;
      report_.source_detail = "remote";
      return parts_.io->ReadRemoteToBuffers(plan_.version, &crcs_);
    case placement::SourceKind::kReplica: {
      source_ = RestoreSource::kReplica;
      report_.source_detail = "replica from node " + std::to_string(mine_->from_node);
      for (auto& [i, buf] : *received) {
        if (transfers_[i].owner != pl_.node()) continue;
        restored_shard_ = std::move(buf);  // kept for the re-protect; not copied
        if (restored_shard_.size() != my_shard_bytes) {
          return Status::Corruption("replica of " + std::to_string(restored_shard_.size()) +
                                    " bytes, shard has " + std::to_string(my_shard_bytes));
        }
        return CheckAndScatter(restored_shard_);
      }
      return Status::Corruption("no replica received");
    }
    case placement::SourceKind::kDecode: {
      source_ = RestoreSource::kDecode;
      report_.source_detail = "decode of " + std::to_string(mine_->decodes.size()) + " stripes";
      restored_shard_.assign(my_shard_bytes, 0);
      for (size_t c = 0; c < chains_.size(); ++c) {
        if (chains_[c].dst_rank != parts_.transport->rank()) continue;
        const placement::StripeDecode& dec = plan_.decodes[chain_info_[c].decode];
        const placement::StripeRow& rb = dec.rebuilt[chain_info_[c].rebuilt];
        const uint64_t at = static_cast<uint64_t>(rb.row) * dec.piece_bytes;
        MEMENTO_CHECK_LE(at + chain_rows_[c].size(), restored_shard_.size());
        std::memcpy(restored_shard_.data() + at, chain_rows_[c].data(), chain_rows_[c].size());
      }
      return CheckAndScatter(restored_shard_);
    }
  }
  return Status::Internal("unknown shard source");
}

// ---- 5. agree ------------------------------------------------------------------------------

Result<RecoveryExecutor::Agreement> RecoveryExecutor::Agree(const Status& local) {
  const uint8_t outcome = local.ok() ? 0 : (mismatch_ ? 1 : 2);
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(&outcome, 1));
  Agreement agreed;
  agreed.everyone = true;
  for (const auto& o : all) {
    if (o.size() != 1) return Status::Corruption("restore outcome record");
    agreed.everyone = agreed.everyone && o[0] == 0;
    agreed.other_failure = agreed.other_failure || o[0] > 1;
    agreed.outcomes.push_back(o[0]);
  }
  return agreed;
}

bool RecoveryExecutor::MarkMismatchedSources(const Agreement& agreed, int attempt) {
  const uint64_t version = plan_.version;
  bool changed = false;
  for (const placement::ShardSource& s : plan_.shards) {
    if (agreed.outcomes.at(pl_.rank_of(s.node, s.lane)) != 1) continue;
    std::string from;
    placement::InventoryItem bad;
    bad.version = version;
    bad.lane = s.lane;
    if (s.kind == placement::SourceKind::kReplica) {
      bad.node = s.from_node;
      bad.kind = placement::ItemKind::kReplica;
      bad.owner = s.node;
      changed = MarkBad(bad) || changed;
      from = "replica from node " + std::to_string(s.from_node);
    } else if (s.kind == placement::SourceKind::kDecode) {
      // Data rows are survivors' shards, checked against their own seals;
      // only parity rows can carry what the region crc missed.
      for (int d : s.decodes) {
        const placement::StripeDecode& dec = plan_.decodes.at(d);
        for (const placement::StripeRow& in : dec.inputs) {
          if (!in.parity) continue;
          bad.node = in.node;
          bad.lane = dec.lane;
          bad.kind = placement::ItemKind::kParity;
          bad.stripe = dec.stripe;
          bad.row = in.row;
          changed = MarkBad(bad) || changed;
        }
      }
      from = "decode";
    }
    report_.notes.push_back(V(version) + ": node " + std::to_string(s.node) + " lane " +
                            std::to_string(s.lane) + " rebuilt by " + from +
                            " fails the end-to-end check; its sources are marked bad and the "
                            "restore is planned again (attempt " +
                            std::to_string(attempt + 2) + ")");
  }
  return changed;
}

bool RecoveryExecutor::DropRemoteVersionOfPlan() {
  bool reads_remote = false;
  for (const placement::ShardSource& s : plan_.shards) {
    reads_remote = reads_remote || s.kind == placement::SourceKind::kRemote;
  }
  if (!reads_remote || input_.remote_versions.erase(plan_.version) == 0) return false;
  report_.notes.push_back("remote " + V(plan_.version) +
                          " failed its checks; trying the next complete version");
  return true;
}

Status RecoveryExecutor::FallBackToRemote() {
  Status elastic = Status::Ok();
  for (auto v = input_.remote_versions.rbegin(); v != input_.remote_versions.rend(); ++v) {
    Status r = parts_.io->ReadRemoteToBuffers(*v, &crcs_);
    MEMENTO_ASSIGN_OR_RETURN(bool ok, parts_.transport->AllTrue(r.ok()));
    if (ok) {
      report_.version = *v;
      source_ = RestoreSource::kRemote;
      report_.source_detail = "remote (fallback)";
      all_local_ = false;
      fell_back_ = true;
      return Status::Ok();
    }
    if (r.code() == StatusCode::kElasticRestoreNeeded && elastic.ok()) elastic = r;
    report_.notes.push_back("remote " + V(*v) + ": " +
                            (r.ok() ? std::string("failed on another rank") : r.ToString()));
  }
  if (!elastic.ok()) return elastic;
  std::string why = "restore of " + V(plan_.version) + " failed";
  for (const auto& n : report_.notes) why += "; " + n;
  return Status::Unavailable(why);
}

// ---- 6. re-protect -------------------------------------------------------------------------

Status RecoveryExecutor::Reprotect() {
  const uint64_t version = report_.version;
  if (all_local_ && plan_.reprotect.empty() && !fell_back_) {
    (void)parts_.store->MarkCommitted(*my_slot_, version);
    parts_.slots->SetCommitted(*my_slot_);
    return Status::Ok();
  }
  ReduceBytes bytes;
  if (!fell_back_ && MinimalReprotectPossible(plan_)) {
    if (parts_.background) {
      DeferMinimal();
      return Status::Ok();
    }
    std::string why;
    MEMENTO_ASSIGN_OR_RETURN(bool agreed, MinimalAgreed(-1, &bytes, &why));
    report_.stats.reprotect_bytes_sent = bytes.sent;
    report_.stats.reprotect_bytes_received = bytes.received;
    if (agreed) {
      report_.stats.reprotect_mode = "minimal";
      return Status::Ok();
    }
    report_.notes.push_back("minimal re-protect failed (" + why +
                            "), re-protecting the whole version");
  }
  Status s = parts_.reprotector->Full(version, &bytes, parts_.background);
  report_.stats.reprotect_mode = parts_.background ? "full, background" : "full";
  report_.stats.reprotect_bytes_sent = bytes.sent;
  report_.stats.reprotect_bytes_received = bytes.received;
  if (!s.ok()) report_.notes.push_back("not re-protected: " + s.ToString());
  return Status::Ok();
}

bool RecoveryExecutor::MyNodeLost() const {
  const auto& failed = plan_.failed_nodes;
  return std::find(failed.begin(), failed.end(), pl_.node()) != failed.end();
}

int RecoveryExecutor::ReprotectTagBase() const {
  return static_cast<int>((2 * transfers_.size() + chains_.size()) % wire::kRecoverTagSpan);
}

Result<bool> RecoveryExecutor::MinimalAgreed(int fresh_slot, ReduceBytes* bytes,
                                             std::string* why) {
  const uint64_t version = report_.version;
  int slot = -1;
  Status s = parts_.reprotector->Minimal(plan_,
                                         restored_shard_.empty() ? nullptr : &restored_shard_,
                                         seals_of_, ReprotectTagBase(), bytes, &slot, fresh_slot);
  if (s.ok()) s = RunHook(Stage::kReprotect, version);
  MEMENTO_ASSIGN_OR_RETURN(bool agreed, parts_.transport->AllTrue(s.ok()));
  if (agreed) {
    Status c = parts_.store->MarkCommitted(slot, version);
    if (!c.ok()) {
      const std::string note = "re-protected " + V(version) + " not marked committed: " + c.ToString();
      report_.notes.push_back(note);
      Log(LogLevel::kWarn, note);
    }
    parts_.slots->SetCommitted(slot);
    return true;
  }
  if (slot >= 0 && MyNodeLost()) (void)parts_.store->Invalidate(slot);
  *why = s.ok() ? std::string("on another rank") : s.ToString();
  return false;
}

void RecoveryExecutor::DeferMinimal() {
  const uint64_t version = report_.version;
  if (MyNodeLost()) {
    // The slot is chosen now, on the application thread, so that a Save
    // issued meanwhile takes another one.
    fresh_slot_ = parts_.slots->Acquire();
    parts_.slots->Pin(fresh_slot_);
  } else if (const std::optional<int> held = parts_.store->FindVersion(version, *parts_.lineage)) {
    // The survivor's copy is what the chains read: a Save must not rewrite it.
    parts_.slots->SetCommitted(*held);
    parts_.slots->Pin(*held);
    pinned_slot_ = *held;
  }
  deferred_ = true;
  report_.stats.reprotect_mode = "minimal, background";
  report_.notes.push_back("what the lost nodes held of " + V(version) +
                          " is rebuilt in the background (ProtectionState(); Wait())");
}

Result<bool> RecoveryExecutor::RunDeferredReprotect() {
  MEMENTO_CHECK(deferred_);
  const uint64_t version = report_.version;
  ReduceBytes bytes;
  std::string why;
  Result<bool> agreed = MinimalAgreed(fresh_slot_, &bytes, &why);
  for (int pinned : {fresh_slot_, pinned_slot_}) {
    if (pinned >= 0) parts_.slots->Unpin(pinned);
  }
  fresh_slot_ = pinned_slot_ = -1;
  deferred_ = false;
  std::vector<uint8_t>().swap(restored_shard_);  // the lost node's copy: no longer needed
  if (!agreed.ok()) return agreed.status().WithContext("background re-protect of " + V(version));
  if (*agreed) {
    Log(LogLevel::kInfo, V(version) + " protected again in the background (" +
                             std::to_string(bytes.received) + " B received here)");
  } else {
    Log(LogLevel::kWarn, V(version) + " not re-protected in the background (" + why +
                             "); the next Save protects the job again");
  }
  return agreed;
}

// ---- 7. byte counts ------------------------------------------------------------------------

Status RecoveryExecutor::GatherByteCounts() {
  RestoreStats& st = report_.stats;
  const std::vector<uint8_t> mine =
      wire::EncodeCounters({st.bytes_received, st.reprotect_bytes_received});
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(mine.data(), mine.size()));
  st.bytes_received_per_node.assign(pl_.num_nodes(), 0);
  st.reprotect_bytes_received_per_node.assign(pl_.num_nodes(), 0);
  for (int node = 0; node < pl_.num_nodes(); ++node) {
    for (int lane = 0; lane < pl_.lanes(); ++lane) {
      MEMENTO_ASSIGN_OR_RETURN(auto theirs,
                               wire::DecodeCounters(all.at(pl_.rank_of(node, lane)), 2));
      st.bytes_received_per_node[node] += theirs[0];
      st.reprotect_bytes_received_per_node[node] += theirs[1];
    }
  }
  return Status::Ok();
}

}  // namespace memento::runtime
