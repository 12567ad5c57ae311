// Where a rebuilt shard lands (RecoveryExecutor's landing: in a lost node's
// buffers or a slot of its store, or in memory of a survivor's own), its
// check against the seals, and its copy into the new store's slot.
#include <algorithm>
#include <string>
#include <vector>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "recovery/recovery_executor.h"
#include "recovery/report_text.h"

namespace memento::runtime {
Status RecoveryExecutor::PrepareLanding() {
  std::vector<uint64_t> sizes;
  for (const RegisteredEntry& e : parts_.io->entries()) sizes.push_back(e.bytes);
  if (!MyNodeLost()) {
    landed_ = ShardLanding::InMemory(sizes);
    landed_copy_ =
        std::make_unique<LandedCopy>(&parts_.io->entries(), &landed_, parts_.io->copiers());
    return Status::Ok();
  }
  // A lost node's store holds nothing of this run: the slot the re-protect
  // fills is where the shard ends up. Pinned until the re-protect ends, so
  // that a Save issued meanwhile takes another one.
  const int slot = parts_.slots->Acquire();
  parts_.slots->Pin(slot);
  const std::vector<RegisteredEntry>& entries = parts_.io->entries();
  // Host buffers: the shard lands in them, and training resumes without
  // waiting for the new store's pages (being reserved in the background, at
  // about 0.6 s per GiB on a 2-core VM, several times the transfer); the
  // re-protect copies it into the slot (LandInStore), before the buffers
  // may be written (WaitSnapshot waits for parts_.buffers). Without that
  // hold (no background re-protect to wait for), or with device entries:
  // in the slot.
  const bool host = std::none_of(entries.begin(), entries.end(),
                                 [](const RegisteredEntry& e) { return e.device(); });
  if (host && (parts_.buffers != nullptr || !parts_.background)) {
    std::vector<uint8_t*> data;
    for (const RegisteredEntry& e : entries) data.push_back(e.data);
    landed_ = ShardLanding::InBuffers(data, sizes);
    buffer_slot_ = slot;
    landed_copy_ = std::make_unique<LandedCopy>(&entries, &landed_, parts_.io->copiers());
    return Status::Ok();
  }
  Status begun = parts_.store->BeginWriteSlot(slot, plan_.version, lineage_);
  if (!begun.ok()) {
    parts_.slots->Unpin(slot);
    return begun.WithContext("restore: slot for the rebuilt shard");
  }
  landed_ = ShardLanding::InSlot(parts_.store, slot, sizes);
  landed_copy_ =
      std::make_unique<LandedCopy>(&parts_.io->entries(), &landed_, parts_.io->copiers());
  return Status::Ok();
}

void RecoveryExecutor::DropLanding() {
  if (const int slot = landed_.slot(); slot >= 0) (void)parts_.store->Invalidate(slot);
  ReleaseLanding();
}

Status RecoveryExecutor::LandInStore() {
  if (buffer_slot_ < 0) return Status::Ok();
  const std::vector<RegisteredEntry>& entries = parts_.io->entries();
  const int slot = buffer_slot_;
  buffer_slot_ = -1;
  landed_copy_.reset();
  landed_ = ShardLanding();
  // Waits for the store's pages; then entry by entry, checked against what
  // the restore verified, so that a shard the application changed too early
  // is never sealed as the version.
  Status s = parts_.store->BeginWriteSlot(slot, plan_.version, lineage_);
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < entries.size(); ++i) {
    const RegisteredEntry& e = entries[i];
    sizes.push_back(e.bytes);
    if (!s.ok()) continue;
    uint8_t* dst = parts_.store->MutableRegion(slot, static_cast<int>(i));
    erasure::Crc32cStream crc;
    constexpr uint64_t kPiece = 256 << 10;
    for (uint64_t off = 0; off < e.bytes; off += kPiece) {
      crc.UpdateCopy(dst + off, e.data + off, std::min(kPiece, e.bytes - off));
    }
    if (i >= crcs_.size() || crc.value() != crcs_[i]) {
      s = Status::Corruption("entry '" + e.name +
                             "' changed after Restore returned and before the restored " +
                             VersionText(plan_.version) +
                             " was copied into the node store: write the registered buffers "
                             "only after WaitSnapshot()");
    } else {
      s = parts_.store->SealRegion(slot, static_cast<int>(i), e.bytes, crc.value());
    }
  }
  EndHold();
  if (!s.ok()) {
    (void)parts_.store->Invalidate(slot);
    parts_.slots->Unpin(slot);
    return s.WithContext("restore: the rebuilt shard into the node store");
  }
  landed_ = ShardLanding::InSlot(parts_.store, slot, sizes);
  return Status::Ok();
}

void RecoveryExecutor::EndHold() {
  if (holding_) parts_.buffers->Release();
  holding_ = false;
}

Status RecoveryExecutor::CheckAndCopyLanded() {
  auto it = seals_of_.find({pl_.node(), pl_.lane()});
  if (it == seals_of_.end()) {
    mismatch_ = Mismatch::kNoSeals;
    return Status::Corruption("no entry seals of this shard survive: cannot check it end to end");
  }
  // Into the buffers, hashed as it lands (piece by piece during the
  // transfer, else in one pass now), then checked.
  std::vector<uint32_t> crcs;
  uint32_t whole = 0;
  if (!landed_copy_ || !landed_copy_->Finish(&crcs, &whole)) {
    MEMENTO_RETURN_IF_ERROR(parts_.io->CopyLandedToBuffers(landed_, &crcs, &whole));
  }
  if (replica_seal_ && whole != replica_seal_->crc) {
    // The holder's copy is bad: the plan is made again without it.
    mismatch_ = Mismatch::kSealed;
    return Status::Corruption("restore: " + replica_seal_->from + " fails its sealed crc32c");
  }
  Status s = parts_.io->CheckAgainstSeals(crcs, it->second);
  if (!s.ok()) {
    mismatch_ = Mismatch::kEndToEnd;
    return s;
  }
  if (const int slot = landed_.slot(); slot >= 0) {
    const std::vector<RegisteredEntry>& entries = parts_.io->entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      MEMENTO_RETURN_IF_ERROR(
          parts_.store->SealRegion(slot, static_cast<int>(i), entries[i].bytes, crcs[i]));
    }
  }
  crcs_ = std::move(crcs);
  return Status::Ok();
}

void RecoveryExecutor::ReleaseLanding() {
  if (landed_.slot() >= 0) parts_.slots->Unpin(landed_.slot());
  if (buffer_slot_ >= 0) parts_.slots->Unpin(buffer_slot_);
  buffer_slot_ = -1;
  landed_copy_.reset();
  landed_ = ShardLanding();
  EndHold();
}

}  // namespace memento::runtime
