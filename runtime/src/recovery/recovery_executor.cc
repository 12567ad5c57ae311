#include "recovery/recovery_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/log.h"
#include "recovery/inventory.h"
#include "recovery/report_text.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Pieces of one replica transfer in flight at once where the transport
// tests transfers without blocking (MPI, in-process), all driven by one
// thread a side: a piece's completion latency overlaps the next pieces'
// transfer, and no other thread polls beside it. Elsewhere (transports
// without a non-blocking Test: Gloo, wrappers that do not forward it) one at
// a time: their receives happen inside Wait.
constexpr size_t kTransferWindow = 4;
// Tags of one transfer: its header, then its pieces, in order.
constexpr size_t TransferTags() { return 2; }
// Tag k of transfer i: k = 0 its header, 1 its pieces.
int TransferTag(size_t i, size_t k) { return wire::RecoverTag(TransferTags() * i + k); }

}  // namespace

RecoveryExecutor::RecoveryExecutor(Parts parts) : parts_(std::move(parts)), pl_(*parts_.layout) {}

RecoveryExecutor::~RecoveryExecutor() {
  // A restore that ended early (or a deferred re-protect that never ran)
  // gives back the slot its shard landed in.
  DropLanding();
  if (pinned_slot_ >= 0) parts_.slots->Unpin(pinned_slot_);
}

Status RecoveryExecutor::RunHook(Stage stage, uint64_t version) const {
  if (!parts_.hook) return Status::Ok();
  return parts_.hook(stage, version);
}

Result<RestoreReport> RecoveryExecutor::Run() {
  auto t0 = Clock::now();
  MEMENTO_RETURN_IF_ERROR(TakeInventory());
  report_.stats.inventory_s = SecondsSince(t0);
  std::vector<std::vector<uint8_t>> agreed_counters;  // from the votes that agreed
  for (int attempt = 0;; ++attempt) {
    MEMENTO_ASSIGN_OR_RETURN(plan_, Plan());  // its errors name the problem already
    report_.plan_json = plan_.ToJson();
    report_.stats.plan_read_bytes_per_node = plan_.read_bytes_per_node;
    MEMENTO_RETURN_IF_ERROR(RunHook(Stage::kRecover, plan_.version));
    t0 = Clock::now();
    MEMENTO_RETURN_IF_ERROR(GatherEntrySeals());
    const Status local = TransferAndRestore();
    wrote_buffers_ = true;
    MEMENTO_ASSIGN_OR_RETURN(Agreement agreed, Agree(local));
    report_.stats.transfer_s += SecondsSince(t0);
    if (agreed.everyone) {
      report_.version = plan_.version;
      agreed_counters = std::move(agreed.counters);
      break;
    }
    if (!local.ok()) {
      report_.notes.push_back("the restore of " + VersionText(plan_.version) +
                              " failed: " + local.ToString());
    }
    // A shard rebuilt somewhere cannot be checked (its owner's entry seals
    // are lost with every copy): this version's memory copies are passed
    // over; the planner takes the next version in memory, or remote.
    if (agreed.no_seals && !agreed.other_failure && DropMemoryVersionOfPlan()) continue;
    // Every failure an end-to-end mismatch: the inputs of the mismatched
    // shards are bad copies; plan again without them. When the copies sent
    // pass their holders' checks, the plan is run again once instead
    // (changed on the way).
    if (!agreed.other_failure) {
      MEMENTO_ASSIGN_OR_RETURN(std::set<ServedCopyId> bad_served, VerifyServedCopies(agreed));
      bool again = false;
      const bool marked = MarkMismatchedSources(agreed, bad_served, attempt, &again);
      ran_again_ = ran_again_ || again;
      if (marked || again) continue;
    }
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
    // Before the re-protect: its collectives run on the commit thread from
    // now on. Where the plan's first run was agreed, the counters came with
    // the votes (nothing was received since).
    if (!agreed_counters.empty()) {
      MEMENTO_RETURN_IF_ERROR(AddByteCounts(agreed_counters));
    } else {
      MEMENTO_RETURN_IF_ERROR(GatherByteCounts());
    }
    MEMENTO_RETURN_IF_ERROR(Reprotect());
  } else {
    MEMENTO_RETURN_IF_ERROR(Reprotect());
    MEMENTO_RETURN_IF_ERROR(GatherByteCounts());
  }
  report_.stats.reprotect_s = SecondsSince(t0);
  if (reprotect_failed_) {
    report_.protection = "unprotected";
  } else {
    report_.protection =
        parts_.background && report_.stats.reprotect_mode != "none" ? "re-protecting" : "protected";
  }
  Log(LogLevel::kInfo, report_.ToString() + " [" + report_.source_detail + "; lost nodes " +
                           std::to_string(report_.lost_nodes.size()) + "; sent " +
                           std::to_string(report_.stats.bytes_sent) + " B, received " +
                           std::to_string(report_.stats.bytes_received) + " B]");
  // The whole report as JSON is built only for a debug log (it costs more than
  // a small restore itself).
  if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, "recovery report " + report_.ToJson());
  return std::move(report_);
}

