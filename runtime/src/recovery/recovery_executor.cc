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
#include "transport/wire.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string V(uint64_t version) { return "v" + std::to_string(version); }

// An inventory item of `version` to mark bad: `kind` held by `node`, `lane`.
placement::InventoryItem ItemOf(uint64_t version, placement::ItemKind kind, int node, int lane) {
  placement::InventoryItem item;
  item.version = version;
  item.kind = kind;
  item.node = node;
  item.lane = lane;
  return item;
}

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
      report_.notes.push_back("the restore of " + V(plan_.version) +
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
  Log(LogLevel::kDebug, "recovery report " + report_.ToJson());
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
      return parts_.io->CopySlotToBuffers(slot, plan_.version, &crcs_);
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
    if (!my_slot_) return Status::NotFound(V(plan_.version) + " not in this store");
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

// ---- 4. agree ------------------------------------------------------------------------------

Result<RecoveryExecutor::Agreement> RecoveryExecutor::Agree(const Status& local) {
  const uint8_t outcome = local.ok() ? kRestored : static_cast<uint8_t>(mismatch_);
  std::vector<uint8_t> mine = wire::EncodeCounters({received_, 0});
  mine.insert(mine.begin(), outcome);
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(mine.data(), mine.size()));
  Agreement agreed;
  agreed.everyone = true;
  for (const auto& o : all) {
    if (o.size() != mine.size()) return Status::Corruption("restore outcome record");
    agreed.counters.emplace_back(o.begin() + 1, o.end());
    agreed.everyone = agreed.everyone && o[0] == kRestored;
    agreed.other_failure = agreed.other_failure || o[0] == static_cast<uint8_t>(Mismatch::kNone);
    agreed.no_seals = agreed.no_seals || o[0] == static_cast<uint8_t>(Mismatch::kNoSeals);
    agreed.outcomes.push_back(o[0]);
  }
  return agreed;
}

Result<std::set<RecoveryExecutor::ServedCopyId>> RecoveryExecutor::VerifyServedCopies(
    const Agreement& agreed) {
  std::vector<int32_t> mine;  // ServedCopyId of each copy here that fails
  auto check = [&](int region, std::initializer_list<int32_t> id) {
    const Status ok = my_slot_ && region >= 0 ? parts_.store->VerifyRegion(*my_slot_, region)
                                              : Status::NotFound("copy not in this store");
    if (!ok.ok()) mine.insert(mine.end(), id);
  };
  for (const placement::ShardSource& s : plan_.shards) {
    const uint8_t outcome = agreed.outcomes.at(pl_.rank_of(s.node, s.lane));
    if (s.kind == placement::SourceKind::kReplica &&
        outcome == static_cast<uint8_t>(Mismatch::kSealed)) {
      if (s.from_node == pl_.node() && s.lane == pl_.lane()) {
        check(pl_.ReplicaRegion(s.node), {kReplicaCopy, s.from_node, s.lane, s.node, -1});
      }
    } else if (s.kind == placement::SourceKind::kDecode &&
               outcome == static_cast<uint8_t>(Mismatch::kEndToEnd)) {
      for (int d : s.decodes) {
        const placement::StripeDecode& dec = plan_.decodes.at(d);
        for (const placement::StripeRow& in : dec.inputs) {
          if (!in.parity || in.node != pl_.node() || dec.lane != pl_.lane()) continue;
          check(pl_.ParityRegion(dec.stripe, in.row),
                {kParityCopy, in.node, dec.lane, dec.stripe, in.row});
        }
      }
    }
  }
  MEMENTO_ASSIGN_OR_RETURN(auto all,
                           parts_.transport->Allgather(mine.data(), mine.size() * sizeof(int32_t)));
  constexpr size_t kFields = std::tuple_size_v<ServedCopyId>;
  constexpr size_t kRecordBytes = kFields * sizeof(int32_t);
  std::set<ServedCopyId> bad;
  for (size_t rank = 0; rank < all.size(); ++rank) {
    const std::vector<uint8_t>& rec = all[rank];
    if (rec.size() % kRecordBytes != 0) {
      return Status::Corruption(
          "restore: rank " + std::to_string(rank) + "'s record of failed copy checks has " +
          std::to_string(rec.size()) + " bytes, not a multiple of " + std::to_string(kRecordBytes));
    }
    if (rec.empty()) continue;
    std::vector<int32_t> v(rec.size() / sizeof(int32_t));
    std::memcpy(v.data(), rec.data(), rec.size());
    for (size_t i = 0; i < v.size(); i += kFields) {
      bad.emplace(v[i], v[i + 1], v[i + 2], v[i + 3], v[i + 4]);
    }
  }
  return bad;
}

