// StoreLayout: the fixed set of regions that every slot of a node store holds.
//
// A region is one contiguous byte range of a slot: an entry of this rank's own
// shard (kShard), a copy of a peer's shard entry (kReplica) or one
// parity piece of a stripe (kParity). The layout is fixed when the
// store is created — memory is allocated once per layout, never on the
// checkpoint path — and it is stored in the segment so that a relaunched rank
// can check it registers the same shard before reusing the data.
//
// Per-entry metadata (dtype, global shape, this rank's slice) is stored now and
// used by elastic restore later; memento itself never interprets it.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"

namespace memento::runtime {

enum class RegionKind : uint16_t {
  kShard = 1,    // an entry of this rank's own shard
  kReplica = 2,  // a copy of a peer's shard entry
  kParity = 3,   // a parity piece protecting a stripe of peers' data
  kSeals = 4,    // a peer's per-entry sizes and crc32c (end-to-end check of a rebuilt shard)
};

// "shard", "replica", "parity", "seals".
const char* RegionKindName(RegionKind kind);

// How a buffer maps onto a logical tensor (for elastic restore). All vectors
// empty = opaque bytes. Otherwise global_shape, shape and offsets have the same
// length: this rank holds global[offsets[i] .. offsets[i] + shape[i]) in each
// dimension i.
struct EntryLayout {
  static constexpr size_t kMaxDTypeBytes = 64;  // what the store keeps of dtype

  std::string dtype;                  // e.g. "float32", "bfloat16", "uint8"; may be empty
  std::vector<int64_t> global_shape;  // shape of the whole logical tensor
  std::vector<int64_t> shape;         // shape of this rank's slice
  std::vector<int64_t> offsets;       // where the slice starts in the global tensor

  bool operator==(const EntryLayout& o) const {
    return dtype == o.dtype && global_shape == o.global_shape && shape == o.shape &&
           offsets == o.offsets;
  }
  bool operator!=(const EntryLayout& o) const { return !(*this == o); }

  // InvalidArgument when shapes disagree in length or a value is negative or
  // an offset + extent exceeds the global extent.
  Status Validate() const;
};

// One region of a slot.
struct RegionSpec {
  RegionKind kind = RegionKind::kShard;
  // Entry name (kShard / kReplica), or a free label for parity ("parity/3").
  // 1..1024 bytes, unique within a layout.
  std::string name;
  // Bytes reserved for the region in every slot. A sealed length may be
  // smaller (never larger). 0 is allowed (an empty entry).
  uint64_t capacity = 0;
  // kShard: this node's index and lane. kReplica: the owner's node index and
  // lane (local rank). kParity: the group index; owner_lane = the
  // parity row (see runtime/src/protection_layout.h).
  uint32_t owner_node = 0;
  uint32_t owner_lane = 0;
  // kParity: the stripe / parity piece index. 0 otherwise.
  uint32_t piece = 0;
  // Tensor metadata of the entry (kShard / kReplica); empty for parity.
  EntryLayout layout;

  bool operator==(const RegionSpec& o) const {
    return kind == o.kind && name == o.name && capacity == o.capacity &&
           owner_node == o.owner_node && owner_lane == o.owner_lane && piece == o.piece &&
           layout == o.layout;
  }
  bool operator!=(const RegionSpec& o) const { return !(*this == o); }
};

struct StoreLayout {
  std::vector<RegionSpec> regions;

  bool operator==(const StoreLayout& o) const { return regions == o.regions; }
  bool operator!=(const StoreLayout& o) const { return !(*this == o); }

  // Sum of capacities (payload bytes of one slot, without alignment padding).
  uint64_t PayloadBytes() const;

  // Index of the region called `name` (first match), or -1.
  int Find(const std::string& name) const;

  // InvalidArgument naming the region when a name is empty, too long or
  // duplicated, an EntryLayout is invalid, or there are more than 1,000,000
  // regions.
  Status Validate() const;
};

}  // namespace memento::runtime
