// ShardIo: moves this rank's shard (its registered entries, concatenated in
// registration order) between the registered buffers, the node store, the
// remote tier and a restored shard in memory. Every copy into the buffers
// reports the per-entry crc32c of what landed.
//
// Thread-safety: none of its own; used by one restore at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/remote_store.h"
#include "memento/runtime/transport.h"
#include "protect/entry_seals.h"
#include "protect/protection_layout.h"
#include "snapshot/registered_entry.h"
#include "snapshot/staged_copy.h"
#include "store/shard_landing.h"

namespace memento::runtime {

// Work run behind: fn starts on a thread of its own whose nice value is
// kBehindNice above the creating thread's (a lower priority; Linux schedules
// each thread by its own nice value, 19 at most; the creator keeps its own),
// and Join() returns fn's status. For what a rank restores for itself out of
// its own store while its node serves or receives the transfers a lost node
// waits for: started before them, it runs in the time they leave free, and
// where ranks share cores the scheduler runs the transfers first. On idle
// cores the priority changes nothing. The destructor joins.
inline constexpr int kBehindNice = 10;
class Behind {
 public:
  explicit Behind(std::function<Status()> fn);
  ~Behind();
  Behind(const Behind&) = delete;
  Behind& operator=(const Behind&) = delete;
  Status Join();

 private:
  Status status_;  // fn's; declared first: the thread writes it
  std::thread thread_;
};

// Bytes [begin, begin + len) of the shard whose entries (of `entry_bytes`
// bytes each, in order) are the first regions of `store`'s sealed `slot`,
// into dst (zero beyond its end). Corruption naming the entry when a sealed
// length differs.
Status ReadShardRange(const NodeStore& store, int slot, const std::vector<uint64_t>& entry_bytes,
                      uint64_t begin, uint64_t len, uint8_t* dst);

// Copies a shard into the registered buffers piece by piece while it is
// still landing, so that the copy overlaps the transfer instead of following
// it: every piece, once landed (any thread, any order), is copied from the
// landing into the buffers and hashed as it leaves the landing (host buffers
// with streaming stores); Finish combines the pieces' crc32c (Crc32cCombine) into
// each entry's and the whole shard's. Pieces must not overlap; a failed copy
// or a shard not covered exactly makes Finish return false, and the caller
// then copies the landed shard in one pass (ShardIo::CopyLandedToBuffers).
class LandedCopy {
 public:
  // All borrowed; `landed` holds the shard as it lands; `copiers` stage the
  // pieces for device buffers (ShardIo::copiers()).
  LandedCopy(const std::vector<RegisteredEntry>* entries, const ShardLanding* landed,
             StagedCopierPool* copiers);
  // Bytes [off, off + len) of the shard have landed. Thread-safe.
  void Piece(uint64_t off, uint64_t len);
  // True when the pieces covered every byte of the shard exactly once and
  // every copy succeeded: then *crcs holds every entry's crc32c and *whole
  // that of the whole shard, as CopyLandedToBuffers gives them.
  bool Finish(std::vector<uint32_t>* crcs, uint32_t* whole);

 private:
  struct Part {
    uint64_t offset = 0;  // in the entry
    uint64_t length = 0;
    uint32_t crc = 0;
  };
  const std::vector<RegisteredEntry>* entries_;
  const ShardLanding* landed_;
  StagedCopierPool* copiers_;
  std::vector<uint64_t> base_;  // shard offset of each entry
  std::mutex mu_;
  std::vector<std::vector<Part>> parts_;  // per entry; guarded by mu_
  bool failed_ = false;                   // guarded by mu_
};

class ShardIo {
 public:
  // Borrowed; `remote` may be null (no remote tier). `copiers`: the pinned
  // buffer pairs that copies into device buffers go through from host memory
  // not registered with the driver. `registered_slots`: the store's slots
  // whose device entries' pages this process registered (the copy engine
  // reads those directly).
  ShardIo(const std::vector<RegisteredEntry>* entries, const NodeStore* store,
          const ProtectionLayout* layout, RemoteStore* remote, const Transport* transport,
          StagedCopierPool* copiers, std::set<int> registered_slots = {});

  // Copies the sealed entries of `slot` (which must hold `version`) into the
  // buffers, hashing the bytes as they leave the slot; Corruption naming the entry on
  // a size, version or crc32c mismatch, or if the slot changed meanwhile.
  // *staged_bytes (when given): the bytes of device entries that went
  // through pinned buffer pairs (copiers(), 2 MiB per restore thread)
  // because `slot` is not among the registered slots.
  Status CopySlotToBuffers(int slot, uint64_t version, std::vector<uint32_t>* crcs,
                           uint64_t* staged_bytes = nullptr) const;

  // Reads this rank's file of remote `version` (the one of its place in the
  // layout) into the buffers. ElasticRestoreNeeded when it was written by a
  // different number of ranks; FailedPrecondition naming the entry when an
  // entry's recorded tensor layout is not the registered one (another slice).
  Status ReadRemoteToBuffers(uint64_t version, std::vector<uint32_t>* crcs) const;

  // Copies a landed shard into the buffers in one pass, hashing the bytes as
  // they leave the landing: *crcs gets every entry's crc32c, *whole that of the whole
  // shard (its entries in order). The caller checks them (CheckAgainstSeals)
  // before the restore counts: a shard that fails leaves the attempt failed
  // and the buffers to the next one, as a local copy that fails does.
  Status CopyLandedToBuffers(const ShardLanding& landed, std::vector<uint32_t>* crcs,
                             uint32_t* whole) const;

  // Every entry's crc32c against its owner's seals; Corruption naming the
  // first entry that differs (an end-to-end mismatch).
  Status CheckAgainstSeals(const std::vector<uint32_t>& crcs,
                           const std::vector<EntrySeal>& seals) const;

  // Bytes [begin, begin + len) of this rank's shard into dst (zero beyond its
  // end): from `landed` when given (a rebuilt shard), else from the sealed
  // entries of `slot`.
  Status ReadRange(int slot, const ShardLanding* landed, uint64_t begin, uint64_t len,
                   uint8_t* dst) const;

  // Where bytes [begin, begin + len) of this rank's shard lie, in `landed`
  // when given, else in the sealed entries of `slot`, when they lie within
  // one entry (read in place, no copy); else null: the range straddles
  // entries or runs past the shard, or the entry is not readable (ReadRange
  // then copies the bytes or reports why).
  const uint8_t* SpanOfRange(int slot, const ShardLanding* landed, uint64_t begin,
                             uint64_t len) const;

  // Every complete remote version, ascending, as (version, lineage) (empty
  // when there is none or no remote tier); a failure to list is appended to
  // `notes` (and counts as none). Complete means manifest and file sizes
  // check out; payload crcs are verified only when a version is read.
  std::vector<std::pair<uint64_t, uint64_t>> CompleteRemoteVersions(
      std::vector<std::string>* notes) const;

  const std::vector<RegisteredEntry>& entries() const { return *entries_; }
  // The pinned buffer pairs the copies into device buffers go through (for
  // a LandedCopy).
  StagedCopierPool* copiers() const { return copiers_; }
  bool has_remote() const { return remote_ != nullptr; }

 private:
  const std::vector<RegisteredEntry>* entries_;
  std::vector<uint64_t> entry_bytes_;  // of *entries_, for ReadShardRange
  const NodeStore* store_;
  const ProtectionLayout* layout_;
  RemoteStore* remote_;
  const Transport* transport_;
  StagedCopierPool* copiers_;
  const std::set<int> registered_slots_;
};

}  // namespace memento::runtime
