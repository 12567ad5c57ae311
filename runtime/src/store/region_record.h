// A region record of a node store's layout area (node_store_format.h): one
// region's spec, its index, the job's hash and its offset within a slot,
// checked by a crc32c.
#pragma once

#include <cstdint>
#include <string>

#include "memento/common/status.h"
#include "memento/runtime/node_store.h"

namespace memento::runtime {

// Serializes region `index` of a layout whose data sits at `offset_in_slot`.
std::string EncodeRegionRecord(const RegionSpec& r, uint32_t index, uint64_t job_hash,
                               uint64_t offset_in_slot);

// Parses one region record at `p` (at most `avail` bytes). Sets *consumed.
Status DecodeRegionRecord(const uint8_t* p, uint64_t avail, uint32_t index, uint64_t job_hash,
                          RegionSpec* out, uint64_t* offset_in_slot, uint64_t* consumed);

}  // namespace memento::runtime
