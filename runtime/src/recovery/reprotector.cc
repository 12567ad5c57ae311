#include "recovery/reprotector.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/erasure/rs_codec.h"
#include "snapshot/crc32c_combine.h"

namespace memento::runtime {

bool MinimalReprotectPossible(const placement::RecoveryPlan& plan) {
  if (plan.memory_cannot_serve) return false;
  const std::set<int> failed(plan.failed_nodes.begin(), plan.failed_nodes.end());
  for (const placement::ShardSource& s : plan.shards) {
    if (s.kind == placement::SourceKind::kRemote) return false;
    if (s.kind != placement::SourceKind::kLocal && failed.count(s.node) == 0) return false;
  }
  for (const placement::ReprotectItem& item : plan.reprotect) {
    if (failed.count(item.node) == 0) return false;
  }
  return true;
}

Status BuildReprotectChains(const placement::RecoveryPlan& plan, const ProtectionLayout& layout,
                            std::vector<ReduceChain>* chains,
                            std::vector<ReprotectChainInfo>* info) {
  chains->clear();
  info->clear();
  const auto& groups = layout.groups();
  for (size_t i = 0; i < plan.reprotect.size(); ++i) {
    const placement::ReprotectItem& item = plan.reprotect[i];
    ReduceChain chain;
    chain.dst_rank = layout.rank_of(item.node, item.lane);
    ReprotectChainInfo ci;
    ci.item = static_cast<int>(i);
    if (item.kind == placement::ItemKind::kReplica) {
      chain.length = layout.shard_bytes(item.owner, item.lane);
      chain.terms.push_back({layout.rank_of(item.owner, item.lane), -1, 1});
    } else if (item.kind == placement::ItemKind::kParity) {
      const placement::ProtectionGroup& g = groups.group(item.group);
      const int k = g.data;
      ci.piece_bytes = layout.map(item.lane).piece_bytes(item.group);
      chain.length = ci.piece_bytes;
      std::vector<uint8_t> coefs(k, 1);  // xor: the parity row is all ones
      if (layout.scheme().kind() == placement::SchemeKind::kReedSolomon) {
        MEMENTO_ASSIGN_OR_RETURN(auto codec, erasure::RsCodec::Create(k, g.parity));
        for (int r = 0; r < k; ++r) {
          coefs[r] = codec.generator().at(static_cast<size_t>(k + item.row) * k + r);
        }
      }
      for (int r = 0; r < k; ++r) {
        const int node = groups.DataRowNode(item.group, item.stripe, r);
        chain.terms.push_back({layout.rank_of(node, item.lane), r, coefs[r]});
      }
    } else {
      return Status::Internal("re-protect item of kind shard");
    }
    if (chain.length == 0) continue;
    chains->push_back(std::move(chain));
    info->push_back(ci);
  }
  return Status::Ok();
}

Reprotector::Reprotector(Parts parts) : parts_(std::move(parts)) {
  MEMENTO_CHECK(parts_.lineage != nullptr);
}

Status Reprotector::Minimal(const placement::RecoveryPlan& plan, const ShardLanding* landed,
                            const SealsByOwner& seals_of, int tag_base, ReduceBytes* bytes,
                            int* slot_out) {
  const ProtectionLayout& pl = *parts_.layout;
  const uint64_t version = plan.version;
  const bool fresh = std::find(plan.failed_nodes.begin(), plan.failed_nodes.end(), pl.node()) !=
                     plan.failed_nodes.end();
  *slot_out = -1;
  // 1. A lost node's rank: its shard already landed in the slot it fills; a
  // survivor serves from its slot of the version.
  Status local;
  int slot = -1;
  if (fresh) {
    if (landed == nullptr || landed->slot() < 0) {
      local = Status::Internal("lost node's rank has no restored shard in a slot");
    } else {
      slot = landed->slot();
    }
  } else if (const std::optional<int> found = parts_.store->FindVersion(version, *parts_.lineage)) {
    slot = *found;
  } else {
    local = Status::NotFound("v" + std::to_string(version) + " vanished from this store");
  }

  // 2. Every rank takes part in the chains, whatever its own state. A lost
  // node's rank receives each rebuilt item straight into its held region of
  // the slot.
  std::vector<ReduceChain> chains;
  std::vector<ReprotectChainInfo> info;
  Status built = BuildReprotectChains(plan, pl, &chains, &info);
  std::vector<uint8_t*> into;
  std::vector<int> chain_of;  // per held region
  if (built.ok() && fresh && local.ok()) {
    local = HeldTargets(plan, slot, chains, info, &into, &chain_of);
  }
  into.resize(chains.size(), nullptr);
  // Each chain's crc32c, combined from its pieces' as they land (in order).
  std::vector<uint32_t> chain_crc(chains.size(), 0);
  if (built.ok()) {
    const bool can_read = local.ok() && slot >= 0;
    // A term's row within this rank's shard: all of it (a replica) or one
    // data row; a lost node's shard lies in its landing, a survivor's in its
    // sealed slot.
    const ShardLanding* const from = fresh ? landed : nullptr;
    auto shard_offset = [&](int c, const ReduceTerm& term, uint64_t off) {
      return (term.row_id < 0 ? 0 : static_cast<uint64_t>(term.row_id) * info[c].piece_bytes) + off;
    };
    auto reader = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len,
                      uint8_t* dst) -> Status {
      if (!can_read) {
        return Status::Unavailable("this rank has no copy of v" + std::to_string(version));
      }
      return parts_.io->ReadRange(slot, from, shard_offset(c, term, off), len, dst);
    };
    RowSink sink;
    sink.span = [&](int c, uint64_t off, uint64_t) {
      return into[c] != nullptr ? into[c] + off : nullptr;
    };
    sink.landed = [&](int c, uint64_t, uint64_t len, uint32_t crc) {
      chain_crc[c] = Crc32cCombine(chain_crc[c], crc, len);
    };
    sink.write = [&](int c, uint64_t, const uint8_t*, uint64_t) {
      return Status::Internal("re-protect chain " + std::to_string(c) +
                              " has no held region to land in on rank " +
                              std::to_string(parts_.transport->rank()));
    };
    // Rows are folded (and a first term's sent) straight from where they
    // lie; the reader copies only pieces that straddle two entries.
    ReduceOptions options;
    options.span = [&](int c, const ReduceTerm& term, uint64_t off,
                       uint64_t len) -> const uint8_t* {
      return can_read ? parts_.io->SpanOfRange(slot, from, shard_offset(c, term, off), len)
                      : nullptr;
    };
    std::vector<std::vector<uint8_t>> unused;
    built = RunReduceChains(parts_.transport, chains, tag_base, parts_.chunk_bytes, reader, &unused,
                            bytes, &sink, &options);
  }
  if (local.ok()) local = built;

