// In-shm binary format of a node store segment (private to node_store.cc and
// its tests). All integers are native-endian (a segment never leaves its
// machine); every structure is 8-byte aligned within the mapping.
//
//   [SegmentHeader]                 at 0, kHeaderBytes reserved
//   [FinishedMark]                  at kFinishedOffset, inside the reserved header bytes
//   [region records]                layout area, one variable-length record per region
//   [catalog]                       opaque bytes the creator recorded (the job's catalog)
//   [slot control blocks]           per slot: SlotHeader + RegionSeal[regions]
//   [slot data]                     per slot: the regions' bytes (page-aligned slots)
#pragma once

#include <cstddef>
#include <cstdint>

namespace memento::runtime::format {

inline constexpr uint64_t kSegmentMagic = 0x31444F4E4D454D4Dull;  // "MMEMNOD1"
inline constexpr uint32_t kReady = 0x59444552u;                   // "REDY"
inline constexpr uint32_t kRegionMagic = 0x314E4752u;             // "RGN1"
inline constexpr uint32_t kSlotMagic = 0x31544C53u;               // "SLT1"
inline constexpr uint32_t kSealMagic = 0x314C4553u;               // "SEL1"
// Slot states: values far apart so that a flipped bit never yields another.
inline constexpr uint32_t kStateEmpty = 0;
inline constexpr uint32_t kStateWriting = 0x47545257u;  // "WRTG"
inline constexpr uint32_t kStateSealed = 0x4C414553u;   // "SEAL"
inline constexpr uint32_t kCommitted = 0x54494D43u;     // "CMIT"

inline constexpr uint64_t kHeaderBytes = 1024;
inline constexpr uint64_t kRegionAlign = 64;
inline constexpr uint64_t kSlotAlign = 4096;
inline constexpr size_t kJobBytes = 64;
inline constexpr size_t kNodeBytes = 256;

struct SegmentHeader {
  uint64_t magic;
  uint32_t format;
  uint32_t header_bytes;
  char job[kJobBytes];    // NUL-padded
  char node[kNodeBytes];  // NUL-padded
  uint32_t local_rank;
  uint32_t slot_count;
  uint32_t region_count;
  uint32_t layout_crc;  // crc32c of the layout area
  uint64_t job_hash;
  uint64_t layout_offset;
  uint64_t layout_bytes;
  uint64_t slot_table_offset;
  uint64_t slot_control_bytes;
  uint64_t slot_data_offset;
  uint64_t slot_stride;
  uint64_t total_bytes;
  uint64_t created_unix_ns;
  // The catalog area (NodeStore::catalog): right after the layout area.
  uint64_t catalog_offset;
  uint64_t catalog_bytes;
  uint32_t catalog_crc;  // crc32c of the catalog area
  uint32_t pad0;
  uint32_t header_crc;  // crc32c of every byte above
  uint32_t ready;       // kReady, stored last (release) when creation is complete
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);
inline constexpr size_t kHeaderCrcBytes = offsetof(SegmentHeader, header_crc);

// The finished mark (NodeStore::MarkFinished): in the header area after the
// SegmentHeader, outside its crc, so that marking never rewrites the header.
// Zero in a store that was never marked (also one made before marks existed).
// Written with `magic` cleared first and stored last (release); `crc` covers
// every field before it.
inline constexpr uint32_t kFinishedMagic = 0x48534E46u;  // "FNSH"
inline constexpr uint64_t kFinishedOffset = 768;
struct FinishedMark {
  uint32_t magic;
  uint32_t format;
  uint64_t job_hash;
  uint64_t lineage;
  uint64_t version;
  uint64_t unix_ns;  // when the run finished
  uint32_t crc;      // crc32c of the fields above
  uint32_t pad0;
};
static_assert(sizeof(SegmentHeader) <= kFinishedOffset);
static_assert(kFinishedOffset + sizeof(FinishedMark) <= kHeaderBytes);
inline constexpr size_t kFinishedCrcBytes = offsetof(FinishedMark, crc);

// Fixed prefix of a region record; followed by name, dtype, global_shape,
// shape, offsets (int64 each), a uint32 crc32c of everything before it, and
// zero padding to 8 bytes (record_bytes includes all of it).
struct RegionRecordFixed {
  uint32_t magic;
  uint16_t format;
  uint16_t kind;
  uint32_t record_bytes;
  uint32_t index;
  uint64_t job_hash;
  uint64_t capacity;
  uint64_t offset_in_slot;
  uint32_t owner_node;
  uint32_t owner_lane;
  uint32_t piece;
  uint32_t name_len;
  uint32_t dtype_len;
  uint32_t ndim;
};
static_assert(sizeof(RegionRecordFixed) == 64);

struct SlotHeader {
  uint32_t magic;
  uint16_t format;
  uint16_t pad0;
  uint32_t slot_index;
  uint32_t region_count;
  uint64_t job_hash;
  uint64_t version;
  uint32_t header_crc;  // crc32c of the fields above, written at SealSlot
  uint32_t state;       // kStateEmpty / kStateWriting / kStateSealed (atomic)
  uint32_t committed;   // 0 or kCommitted (atomic)
  uint32_t generation;  // bumped by every BeginWrite/Invalidate (atomic, readers' torn check)
  // The run (lineage) that wrote this version; 0 for none. Covered by
  // header_crc when not 0 (the crc of the fields above continued over it),
  // so that a slot written before lineages existed validates unchanged.
  uint64_t lineage;
  uint8_t pad1[8];
};
static_assert(sizeof(SlotHeader) == 64);
inline constexpr size_t kSlotHeaderCrcBytes = offsetof(SlotHeader, header_crc);

struct RegionSeal {
  uint32_t magic;
  uint16_t format;
  uint16_t kind;
  uint32_t region;
  uint32_t pad0;
  uint64_t job_hash;
  uint64_t version;
  uint64_t length;
  uint32_t payload_crc;
  uint32_t record_crc;  // crc32c of the fields above
};
static_assert(sizeof(RegionSeal) == 48);
inline constexpr size_t kSealCrcBytes = offsetof(RegionSeal, record_crc);

}  // namespace memento::runtime::format
