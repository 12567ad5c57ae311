#include "snapshot/staged_copy.h"

#include <algorithm>

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
  // Piece k goes through buf_[k % 2]: before it is queued, piece k - 2 (the
  // buffer's last) is waited for and copied out, while piece k - 1 is on the
  // copy engine. Pieces leave the buffers in order, so *crc sees them in order.
  struct Pending {
    uint8_t* dst = nullptr;
    size_t n = 0;
  } pending[2];
  auto drain = [&](int b) {
    Status landed = batch_[b].Landed(0);
    if (landed.ok()) crc->UpdateCopy(pending[b].dst, buf_[b], pending[b].n);
    pending[b] = Pending{};
    return landed;
  };
  Status status;
  size_t k = 0;
  for (size_t off = 0; off < n && status.ok(); off += piece_, ++k) {
    const int b = static_cast<int>(k % 2);
    if (pending[b].n > 0) status = drain(b);
    if (!status.ok()) break;
    const size_t len = std::min(piece_, n - off);
    size_t queued = 0;
    one_[0] = DeviceCopyBatch::Copy{buf_[b], src + off, len, gpu};
    status = batch_[b].Queue(one_, after, &queued);
    if (status.ok()) pending[b] = Pending{dst + off, len};
  }
  // The older piece first: the last one queued is in buf_[(k - 1) % 2].
  for (size_t i = 0; i < 2; ++i) {
    const int b = static_cast<int>((k + i) % 2);
    if (pending[b].n == 0) continue;
    if (status.ok()) {
      status = drain(b);
    } else {
      (void)batch_[b].WaitAll();  // nothing queued may outlive the call
      pending[b] = Pending{};
    }
  }
  return status;
}

}  // namespace memento::runtime
