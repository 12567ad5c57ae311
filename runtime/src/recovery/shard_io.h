// ShardIo: moves this rank's shard (its registered entries, concatenated in
// registration order) between the registered buffers, the node store, the
// remote tier and a restored shard in memory. Every copy into the buffers
// reports the per-entry crc32c of what landed.
//
// Thread-safety: none of its own; used by one restore at a time.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/remote_store.h"
#include "memento/runtime/transport.h"
#include "protect/entry_seals.h"
#include "protect/protection_layout.h"
#include "snapshot/registered_entry.h"

namespace memento::runtime {

// Bytes [begin, begin + len) of the shard whose entries (of `entry_bytes`
// bytes each, in order) are the first regions of `store`'s sealed `slot`,
// into dst (zero beyond its end). Corruption naming the entry when a sealed
// length differs.
Status ReadShardRange(const NodeStore& store, int slot, const std::vector<uint64_t>& entry_bytes,
                      uint64_t begin, uint64_t len, uint8_t* dst);

class ShardIo {
 public:
  // Everything is borrowed; `remote` may be null (no remote tier).
  ShardIo(const std::vector<RegisteredEntry>* entries, const NodeStore* store,
          const ProtectionLayout* layout, RemoteStore* remote, const Transport* transport);

  // Copies the sealed entries of `slot` (which must hold `version`) into the
  // buffers, hashing the bytes as they land; Corruption naming the entry on
  // a size, version or crc32c mismatch, or if the slot changed meanwhile.
  Status CopySlotToBuffers(int slot, uint64_t version, std::vector<uint32_t>* crcs) const;

  // Reads this rank's file of remote `version` into the buffers.
  // ElasticRestoreNeeded when it was written by a different number of ranks.
  Status ReadRemoteToBuffers(uint64_t version, std::vector<uint32_t>* crcs) const;

  // Copies a whole restored `shard` into the buffers.
  Status ScatterToBuffers(const std::vector<uint8_t>& shard, std::vector<uint32_t>* crcs) const;

  // Checks a rebuilt `shard` entry by entry against its owner's seals.
  Status VerifyAgainstSeals(const std::vector<uint8_t>& shard,
                            const std::vector<EntrySeal>& seals) const;

  // Bytes [begin, begin + len) of this rank's shard into dst (zero beyond its
  // end): from `shard` when given (a restored shard), else from the sealed
  // entries of `slot`.
  Status ReadRange(int slot, const std::vector<uint8_t>* shard, uint64_t begin, uint64_t len,
                   uint8_t* dst) const;

  // Every complete remote version, ascending, as (version, lineage) (empty
  // when there is none or no remote tier); a failure to list is appended to
  // `notes` (and counts as none). Complete means manifest and file sizes
  // check out; payload crcs are verified only when a version is read.
  std::vector<std::pair<uint64_t, uint64_t>> CompleteRemoteVersions(
      std::vector<std::string>* notes) const;

  const std::vector<RegisteredEntry>& entries() const { return *entries_; }
  bool has_remote() const { return remote_ != nullptr; }

 private:
  const std::vector<RegisteredEntry>* entries_;
  std::vector<uint64_t> entry_bytes_;  // of *entries_, for ReadShardRange
  const NodeStore* store_;
  const ProtectionLayout* layout_;
  RemoteStore* remote_;
  const Transport* transport_;
};

}  // namespace memento::runtime