bool RecoveryExecutor::MarkMismatchedSources(const Agreement& agreed,
                                             const std::set<ServedCopyId>& bad_served, int attempt,
                                             bool* again) {
  Mismatches m{bad_served, {}, "(attempt " + std::to_string(attempt + 2) + ")"};
  // Survivors whose own copy failed its crc32c: a decode that read it as a
  // data row is blamed on it, not on the parity rows.
  for (const placement::ShardSource& s : plan_.shards) {
    if (s.kind == placement::SourceKind::kLocal &&
        agreed.outcomes.at(pl_.rank_of(s.node, s.lane)) ==
            static_cast<uint8_t>(Mismatch::kSealed)) {
      m.bad_local.emplace(s.node, s.lane);
    }
  }
  for (const placement::ShardSource& s : plan_.shards) {
    const uint8_t outcome = agreed.outcomes.at(pl_.rank_of(s.node, s.lane));
    if (outcome == kRestored || outcome == static_cast<uint8_t>(Mismatch::kNone)) continue;
    const std::string shard =
        V(plan_.version) + ": node " + std::to_string(s.node) + " lane " + std::to_string(s.lane);
    std::optional<std::string> from;
    if (s.kind == placement::SourceKind::kLocal) {
      placement::InventoryItem bad =
          ItemOf(plan_.version, placement::ItemKind::kShard, s.node, s.lane);
      bad.owner = s.node;
      m.changed = MarkBad(bad) || m.changed;
      from = "its own copy";
    } else if (s.kind == placement::SourceKind::kReplica) {
      from = BlameReplica(s, outcome, shard, &m);
    } else if (s.kind == placement::SourceKind::kDecode) {
      from = BlameDecode(s, shard, &m);
    }
    if (!from) continue;
    const std::string replanned = "the restore is planned again " + m.next;
    if (outcome == static_cast<uint8_t>(Mismatch::kSealed)) {
      report_.notes.push_back(shard + ": " + *from +
                              " fails its sealed crc32c; it is marked bad and " + replanned);
    } else {
      report_.notes.push_back(shard + " rebuilt by " + *from +
                              " fails the end-to-end check; its sources are marked bad and " +
                              replanned);
    }
  }
  *again = m.again;
  return m.changed;
}

std::optional<std::string> RecoveryExecutor::BlameReplica(const placement::ShardSource& s,
                                                          uint8_t outcome, const std::string& shard,
                                                          Mismatches* m) {
  const bool sealed = outcome == static_cast<uint8_t>(Mismatch::kSealed);
  const std::string holder = std::to_string(s.from_node);
  // A replica that failed its seal where it landed but passes it on its
  // holder changed on the way: sent once more, then blamed.
  const bool passes_on_holder =
      !m->bad_served.count({kReplicaCopy, s.from_node, s.lane, s.node, -1});
  const auto resent_key = std::make_tuple(plan_.version, s.from_node, s.lane, s.node);
  if (sealed && !ran_again_ && passes_on_holder) {
    m->again = true;
    resent_replicas_.insert(resent_key);
    report_.notes.push_back(shard + ": the replica from node " + holder +
                            " fails its sealed crc32c where it landed and passes it on its "
                            "holder: the bytes changed on the way; it is sent again " +
                            m->next);
    return std::nullopt;
  }
  placement::InventoryItem bad =
      ItemOf(plan_.version, placement::ItemKind::kReplica, s.from_node, s.lane);
  bad.owner = s.node;
  m->changed = MarkBad(bad) || m->changed;
  if (sealed && passes_on_holder) {
    // Changed on the way once more (this plan already ran again): the
    // holder's copy is sound, the way from it is not; the copy is not used
    // again in this restore.
    report_.notes.push_back(shard + ": the replica from node " + holder +
                            " fails its sealed crc32c where it landed" +
                            (resent_replicas_.count(resent_key) ? " again" : "") +
                            ", though it passes it on its holder; it is not used again and the "
                            "restore is planned again " +
                            m->next);
    return std::nullopt;
  }
  return sealed ? "the replica on node " + holder : "replica from node " + holder;
}

