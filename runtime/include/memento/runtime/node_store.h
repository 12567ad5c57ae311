// NodeStore: one rank's checkpoint memory on its node, in POSIX shared memory.
//
// One segment per (job, node identity, local rank), named
//   "/memento.<job>.<node>-<hash>.r<lane>"
// where <node> is the identity with every character outside [A-Za-z0-9_-]
// replaced by '_' (truncated to 64) and <hash> is the crc32c of the full
// identity in hex: readable, unique, free of '/', never the MPI rank. It is
// created O_CREAT|O_EXCL with mode 0600 and outlives the process, so a
// restarted rank re-attaches to its data; a lost node is modelled by unlinking
// its segments.
//
// The segment holds `slots` slots; each slot holds one version: the regions
// of the StoreLayout (fixed at creation), each with a seal record (length,
// crc32c of the payload) and a slot header (version, sealed and committed
// flags). Every header and record carries a magic, the format version, the
// job id (or its hash), the version number, lengths and a crc32c of itself;
// everything is validated when read. A bad copy is reported (Corruption naming
// the segment, slot, region and field) and treated as missing; nothing read
// from the segment can crash the reader (all offsets are bounds-checked, the
// mapping never shrinks, its pages are reserved at creation).
//
// Slot lifecycle (one version):
//   int s = BeginWrite(v)           picks a slot that is not the newest committed
//                                   one and invalidates it (sealed flag cleared
//                                   FIRST, before any byte changes)
//   memcpy(MutableRegion(s, i), ...) the engine's threads copy chunks
//   SealRegion(s, i, length, crc)   per region, once its bytes are in
//   SealSlot(s, v)                  every region sealed -> slot header crc, then
//                                   the sealed flag with release ordering
//   MarkCommitted(s)                after the commit collective (informational:
//                                   restore agrees on versions by allgather)
// Readers load the sealed flag with acquire ordering and never hand out an
// unsealed region.
//
// Thread-safety: one thread at a time changes a given slot's state
// (BeginWrite / Invalidate / SealSlot / MarkCommitted); different threads may
// fill disjoint bytes of MutableRegion() and call SealRegion() for different
// regions of the slot being written concurrently. Read functions may run in
// any thread (or another process, e.g. `memento inspect`); a read that races
// a rewrite of the same slot reports the slot as unsealed or its payload as
// corrupt, never returns a torn region as valid (VerifyRegion re-checks the
// seal after hashing).
//
// Ownership: a NodeStore owns its mapping (move-only); destruction unmaps but
// never unlinks (Destroy() does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/config.h"
#include "memento/runtime/finished_run.h"
#include "memento/runtime/shm_segment.h"
#include "memento/runtime/store_layout.h"

namespace memento::runtime {

// Which store: the segment name is derived from these three alone.
struct StoreId {
  std::string job;          // Config::job (ValidateJobId rules)
  std::string node;         // NodeIdentity(); 1..200 bytes
  uint32_t local_rank = 0;  // lane of this rank on its node

  // "job=j node=host/1 lane=0" for messages.
  std::string ToString() const;
};

// The on-disk (in-shm) format version; a segment with another one is never
// attached.
inline constexpr uint32_t kNodeStoreFormat = 2;

// What a slot holds, read cheaply from headers and records (no payload crc).
struct RegionState {
  int region = 0;
  RegionKind kind = RegionKind::kShard;
  uint32_t owner_node = 0;
  uint32_t owner_lane = 0;
  uint32_t piece = 0;
  bool sealed = false;  // a seal record for this slot's version exists
  uint64_t length = 0;  // sealed payload length (0 when not sealed)
  uint32_t crc = 0;     // sealed payload crc32c (0 when not sealed)
  bool ok = false;      // sealed and the seal record validated
  std::string problem;  // why not ok ("" when ok)
};

struct SlotState {
  int slot = 0;
  uint64_t version = 0;    // meaningful when sealed or writing
  uint64_t lineage = 0;    // the run that wrote it (Checkpointer lineage; 0: none)
  bool writing = false;    // BeginWrite called, not sealed yet
  bool sealed = false;     // the sealed flag is set
  bool committed = false;  // MarkCommitted was called for this version
  bool ok = false;         // sealed and every header/record validated
  bool damaged = false;    // the state word is none of empty, writing, sealed
  std::string problem;     // why not ok ("" when ok; "empty" for a never-used slot)
  std::vector<RegionState> regions;
};

struct StoreInventory {
  std::vector<SlotState> slots;

