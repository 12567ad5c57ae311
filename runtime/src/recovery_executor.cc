// Checkpointer::RestoreProtected: restore after failures under a protecting
// scheme (DESIGN §6).
//
//  1. Inventory. Every rank reports every item of every sealed slot (its
//     shard, everything it holds for peers) from the seal records alone
//     (length + crc32c, no payload hashing) and allgathers them with the
//     newest complete remote version. A node none of whose ranks reports
//     anything lost its memory.
//  2. Plan. placement::PlanRecovery (pure; every rank computes the same plan).
//     Then each rank verifies (crc32c, one pass) only what the plan reads from
//     it, plus its own shard of the plan's version; the failures are
//     allgathered, marked bad in the inventory and the plan is made again,
//     until no new failure shows. A corrupt copy is never chosen, and the
//     cost is that of the bytes the restore reads, not of every slot.
//  3. Execute. Replica sources become transfers (holder -> owner, the whole
//     shard); transfer i uses tags kTagRecoverBase + 2*(i % span) (header:
//     length, crc32c) and +1 (payload). Every outgoing transfer runs on its
//     own thread and the incoming ones are received in list order on the
//     calling thread, so no ordering between ranks can deadlock. Each
//     payload's crc32c is checked on arrival. Decodes run as partial-product
//     reduce chains (partial_decode.h): each input holder multiplies its row
//     by its decode coefficient and the sum travels along the holders to the
//     owner of the rebuilt row, which receives just that row. A copied or
//     decoded shard is checked entry by entry against its owner's entry seals
//     (entry_seals.h; one allgather collects them from any holder) before it
//     is written into the buffers or the store. Local shards
//     are copied from the slot (crc verified), remote ones read from the
//     remote tier.
//  4. Agree (allgather of each rank's outcome). When every failure is an
//     end-to-end mismatch, the copies the mismatched shards were rebuilt from
//     (the replica; the parity rows of the decode) are marked bad and the
//     restore is planned and executed again from memory. Otherwise every rank
//     falls back to the newest remote version if there is one.
//  5. Re-protect (reprotect.h). Nothing when every shard was local and
//     nothing held for peers was lost; else, when possible, only what the
//     lost nodes held is rebuilt into fresh slots on their ranks (replicas
//     from the owners, parity as reduce chains over the stripe's data rows),
//     sealed and committed by one AllTrue; otherwise (or if that fails) the
//     restored version is re-snapshotted from the buffers and protected again
//     as a whole. Either way the version is committed before Restore returns.
//  6. Bytes received per node (restore and re-protect) are allgathered into
//     the report.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "checkpointer_impl.h"
#include "device_copy.h"
#include "entry_seals.h"
#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/erasure/rs_codec.h"
#include "memento/erasure/xor_codec.h"
#include "memento/placement/recovery_planner.h"
#include "memento/placement/topology.h"
#include "memento/runtime/log.h"
#include "message_tags.h"
#include "partial_decode.h"
#include "reduce_chain.h"
#include "reprotect.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Inventory item on the wire: 8 x int64.
enum : int { kFVersion, kFKind, kFOwner, kFStripe, kFRow, kFBytes, kFOk, kFields };

struct Transfer {
  int src = -1;  // world ranks
  int dst = -1;
  bool replica = false;
  int owner = -1;  // replica: whose shard
};

struct TransferHeader {
  uint64_t length = 0;
  uint32_t crc = 0;
  uint32_t ok = 0;
};

// An inventory item found bad after the first allgather (its payload fails
// its crc32c, or what was rebuilt from it fails the end-to-end check). On the
// wire: version, kind, owner, stripe, row (int64 each); node and lane are the
// sender's.
struct BadItem {
  int node = -1;
  int lane = 0;
  uint64_t version = 0;
  placement::ItemKind kind = placement::ItemKind::kShard;
  int owner = -1;
  int stripe = -1;
  int row = -1;
};
constexpr size_t kBadFields = 5;

// Whether `plan` reads `item`, held by (node, lane): a replica it copies, or
// a parity row it decodes from.
bool PlanReads(const placement::RecoveryPlan& plan, int node, int lane,
               const placement::HeldItem& item) {
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

}  // namespace