std::optional<std::string> RecoveryExecutor::BlameDecode(const placement::ShardSource& s,
                                                         const std::string& shard, Mismatches* m) {
  int read_bad_copy = -1;
  bool blamed = false;  // a stripe's parity rows marked bad
  // Data rows are survivors' shards, checked against their own seals; only
  // parity rows can carry what the region crc missed.
  for (int d : s.decodes) {
    const placement::StripeDecode& dec = plan_.decodes.at(d);
    int bad_row_node = -1;
    for (const placement::StripeRow& in : dec.inputs) {
      if (!in.parity && m->bad_local.count({in.node, dec.lane}) > 0) bad_row_node = in.node;
    }
    if (bad_row_node >= 0) {  // marked bad as that survivor's own copy
      read_bad_copy = bad_row_node;
      continue;
    }
    // Parity rows that fail their sealed crc32c are the bad copies. When
    // every row passes, the bytes changed on the way (or in a hop): decoded
    // once more, and blamed on the parity rows if it fails again.
    auto failed = [&](const placement::StripeRow& in) {
      return m->bad_served.count({kParityCopy, in.node, dec.lane, dec.stripe, in.row}) > 0;
    };
    bool parity_failed = false;
    for (const placement::StripeRow& in : dec.inputs) {
      parity_failed = parity_failed || (in.parity && failed(in));
    }
    if (!parity_failed && !ran_again_) {
      m->again = true;
      continue;
    }
    blamed = true;
    for (const placement::StripeRow& in : dec.inputs) {
      if (!in.parity || (parity_failed && !failed(in))) continue;
      placement::InventoryItem bad =
          ItemOf(plan_.version, placement::ItemKind::kParity, in.node, dec.lane);
      bad.stripe = dec.stripe;
      bad.row = in.row;
      m->changed = MarkBad(bad) || m->changed;
    }
  }
  if (read_bad_copy < 0 && !blamed) {
    report_.notes.push_back(
        shard +
        " rebuilt by decode fails the end-to-end check while every row it read passes its "
        "sealed crc32c: the bytes changed on the way; it is decoded again " +
        m->next);
    return std::nullopt;
  }
  return read_bad_copy >= 0
             ? "decode (it read node " + std::to_string(read_bad_copy) + "'s bad copy)"
             : std::string("decode");
}

bool RecoveryExecutor::DropMemoryVersionOfPlan() {
  const size_t before = input_.inventory.size();
  input_.inventory.erase(std::remove_if(input_.inventory.begin(), input_.inventory.end(),
                                        [&](const placement::InventoryItem& it) {
                                          return it.version == plan_.version;
                                        }),
                         input_.inventory.end());
  if (input_.inventory.size() == before) return false;
  report_.notes.push_back(V(plan_.version) +
                          " in memory: no entry seals of a shard it rebuilds survive to check it "
                          "end to end; trying the next version");
  return true;
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
          "re-protected " + V(version) + " not marked committed: " + c.ToString();
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
  report_.notes.push_back("what the lost nodes held of " + V(version) +
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