  // Slot index of the highest version whose slot is ok (and committed, for
  // NewestCommitted), or -1.
  int NewestSealed() const;
  int NewestCommitted() const;
};

// A sealed region handed to a reader. `data` points into the mapping and
// stays valid while the NodeStore lives, but its bytes change once the slot is
// rewritten: copy out, then call NodeStore::StillSealed(slot, version).
struct RegionView {
  const uint8_t* data = nullptr;
  uint64_t length = 0;
  uint32_t crc = 0;
  uint64_t version = 0;
};

class NodeStore {
 public:
  NodeStore() = default;
  NodeStore(NodeStore&&) noexcept = default;
  NodeStore& operator=(NodeStore&&) noexcept = default;
  NodeStore(const NodeStore&) = delete;
  NodeStore& operator=(const NodeStore&) = delete;
  ~NodeStore() = default;

  // The shm name of `id` (see the file comment). InvalidArgument when the job
  // id or node identity break the rules.
  static Result<std::string> SegmentName(const StoreId& id);
  // "/memento.<job>." — the prefix shared by all segments of `job`.
  static std::string JobPrefix(const std::string& job);

  // Bytes of the segment that Create() would make (headers + slots).
  static uint64_t SegmentBytes(const StoreLayout& layout, int slots);

  // Creates a new store; every slot empty. AlreadyExists if the segment
  // exists (O_EXCL), ResourceExhausted if /dev/shm lacks the bytes,
  // InvalidArgument for a bad id/layout or slots < 2. Cost: allocating and
  // zeroing SegmentBytes() of memory, nearly all of it (the slots' data) on
  // a background thread that the first BeginWriteSlot waits for: a
  // replacement node's restore lands in the registered buffers meanwhile.
  // `catalog`: opaque bytes kept with the store for its lifetime (the engine
  // records the job's catalog there: which ranks held which entries, for an
  // elastic restore on another topology); checked by a crc like the layout.
  static Result<NodeStore> Create(const StoreId& id, const StoreLayout& layout, int slots,
                                  const std::vector<uint8_t>& catalog = {});

  // Attaches to an existing store, keeping its data. The header must validate
  // (magic, format, crc, job id and node identity of `id`, sizes), else:
  // NotFound (no segment), Corruption (a field fails validation; names it),
  // FailedPrecondition (valid but of another format version or job).
  static Result<NodeStore> Attach(const StoreId& id,
                                  ShmSegment::Access access = ShmSegment::Access::kReadWrite);
  // Same, by segment name (for `memento inspect`, which does not know the id).
  static Result<NodeStore> AttachByName(const std::string& name, ShmSegment::Access access);

  // What the engine calls at start-up: Attach() when the segment exists and
  // its layout and slot count equal `layout` / `slots` (the data is kept for
  // Restore); Create() when it does not exist. An existing segment that
  // cannot be attached or has another layout is, per `policy`, an error
  // (FailedPrecondition naming segment and reason; nothing touched) or
  // unlinked and recreated (logged at warn). `*attached` (optional) tells
  // which happened.
  //
  // With `set_aside` given, a segment whose header or layout fails
  // validation (Corruption) is, whatever `policy`, renamed to
  // "<name>.corrupt.<pid>" (logged at warn) and a fresh store created: the
  // node's memory is lost for the restore, and its bytes are kept until the
  // caller unlinks `*set_aside` (after a successful restore). `*set_aside` is
  // "" when nothing was set aside. A store with another `catalog` counts as
  // one with another layout.
  static Result<NodeStore> OpenOrCreate(const StoreId& id, const StoreLayout& layout, int slots,
                                        StalePolicy policy, bool* attached = nullptr,
                                        std::string* set_aside = nullptr,
                                        const std::vector<uint8_t>& catalog = {});

  // What OpenOrCreate puts between a segment's name and the pid when it sets
  // a damaged segment aside.
  static constexpr const char* kSetAsideSuffix = ".corrupt.";
  // ... and when it sets aside a store of another topology for an elastic restore.
  static constexpr const char* kElasticSuffix = ".elastic.";

  // Renames the store of `id` to "<name>.elastic.<pid>" (its data intact,
  // logged) and returns the new name; NotFound when there is none. The
  // elastic restore reads it with AttachAside and unlinks it once the
  // restored version is protected under the new topology.
  static Result<std::string> SetAsideForElastic(const StoreId& id);
  // Whether `name` is a store SetAsideForElastic renamed: it ends in
  // kElasticSuffix and a pid (a job or node named "elastic" does not count).
  static bool IsElasticAside(const std::string& name);
  // Attaches read-only to a store set aside under `name` (no check that the
  // name is its id's; the header, layout and catalog are validated).
  static Result<NodeStore> AttachAside(const std::string& name);

  // Unlinks the segment of `id` (node loss in tests, `memento clean`).
  // NotFound if absent. Existing mappings stay valid.
  static Status Destroy(const StoreId& id);