// ---- 1. inventory --------------------------------------------------------------------------
// (TakeInventory, MyInventory, ChooseLineage: executor_inventory.cc)

// ---- 2. plan --------------------------------------------------------------------------------

Result<placement::RecoveryPlan> RecoveryExecutor::Plan() {
  MEMENTO_ASSIGN_OR_RETURN(auto topology,
                           placement::Topology::Uniform(pl_.num_nodes(), pl_.lanes()));
  auto tp = Clock::now();
  auto planned = placement::PlanRecovery(topology, pl_.groups(), input_);
  report_.stats.plan_s += SecondsSince(tp);
  if (!planned.ok()) {
    if (planned.status().code() != StatusCode::kUnrecoverable) return planned.status();
    if (wrote_buffers_ && !committed_seen_) {
      // Not "nothing to restore" (a fresh start from the buffers as they
      // were): an attempt has written part of a version into them.
      std::string text =
          "no version can be restored, and an earlier attempt has written part "
          "of one into the registered buffers (do not train from them): " +
          planned.status().message();
      for (const std::string& n : report_.notes) text += "; " + n;
      return Status::Unrecoverable(text);
    }
    return NothingRestorable(committed_seen_, planned.status().message(), report_.notes);
  }
  return planned;
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

// ---- 3. transfer ---------------------------------------------------------------------------

// (SealsRecordsFor, GuessesCoverPlan, GatherEntrySeals: executor_inventory.cc)

Status RecoveryExecutor::TransferAndRestore() {
  mine_ = nullptr;
  all_local_ = true;
  transfers_.clear();
  for (const placement::ShardSource& s : plan_.shards) {
    if (s.node == pl_.node() && s.lane == pl_.lane()) mine_ = &s;
    if (s.kind != placement::SourceKind::kLocal) all_local_ = false;
    if (s.kind == placement::SourceKind::kReplica) {
      transfers_.push_back({pl_.rank_of(s.from_node, s.lane), pl_.rank_of(s.node, s.lane), s.node});
    }
  }
  MEMENTO_CHECK(mine_ != nullptr);
  crcs_.clear();
  staged_bytes_ = 0;
  mismatch_ = Mismatch::kNone;
  source_ = RestoreSource::kLocalMemory;
  my_slot_ = parts_.store->FindVersion(plan_.version, lineage_);
  DropLanding();  // an earlier attempt's
  replica_seal_.reset();
  chains_.clear();
  chain_info_.clear();
  const Status built = BuildDecodeChains(plan_, pl_, &chains_, &chain_info_);
  // A survivor's own shard is copied while this node serves the others
  // (they read the slot too, nothing writes it), behind their transfers:
  // decode hops too, whose chains wait on the link most of the time
  // (interleaved, N=8 over a 0.1 GiB/s link: xor:3 resumed at 1.12-1.18 x
  // S / link so, 1.17-1.31 copying after its chains; rs:4+2 1.44-1.58
  // against 1.52-1.63). Joined when this attempt ends, however it ends (it
  // writes the buffers and crcs_).
  std::optional<Behind> own_copy;
  if (mine_->kind == placement::SourceKind::kLocal && my_slot_) {
    own_copy.emplace([this, slot = *my_slot_] {
      return parts_.io->CopySlotToBuffers(slot, plan_.version, &crcs_, &staged_bytes_);
    });
  }
  Status landing = Status::Ok();
  if (mine_->kind == placement::SourceKind::kReplica ||
      mine_->kind == placement::SourceKind::kDecode) {
    landing = PrepareLanding();
  }
  // Every rank takes part in every exchange, whatever failed before.
  Status got = ExchangeReplicas();
  Status decoded = built.ok() ? RunDecodes() : built;
  if (got.ok()) got = decoded.WithContext("restore: decode");
  if (got.ok()) got = landing;
  if (!got.ok()) return got;
  return RestoreMyShard(own_copy ? &*own_copy : nullptr);
}

Status RecoveryExecutor::SendReplica(size_t i) {
  const Transfer& t = transfers_[i];
  const int tag = TransferTag(i, 0);
  // Its replica of the owner's shard, straight from the slot, with the crc32c
  // it was sealed with (the receiver checks the bytes against it).
  Result<RegionView> view = Status::NotFound(VersionText(plan_.version) + " not in this store");
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
  MEMENTO_RETURN_IF_ERROR(parts_.transport->Send(t.dst, tag, &h, sizeof(h)));
  if (!view.ok()) return view.status();
  // Pieces of one chunk (the MPI count limit is 2 GiB, a shard may be
  // larger), in order, up to kTransferWindow of them started at once.
  const uint64_t piece = parts_.chunk_bytes;
  const size_t window = parts_.transport->TestsTransfers() ? kTransferWindow : 1;
  std::deque<std::pair<std::unique_ptr<Transport::PendingTransfer>, uint64_t>> flight;
  auto finish_oldest = [&]() -> Status {
    auto [sending, n] = std::move(flight.front());
    flight.pop_front();
    MEMENTO_RETURN_IF_ERROR(sending->Wait().status());
    sent_ += n;
    return Status::Ok();
  };
  for (uint64_t off = 0; off < h.length; off += piece) {
    const uint64_t n = std::min(piece, h.length - off);
    MEMENTO_ASSIGN_OR_RETURN(
        auto sending, parts_.transport->StartSend(t.dst, TransferTag(i, 1), view->data + off, n));
    flight.emplace_back(std::move(sending), n);
    if (flight.size() >= window) MEMENTO_RETURN_IF_ERROR(finish_oldest());
  }
  while (!flight.empty()) MEMENTO_RETURN_IF_ERROR(finish_oldest());
  return Status::Ok();
}

Status RecoveryExecutor::ReceiveReplica(size_t i) {
  const Transfer& t = transfers_[i];
  const int tag = TransferTag(i, 0);
  const std::string from = "rank " + std::to_string(t.src);
  wire::PayloadHeader h;
  auto n = parts_.transport->Recv(t.src, tag, &h, sizeof(h));
  if (!n.ok()) return n.status().WithContext("restore: header from " + from);
  if (!h.ok) return Status::Unavailable("restore: " + from + " cannot serve its part");
  // Pieces land where the shard goes (straight into the slot when a piece
  // lies within one entry, else through a bounce buffer), up to
  // kTransferWindow receives posted at once, landed in order. Once the oldest
  // has landed, the next receive is posted before the landed piece is copied
  // into the buffers, so the window stays full during the copy (window + 1
  // bounce buffers: the one being copied out is never a posted receive's). A
  // replica of another length is received all the same (into those buffers),
  // and so is the rest of a replica after a piece that was taken but did not
  // fit: every send completes (under MPI a large piece's send finishes only
  // once it is received; a receive given up on would leave the holder waiting
  // for the timeout) and nothing of this attempt is left queued for the next
  // one, which uses the same tags.
  const bool fits = h.length == landed_.size();
  Status failed = Status::Ok();  // the first piece that did not land; the rest is drained
  auto keep = [&] { return fits && failed.ok(); };
  const uint64_t piece = parts_.chunk_bytes;
  const size_t window = parts_.transport->TestsTransfers() ? kTransferWindow : 1;
  std::vector<std::vector<uint8_t>> bounce(window + 1);
  struct Posted {
    std::unique_ptr<Transport::PendingTransfer> receiving;
    uint64_t off = 0, want = 0;
    bool bounced = false;
    size_t buffer = 0;
  };
  std::deque<Posted> posted;
  uint64_t next_off = 0;
  size_t index = 0;
  auto post_next = [&]() -> Status {
    if (next_off >= h.length) return Status::Ok();
    Posted p;
    p.off = next_off;
    p.want = std::min(piece, h.length - next_off);
    p.buffer = index % bounce.size();
    uint8_t* dst = keep() ? landed_.Span(p.off, p.want) : nullptr;
    if (dst == nullptr) {
      bounce[p.buffer].resize(p.want);
      dst = bounce[p.buffer].data();
      p.bounced = true;
    }
    MEMENTO_ASSIGN_OR_RETURN(p.receiving,
                             parts_.transport->StartRecv(t.src, TransferTag(i, 1), dst, p.want));
    posted.push_back(std::move(p));
    next_off += piece;
    ++index;
    return Status::Ok();
  };
  while (posted.size() < window && next_off < h.length) MEMENTO_RETURN_IF_ERROR(post_next());
  while (!posted.empty()) {
    Posted p = std::move(posted.front());
    posted.pop_front();
    Result<size_t> got = p.receiving->Wait();
    // An oversized piece is taken (and refused); any other error means the
    // transport or the holder is gone, and nothing more will arrive.
    if (!got.ok() && got.status().code() != StatusCode::kInvalidArgument) {
      return got.status().WithContext("restore: piece from " + from);
    }
    if (!got.ok() || *got != p.want) {
      if (failed.ok()) {
        failed = !got.ok() ? got.status().WithContext("restore: piece from " + from)
                           : Status::Corruption("restore: piece of " + std::to_string(*got) +
                                                " bytes from " + from + ", expected " +
                                                std::to_string(p.want));
      }
    } else {
      received_ += p.want;
    }
    MEMENTO_RETURN_IF_ERROR(post_next());
    if (!keep()) continue;
    if (p.bounced) landed_.Write(p.off, bounce[p.buffer].data(), p.want);
    if (landed_copy_) landed_copy_->Piece(p.off, p.want);
  }
  if (!failed.ok()) return failed;
  if (!fits) {
    return Status::Corruption("restore: replica of " + std::to_string(h.length) + " bytes from " +
                              from + ", the shard has " + std::to_string(landed_.size()));
  }
  // Checked against the holder's seal as it is copied into the buffers.
  replica_seal_ =
      ReplicaSeal{h.crc, "the replica of node " + std::to_string(t.owner) + " from " + from};
  return Status::Ok();
}

Status RecoveryExecutor::ExchangeReplicas() {
  const int me = parts_.transport->rank();
  std::vector<std::thread> senders;
  std::vector<Status> send_status(transfers_.size());
  for (size_t i = 0; i < transfers_.size(); ++i) {
    if (transfers_[i].src == me) senders.emplace_back([&, i] { send_status[i] = SendReplica(i); });
  }
  Status got = Status::Ok();
  for (size_t i = 0; i < transfers_.size(); ++i) {  // in list order
    if (transfers_[i].dst != me) continue;
    Status s = ReceiveReplica(i);
    if (!s.ok() && got.ok()) got = s;
  }
  for (auto& th : senders) th.join();
  for (const Status& s : send_status) {
    if (!s.ok() && got.ok()) got = s.WithContext("restore: sending");
  }
  return got;
}

Status RecoveryExecutor::RunDecodes() {
  auto decode_of = [&](int c) -> const placement::StripeDecode& {
    return plan_.decodes[chain_info_[c].decode];
  };
  // Byte `off` of row `row` of a stripe, within this rank's shard.
  auto row_offset = [](const placement::StripeDecode& dec, int row, uint64_t off) {
    return static_cast<uint64_t>(row) * dec.piece_bytes + off;
  };
  // Input rows: a survivor's data row is a piece of its shard, a parity row
  // its parity region. Hops fold them straight from the sealed slot (and a
  // first term sends its row from there: `options.span` below); the reader
  // copies only pieces that straddle two entries or pass the end, and says
  // why a row cannot be read.
  auto parity_region = [&](const placement::StripeDecode& dec,
                           const placement::StripeRow& in) -> Result<RegionView> {
    const int region = pl_.ParityRegion(dec.stripe, in.row);
    if (region < 0) return Status::Internal("no parity region for the plan's row");
    return parts_.store->ReadRegion(*my_slot_, region);
  };
  auto reader = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len,
                    uint8_t* dst) -> Status {
    if (!my_slot_) return Status::NotFound(VersionText(plan_.version) + " not in this store");
    const placement::StripeDecode& dec = decode_of(c);
    const placement::StripeRow& in = dec.inputs[term.row_id];
    if (!in.parity) {
      return parts_.io->ReadRange(*my_slot_, nullptr, row_offset(dec, in.row, off), len, dst);
    }
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, parity_region(dec, in));
    if (off + len > view.length) return Status::Corruption("parity region too short");
    std::memcpy(dst, view.data + off, len);
    return Status::Ok();
  };
  // Rebuilt rows are received straight where this rank's shard goes; a
  // piece that straddles two entries comes through a buffer and is copied.
  auto shard_offset = [&](int c, uint64_t off) {
    const placement::StripeDecode& dec = decode_of(c);
    return row_offset(dec, dec.rebuilt[chain_info_[c].rebuilt].row, off);
  };
  RowSink sink;
  sink.span = [&](int c, uint64_t off, uint64_t len) {
    return landed_.Span(shard_offset(c, off), len);  // null past the end too
  };
  // LandedCopy hashes each piece as it copies it into the buffers.
  sink.landed = [&](int c, uint64_t off, uint64_t len, uint32_t) {
    if (landed_copy_) landed_copy_->Piece(shard_offset(c, off), len);
  };
  sink.landed_crc = false;
  sink.write = [&](int c, uint64_t off, const uint8_t* data, uint64_t len) -> Status {
    const uint64_t at = shard_offset(c, off);
    if (at + len > landed_.size()) {
      return Status::Internal("rebuilt row ends at " + std::to_string(at + len) +
                              ", past the shard's " + std::to_string(landed_.size()) + " bytes");
    }
    landed_.Write(at, data, len);
    if (landed_copy_) landed_copy_->Piece(at, len);
    return Status::Ok();
  };
  // Pieces carry no crc32c of their own (two passes over every byte per hop
  // saved): the rebuilt shard is checked end to end against its owner's
  // seals before the restore counts. A mismatch has the parity rows it read
  // checked by their holders and plans again (VerifyServedCopies,
  // MarkMismatchedSources); a piece failing its crc32c used to fail the
  // attempt straight over to remote.
  ReduceOptions options;
  options.check_pieces = false;
  options.span = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len) -> const uint8_t* {
    if (!my_slot_) return nullptr;
    const placement::StripeDecode& dec = decode_of(c);
    const placement::StripeRow& in = dec.inputs[term.row_id];
    if (!in.parity) {
      return parts_.io->SpanOfRange(*my_slot_, nullptr, row_offset(dec, in.row, off), len);
    }
    Result<RegionView> view = parity_region(dec, in);  // else the reader says why
    return view.ok() && off + len <= view->length ? view->data + off : nullptr;
  };
  ReduceBytes bytes;
  std::vector<std::vector<uint8_t>> unused;
  Status s =
      RunReduceChains(parts_.transport, chains_,
                      static_cast<int>(TransferTags() * transfers_.size() % wire::kRecoverTagSpan),
                      parts_.chunk_bytes, reader, &unused, &bytes, &sink, &options);
  sent_ += bytes.sent;
  received_ += bytes.received;
  return s;
}

