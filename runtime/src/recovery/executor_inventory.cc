// The restore's first step (RecoveryExecutor): every rank's inventory in one
// allgather, with the caller's rider (the engine's finished-run view) and the
// entry seals of its newest committed version, and the entry seals of the
// planned version (taken from that allgather when every rank's came along,
// else gathered on their own).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "recovery/inventory.h"
#include "recovery/recovery_executor.h"
#include "transport/wire.h"

namespace memento::runtime {

Status RecoveryExecutor::TakeInventory() {
  // The inventory, the caller's rider, then the seals records of this rank's
  // newest committed version, which the plan usually restores:
  // GatherEntrySeals then needs no collective of its own. Layout: u32
  // inventory length, the inventory, u32 rider length, the rider, u64
  // version, u64 lineage, u32 count and count x (u64 version, u64 lineage) of
  // the versions this rank vouches for, the records.
  const wire::Inventory inventory = MyInventory();
  const std::vector<uint8_t> inv = wire::EncodeInventory(inventory);
  SealsGuess guess;
  for (size_t i = 0; i < inventory.items.size(); ++i) {
    if (i >= inventory.item_committed.size() || !inventory.item_committed[i]) continue;
    const uint64_t l = inventory.item_lineage.at(i), v = inventory.items[i].version;
    if (std::make_pair(l, v) > std::make_pair(guess.lineage, guess.version)) {
      guess.lineage = l;
      guess.version = v;
    }
  }
  if (guess.version != 0) guess.records = SealsRecordsFor(guess.version, guess.lineage);
  for (const SlotState& st : parts_.store->Inventory().slots) {
    if ((st.sealed || st.writing) && !SealsRecordsFor(st.version, st.lineage).empty()) {
      guess.vouches.emplace_back(st.version, st.lineage);
    }
  }
  std::vector<uint8_t> blob;
  auto put = [&blob](const void* p, size_t n) {
    blob.insert(blob.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const uint32_t inv_len = static_cast<uint32_t>(inv.size());
  const uint32_t count = static_cast<uint32_t>(guess.vouches.size());
  const uint32_t rider_len = static_cast<uint32_t>(parts_.rider.size());
  put(&inv_len, sizeof(inv_len));
  put(inv.data(), inv.size());
  put(&rider_len, sizeof(rider_len));
  put(parts_.rider.data(), parts_.rider.size());
  put(&guess.version, sizeof(uint64_t));
  put(&guess.lineage, sizeof(uint64_t));
  put(&count, sizeof(count));
  for (const auto& [v, l] : guess.vouches) {
    put(&v, sizeof(v));
    put(&l, sizeof(l));
  }
  put(guess.records.data(), guess.records.size());
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(blob.data(), blob.size()));
  std::vector<wire::Inventory> theirs(all.size());
  std::vector<std::vector<uint8_t>> riders(all.size());
  guesses_.assign(all.size(), SealsGuess());
  for (int node = 0; node < pl_.num_nodes(); ++node) {
    for (int lane = 0; lane < pl_.lanes(); ++lane) {
      const int rank = pl_.rank_of(node, lane);
      const std::vector<uint8_t>& raw = all.at(rank);
      size_t at = 0;
      auto get = [&](void* p, size_t n) {
        if (raw.size() - at < n) return false;
        std::memcpy(p, raw.data() + at, n);
        at += n;
        return true;
      };
      uint32_t len = 0, vouched = 0;
      SealsGuess& g = guesses_[rank];
      bool ok = get(&len, sizeof(len)) && raw.size() - at >= len;
      if (ok) {
        MEMENTO_ASSIGN_OR_RETURN(
            theirs.at(rank),
            wire::DecodeInventory(std::vector<uint8_t>(raw.begin() + at, raw.begin() + at + len),
                                  node, lane));
        at += len;
      }
      ok = ok && get(&len, sizeof(len)) && raw.size() - at >= len;
      if (ok) {
        riders[rank].assign(raw.begin() + at, raw.begin() + at + len);
        at += len;
      }
      ok = ok && get(&g.version, sizeof(uint64_t)) && get(&g.lineage, sizeof(uint64_t)) &&
           get(&vouched, sizeof(vouched)) && (raw.size() - at) / 16 >= vouched;
      for (uint32_t k = 0; ok && k < vouched; ++k) {
        uint64_t v = 0, l = 0;
        ok = get(&v, sizeof(v)) && get(&l, sizeof(l));
        g.vouches.emplace_back(v, l);
      }
      if (!ok) {
        return Status::Corruption("restore: rank " + std::to_string(rank) +
                                  "'s inventory record is cut short");
      }
      g.records.assign(raw.begin() + at, raw.end());
    }
  }
  if (parts_.on_gathered) MEMENTO_RETURN_IF_ERROR(parts_.on_gathered(riders));
  return ChooseLineage(theirs);
}

wire::Inventory RecoveryExecutor::MyInventory() {
  wire::Inventory mine = StoreItems(*parts_.store, pl_, &report_.notes);
  for (const auto& [version, lineage] : parts_.io->CompleteRemoteVersions(&report_.notes)) {
    mine.remote_complete.push_back(version);
    mine.remote_lineage.push_back(lineage);
  }
  return mine;
}

Status RecoveryExecutor::ChooseLineage(const std::vector<wire::Inventory>& theirs) {
  std::vector<const wire::Inventory*> all;
  for (const wire::Inventory& inv : theirs) all.push_back(&inv);
  const LineageChoice choice = ChooseNewestLineage(all, all);
  MEMENTO_RETURN_IF_ERROR(CheckRemoteListingsAgree(choice, report_.notes));
  const uint64_t newest = choice.newest.value_or(0);
  // Only the newest run's versions are candidates (lineage ids grow with the
  // time a run started); another run's are passed over, whatever their numbers.
  lineage_ = newest;
  if (choice.newest) *parts_.lineage = newest;
  committed_seen_ = false;
  for (const wire::Inventory& inv : theirs) {
    committed_seen_ = committed_seen_ || (choice.newest && wire::HoldsCommitted(inv, newest));
  }
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
  return Status::Ok();
}

std::vector<uint8_t> RecoveryExecutor::SealsRecordsFor(uint64_t version, uint64_t lineage) const {
  // The seals of `version` this rank can vouch for: the sealed crc32c of its
  // own entries (their records are checked; a payload that differs from them
  // shows when it is copied), the verified seals regions it keeps for peers.
  std::vector<uint8_t> mine;
  NodeStore* store = parts_.store;
  if (const std::optional<int> slot = store->FindVersion(version, lineage)) {
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
  return mine;
}

bool RecoveryExecutor::GuessesCoverPlan() const {
  const std::pair<uint64_t, uint64_t> planned(plan_.version, lineage_);
  for (const SealsGuess& g : guesses_) {
    if (std::make_pair(g.version, g.lineage) == planned) continue;
    if (std::find(g.vouches.begin(), g.vouches.end(), planned) != g.vouches.end()) return false;
  }
  return true;
}

Status RecoveryExecutor::GatherEntrySeals() {
  seals_of_.clear();
  if (GuessesCoverPlan()) {
    std::vector<std::vector<uint8_t>> all(guesses_.size());
    const std::pair<uint64_t, uint64_t> planned(plan_.version, lineage_);
    for (size_t r = 0; r < guesses_.size(); ++r) {
      if (std::make_pair(guesses_[r].version, guesses_[r].lineage) == planned) {
        all[r] = guesses_[r].records;
      }
    }
    MEMENTO_ASSIGN_OR_RETURN(seals_of_, DecodeSeals(all));
    return Status::Ok();
  }
  ++report_.stats.seals_exchanges;
  MEMENTO_ASSIGN_OR_RETURN(
      seals_of_, ExchangeSeals(parts_.transport, SealsRecordsFor(plan_.version, lineage_)));
  return Status::Ok();
}

}  // namespace memento::runtime
