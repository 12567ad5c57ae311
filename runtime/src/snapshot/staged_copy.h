// StagedCopier: copies between a device and host memory through two pinned
// buffers that the driver allocated (cudaHostAlloc): device to host for
// MEMENTO_DEVICE_COPY=staged, host to device for a restore from host memory
// that is not registered with the driver (a node store this process did not
// register: after a relaunch, or with staged copies; the heap).
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
// Thread-safety: one thread at a time (its copies go on the calling
// thread's side streams, and none outlives a call).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "memento/common/status.h"
#include "memento/erasure/crc32c.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {

// The size of each of a StagedCopier's two buffers, as the snapshot and the
// restore use them: a chunk or restore piece of several keeps one on the
// copy engine while the thread copies the other.
inline constexpr size_t kStagedPieceBytes = 1 << 20;

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

// The other way, for a restore from host memory the driver does not know as
// pinned: piece k of `src` is copied into buf[k % 2] by the calling thread,
// hashed into *crc on the way, and queued to `dst` (memory of device `gpu`)
// while the copy engine still moves piece k - 1 from the other buffer; a
// buffer is refilled only once its last piece landed (`crc` may be null:
// copied only, for a source the caller verifies). Returns the first
// error; nothing is still queued when it returns.
template <typename Batch>
Status CopyToDeviceThroughTwoBuffers(uint8_t* dst, const uint8_t* src, size_t n, int gpu,
                                     size_t piece, uint8_t* const buf[2], Batch* const batch[2],
                                     erasure::Crc32cStream* crc,
                                     std::vector<DeviceCopyBatch::Copy>* one) {
  bool pending[2] = {false, false};
  one->resize(1);
  Status status;
  size_t k = 0;
  for (size_t off = 0; off < n && status.ok(); off += piece, ++k) {
    const int b = static_cast<int>(k % 2);
    if (pending[b]) {
      pending[b] = false;
      status = batch[b]->Landed(0);
      if (!status.ok()) break;
    }
    const size_t len = std::min(piece, n - off);
    if (crc != nullptr) {
      crc->UpdateCopy(buf[b], src + off, len);
    } else {
      std::memcpy(buf[b], src + off, len);
    }
    size_t queued = 0;
    (*one)[0] = DeviceCopyBatch::Copy{dst + off, buf[b], len, gpu};
    status = batch[b]->Queue(*one, nullptr, &queued);
    pending[b] = queued > 0;
  }
  for (int b = 0; b < 2; ++b) {
    if (!pending[b]) continue;
    Status landed = status.ok() ? batch[b]->Landed(0) : batch[b]->WaitAll();
    if (status.ok()) status = landed;
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

  // Copies `n` bytes from host memory `src` (any: the calling thread copies
  // each piece into a buffer) to `dst`, memory of device `gpu`, and adds them
  // to *crc in order (when `crc` is not null). Returns when every byte is in
  // `dst` and nothing of it is still queued, whatever failed. Errors name the
  // CUDA error.
  Status ToDevice(uint8_t* dst, const uint8_t* src, size_t n, int gpu, erasure::Crc32cStream* crc);

  // Pinned host bytes this copier holds (0 before its first copy).
  size_t pinned_bytes() const { return buf_[0] != nullptr ? 2 * piece_ : 0; }

 private:
  Status Allocate(int gpu);

  const size_t piece_;
  uint8_t* buf_[2] = {nullptr, nullptr};  // portable: any device copies into them
  DeviceCopyBatch batch_[2];              // one copy each: the piece in buf_[i]
  std::vector<DeviceCopyBatch::Copy> one_;  // the copy queued, reused
};

// StagedCopiers for threads that come and go (the restore's): Take() hands
// one to the calling thread (a free one, else a new one), Give() takes it
// back for the next. The copiers and their pinned buffers (2 MiB each) live
// as long as the pool. Thread-safe.
class StagedCopierPool {
 public:
  std::unique_ptr<StagedCopier> Take();
  void Give(std::unique_ptr<StagedCopier> copier);

  // StagedCopier::ToDevice on a copier taken for the call.
  Status ToDevice(uint8_t* dst, const uint8_t* src, size_t n, int gpu, erasure::Crc32cStream* crc);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<StagedCopier>> free_;  // guarded by mu_
};

}  // namespace memento::runtime