Status RecoveryExecutor::RestoreMyShard(Behind* own_copy) {
  switch (mine_->kind) {
    case placement::SourceKind::kLocal: {
      report_.source_detail = "local";
      // Started with the attempt whenever the slot was found.
      if (own_copy == nullptr) return Status::NotFound("local copy vanished");
      Status s = own_copy->Join();
      // A copy that fails its crc32c here is marked bad and the plan made
      // again (nothing was verified before the transfer).
      if (s.code() == StatusCode::kCorruption) mismatch_ = Mismatch::kSealed;
      if (s.ok() && staged_bytes_ > 0) {
        report_.source_detail += "; " + std::to_string(staged_bytes_) +
                                 " device bytes staged through pinned buffers (the slot's pages "
                                 "are not registered with the driver in this process)";
      }
      return s;
    }
    case placement::SourceKind::kRemote:
      source_ = RestoreSource::kRemote;
      report_.source_detail = "remote";
      return parts_.io->ReadRemoteToBuffers(plan_.version, &crcs_);
    case placement::SourceKind::kReplica:
      source_ = RestoreSource::kReplica;
      report_.source_detail = "replica from node " + std::to_string(mine_->from_node);
      return CheckAndCopyLanded();
    case placement::SourceKind::kDecode:
      source_ = RestoreSource::kDecode;
      report_.source_detail = "decode of " + std::to_string(mine_->decodes.size()) + " stripes";
      return CheckAndCopyLanded();
  }
  return Status::Internal("unknown shard source");
}

