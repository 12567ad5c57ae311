#include "recovery/inventory.h"

#include <algorithm>
#include <iterator>

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
  bool first = true;
  for (const wire::Inventory* inv : remote_of_rank) {
    std::set<std::pair<uint64_t, uint64_t>> seen;
    for (size_t i = 0; i < inv->remote_complete.size(); ++i) {
      seen.emplace(inv->remote_complete[i],
                   i < inv->remote_lineage.size() ? inv->remote_lineage[i] : 0);
    }
    if (first) {
      choice.remote = std::move(seen);
      first = false;
    } else {
      for (auto it = choice.remote.begin(); it != choice.remote.end();) {
        it = seen.count(*it) ? std::next(it) : choice.remote.erase(it);
      }
    }
  }
  auto see = [&](uint64_t lineage) {
    choice.newest = choice.newest ? std::max(*choice.newest, lineage) : lineage;
  };
  for (const wire::Inventory* inv : items) {
    for (uint64_t l : inv->item_lineage) see(l);
  }
  for (const auto& [v, l] : choice.remote) see(l);
  return choice;
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
