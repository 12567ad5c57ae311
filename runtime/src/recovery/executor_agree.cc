// The restore's fourth step (RecoveryExecutor): every rank's outcome agreed in one
// allgather; on a mismatch the copies served and the sources blamed are marked bad
// and the plan drops them, down to the remote tier.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "recovery/recovery_executor.h"
#include "recovery/report_text.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

// An inventory item of `version` to mark bad: `kind` held by `node`, `lane`.
placement::InventoryItem ItemOf(uint64_t version, placement::ItemKind kind, int node, int lane) {
  placement::InventoryItem item;
  item.version = version;
  item.kind = kind;
  item.node = node;
  item.lane = lane;
  return item;
}

}  // namespace

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
    const std::string shard = VersionText(plan_.version) + ": node " + std::to_string(s.node) +
                              " lane " + std::to_string(s.lane);
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
  report_.notes.push_back(VersionText(plan_.version) +
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
  report_.notes.push_back("remote " + VersionText(plan_.version) +
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
    report_.notes.push_back("remote " + VersionText(*v) + ": " +
                            (r.ok() ? std::string("failed on another rank") : r.ToString()));
  }
  if (!elastic.ok()) return elastic;
  std::string why = "restore of " + VersionText(plan_.version) + " failed";
  for (const auto& n : report_.notes) why += "; " + n;
  return Status::Unavailable(why);
}

}  // namespace memento::runtime