// ---- 4. agree: executor_agree.cc ----------------------------------------------------------

// ---- 5. re-protect -------------------------------------------------------------------------

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
    Result<bool> agreed = MinimalAgreed(&bytes, &why);
    ReleaseLanding();
    MEMENTO_RETURN_IF_ERROR(agreed.status());
    report_.stats.reprotect_bytes_sent = bytes.sent;
    report_.stats.reprotect_bytes_received = bytes.received;
    if (*agreed) {
      report_.stats.reprotect_mode = "minimal";
      return Status::Ok();
    }
    report_.notes.push_back("minimal re-protect failed (" + why +
                            "), re-protecting the whole version");
  }
  DropLanding();  // the full re-protect snapshots the buffers again
  Status s = parts_.reprotector->Full(version, &bytes, parts_.background);
  report_.stats.reprotect_mode = parts_.background ? "full, background" : "full";
  report_.stats.reprotect_bytes_sent = bytes.sent;
  report_.stats.reprotect_bytes_received = bytes.received;
  if (!s.ok()) {
    report_.notes.push_back("not re-protected: " + s.ToString());
    // Blocking: the lost nodes' copies are still missing (a background
    // re-protect reports its outcome through ProtectionState()).
    if (!parts_.background) reprotect_failed_ = true;
  }
  return Status::Ok();
}