Status Checkpointer::Impl::ScatterShardToBuffers(const std::vector<uint8_t>& shard,
                                                 std::vector<uint32_t>* crcs) {
  crcs->assign(entries_.size(), 0);
  uint64_t at = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const RegisteredEntry& e = entries_[i];
    MEMENTO_CHECK_LE(at + e.bytes, shard.size());
    MEMENTO_RETURN_IF_ERROR(CopyBytes(e.data, shard.data() + at, e.bytes, e.device));
    (*crcs)[i] = erasure::Crc32c(shard.data() + at, e.bytes);
    at += e.bytes;
  }
  return Status::Ok();
}

Status Checkpointer::Impl::ReadShardRange(int slot, const std::vector<uint8_t>* shard,
                                          uint64_t begin, uint64_t len, uint8_t* dst) const {
  std::memset(dst, 0, len);
  const uint64_t end = begin + len;
  if (shard != nullptr) {
    if (begin < shard->size()) {
      std::memcpy(dst, shard->data() + begin, std::min<uint64_t>(end, shard->size()) - begin);
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    const uint64_t eb = protection_->entry_base(static_cast<int>(i));
    const uint64_t ee = eb + entries_[i].bytes;
    const uint64_t lo = std::max(eb, begin), hi = std::min(ee, end);
    if (lo >= hi) continue;
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, store_.ReadRegion(slot, static_cast<int>(i)));
    if (view.length != entries_[i].bytes) {
      return Status::Corruption("entry '" + entries_[i].name + "' holds " +
                                std::to_string(view.length) + " bytes, expected " +
                                std::to_string(entries_[i].bytes));
    }
    std::memcpy(dst + (lo - begin), view.data + (lo - eb), hi - lo);
  }
  return Status::Ok();
}

Status Checkpointer::Impl::GatherEntrySeals(
    uint64_t version, std::map<std::pair<int, int>, std::vector<EntrySeal>>* out) {
  const ProtectionLayout& pl = *protection_;
  // Records: i32 node, i32 lane, u32 bytes, then the EncodeEntrySeals bytes.
  std::vector<uint8_t> mine;
  auto add = [&](int node, const std::vector<uint8_t>& rec) {
    const int32_t head[2] = {node, pl.lane()};
    const uint32_t len = static_cast<uint32_t>(rec.size());
    const size_t at = mine.size();
    mine.resize(at + 12 + rec.size());
    std::memcpy(mine.data() + at, head, 8);
    std::memcpy(mine.data() + at + 8, &len, 4);
    std::memcpy(mine.data() + at + 12, rec.data(), rec.size());
  };
  if (const std::optional<int> slot = store_.FindVersion(version)) {
    // Its own entries' seals (the payloads were verified by the inventory).
    std::vector<EntrySeal> own;
    for (size_t i = 0; i < entries_.size(); ++i) {
      auto view = store_.ReadRegion(*slot, static_cast<int>(i));
      if (!view.ok()) break;
      own.push_back({view->length, view->crc});
    }
    if (own.size() == entries_.size()) add(pl.node(), EncodeEntrySeals(own));
    // The seals it keeps for peers.
    for (const SealsRegion& r : pl.seals()) {
      if (!store_.VerifyRegion(*slot, r.region).ok()) continue;
      auto view = store_.ReadRegion(*slot, r.region);
      if (!view.ok()) continue;
      add(r.owner, std::vector<uint8_t>(view->data, view->data + view->length));
    }
  }
  MEMENTO_ASSIGN_OR_RETURN(auto all, transport_->Allgather(mine.data(), mine.size()));
  for (const auto& raw : all) {
    size_t at = 0;
    while (at + 12 <= raw.size()) {
      int32_t head[2];
      uint32_t len;
      std::memcpy(head, raw.data() + at, 8);
      std::memcpy(&len, raw.data() + at + 8, 4);
      if (at + 12 + len > raw.size()) return Status::Corruption("entry seals allgather record");
      auto seals = DecodeEntrySeals(raw.data() + at + 12, len);
      if (seals.ok()) out->emplace(std::make_pair(head[0], head[1]), std::move(seals).value());
      at += 12 + len;
    }
  }
  return Status::Ok();
}

Status Checkpointer::Impl::Reseed(uint64_t version) {
  // A copy of `version` this store already holds (a survivor's) stays the
  // committed slot, so the new copy goes elsewhere and the old one is dropped
  // only once the new one is committed (CommitOne): a failure during the
  // reseed still leaves `version` in memory. Without one, the slot of the
  // newest committed version is kept the same way.
  if (std::optional<int> held = store_.FindVersion(version)) {
    std::lock_guard<std::mutex> lock(mu_);
    committed_slot_ = *held;
  }
  Status started = StartVersion(version, /*persistable=*/false);
  Status committed = Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_committed_ = version;  // the job's newest checkpoint, in memory or not
  }
  return started.ok() ? committed : started;
}

