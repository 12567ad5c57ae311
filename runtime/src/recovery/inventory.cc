#include "recovery/inventory.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <string>

namespace memento::runtime {

wire::Inventory StoreItems(const NodeStore& store, const ProtectionLayout& layout,
                           std::vector<std::string>* notes) {
  wire::Inventory mine;
  const int node = layout.node(), lane = layout.lane();
  const int entries = static_cast<int>(layout.entry_count(node, lane));
  for (const SlotState& st : store.Inventory().slots) {
    if (!st.ok) {
      if (st.sealed) notes->push_back("slot " + std::to_string(st.slot) + ": " + st.problem);
      continue;
    }
    // A region's seal record is valid (the payload is verified later, only
    // where the plan reads it).
    auto record_ok = [&](int region) {
      if (region < 0 || static_cast<size_t>(region) >= st.regions.size()) return false;
      if (!st.regions[region].ok) {
        notes->push_back("slot " + std::to_string(st.slot) + " region " +
                         std::to_string(region) + ": " + st.regions[region].problem);
      }
      return st.regions[region].ok;
    };
    auto push = [&](placement::ItemKind kind, int owner, int stripe, int row, uint64_t bytes,
                    bool ok) {
      placement::InventoryItem item;
      item.version = st.version;
      item.kind = kind;
      item.owner = owner;
      item.stripe = stripe;
      item.row = row;
      item.bytes = bytes;
      item.crc_ok = ok;
      mine.items.push_back(item);
      mine.item_lineage.push_back(st.lineage);
      mine.item_committed.push_back(st.committed);
    };
    bool shard_ok = true;
    for (int i = 0; i < entries; ++i) shard_ok = record_ok(i) && shard_ok;
    push(placement::ItemKind::kShard, node, -1, -1, layout.shard_bytes(node, lane), shard_ok);
    for (const HeldRegion& h : layout.held()) {
      push(h.item.kind, h.item.owner, h.item.stripe, h.item.row, h.capacity, record_ok(h.region));
    }
  }
  return mine;
}

LineageChoice ChooseNewestLineage(const std::vector<const wire::Inventory*>& remote_of_rank,
                                  const std::vector<const wire::Inventory*>& items) {
  LineageChoice choice;
  // (version, lineage) -> the ranks that see it complete.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> seen_by;
  const int ranks = static_cast<int>(remote_of_rank.size());
  for (int r = 0; r < ranks; ++r) {
    const wire::Inventory* inv = remote_of_rank[r];
    std::set<std::pair<uint64_t, uint64_t>> seen;
    for (size_t i = 0; i < inv->remote_complete.size(); ++i) {
      seen.emplace(inv->remote_complete[i],
                   i < inv->remote_lineage.size() ? inv->remote_lineage[i] : 0);
    }
    for (const auto& vl : seen) seen_by[vl].push_back(r);
  }
  // Ordered as runs are: by lineage, then version.
  auto later = [](const std::pair<uint64_t, uint64_t>& a, const std::pair<uint64_t, uint64_t>& b) {
    return std::make_pair(a.second, a.first) > std::make_pair(b.second, b.first);
  };
  std::optional<std::pair<uint64_t, uint64_t>> newest_agreed, newest_disputed;
  std::vector<int> disputed_seen_by;
  for (const auto& [vl, by] : seen_by) {
    if (static_cast<int>(by.size()) == ranks) {
      choice.remote.insert(vl);
      if (!newest_agreed || later(vl, *newest_agreed)) newest_agreed = vl;
    } else if (!newest_disputed || later(vl, *newest_disputed)) {
      newest_disputed = vl;
      disputed_seen_by = by;
    }
  }
  auto see = [&](uint64_t lineage) {
    choice.newest = choice.newest ? std::max(*choice.newest, lineage) : lineage;
  };
  std::optional<std::pair<uint64_t, uint64_t>> newest_item;
  for (const wire::Inventory* inv : items) {
    for (size_t i = 0; i < inv->items.size(); ++i) {
      const std::pair<uint64_t, uint64_t> vl{inv->items[i].version,
                                             i < inv->item_lineage.size() ? inv->item_lineage[i]
                                                                          : 0};
      see(vl.second);
      if (!newest_item || later(vl, *newest_item)) newest_item = vl;
    }
  }
  for (const auto& [v, l] : choice.remote) see(l);
  if (newest_disputed && (!newest_agreed || later(*newest_disputed, *newest_agreed)) &&
      (!newest_item || later(*newest_disputed, *newest_item))) {
    std::string who, missing;
    for (int r = 0; r < ranks; ++r) {
      const bool has =
          std::find(disputed_seen_by.begin(), disputed_seen_by.end(), r) != disputed_seen_by.end();
      std::string& list = has ? who : missing;
      if (!list.empty()) list += ", ";
      list += std::to_string(r);
    }
    choice.disputed = "remote version " + std::to_string(newest_disputed->first) +
                      " is complete for rank(s) " + who + " but not seen by rank(s) " + missing;
  }
  return choice;
}

Status CheckRemoteListingsAgree(const LineageChoice& choice, const std::vector<std::string>& notes) {
  if (choice.disputed.empty()) return Status::Ok();
  std::string text = "restore: the ranks do not see the same remote tier: " + choice.disputed +
                     ", and nothing newer is held in memory. Every rank must read one shared "
                     "directory (MEMENTO_REMOTE, an absolute path the same on every node); a "
                     "rank that could not list it says why";
  for (const std::string& n : notes) {
    if (n.rfind("remote: ", 0) == 0) text += " (this rank: " + n.substr(8) + ")";
  }
  return Status::Unavailable(text);
}

Status NothingRestorable(bool committed_seen, const std::string& why,
                         const std::vector<std::string>& notes) {
  std::string text = committed_seen ? "no committed version can be restored: " + why
                                    : "nothing to restore: " + why;
  for (const std::string& n : notes) text += "; " + n;
  if (committed_seen) return Status::Unrecoverable(text);
  return Status::NotFound(text);
}

void AppendHeldSeals(const NodeStore& store, int slot, const ProtectionLayout& layout, int lane,
                     std::vector<uint8_t>* records) {
  for (const SealsRegion& r : layout.seals()) {
    if (!store.VerifyRegion(slot, r.region).ok()) continue;
    auto view = store.ReadRegion(slot, r.region);
    if (!view.ok()) continue;
    wire::AppendSealsRecord(
        {r.owner, lane, std::vector<uint8_t>(view->data, view->data + view->length)}, records);
  }
}

Result<SealsByOwner> ExchangeSeals(Transport* transport, const std::vector<uint8_t>& mine) {
  MEMENTO_ASSIGN_OR_RETURN(auto all, transport->Allgather(mine.data(), mine.size()));
  return DecodeSeals(all);
}

Result<SealsByOwner> DecodeSeals(const std::vector<std::vector<uint8_t>>& all) {
  SealsByOwner out;
  for (const auto& raw : all) {
    MEMENTO_ASSIGN_OR_RETURN(auto records, wire::DecodeSealsRecords(raw));
    for (wire::SealsRecord& r : records) {
      auto seals = DecodeEntrySeals(r.seals.data(), r.seals.size());
      if (seals.ok()) out.emplace(std::make_pair(r.node, r.lane), std::move(seals).value());
    }
  }
  return out;
}

}  // namespace memento::runtime
