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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/erasure/crc32c.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {

// The piece pipeline of StagedCopier::ToHost over any two one-copy batches
// with DeviceCopyBatch's Queue / Landed / WaitAll (tests drive it with a host
// stand-in): piece k of `n` bytes (at most `piece`) goes through buf[k % 2];
// before it is queued, piece k - 2 (that buffer's last) is waited for and
// copied out to `dst`, hashed into *crc, while piece k - 1 is on the copy
// engine. Pieces leave the buffers in order, so *crc sees them in order.
// Returns the first error; nothing is still queued when it returns. `one`:
// the caller's list of one copy, reused for every piece (no allocation per
// chunk).
template <typename Batch>
Status CopyThroughTwoBuffers(uint8_t* dst, const uint8_t* src, size_t n, int gpu, size_t piece,
                             uint8_t* const buf[2], Batch* const batch[2], const DeviceFence* after,
                             erasure::Crc32cStream* crc, std::vector<DeviceCopyBatch::Copy>* one) {
  struct Pending {
    uint8_t* dst = nullptr;
    size_t n = 0;
  } pending[2];
  auto drain = [&](int b) {
    Status landed = batch[b]->Landed(0);
    if (landed.ok()) crc->UpdateCopy(pending[b].dst, buf[b], pending[b].n);
    pending[b] = Pending{};
    return landed;
  };
  one->resize(1);
  Status status;
  size_t k = 0;
  for (size_t off = 0; off < n && status.ok(); off += piece, ++k) {
    const int b = static_cast<int>(k % 2);
    if (pending[b].n > 0) status = drain(b);
    if (!status.ok()) break;
    const size_t len = std::min(piece, n - off);
    size_t queued = 0;
    (*one)[0] = DeviceCopyBatch::Copy{buf[b], src + off, len, gpu};
    status = batch[b]->Queue(*one, after, &queued);
    if (status.ok()) pending[b] = Pending{dst + off, len};
  }
  // The older piece first: the last one queued is in buf[(k - 1) % 2].
  for (size_t i = 0; i < 2; ++i) {
    const int b = static_cast<int>((k + i) % 2);
    if (pending[b].n == 0) continue;
    if (status.ok()) {
      status = drain(b);
    } else {
      (void)batch[b]->WaitAll();  // nothing queued may outlive the call
      pending[b] = Pending{};
    }
  }
  return status;
}

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
  std::vector<DeviceCopyBatch::Copy> one_;  // the copy queued, reused
};

}  // namespace memento::runtime
