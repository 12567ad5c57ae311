#include "memento/runtime/store_layout.h"

#include <unordered_set>

namespace memento::runtime {

const char* RegionKindName(RegionKind kind) {
  switch (kind) {
    case RegionKind::kShard:
      return "shard";
    case RegionKind::kReplica:
      return "replica";
    case RegionKind::kParity:
      return "parity";
    case RegionKind::kSeals:
      return "seals";
  }
  return "unknown";
}

Status EntryLayout::Validate() const {
  const size_t n = global_shape.size();
  if (shape.size() != n || offsets.size() != n) {
    return Status::InvalidArgument("entry layout: global_shape, shape and offsets have " +
                                   std::to_string(n) + ", " + std::to_string(shape.size()) +
                                   " and " + std::to_string(offsets.size()) +
                                   " dimensions; they must agree");
  }
  if (dtype.size() > kMaxDTypeBytes) {
    return Status::InvalidArgument("entry layout: dtype '" + dtype + "' is longer than " +
                                   std::to_string(kMaxDTypeBytes) + " bytes");
  }
  if (n > 64) return Status::InvalidArgument("entry layout: more than 64 dimensions");
  for (size_t i = 0; i < n; ++i) {
    if (global_shape[i] < 0 || shape[i] < 0 || offsets[i] < 0 ||
        offsets[i] > global_shape[i] - shape[i]) {
      return Status::InvalidArgument("entry layout: dimension " + std::to_string(i) + " slice [" +
                                     std::to_string(offsets[i]) + ", +" + std::to_string(shape[i]) +
                                     ") does not fit global extent " +
                                     std::to_string(global_shape[i]));
    }
  }
  return Status::Ok();
}

uint64_t StoreLayout::PayloadBytes() const {
  uint64_t total = 0;
  for (const auto& r : regions) total += r.capacity;
  return total;
}

int StoreLayout::Find(const std::string& name) const {
  for (size_t i = 0; i < regions.size(); ++i) {
    if (regions[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Status StoreLayout::Validate() const {
  if (regions.size() > 1000000) {
    return Status::InvalidArgument("store layout: " + std::to_string(regions.size()) +
                                   " regions (at most 1000000)");
  }
  std::unordered_set<std::string> seen;
  uint64_t total = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const RegionSpec& r = regions[i];
    const std::string where = "store layout: region " + std::to_string(i) + " '" + r.name + "'";
    if (r.name.empty() || r.name.size() > 1024) {
      return Status::InvalidArgument(where + ": name must have 1..1024 bytes");
    }
    if (r.kind != RegionKind::kShard && r.kind != RegionKind::kReplica &&
        r.kind != RegionKind::kParity && r.kind != RegionKind::kSeals) {
      return Status::InvalidArgument(where + ": unknown kind " +
                                     std::to_string(static_cast<int>(r.kind)));
    }
    if (r.capacity > (1ull << 48)) {
      return Status::InvalidArgument(where + ": capacity " + std::to_string(r.capacity) +
                                     " exceeds 256 TiB");
    }
    // The slot is the regions side by side and a store holds at most 64
    // slots: bounding their sum keeps every offset of the store's geometry
    // far from overflowing (a crafted segment could otherwise make its
    // computed size wrap around to the file's).
    if (r.capacity > (1ull << 48) - total) {
      return Status::InvalidArgument(where + ": the regions' capacities exceed 256 TiB in all");
    }
    total += r.capacity;
    if (!seen.insert(r.name).second) {
      return Status::InvalidArgument(where + ": duplicate name");
    }
    Status s = r.layout.Validate();
    if (!s.ok()) return s.WithContext(where);
  }
  return Status::Ok();
}

}  // namespace memento::runtime