bool RecoveryExecutor::MyNodeLost() const {
  const auto& failed = plan_.failed_nodes;
  return std::find(failed.begin(), failed.end(), pl_.node()) != failed.end();
}

int RecoveryExecutor::ReprotectTagBase() const {
  return static_cast<int>((TransferTags() * transfers_.size() + chains_.size()) %
                          wire::kRecoverTagSpan);
}

Result<bool> RecoveryExecutor::MinimalAgreed(ReduceBytes* bytes, std::string* why) {
  const uint64_t version = report_.version;
  int slot = -1;
  // A shard that landed in the buffers goes into the store first; failing
  // that, this rank still takes part in the chains (and fails them).
  const Status in_store = LandInStore();
  Status s = parts_.reprotector->Minimal(plan_, landed_.slot() >= 0 ? &landed_ : nullptr, seals_of_,
                                         ReprotectTagBase(), bytes, &slot);
  if (!in_store.ok()) s = in_store;
  if (s.ok()) s = RunHook(Stage::kReprotect, version);
  MEMENTO_ASSIGN_OR_RETURN(bool agreed, parts_.transport->AllTrue(s.ok()));
  if (agreed) {
    Status c = parts_.store->MarkCommitted(slot, version);
    if (!c.ok()) {
      const std::string note =
          "re-protected " + VersionText(version) + " not marked committed: " + c.ToString();
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
    // The slot the shard landed in or is copied into, pinned since: a Save
    // issued meanwhile takes another one. Landed in the buffers, they are
    // held until that copy.
    MEMENTO_CHECK(landed_.slot() >= 0 || buffer_slot_ >= 0);
    if (buffer_slot_ >= 0) {
      parts_.buffers->Hold();
      holding_ = true;
    }
  } else if (const std::optional<int> held = parts_.store->FindVersion(version, *parts_.lineage)) {
    // The survivor's copy is what the chains read: a Save must not rewrite it.
    parts_.slots->SetCommitted(*held);
    parts_.slots->Pin(*held);
    pinned_slot_ = *held;
  }
  deferred_ = true;
  report_.stats.reprotect_mode = "minimal, background";
  report_.notes.push_back("what the lost nodes held of " + VersionText(version) +
                          " is rebuilt in the background (ProtectionState(); Wait())");
}

Result<bool> RecoveryExecutor::RunDeferredReprotect() {
  MEMENTO_CHECK(deferred_);
  const uint64_t version = report_.version;
  ReduceBytes bytes;
  std::string why;
  Result<bool> agreed = MinimalAgreed(&bytes, &why);
  ReleaseLanding();
  if (pinned_slot_ >= 0) parts_.slots->Unpin(pinned_slot_);
  pinned_slot_ = -1;
  deferred_ = false;
  if (!agreed.ok())
    return agreed.status().WithContext("background re-protect of " + VersionText(version));
  if (*agreed) {
    Log(LogLevel::kInfo, VersionText(version) + " protected again in the background (" +
                             std::to_string(bytes.received) + " B received here)");
  } else {
    Log(LogLevel::kWarn, VersionText(version) + " not re-protected in the background (" + why +
                             "); the next Save protects the job again");
  }
  return agreed;
}

// ---- 6. byte counts ------------------------------------------------------------------------

Status RecoveryExecutor::GatherByteCounts() {
  RestoreStats& st = report_.stats;
  const std::vector<uint8_t> mine =
      wire::EncodeCounters({st.bytes_received, st.reprotect_bytes_received});
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(mine.data(), mine.size()));
  return AddByteCounts(all);
}

Status RecoveryExecutor::AddByteCounts(const std::vector<std::vector<uint8_t>>& all) {
  RestoreStats& st = report_.stats;
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