  bool valid() const { return segment_.valid(); }
  const std::string& segment_name() const { return segment_.name(); }
  const StoreId& id() const { return id_; }
  const StoreLayout& layout() const { return layout_; }
  int slot_count() const { return slot_count_; }
  int region_count() const { return static_cast<int>(layout_.regions.size()); }
  uint64_t segment_bytes() const { return segment_.size(); }
  // The catalog given at creation (empty if none).
  const std::vector<uint8_t>& catalog() const { return catalog_; }

  // ---- writing (read-write attachment only; else FailedPrecondition) ----

  // Picks the slot for `version` and invalidates it: never the slot of the
  // newest committed version (if none is committed: never the newest sealed
  // one); among the rest an empty/invalid slot first, else the lowest
  // version. AlreadyExists if a sealed slot already holds `version`
  // (Invalidate it first to rewrite). Returns the slot index. `lineage` is
  // recorded in the slot header (SlotState::lineage; 0: none).
  Result<int> BeginWrite(uint64_t version, uint64_t lineage = 0);
  // Invalidates `slot` and marks it as being written with `version` of
  // `lineage` (for the engine writing a version into a chosen slot). On a
  // store Create made, first waits until its data pages are reserved
  // (ShmSegment::WaitReserved; ResourceExhausted if the file system filled
  // up meanwhile, and nothing is written).
  Status BeginWriteSlot(int slot, uint64_t version, uint64_t lineage = 0);
  // Clears the sealed and committed flags of `slot` (its data is then never
  // read as a checkpoint).
  Status Invalidate(int slot);

  // Writable pointer to region `region` of `slot` (RegionSpec::capacity
  // bytes, 64-byte aligned). Only between BeginWrite and SealSlot (a bug
  // otherwise: MEMENTO_CHECK).
  uint8_t* MutableRegion(int slot, int region);

  // Records that `region` of `slot` holds `length` bytes whose crc32c is
  // `crc` (computed by the caller while copying). InvalidArgument if length >
  // capacity; FailedPrecondition if the slot is not being written.
  Status SealRegion(int slot, int region, uint64_t length, uint32_t crc);

  // Seals the slot: every region must be sealed for `version` (else
  // FailedPrecondition naming the first unsealed region). Writes the slot
  // header crc, then the sealed flag (release).
  Status SealSlot(int slot, uint64_t version);

  // Sets the committed flag of a sealed slot (FailedPrecondition if the slot
  // is not sealed with `version`).
  Status MarkCommitted(int slot, uint64_t version);

  // ---- reading (any attachment) ----

  // Every slot's state from headers and records; O(slots x regions), no
  // payload hashing.
  StoreInventory Inventory() const;

  // Validates slot/region headers and records (as Inventory) and returns the
  // sealed payload. FailedPrecondition if the slot is not sealed, Corruption
  // if a record fails validation.
  Result<RegionView> ReadRegion(int slot, int region) const;

  // ReadRegion + recompute the payload crc32c (cost: one pass over the
  // payload). Corruption naming segment, slot, region and both crcs on
  // mismatch, or if the slot was rewritten while hashing.
  Status VerifyRegion(int slot, int region) const;

  // True while `slot` is still sealed with `version` (re-check after copying
  // out of a RegionView).
  bool StillSealed(int slot, uint64_t version) const;

  // ---- the finished mark (a run that ended normally; Checkpointer::Finish) ----

  // Records that run `run` finished (read-write attachment only), replacing
  // any earlier mark. It lives in the header area, outside the header's crc,
  // with a crc of its own; the slots are untouched.
  Status MarkFinished(const FinishedRun& run);
  // Removes the mark (a later run resumed the finished one). Read-write only.
  Status ClearFinished();
  // The mark, or nullopt when there is none or it fails validation (a torn
  // or damaged mark counts as none: the store is then restored as before
  // marks existed). Any attachment.
  std::optional<FinishedRun> Finished() const;

  // The ok, sealed slot holding `version`, if any.
  std::optional<int> FindVersion(uint64_t version) const;
  // The same, of `lineage` only (a slot of another run with the same number
  // is not it).
  std::optional<int> FindVersion(uint64_t version, uint64_t lineage) const;

 private:
  friend class NodeStoreTestPeer;
  static Result<NodeStore> FromSegment(ShmSegment segment, const StoreId* expect);
  Status CheckWritable(const char* what) const;
  uint8_t* SlotControl(int slot) const;  // the slot's control block in the mapping

  ShmSegment segment_;
  StoreId id_;
  StoreLayout layout_;
  std::vector<uint8_t> catalog_;
  int slot_count_ = 0;
  uint64_t job_hash_ = 0;
  std::vector<uint64_t> region_offsets_;  // offset of each region within a slot
  uint64_t slot_table_offset_ = 0;        // first slot control block
  uint64_t slot_control_bytes_ = 0;       // bytes of one slot control block
  uint64_t slot_data_offset_ = 0;         // first slot's data
  uint64_t slot_stride_ = 0;              // bytes between slot data areas
};

}  // namespace memento::runtime
