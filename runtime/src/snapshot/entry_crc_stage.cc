#include "snapshot/entry_crc_stage.h"

#include <string>

#include "snapshot/crc32c_combine.h"
#include "memento/common/check.h"

namespace memento::runtime {

void EntryCrcStage::Reset(int entries, std::vector<int> chunk_entry,
                          std::vector<uint64_t> chunk_length) {
  MEMENTO_CHECK_EQ(chunk_entry.size(), chunk_length.size());
  chunk_entry_ = std::move(chunk_entry);
  chunk_length_ = std::move(chunk_length);
  chunk_crc_.assign(chunk_entry_.size(), 0);
  entry_crc_.assign(entries, 0);
}

Status EntryCrcStage::Begin(uint64_t, int slot, int chunks) {
  // Without a slot no chunk comes (the version has failed).
  if (slot != kNoSlot) MEMENTO_CHECK_EQ(static_cast<size_t>(chunks), chunk_crc_.size());
  return Status::Ok();
}

Status EntryCrcStage::OnChunk(const Chunk& chunk) {
  MEMENTO_CHECK(chunk.index >= 0 && static_cast<size_t>(chunk.index) < chunk_crc_.size());
  MEMENTO_CHECK_EQ(chunk.length, chunk_length_[chunk.index]);
  chunk_crc_[chunk.index] = chunk.crc;
  return Status::Ok();
}

Status EntryCrcStage::End(uint64_t, const Status&) {
  std::fill(entry_crc_.begin(), entry_crc_.end(), 0u);
  std::vector<bool> started(entry_crc_.size(), false);
  for (size_t i = 0; i < chunk_crc_.size(); ++i) {
    const int e = chunk_entry_[i];
    entry_crc_[e] =
        started[e] ? Crc32cCombine(entry_crc_[e], chunk_crc_[i], chunk_length_[i]) : chunk_crc_[i];
    started[e] = true;
  }
  return Status::Ok();
}

}  // namespace memento::runtime