  // 3. A lost node's rank: the seals of what it holds, then the entry seals,
  // then the slot.
  if (fresh && local.ok()) local = SealHeld(slot, chain_of, chain_crc);
  if (fresh && local.ok()) local = WriteSeals(slot, seals_of);
  if (fresh && local.ok()) local = parts_.store->SealRegion(slot, pl.topology_region(), 0, 0);
  if (fresh && local.ok()) local = parts_.store->SealSlot(slot, version);
  if (!local.ok() && fresh && slot >= 0) (void)parts_.store->Invalidate(slot);
  if (local.ok()) *slot_out = slot;
  return local;
}

Status Reprotector::HeldTargets(const placement::RecoveryPlan& plan, int slot,
                                const std::vector<ReduceChain>& chains,
                                const std::vector<ReprotectChainInfo>& info,
                                std::vector<uint8_t*>* into, std::vector<int>* chain_of) {
  NodeStore* store = parts_.store;
  const int me = parts_.transport->rank();
  into->assign(chains.size(), nullptr);
  chain_of->clear();
  for (const HeldRegion& h : parts_.layout->held()) {
    chain_of->push_back(-1);
    if (h.capacity == 0) continue;
    int chain = -1;
    for (size_t c = 0; c < chains.size(); ++c) {
      const placement::ReprotectItem& item = plan.reprotect[info[c].item];
      if (chains[c].dst_rank != me || item.kind != h.item.kind) continue;
      const bool match = item.kind == placement::ItemKind::kReplica
                             ? item.owner == h.item.owner
                             : item.stripe == h.item.stripe && item.row == h.item.row;
      if (match) chain = static_cast<int>(c);
    }
    const std::string& name = store->layout().regions[h.region].name;
    if (chain < 0) {
      return Status::Internal("held region " + name + " is not rebuilt by the re-protect plan");
    }
    if (chains[chain].length != h.capacity) {
      return Status::Internal("held region " + name + " has " + std::to_string(h.capacity) +
                              " bytes, its re-protect chain " +
                              std::to_string(chains[chain].length));
    }
    (*into)[chain] = store->MutableRegion(slot, h.region);
    chain_of->back() = chain;
  }
  return Status::Ok();
}

Status Reprotector::SealHeld(int slot, const std::vector<int>& chain_of,
                             const std::vector<uint32_t>& chain_crc) {
  const std::vector<HeldRegion>& held = parts_.layout->held();
  for (size_t i = 0; i < held.size(); ++i) {
    const uint32_t crc = chain_of[i] < 0 ? 0 : chain_crc[chain_of[i]];  // 0: an empty region
    MEMENTO_RETURN_IF_ERROR(parts_.store->SealRegion(slot, held[i].region, held[i].capacity, crc));
  }
  return Status::Ok();
}

Status Reprotector::WriteSeals(int slot, const SealsByOwner& seals_of) {
  NodeStore* store = parts_.store;
  const ProtectionLayout& pl = *parts_.layout;
  for (const SealsRegion& r : pl.seals()) {
    auto it = seals_of.find({r.owner, pl.lane()});
    if (it == seals_of.end()) {
      return Status::NotFound("no entry seals of node " + std::to_string(r.owner) + " survive");
    }
    const std::vector<uint8_t> rec = EncodeEntrySeals(it->second);
    if (rec.size() != r.capacity) {
      return Status::Corruption("entry seals of node " + std::to_string(r.owner) + " have " +
                                std::to_string(rec.size()) + " bytes, the region " +
                                std::to_string(r.capacity));
    }
    std::memcpy(store->MutableRegion(slot, r.region), rec.data(), rec.size());
    MEMENTO_RETURN_IF_ERROR(
        store->SealRegion(slot, r.region, rec.size(), erasure::Crc32c(rec.data(), rec.size())));
  }
  return Status::Ok();
}

Status Reprotector::Full(uint64_t version, ReduceBytes* bytes, bool background) {
  // A copy of `version` this store already holds (a survivor's) stays the
  // committed slot, so the new copy goes elsewhere and the old one is dropped
  // only once the new one is committed: a failure during the re-protect
  // still leaves `version` in memory. Without one, the slot of the newest
  // committed version is kept the same way.
  if (std::optional<int> held = parts_.store->FindVersion(version, *parts_.lineage)) {
    parts_.slots->SetCommitted(*held);
  }
  Status s = parts_.resnapshot(version, background);
  if (parts_.protect != nullptr) {
    bytes->sent += parts_.protect->bytes_sent();
    bytes->received += parts_.protect->bytes_received();
  }
  return s;
}

}  // namespace memento::runtime
