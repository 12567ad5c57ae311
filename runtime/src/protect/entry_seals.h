// Entry seals: an owner's per-entry sizes and crc32c, the end-to-end check of
// a shard rebuilt elsewhere (docs/architecture.md §6 step 3).
//
// At the end of each version's protect stream every owner sends its entry
// seals to every node that holds anything of its shard (replica holders; the
// parity holders of the stripes of its pieces), which keeps them in a
// "seals/n<owner>" region of the same slot (RegionKind::kSeals, sealed with
// crc32c like every region). On restore the seals of every owner are
// gathered from any holder, and every rebuilt shard (replica copy or decode)
// is checked entry by entry before the restore counts and before the store
// seals it: a wrong input that passed its own region crc (e.g. a corrupt row
// whose region crc was recomputed over the corrupt bytes) can not produce a
// wrong restore.
//
// Wire / region format: u32 magic "ESL1", u32 count, then per entry
// {u64 bytes, u32 crc32c, u32 zero}; EntrySealsBytes(count) bytes in all.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "memento/common/status.h"

namespace memento::runtime {

struct EntrySeal {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Every owner's entry seals, by (node, lane).
using SealsByOwner = std::map<std::pair<int, int>, std::vector<EntrySeal>>;

uint64_t EntrySealsBytes(size_t count);
std::vector<uint8_t> EncodeEntrySeals(const std::vector<EntrySeal>& seals);
// Corruption on a bad magic or a length that does not match the count.
Result<std::vector<EntrySeal>> DecodeEntrySeals(const uint8_t* data, size_t bytes);

// Checks `shard` (entries concatenated, sizes `entry_bytes`, names for the
// message) against the owner's seals. Corruption naming the first entry whose
// size or crc32c differs.
// The same for entries already hashed: `crcs` (one per entry) against the
// owner's seals.
Status CheckEntryCrcs(const std::vector<uint32_t>& crcs, const std::vector<uint64_t>& entry_bytes,
                      const std::vector<std::string>& names, const std::vector<EntrySeal>& seals);
Status VerifyShardAgainstSeals(const std::vector<uint8_t>& shard,
                               const std::vector<uint64_t>& entry_bytes,
                               const std::vector<std::string>& names,
                               const std::vector<EntrySeal>& seals);

}  // namespace memento::runtime
