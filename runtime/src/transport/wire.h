// Every message format the engine sends over a Transport, in one place: the
// point-to-point tags, the fixed headers, and the records of the collectives
// (allgathers). A record is encoded by one function and decoded by its twin
// here, so a format changes in one file and is tested in wire_test.cc.
//
// All integers are little-endian as the hosts write them (every rank runs the
// same binary on the same architecture); fixed headers are sent as their
// bytes and guarded by static_asserts on their size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/elastic_plan.h"
#include "memento/placement/recovery_planner.h"
#include "memento/runtime/remote_store.h"
#include "memento/runtime/transport.h"

namespace memento::runtime::wire {

// ---- tags ----------------------------------------------------------------------------------
// Stages pick disjoint ranges, so messages of different stages never match.

// Persist: rank r -> rank 0, "my rank file of version v is written" (a PersistRecord).
inline constexpr int kTagPersistDone = 100;

// Protect: owner -> holder, a ProtectHeader with kTagProtect, then its
// payload with kTagProtectPayload. Only the destination's sender thread sends
// to it, and each channel (source, destination, tag) delivers in order, so
// the n-th payload belongs to the n-th header: the holder posts the payload's
// receive (in place, at the header's offset) as soon as the header is in,
// and receives the next header while that payload is still moving.
inline constexpr int kTagProtectPayload = 999;
inline constexpr int kTagProtect = 1000;
// Protect of an erasure scheme: the parity reduce chains (reduce_chain.h) of
// a version, chain c of a batch on kTagProtectChain + c (at most
// kProtectChainTags chains per batch).
inline constexpr int kTagProtectChain = 1001;
inline constexpr int kProtectChainTags = 499;

// Elastic restore: serving rank -> new rank, the pieces of its new slices
// that the server holds, as chunks (a PayloadHeader then the payload, both
// with this tag). One stream per (server, receiver) pair.
inline constexpr int kTagElastic = 1500;
static_assert(kTagProtectChain + kProtectChainTags <= kTagElastic, "protect chain tags overlap");

// Recovery and re-protect: message i of a restore (a replica transfer's header
// or payload, a reduce chain's pieces) uses RecoverTag(i); the span wraps so
// that any number of messages stays inside the range.
inline constexpr int kTagRecoverBase = 2000;
inline constexpr int kRecoverTagSpan = 14000;
int RecoverTag(size_t index);
static_assert(kTagRecoverBase + kRecoverTagSpan <= kFirstApplicationTag,
              "the engine's tags stay below the applications'");

// ---- fixed headers -------------------------------------------------------------------------

// Part kinds of a ProtectHeader.
inline constexpr uint32_t kReplicaPart = 1;
inline constexpr uint32_t kParityPart = 2;
inline constexpr uint32_t kSealsPart = 3;

// Precedes every protect payload (protect_stage.cc).
struct ProtectHeader {
  uint64_t version = 0;
  uint32_t kind = 0;  // kReplicaPart, kParityPart or kSealsPart
  uint32_t stripe = 0;
  uint32_t row = 0;
  uint32_t data_row = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  // Replica parts: the sender's crc32c of the part (the snapshot's chunk
  // crc). The holder seals with it instead of hashing what it received, so
  // the seal is end to end: a byte changed on the wire or in the holder's
  // memory fails the region check at restore.
  uint32_t crc = 0;
  // How many times this rank began this version before (a Save retried
  // after a failed attempt): parts of a failed attempt still in flight are
  // drained, never taken for the retry's.
  uint32_t attempt = 0;
};
static_assert(sizeof(ProtectHeader) == 48, "wire format");

// Precedes a payload of a restore transfer: its length and crc32c, or
// ok = 0 when the sender cannot serve it (no payload follows then).
struct PayloadHeader {
  uint64_t length = 0;
  uint32_t crc = 0;
  uint32_t ok = 0;
};
static_assert(sizeof(PayloadHeader) == 16, "wire format");

// Precedes a reduce-chain piece (reduce_chain.h): as PayloadHeader, plus the
// stamp of the call that sent it, so that a piece left on a stream by an
// earlier call is told apart from the current call's.
struct PieceHeader {
  uint64_t length = 0;
  uint32_t crc = 0;
  uint32_t ok = 0;
  uint64_t stamp = 0;
};
static_assert(sizeof(PieceHeader) == 24, "wire format");

// Precedes every message of a DeviceRoutedTransport (device_link.h) on the
// wrapped transport, and is each of its handshakes: kind (DeviceFrameKind),
// the message's tag, the sender's sequence number on (peer, tag), and bytes
// (inline and device: the message's length; handshakes: the rank that sends
// the transfer, since the two directions of a pair number their messages apart).
enum DeviceFrameKind : uint32_t {
  kDeviceInline = 1,  // the payload follows the frame
  kDeviceBytes = 2,   // the payload comes over the link
  kDeviceReady = 3,   // the receiver is there (to a lower-numbered sender)
  kDeviceGo = 4,      // the lower-numbered rank opened the transfer
};
struct DeviceFrame {
  uint32_t kind = 0;
  int32_t tag = 0;
  uint64_t seq = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(DeviceFrame) == 24, "wire format");

// ---- records -------------------------------------------------------------------------------

// Persist record of one rank: u64 version, u8 state (0 failed, 1 written,
// 2 still writing), u64 file bytes, u32 crc, u32 name length, name. "Still
// writing" records come while a rank's file takes long, so that rank 0's
// wait for the final record never outlasts the transport's timeout.
struct PersistRecord {
  uint64_t version = 0;
  bool ok = false;
  bool writing = false;  // a heartbeat: the final record of `version` is to come
  RankFileInfo file;     // rank is not sent (the receiver knows the source)
};
inline constexpr size_t kMaxPersistRecord = 4096;
std::vector<uint8_t> EncodePersistRecord(const PersistRecord& record);
Result<PersistRecord> DecodePersistRecord(const uint8_t* data, size_t bytes);

// What a rank says about itself in Prepare (one allgather): its node identity,
// lane, and what a surviving store of it records about the topology it was
// written for. i32 lane, i32 old_index, u32 old_nodes, u32 entries,
// u64 shard_bytes, u32 old_lanes, u32 0, identity (the rest).
struct RankRecord {
  std::string identity;
  int32_t lane = 0;
  int32_t old_index = -1;    // node index recorded in its surviving store, -1 if none
  uint32_t old_nodes = 0;    // node count recorded in its surviving store, 0 if none
  uint64_t shard_bytes = 0;  // sum of its registered entries
  uint32_t entries = 0;      // number of its registered entries
  uint32_t old_lanes = 0;    // ranks per node recorded in its surviving store, 0 if none
};
std::vector<uint8_t> EncodeRankRecord(const RankRecord& record);
Result<RankRecord> DecodeRankRecord(const std::vector<uint8_t>& bytes);

// Restore inventory of one rank (one allgather): every complete remote
// version it sees (ascending) with its lineage, and every item of its sealed
// slots with the lineage of its slot. i64 count of remote versions, per
// remote version 2 x i64: version, lineage; then per item 8 x i64: version,
// kind, owner, stripe, row, bytes, flags (bit 0: crc_ok, bit 1: the slot is
// marked committed), lineage. Node and lane are the sender's, known to the
// receiver. Lineages are u64 carried in i64 words.
struct Inventory {
  std::vector<uint64_t> remote_complete;
  std::vector<uint64_t> remote_lineage;  // parallel to remote_complete (missing: 0)
  std::vector<placement::InventoryItem> items;
  std::vector<uint64_t> item_lineage;  // parallel to items (missing: 0)
  std::vector<bool> item_committed;    // parallel to items (missing: false)
};
// Whether `inventory` holds a committed version of `lineage`: a complete
// remote version, or an item of a slot marked committed.
bool HoldsCommitted(const Inventory& inventory, uint64_t lineage);
std::vector<uint8_t> EncodeInventory(const Inventory& inventory);
// Items get (node, lane) and sealed = true.
Result<Inventory> DecodeInventory(const std::vector<uint8_t>& bytes, int node, int lane);

// Entry seals a rank vouches for (one allgather): per owner i32 node,
// i32 lane, u32 length, then `length` bytes of EncodeEntrySeals.
struct SealsRecord {
  int node = -1;
  int lane = 0;
  std::vector<uint8_t> seals;
};
void AppendSealsRecord(const SealsRecord& record, std::vector<uint8_t>* out);
Result<std::vector<SealsRecord>> DecodeSealsRecords(const std::vector<uint8_t>& bytes);

// A fixed number of u64 counters (e.g. bytes received by a rank).
std::vector<uint8_t> EncodeCounters(const std::vector<uint64_t>& counters);
Result<std::vector<uint64_t>> DecodeCounters(const std::vector<uint8_t>& bytes, size_t count);

// One rank's registered entries with their layouts (one allgather in
// Prepare): i32 node, i32 lane (as the sender knows them; the receiver
// overrides), u32 count, per entry: name, u64 bytes, dtype, global_shape,
// shape, offsets (strings and dims prefixed by a u32 count).
std::vector<uint8_t> EncodeRankCatalog(const placement::RankCatalog& rank);
Result<placement::RankCatalog> DecodeRankCatalog(const std::vector<uint8_t>& bytes);

// What a node store records about the job that created it (NodeStore::catalog):
// the scheme, the topology, every rank's shard size and entry count, and the
// entries of the ranks whose data the store holds (its own and every owner
// it keeps a replica or parity of), so that an elastic restore on another
// topology knows what every surviving byte is.
struct JobCatalog {
  std::string scheme;
  int nodes = 0;
  int lanes = 0;
  std::vector<uint64_t> shard_bytes;  // node-major, nodes x lanes
  std::vector<uint32_t> entry_count;  // node-major
  std::vector<placement::RankCatalog> ranks;
};
std::vector<uint8_t> EncodeJobCatalog(const JobCatalog& catalog);
Result<JobCatalog> DecodeJobCatalog(const std::vector<uint8_t>& bytes);

// Elastic restore inventory of one rank (one allgather): the remote versions
// it sees (an Inventory without items), then per old store it attached: i32
// old node, i32 old lane, its segment name, its JobCatalog bytes and its items
// (an Inventory). Names are u32-prefixed, blobs u64-prefixed.
struct ElasticStoreRecord {
  int node = -1;
  int lane = 0;
  std::string name;
  std::vector<uint8_t> catalog;
  Inventory items;  // decoded with (node, lane)
};
struct ElasticInventory {
  Inventory remote;
  std::vector<ElasticStoreRecord> stores;
};
std::vector<uint8_t> EncodeElasticInventory(const ElasticInventory& inventory);
Result<ElasticInventory> DecodeElasticInventory(const std::vector<uint8_t>& bytes);

// Bad items of an elastic restore, each with the (node, lane) that holds it
// (a rank reads several old stores): per item i64 node, i64 lane, then its
// key, 5 x i64: version, kind, owner, stripe, row.
std::vector<uint8_t> EncodeLocatedBadItems(const std::vector<placement::InventoryItem>& items);
Result<std::vector<placement::InventoryItem>> DecodeLocatedBadItems(
    const std::vector<uint8_t>& bytes);

}  // namespace memento::runtime::wire
