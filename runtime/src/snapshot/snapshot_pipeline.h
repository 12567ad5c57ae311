// SnapshotPipeline: copies one version's chunks into its slot on a pool of
// worker threads and hands each landed chunk to the ChunkStages.
//
// The chunk list of a version is built by the Checkpointer from the fixed
// layout (its vector is reused across versions: no allocation per Save).
// Workers claim chunks with one atomic counter, so big and small entries
// spread evenly. A host chunk is copied in cache-sized pieces and its crc32c
// computed on the source right after each piece is copied, while the piece
// is still in cache: one pass over memory for copy + hash
// (Crc32cStream::UpdateCopy, with streaming stores). A version's device chunks
// are all queued at once by the first worker to wake (DeviceCopyBatch: the
// copy engine runs them back to back, at the speed of one long copy), and
// each is hashed in the destination, pinned host memory, by the worker that
// claims it once it has landed.
//
// The application's buffers are free again (WaitReleased) once every host
// chunk is copied and every device copy has landed; the hashing of the device
// chunks and the stages go on behind it until WaitCopied. The copy engine is
// faster than a few cores hash, so the snapshot's stall is the copy's.
//
// Staged (MEMENTO_DEVICE_COPY=staged), a device chunk is instead claimed like
// a host chunk by a worker, which moves it through its own two pinned
// buffers (StagedCopier): the copy engine fills one while the worker copies
// the other into the slot, hashing it. Several workers keep several copies in
// flight. The buffers are released once the chunk is in the slot.
//
// Thread-safety: Start and the version lifecycle are driven by one thread at
// a time (the Checkpointer's application thread); WaitCopied may be called
// from any thread, concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/chunk_stage.h"
#include "memento/runtime/stage.h"
#include "snapshot/device_copy.h"
#include "snapshot/staged_copy.h"

namespace memento::runtime {

struct CopyTask {
  const uint8_t* src = nullptr;  // registered buffer (+ offset)
  uint8_t* dst = nullptr;        // slot region (+ offset)
  uint64_t length = 0;
  uint64_t offset = 0;  // within the entry
  int entry = 0;
  int gpu = kHostMemory;  // src's CUDA device, kHostMemory for host memory
};

class SnapshotPipeline {
 public:
  // `stages` are called for every chunk, in order; `hook` (may be empty) at
  // Stage::kSnapshot after the first landed chunk of each version;
  // `staged_device`: device chunks go through each worker's pinned buffers.
  SnapshotPipeline(int threads, std::vector<ChunkStage*> stages,
                   std::function<Status(Stage, uint64_t)> hook, bool staged_device = false);
  ~SnapshotPipeline();  // finishes the running version, joins the workers

  // Starts copying `*tasks` (kept alive and unchanged by the caller until
  // WaitCopied returns) for `version` into `slot`. Calls every stage's Begin
  // first. Device copies start only after the work queued on
  // `producer_stream` (a cudaStream_t, nullptr = the legacy default stream)
  // before this call, or, when `producer_event` (a cudaEvent_t the caller
  // recorded) is given, only after that event. Precondition (a bug
  // otherwise): the previous version was waited for.
  Status Start(uint64_t version, int slot, const std::vector<CopyTask>* tasks,
               void* producer_stream = nullptr, void* producer_event = nullptr);

  // `version` fails on this rank before anything is copied (its slot could
  // not be begun: `why`): every stage still begins it, with kNoSlot and no
  // chunk, and WaitCopied reports `why`, so that the commit ends every stage
  // with the failure and a protect stage tells its peers at once. Returns
  // `why`.
  Status StartWithoutSlot(uint64_t version, const Status& why);

  // Blocks until every chunk of the last started version has landed and been
  // handed to the stages; returns the first error of a copy or a stage
  // (OK when nothing was started).
  Status WaitCopied();

  // Blocks until the last started version no longer reads the registered
  // buffers: every host chunk copied, every device copy landed. Returns the
  // first error known by then; one found later (a device chunk's stage) is
  // WaitCopied's. Without device chunks the same as WaitCopied.
  Status WaitReleased();

  // How many versions were started (or failed to start) so far: tells one
  // version's outcome from the next one's.
  uint64_t starts() const { return starts_.load(); }

 private:
  // Records `why` as the outcome of `version`, which copies nothing.
  Status FailToStart(uint64_t version, int slot, const Status& why);
  void WorkerLoop();
  // Queues every device chunk of the running version (DeviceCopyBatch).
  void QueueDeviceCopies();
  // `staged`: the worker's copier, made on its first staged device chunk.
  void RunTask(size_t index, std::unique_ptr<StagedCopier>* staged);
  // A device chunk: waits until it is queued and has landed, then hashes it.
  Status LandDeviceChunk(size_t index, uint32_t* crc);
  // Whether task `t` is copied and hashed by the worker that claims it alone
  // (a host chunk, or a staged device chunk): such a chunk releases the
  // application's buffer once it is done.
  bool CopiedByWorker(const CopyTask& t) const { return t.gpu == kHostMemory || staged_device_; }

  const std::vector<ChunkStage*> stages_;
  const bool staged_device_;
  DeviceFence fence_;  // recorded by Start when the version has device tasks
  const std::function<Status(Stage, uint64_t)> hook_;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped by Start
  bool stop_ = false;
  bool running_ = false;
  size_t remaining_ = 0;  // chunks not yet finished
  Status error_;          // first error of the running version
  // Device chunks: each one's copy in batch_ (device_slot_[task index]), and
  // how their queueing went.
  std::vector<size_t> device_slot_;
  std::vector<DeviceCopyBatch::Copy> device_copies_;
  DeviceCopyBatch batch_;
  size_t host_pending_ = 0;    // chunks CopiedByWorker not yet copied
  bool has_device_ = false;    // the running version has device chunks
  bool device_queued_ = true;  // QueueDeviceCopies returned (or nothing to queue)
  size_t device_count_ = 0;    // device copies queued
  Status device_error_;        // QueueDeviceCopies' error

  // Read by workers without the lock: a worker may claim a chunk of the next
  // version straight after the last one (stores happen before next_ resets).
  std::atomic<const std::vector<CopyTask>*> tasks_{nullptr};
  std::atomic<uint64_t> version_{0};
  std::atomic<int> slot_{0};
  std::atomic<size_t> next_{0};
  std::atomic<bool> first_landed_{false};
  std::atomic<bool> queue_claimed_{false};  // a worker took QueueDeviceCopies
  std::atomic<uint64_t> starts_{0};
};

}  // namespace memento::runtime
