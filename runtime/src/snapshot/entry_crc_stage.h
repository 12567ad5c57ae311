// EntryCrcStage: the engine's own ChunkStage. Collects the crc32c of every
// landed chunk and, at the end of a version, folds them per entry, in offset
// order, into each entry's crc32c (Crc32cCombine): the seal needs no second
// pass over the data however the chunks were spread over threads.
//
// Thread-safety: as ChunkStage (OnChunk writes only its chunk's own cell).
// Memory: one uint32 per chunk, allocated once by Reset().
#pragma once

#include <cstdint>
#include <vector>

#include "memento/runtime/chunk_stage.h"

namespace memento::runtime {

class EntryCrcStage final : public ChunkStage {
 public:
  // Fixes the chunk list: chunk i belongs to entry chunk_entry[i] and has
  // chunk_length[i] bytes; chunks of one entry are consecutive and in offset
  // order. `entries` is the number of entries.
  void Reset(int entries, std::vector<int> chunk_entry, std::vector<uint64_t> chunk_length);

  Status Begin(uint64_t version, int slot, int chunks) override;
  Status OnChunk(const Chunk& chunk) override;
  Status End(uint64_t version, const Status& snapshot) override;

  // After End: the crc32c of entry `entry` (0 for an empty entry).
  uint32_t entry_crc(int entry) const { return entry_crc_[entry]; }

 private:
  std::vector<int> chunk_entry_;
  std::vector<uint64_t> chunk_length_;
  std::vector<uint32_t> chunk_crc_;
  std::vector<uint32_t> entry_crc_;
};

}  // namespace memento::runtime
