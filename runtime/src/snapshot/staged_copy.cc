#include "snapshot/staged_copy.h"

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

}  // namespace memento::runtime
