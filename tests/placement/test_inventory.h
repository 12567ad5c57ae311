// Test helpers: the inventory a healthy job would report for one version.
#pragma once

#include <vector>

#include "memento/placement/group_layout.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/recovery_planner.h"

namespace memento::placement::testing {

// Every item the placement names for `version`, sealed and crc_ok, on every lane.
inline std::vector<InventoryItem> FullInventory(const GroupLayout& layout, int lanes,
                                                uint64_t version, uint64_t shard_bytes = 1200) {
  const PlacementMap map = PlacementMap::Uniform(layout, shard_bytes);
  std::vector<InventoryItem> items;
  for (int node = 0; node < layout.num_nodes(); ++node) {
    for (int lane = 0; lane < lanes; ++lane) {
      for (const HeldItem& h : map.held_by(node)) {
        InventoryItem it;
        it.node = node;
        it.lane = lane;
        it.version = version;
        it.kind = h.kind;
        it.owner = h.owner;
        it.stripe = h.stripe;
        it.row = h.row;
        it.bytes = h.bytes;
        it.sealed = true;
        it.crc_ok = true;
        items.push_back(it);
      }
    }
  }
  return items;
}

}  // namespace memento::placement::testing
