#include "snapshot/staged_copy.h"

#include <utility>

#include "memento/common/check.h"

namespace memento::runtime {

StagedCopier::StagedCopier(size_t piece_bytes) : piece_(piece_bytes) {
  MEMENTO_CHECK_GT(piece_bytes, 0u);
}

StagedCopier::~StagedCopier() {
  // The batches' own destructors wait too, but only after the buffers would
  // be gone.
  (void)batch_[0].WaitAll();
  (void)batch_[1].WaitAll();
  FreePinned(buf_[0]);
  FreePinned(buf_[1]);
}

Status StagedCopier::Allocate(int gpu) {
  for (uint8_t*& buf : buf_) {
    if (buf != nullptr) continue;
    MEMENTO_ASSIGN_OR_RETURN(void* p, AllocatePinned(piece_, gpu));
    buf = static_cast<uint8_t*>(p);
  }
  return Status::Ok();
}

Status StagedCopier::ToHost(uint8_t* dst, const uint8_t* src, size_t n, int gpu,
                            const DeviceFence* after, erasure::Crc32cStream* crc) {
  if (n == 0) return Status::Ok();
  MEMENTO_RETURN_IF_ERROR(Allocate(gpu));
  DeviceCopyBatch* const batches[2] = {&batch_[0], &batch_[1]};
  return CopyThroughTwoBuffers(dst, src, n, gpu, piece_, buf_, batches, after, crc, &one_);
}

Status StagedCopier::ToDevice(uint8_t* dst, const uint8_t* src, size_t n, int gpu,
                              erasure::Crc32cStream* crc) {
  if (n == 0) return Status::Ok();
  MEMENTO_RETURN_IF_ERROR(Allocate(gpu));
  DeviceCopyBatch* const batches[2] = {&batch_[0], &batch_[1]};
  return CopyToDeviceThroughTwoBuffers(dst, src, n, gpu, piece_, buf_, batches, crc, &one_);
}

std::unique_ptr<StagedCopier> StagedCopierPool::Take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      std::unique_ptr<StagedCopier> copier = std::move(free_.back());
      free_.pop_back();
      return copier;
    }
  }
  return std::make_unique<StagedCopier>(kStagedPieceBytes);
}

void StagedCopierPool::Give(std::unique_ptr<StagedCopier> copier) {
  if (copier == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(copier));
}

Status StagedCopierPool::ToDevice(uint8_t* dst, const uint8_t* src, size_t n, int gpu,
                                  erasure::Crc32cStream* crc) {
  std::unique_ptr<StagedCopier> copier = Take();
  Status s = copier->ToDevice(dst, src, n, gpu, crc);
  Give(std::move(copier));
  return s;
}

}  // namespace memento::runtime
