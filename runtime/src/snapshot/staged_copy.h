// StagedCopier: device-to-host copies through two pinned buffers that the
// driver allocated (cudaHostAlloc), for MEMENTO_DEVICE_COPY=staged.
//
// The node store's pages are registered with the driver (cudaHostRegister);
// the copy engine may write into them more slowly than into memory the
// driver allocated itself (its pinned allocations are physically larger
// runs). Staged, the copy engine fills one buffer while the calling thread
// copies the other into the destination, hashing it on the way (one pass,
// streaming stores: Crc32cStream::UpdateCopy), so the store's pages are
// written by the CPU only. The CPU's extra copy is the price; the snapshot
// workers run it in parallel.
//
// Thread-safety: one object per thread (its copies go on that thread's side
// stream); not shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/erasure/crc32c.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {

class StagedCopier {
 public:
  // Pieces of at most `piece_bytes` (> 0); the buffers are allocated by the
  // first copy, on its device.
  explicit StagedCopier(size_t piece_bytes);
  ~StagedCopier();  // waits for its copies still queued, frees the buffers
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;

  // Copies `n` bytes from `src` (memory of device `gpu`) to host memory
  // `dst`, starting only after `after` (may be null), and adds them to *crc
  // in order. Returns when every byte is in `dst` and nothing of it is still
  // queued, whatever failed. Errors name the CUDA error.
  Status ToHost(uint8_t* dst, const uint8_t* src, size_t n, int gpu, const DeviceFence* after,
                erasure::Crc32cStream* crc);

  // Pinned host bytes this copier holds (0 before its first copy).
  size_t pinned_bytes() const { return buf_[0] != nullptr ? 2 * piece_ : 0; }

 private:
  Status Allocate(int gpu);

  const size_t piece_;
  uint8_t* buf_[2] = {nullptr, nullptr};  // portable: any device copies into them
  DeviceCopyBatch batch_[2];              // one copy each: the piece in buf_[i]
  std::vector<DeviceCopyBatch::Copy> one_ = std::vector<DeviceCopyBatch::Copy>(1);
};

}  // namespace memento::runtime