Result<RestoreReport> Checkpointer::Impl::RestoreProtected() {
  const ProtectionLayout& pl = *protection_;
  const int me_node = pl.node();
  const int me_lane = pl.lane();
  const int me = transport_->rank();
  RestoreReport report;
  auto t0 = Clock::now();

  // 1. Inventory, from the seal records alone (no payload hashing).
  std::vector<int64_t> items;
  const int64_t remote_newest = NewestRemoteVersion(&report.notes);
  items.push_back(remote_newest);
  for (const SlotState& st : store_.Inventory().slots) {
    if (!st.ok) {
      if (st.sealed) report.notes.push_back("slot " + std::to_string(st.slot) + ": " + st.problem);
      continue;
    }
    auto record_ok = [&](int region) {
      const bool ok =
          region >= 0 && static_cast<size_t>(region) < st.regions.size() && st.regions[region].ok;
      if (!ok && region >= 0 && static_cast<size_t>(region) < st.regions.size()) {
        report.notes.push_back("slot " + std::to_string(st.slot) + " region " +
                               std::to_string(region) + ": " + st.regions[region].problem);
      }
      return ok;
    };
    bool shard_ok = true;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (!record_ok(static_cast<int>(i))) shard_ok = false;
    }
    auto push = [&](placement::ItemKind kind, int owner, int stripe, int row, uint64_t bytes,
                    bool ok) {
      items.insert(items.end(), {static_cast<int64_t>(st.version), static_cast<int64_t>(kind),
                                 owner, stripe, row, static_cast<int64_t>(bytes), ok ? 1 : 0});
      items.push_back(0);  // padding to kFields + 1
    };
    push(placement::ItemKind::kShard, me_node, -1, -1, pl.shard_bytes(me_node, me_lane), shard_ok);
    for (const HeldRegion& h : pl.held()) {
      push(h.item.kind, h.item.owner, h.item.stripe, h.item.row, h.capacity, record_ok(h.region));
    }
  }
  MEMENTO_ASSIGN_OR_RETURN(auto all,
                           transport_->Allgather(items.data(), items.size() * sizeof(int64_t)));
  placement::RecoveryInput input;
  input.new_num_nodes = pl.num_nodes();
  std::vector<bool> reported(pl.num_nodes(), false);
  int64_t remote_agreed = remote_ ? INT64_MAX : -1;
  for (int node = 0; node < pl.num_nodes(); ++node) {
    for (int lane = 0; lane < pl.lanes(); ++lane) {
      const auto& raw = all.at(pl.rank_of(node, lane));
      const size_t n = raw.size() / sizeof(int64_t);
      if (n < 1 || (n - 1) % (kFields + 1) != 0) {
        return Status::Corruption("restore inventory of " + std::to_string(raw.size()) + " bytes");
      }
      std::vector<int64_t> v(n);
      std::memcpy(v.data(), raw.data(), n * sizeof(int64_t));
      remote_agreed = std::min(remote_agreed, v[0]);
      for (size_t i = 1; i < n; i += kFields + 1) {
        placement::InventoryItem item;
        item.node = node;
        item.lane = lane;
        item.version = static_cast<uint64_t>(v[i + kFVersion]);
        item.kind = static_cast<placement::ItemKind>(v[i + kFKind]);
        item.owner = static_cast<int>(v[i + kFOwner]);
        item.stripe = static_cast<int>(v[i + kFStripe]);
        item.row = static_cast<int>(v[i + kFRow]);
        item.bytes = static_cast<uint64_t>(v[i + kFBytes]);
        item.sealed = true;
        item.crc_ok = v[i + kFOk] != 0;
        input.inventory.push_back(item);
        reported[node] = true;
      }
    }
  }
  if (remote_agreed >= 0) input.remote_versions.insert(static_cast<uint64_t>(remote_agreed));
  for (int node = 0; node < pl.num_nodes(); ++node) {
    if (!reported[node]) input.failed_nodes.push_back(node);
  }
  report.lost_nodes = input.failed_nodes;
  double inventory_s = SecondsSince(t0);
  double plan_s = 0;
  MEMENTO_ASSIGN_OR_RETURN(auto topology, placement::Topology::Uniform(pl.num_nodes(), pl.lanes()));

  // Marks an item of the agreed inventory as not valid; true if it was valid.
  auto mark_bad = [&](const BadItem& b) {
    bool changed = false;
    for (placement::InventoryItem& it : input.inventory) {
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
  };

  // 2. Plan, then verify (crc32c) what the plan reads on this rank and this
  // rank's shard; every rank's failures are allgathered and marked, and the
  // plan is made again until no new failure shows (every rank decides alike).
  std::map<std::pair<int, int>, bool> region_ok;  // (slot, region) -> verified
  auto plan_verified = [&]() -> Result<placement::RecoveryPlan> {
    for (;;) {
      auto tp = Clock::now();
      auto planned = placement::PlanRecovery(topology, pl.groups(), input);
      plan_s += SecondsSince(tp);
      if (!planned.ok()) {
        if (planned.status().code() == StatusCode::kUnrecoverable) {
          std::string why = "nothing to restore: " + planned.status().message();
          for (const auto& n : report.notes) why += "; " + n;
          return Status::NotFound(why);
        }
        return planned.status();
      }
      auto tv = Clock::now();
      const uint64_t v = planned->version;
      std::vector<int64_t> bad;  // BadItem fields, kBadFields each
      if (const std::optional<int> slot = store_.FindVersion(v)) {
        auto check = [&](int region) {
          auto [it, fresh] = region_ok.try_emplace({*slot, region}, false);
          if (fresh) {
            Status s = store_.VerifyRegion(*slot, region);
            it->second = s.ok();
            if (!s.ok()) report.notes.push_back(s.ToString());
          }
          return it->second;
        };
        bool shard_ok = true;
        for (size_t i = 0; i < entries_.size() && shard_ok; ++i) {
          shard_ok = check(static_cast<int>(i));
        }
        auto add = [&](placement::ItemKind kind, int owner, int stripe, int row) {
          bad.insert(bad.end(),
                     {static_cast<int64_t>(v), static_cast<int64_t>(kind), owner, stripe, row});
        };
        if (!shard_ok) add(placement::ItemKind::kShard, me_node, -1, -1);
        for (const HeldRegion& h : pl.held()) {
          if (PlanReads(*planned, me_node, me_lane, h.item) && !check(h.region)) {
            add(h.item.kind, h.item.owner, h.item.stripe, h.item.row);
          }
        }
      }
      MEMENTO_ASSIGN_OR_RETURN(auto outcomes,
                               transport_->Allgather(bad.data(), bad.size() * sizeof(int64_t)));
      bool changed = false;
      for (int node = 0; node < pl.num_nodes(); ++node) {
        for (int lane = 0; lane < pl.lanes(); ++lane) {
          const auto& raw = outcomes.at(pl.rank_of(node, lane));
          if (raw.size() % (kBadFields * sizeof(int64_t)) != 0) {
            return Status::Corruption("restore verification record of " +
                                      std::to_string(raw.size()) + " bytes");
          }
          std::vector<int64_t> f(raw.size() / sizeof(int64_t));
          if (!raw.empty()) std::memcpy(f.data(), raw.data(), raw.size());
          for (size_t i = 0; i < f.size(); i += kBadFields) {
            BadItem b;
            b.node = node;
            b.lane = lane;
            b.version = static_cast<uint64_t>(f[i]);
            b.kind = static_cast<placement::ItemKind>(f[i + 1]);
            b.owner = static_cast<int>(f[i + 2]);
            b.stripe = static_cast<int>(f[i + 3]);
            b.row = static_cast<int>(f[i + 4]);
            if (mark_bad(b)) changed = true;
          }
        }
      }
      inventory_s += SecondsSince(tv);
      if (!changed) return planned;
    }
  };

  // 3. Execute; an end-to-end mismatch marks the copies it was rebuilt from
  // as bad and plans again (another replica, another survivor set), before
  // any fallback to the remote tier.
  placement::RecoveryPlan plan;
  uint64_t version = 0;
  std::vector<Transfer> transfers;
  std::vector<ReduceChain> chains;
  std::vector<uint32_t> crcs;           // this rank's restored entries
  std::vector<uint8_t> restored_shard;  // replica / decode: the shard as rebuilt
  std::map<std::pair<int, int>, std::vector<EntrySeal>> seals_of;  // (node, lane)
  std::optional<int> my_slot;
  RestoreSource source = RestoreSource::kLocalMemory;
  bool all_local = true;
  std::atomic<uint64_t> sent{0};
  uint64_t received_bytes = 0;
  double transfer_s = 0;
  for (int attempt = 0;; ++attempt) {
    auto planned = plan_verified();  // its errors name the problem already
    if (!planned.ok()) return planned.status();
    plan = std::move(planned).value();
    report.plan_json = plan.ToJson();
    report.plan_read_bytes_per_node = plan.read_bytes_per_node;
    version = plan.version;
    MEMENTO_RETURN_IF_ERROR(RunHook(Stage::kRecover, version));
    t0 = Clock::now();
    const placement::ShardSource* mine = nullptr;
    all_local = true;
    for (const auto& s : plan.shards) {
      if (s.node == me_node && s.lane == me_lane) mine = &s;
      if (s.kind != placement::SourceKind::kLocal) all_local = false;
    }
    MEMENTO_CHECK(mine != nullptr);
    transfers.clear();
    for (const auto& s : plan.shards) {
      if (s.kind != placement::SourceKind::kReplica) continue;
      Transfer t;
      t.src = pl.rank_of(s.from_node, s.lane);
      t.dst = pl.rank_of(s.node, s.lane);
      t.replica = true;
      t.owner = s.node;
      transfers.push_back(t);
    }
    crcs.clear();
    restored_shard.clear();
    // Entry seals of every owner, from any node that keeps them (entry_seals.h).
    seals_of.clear();
    MEMENTO_RETURN_IF_ERROR(GatherEntrySeals(version, &seals_of));
    bool mismatch = false;  // this rank's rebuilt shard failed the end-to-end check
    auto verified = [&](const std::vector<uint8_t>& shard) -> Status {
      auto it = seals_of.find({me_node, me_lane});
      if (it == seals_of.end()) {
        return Status::Corruption(
            "no entry seals of this shard survive: cannot check it end to end");
      }
      std::vector<uint64_t> sizes;
      std::vector<std::string> names;
      for (const auto& e : entries_) {
        sizes.push_back(e.bytes);
        names.push_back(e.name);
      }
      Status s = VerifyShardAgainstSeals(shard, sizes, names, it->second);
      if (!s.ok()) {
        mismatch = true;
        return s;
      }
      return ScatterShardToBuffers(shard, &crcs);
    };
    my_slot = store_.FindVersion(version);
    const uint64_t my_shard_bytes = pl.shard_bytes(me_node, me_lane);

    // What this rank sends for transfer t: its replica of the owner's shard,
    // straight from the slot, with the crc32c it was sealed with (the
    // inventory verified it against these bytes for this plan).
    auto payload = [&](const Transfer& t) -> Result<RegionView> {
      if (!my_slot) return Status::NotFound("v" + std::to_string(version) + " not in this store");
      if (!t.replica) return Status::Internal("restore transfer that is not a replica");
      const int region = pl.ReplicaRegion(t.owner);
      if (region < 0)
        return Status::Internal("no replica region for node " + std::to_string(t.owner));
      return store_.ReadRegion(*my_slot, region);
    };
    // Payloads travel in pieces of one chunk (the MPI count limit is 2 GiB; a
    // shard may be larger), received in order into one buffer and hashed as
    // they land.
    const uint64_t piece_bytes = config_.chunk_bytes;

    std::vector<std::thread> senders;
    std::vector<Status> send_status(transfers.size());
    for (size_t i = 0; i < transfers.size(); ++i) {
      if (transfers[i].src != me) continue;
      senders.emplace_back([&, i] {
        const Transfer& t = transfers[i];
        const int tag = kTagRecoverBase + 2 * static_cast<int>(i % kRecoverTagSpan);
        Result<RegionView> view = payload(t);
        TransferHeader h;
        h.ok = view.ok() ? 1 : 0;
        h.length = view.ok() ? view->length : 0;
        h.crc = view.ok() ? view->crc : 0;
        Status w = transport_->Send(t.dst, tag, &h, sizeof(h));
        for (uint64_t off = 0; w.ok() && h.ok && off < h.length; off += piece_bytes) {
          const uint64_t n = std::min(piece_bytes, h.length - off);
          w = transport_->Send(t.dst, tag + 1, view->data + off, n);
          if (w.ok()) sent += n;
        }
        send_status[i] = view.ok() ? w : view.status();
      });
    }
    // Receive in list order.
    Status got = Status::Ok();
    std::map<size_t, std::vector<uint8_t>> received;  // transfer index -> payload
    for (size_t i = 0; i < transfers.size(); ++i) {
      const Transfer& t = transfers[i];
      if (t.dst != me) continue;
      const int tag = kTagRecoverBase + 2 * static_cast<int>(i % kRecoverTagSpan);
      TransferHeader h;
      auto n = transport_->Recv(t.src, tag, &h, sizeof(h));
      if (!n.ok()) {
        if (got.ok())
          got = n.status().WithContext("restore: header from rank " + std::to_string(t.src));
        continue;
      }
      if (!h.ok) {
        if (got.ok())
          got = Status::Unavailable("restore: rank " + std::to_string(t.src) +
                                    " cannot serve its part");
        continue;
      }
      std::vector<uint8_t> buf(h.length);
      erasure::Crc32cStream crc;
      Status m = Status::Ok();
      for (uint64_t off = 0; m.ok() && off < h.length; off += piece_bytes) {
        const uint64_t n = std::min(piece_bytes, h.length - off);
        auto r = transport_->Recv(t.src, tag + 1, buf.data() + off, n);
        if (!r.ok()) {
          m = r.status();
        } else if (*r != n) {
          m = Status::Corruption("restore: piece of " + std::to_string(*r) + " bytes from rank " +
                                 std::to_string(t.src) + ", expected " + std::to_string(n));
        } else {
          crc.Update(buf.data() + off, n);
        }
      }
      if (m.ok() && crc.value() != h.crc) {
        m = Status::Corruption("restore: part from rank " + std::to_string(t.src) +
                               " fails its crc32c");
      }
      if (!m.ok()) {
        if (got.ok()) got = m;
        continue;
      }
      received_bytes += buf.size();
      received[i] = std::move(buf);
    }
    for (auto& th : senders) th.join();
    for (const Status& s : send_status) {
      if (!s.ok() && got.ok()) got = s.WithContext("restore: sending");
    }

    // Decodes: partial products reduced along the input holders (partial_decode.h).
    chains.clear();
    std::vector<DecodeChainInfo> chain_info;
    std::vector<std::vector<uint8_t>> chain_rows;
    ReduceBytes chain_bytes;
    {
      Status built = BuildDecodeChains(plan, pl, &chains, &chain_info);
      if (built.ok()) {
        auto reader = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len,
                          uint8_t* dst) -> Status {
          if (!my_slot)
            return Status::NotFound("v" + std::to_string(version) + " not in this store");
          const placement::StripeDecode& dec = plan.decodes[chain_info[c].decode];
          const placement::StripeRow& in = dec.inputs[term.row_id];
          if (!in.parity) {
            return ReadShardRange(*my_slot, nullptr,
                                  static_cast<uint64_t>(in.row) * dec.piece_bytes + off, len, dst);
          }
          const int region = pl.ParityRegion(dec.stripe, in.row);
          if (region < 0) return Status::Internal("no parity region for the plan's row");
          MEMENTO_ASSIGN_OR_RETURN(RegionView view, store_.ReadRegion(*my_slot, region));
          if (off + len > view.length) return Status::Corruption("parity region too short");
          std::memcpy(dst, view.data + off, len);
          return Status::Ok();
        };
        built = RunReduceChains(transport_.get(), chains,
                                static_cast<int>(2 * (transfers.size() % kRecoverTagSpan)),
                                config_.chunk_bytes, reader, &chain_rows, &chain_bytes);
      }
      if (!built.ok() && got.ok()) got = built.WithContext("restore: decode");
    }
    sent += chain_bytes.sent;
    received_bytes += chain_bytes.received;

    // This rank's shard.
    Status local = got;
    source = RestoreSource::kLocalMemory;
    if (local.ok()) {
      switch (mine->kind) {
        case placement::SourceKind::kLocal:
          report.source_detail = "local";
          local = my_slot ? CopySlotToBuffers(*my_slot, version, &crcs)
                          : Status::NotFound("local copy vanished");
          break;
        case placement::SourceKind::kRemote:
          source = RestoreSource::kRemote;
          report.source_detail = "remote";
          local =
              remote_ ? ReadRemoteToBuffers(version, &crcs) : Status::NotFound("no remote tier");
          break;
        case placement::SourceKind::kReplica: {
          source = RestoreSource::kReplica;
          report.source_detail = "replica from node " + std::to_string(mine->from_node);
          local = Status::Corruption("no replica received");
          for (auto& [i, buf] : received) {
            if (transfers[i].replica && transfers[i].owner == me_node) {
              local =
                  buf.size() == my_shard_bytes
                      ? verified(buf)
                      : Status::Corruption("replica of " + std::to_string(buf.size()) +
                                           " bytes, shard has " + std::to_string(my_shard_bytes));
              restored_shard = std::move(buf);  // for the re-protect; not copied
            }
          }
          break;
        }
        case placement::SourceKind::kDecode: {
          source = RestoreSource::kDecode;
          report.source_detail = "decode of " + std::to_string(mine->decodes.size()) + " stripes";
          std::vector<uint8_t> shard(my_shard_bytes, 0);
          for (size_t c = 0; c < chains.size(); ++c) {
            if (chains[c].dst_rank != me) continue;
            const placement::StripeDecode& dec = plan.decodes[chain_info[c].decode];
            const placement::StripeRow& rb = dec.rebuilt[chain_info[c].rebuilt];
            const uint64_t at = static_cast<uint64_t>(rb.row) * dec.piece_bytes;
            MEMENTO_CHECK_LE(at + chain_rows[c].size(), shard.size());
            std::memcpy(shard.data() + at, chain_rows[c].data(), chain_rows[c].size());
          }
          if (local.ok()) local = verified(shard);
          restored_shard = std::move(shard);
          break;
        }
      }
    }
    // Agree: 0 restored, 1 end-to-end mismatch, 2 any other failure.
    const uint8_t outcome = local.ok() ? 0 : (mismatch ? 1 : 2);
    MEMENTO_ASSIGN_OR_RETURN(auto outcomes, transport_->Allgather(&outcome, 1));
    transfer_s += SecondsSince(t0);
    bool everyone = true, other_failure = false;
    for (const auto& o : outcomes) {
      if (o.size() != 1) return Status::Corruption("restore outcome record");
      everyone = everyone && o[0] == 0;
      other_failure = other_failure || o[0] > 1;
    }
    if (everyone) {
      report.version = version;
      break;
    }
    if (!local.ok()) {
      report.notes.push_back("v" + std::to_string(version) +
                             " from memory failed: " + local.ToString());
    }
    // Every failure an end-to-end mismatch: the inputs of the mismatched
    // shards are bad copies; plan again without them.
    bool retry = !other_failure;
    if (retry) {
      bool changed = false;
      for (const placement::ShardSource& s : plan.shards) {
        if (outcomes.at(pl.rank_of(s.node, s.lane))[0] != 1) continue;
        std::string from;
        if (s.kind == placement::SourceKind::kReplica) {
          changed |= mark_bad(
              {s.from_node, s.lane, version, placement::ItemKind::kReplica, s.node, -1, -1});
          from = "replica from node " + std::to_string(s.from_node);
        } else if (s.kind == placement::SourceKind::kDecode) {
          for (int d : s.decodes) {
            const placement::StripeDecode& dec = plan.decodes.at(d);
            // Data rows are survivors' shards, checked against their own
            // seals; only parity rows can carry what the region crc missed.
            for (const placement::StripeRow& in : dec.inputs) {
              if (!in.parity) continue;
              changed |= mark_bad({in.node, dec.lane, version, placement::ItemKind::kParity, -1,
                                   dec.stripe, in.row});
            }
          }
          from = "decode";
        }
        report.notes.push_back("v" + std::to_string(version) + ": node " + std::to_string(s.node) +
                               " lane " + std::to_string(s.lane) + " rebuilt by " + from +
                               " fails the end-to-end check; its sources are marked bad and "
                               "the restore is planned again (attempt " +
                               std::to_string(attempt + 2) + ")");
      }
      retry = changed;
    }
    if (retry) continue;
    if (remote_agreed < 0) {
      std::string why = "restore of v" + std::to_string(version) + " failed";
      for (const auto& n : report.notes) why += "; " + n;
      return Status::Unavailable(why);
    }
    // Fall back to the remote tier for everyone.
    const uint64_t rv = static_cast<uint64_t>(remote_agreed);
    Status r = ReadRemoteToBuffers(rv, &crcs);
    MEMENTO_ASSIGN_OR_RETURN(bool ok, transport_->AllTrue(r.ok()));
    if (!ok) return r.ok() ? Status::Unavailable("remote restore failed on another rank") : r;
    report.version = rv;
    source = RestoreSource::kRemote;
    report.source_detail = "remote (fallback)";
    all_local = false;
    break;
  }
  report.inventory_s = inventory_s;
  report.plan_s = plan_s;
  report.transfer_s = transfer_s;
  report.bytes_sent = sent.load();
  report.bytes_received = received_bytes;
  for (size_t i = 0; i < entries_.size(); ++i) {
    report.entries.push_back({entries_[i].name, entries_[i].bytes, crcs[i], source});
  }

  // 5. Re-protect (reprotect.h): nothing when nothing was lost; only what the
  // lost nodes held when that is possible; else the whole version again.
  t0 = Clock::now();
  const bool restored_from_plan = report.version == version;
  if (all_local && plan.reprotect.empty() && restored_from_plan) {
    (void)store_.MarkCommitted(*my_slot, version);
    std::lock_guard<std::mutex> lock(mu_);
    latest_committed_ = version;
    committed_slot_ = *my_slot;
  } else {
    bool done = false;
    if (restored_from_plan && MinimalReprotectPossible(plan)) {
      ReduceBytes rb;
      int slot = -1;
      const int tag_base =
          static_cast<int>((2 * transfers.size() + chains.size()) % kRecoverTagSpan);
      Status s = ReprotectMinimal(plan, restored_shard.empty() ? nullptr : &restored_shard,
                                  seals_of, tag_base, &rb, &slot);
      if (s.ok()) s = RunHook(Stage::kReprotect, version);
      report.reprotect_bytes_sent = rb.sent;
      report.reprotect_bytes_received = rb.received;
      MEMENTO_ASSIGN_OR_RETURN(bool all_sealed, transport_->AllTrue(s.ok()));
      if (all_sealed) {
        Status c = store_.MarkCommitted(slot, version);
        if (!c.ok())
          report.notes.push_back("re-protected v" + std::to_string(version) +
                                 " not marked committed: " + c.ToString());
        std::lock_guard<std::mutex> lock(mu_);
        latest_committed_ = version;
        committed_slot_ = slot;
        report.reprotect_mode = "minimal";
        done = true;
      } else {
        if (slot >= 0 && std::find(plan.failed_nodes.begin(), plan.failed_nodes.end(), me_node) !=
                             plan.failed_nodes.end()) {
          (void)store_.Invalidate(slot);
        }
        report.notes.push_back("minimal re-protect failed (" +
                               (s.ok() ? std::string("on another rank") : s.ToString()) +
                               "), re-protecting the whole version");
      }
    }
    if (!done) {
      Status s = Reseed(report.version);
      report.reprotect_mode = "full";
      report.reprotect_bytes_sent += protect_stage_->bytes_sent();
      report.reprotect_bytes_received += protect_stage_->bytes_received();
      if (!s.ok()) report.notes.push_back("not re-protected: " + s.ToString());
    }
  }
  // Bytes per node, for the report (one small allgather).
  {
    const uint64_t mine[2] = {report.bytes_received, report.reprotect_bytes_received};
    MEMENTO_ASSIGN_OR_RETURN(auto per_rank, transport_->Allgather(mine, sizeof(mine)));
    report.bytes_received_per_node.assign(pl.num_nodes(), 0);
    report.reprotect_bytes_received_per_node.assign(pl.num_nodes(), 0);
    for (int node = 0; node < pl.num_nodes(); ++node) {
      for (int lane = 0; lane < pl.lanes(); ++lane) {
        const auto& raw = per_rank.at(pl.rank_of(node, lane));
        if (raw.size() != sizeof(mine)) return Status::Corruption("restore byte counts");
        uint64_t theirs[2];
        std::memcpy(theirs, raw.data(), sizeof(theirs));
        report.bytes_received_per_node[node] += theirs[0];
        report.reprotect_bytes_received_per_node[node] += theirs[1];
      }
    }
  }
  report.reprotect_s = SecondsSince(t0);
  Log(LogLevel::kInfo, report.ToString() + " [" + report.source_detail + "; lost nodes " +
                           std::to_string(report.lost_nodes.size()) + "; sent " +
                           std::to_string(report.bytes_sent) + " B, received " +
                           std::to_string(report.bytes_received) + " B]");
  Log(LogLevel::kDebug, "recovery report " + report.ToJson());
  return report;
}

}  // namespace memento::runtime
