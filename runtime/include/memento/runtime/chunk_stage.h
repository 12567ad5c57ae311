// ChunkStage: what runs on each chunk of a snapshot as soon as it has landed
// in the slot (docs/architecture.md §3: the protect stage streams chunks to replica and
// parity holders while later chunks are still being copied).
//
// The snapshot pipeline cuts every registered entry into chunks of
// Config::chunk_bytes, copies them into the version's slot on background
// threads and, for each chunk, computes its crc32c while it is still in cache.
// It then hands the landed chunk to every stage in order. The engine's own
// sealing is such a stage (it folds chunk crcs into each entry's crc32c);
// the protect stage (runtime/src/protect/) is another.
//
// Thread-safety: OnChunk is called concurrently from the pipeline's worker
// threads for distinct chunks of the same version (in no particular order);
// Begin and End are called from one thread with no OnChunk running for that
// version. A stage must not block a worker for long: hand long work to its own
// threads.
#pragma once

#include <cstdint>

#include "memento/common/status.h"

namespace memento::runtime {

// One landed chunk. `data` points into the slot (shared memory) and stays
// valid and unchanged until the version's End() returns.
struct Chunk {
  uint64_t version = 0;
  int slot = 0;
  int entry = 0;        // index of the registered entry (= region index of its shard)
  uint64_t offset = 0;  // byte offset of the chunk within the entry
  uint64_t length = 0;  // bytes in the chunk (the last one of an entry may be short)
  const uint8_t* data = nullptr;
  uint32_t crc = 0;  // crc32c of the chunk's bytes
  int index = 0;     // position of the chunk in the version's chunk list
};

// The slot of a version that has none on this rank (ChunkStage::Begin).
inline constexpr int kNoSlot = -1;

class ChunkStage {
 public:
  virtual ~ChunkStage() = default;

  // A new version starts: `chunks` chunks will follow, into `slot`. `slot`
  // is kNoSlot when this rank's slot could not be begun: no chunk follows,
  // and End comes with the failure (a stage that exchanges data with other
  // ranks still takes part, so that they learn the version failed).
  virtual Status Begin(uint64_t version, int slot, int chunks) = 0;

  // A chunk has landed. A non-OK Status fails the version (it will not
  // commit on any rank); the pipeline still delivers the remaining chunks.
  virtual Status OnChunk(const Chunk& chunk) = 0;

  // Every chunk of the version was delivered (or the version failed:
  // `snapshot` holds why). Called before the commit collective; a non-OK
  // result fails the version. Blocking here delays only the commit.
  virtual Status End(uint64_t version, const Status& snapshot) = 0;
};

}  // namespace memento::runtime
