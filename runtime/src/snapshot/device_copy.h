// Copies between registered buffers (host or, with CUDA, device memory) and
// the node store's slots. The only place the runtime touches CUDA: with
// MEMENTO_WITH_CUDA off, device_copy_host.cc provides plain memcpy and
// reports every pointer as host memory.
//
// Thread-safety: every function may be called from any thread (DeviceCopyBatch
// says its own). With CUDA each calling thread uses its own non-blocking side
// stream (created on first use), so copies never serialize behind the
// training's default stream work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"

namespace memento::runtime {

// The device of host memory.
inline constexpr int kHostMemory = -1;

// The CUDA device that `ptr` lies on (device or managed memory), else
// kHostMemory. Always kHostMemory without CUDA.
int DeviceOf(const void* ptr);

// Marks the calling thread as one of the runtime's own (snapshot workers,
// copies run behind a restore): a device copy leaves it on the copy's
// device. Any other thread (the application's) gets its current device back
// after the copy. A no-op without CUDA.
void MarkRuntimeThread();

// Pins [ptr, ptr + bytes) of host memory (cudaHostRegister) so that device
// copies into it run at pinned speed. Once per range; a no-op without CUDA.
// Failure is not fatal for correctness (copies are then staged by the driver):
// the caller may log and continue.
Status PinHostMemory(void* ptr, size_t bytes);
// Undoes PinHostMemory (before the mapping goes away).
void UnpinHostMemory(void* ptr);

// `bytes` of pinned host memory the driver allocates (cudaHostAlloc; portable:
// every device copies into it at pinned speed), with
// device `gpu` made the calling thread's current device first (a thread's
// first CUDA call makes a context on its current device). Errors name the
// CUDA error; without CUDA, FailedPrecondition.
Result<void*> AllocatePinned(size_t bytes, int gpu);
// Frees what AllocatePinned returned (nullptr: nothing).
void FreePinned(void* ptr);

// A point in a producing stream's queued work that device copies wait for:
// the snapshot of a version must copy what the training's stream produces,
// not what a buffer held when Save was called (the copies run on side
// streams that do not otherwise wait for the training's streams). One CUDA
// event, created on first use and reused for every version (no allocation
// per Save). Without CUDA every call is a no-op.
// Thread-safety: Record from one thread; CopyDeviceBytes may read the fence from
// any thread once Record returned, until the next Record.
class DeviceFence {
 public:
  DeviceFence() = default;
  ~DeviceFence();
  DeviceFence(const DeviceFence&) = delete;
  DeviceFence& operator=(const DeviceFence&) = delete;

  // Marks the current end of the work queued on `stream` (a cudaStream_t;
  // nullptr = the legacy default stream, whose work also orders after every
  // blocking stream's earlier work).
  Status Record(void* stream);

  // Takes `event` (a cudaEvent_t the caller recorded and keeps alive) as the
  // point to wait for, until the next Record or Adopt.
  Status Adopt(void* event);

  // The event to wait for (a cudaEvent_t), or nullptr before the first
  // Record or Adopt.
  void* event() const { return event_; }

 private:
  void* own_ = nullptr;    // created by the first Record, destroyed with the fence
  void* event_ = nullptr;  // own_ or an adopted event
};

// Copies `bytes` from `src` to `dst`, one of them memory of CUDA device
// `gpu` (DeviceOf; the direction is deduced by the driver), on a side stream
// of that device: the calling thread is made to work on `gpu` first. A
// thread's current device is 0 until it sets one, and a copy from it would
// make a context (hundreds of MiB) on device 0 in every process of a node
// whose ranks each use another GPU. Starts only after `after` (may be
// null). Returns when the bytes are in place. Errors name the CUDA error;
// without CUDA, FailedPrecondition.
Status CopyDeviceBytes(void* dst, const void* src, size_t bytes, int gpu,
                       const DeviceFence* after = nullptr);

// Device copies all queued at once by one thread (a version's copies into
// the node store; a staged copy's one piece, either way), so that the copy
// engines run them back to back as they would one long copy (a
// copy per chunk waited for before the next is queued leaves an engine idle
// while the host hashes), and waited for one by one from any thread: the
// snapshot workers hash each chunk as it lands. The copies of a device go
// round-robin to kLanes streams of the queuing thread: on an H200 (see
// experiments/results/gpu.md) the snapshot into memory the driver registered
// (the node store's tmpfs pages) moved 18.8 GB/s on one stream, 24 GB/s when
// two threads each kept a stream busy (both with two snapshot workers
// hashing every landed byte), and torch's one stream into cudaHostAlloc
// memory 53 GB/s. One event per copy, made on first use on the
// copy's device and kept for the next versions.
// Thread-safety: Queue from one thread at a time; Landed and WaitAll from any
// thread once Queue returned, until the next Queue.
class DeviceCopyBatch {
 public:
  struct Copy {
    // One of them memory of device `gpu`, the other pinned host memory
    // (PinHostMemory, AllocatePinned); the driver tells the direction.
    uint8_t* dst = nullptr;
    const uint8_t* src = nullptr;
    size_t bytes = 0;
    int gpu = kHostMemory;
  };
  DeviceCopyBatch() = default;
  ~DeviceCopyBatch();  // waits for what is still queued, then destroys the events
  DeviceCopyBatch(const DeviceCopyBatch&) = delete;
  DeviceCopyBatch& operator=(const DeviceCopyBatch&) = delete;

  // Queues `copies` in order, each on the calling thread's side stream of its
  // device (made the thread's current device) after `after` (may be null),
  // with an event after each. *queued: how many were queued, all of them or
  // those before the first error, which is returned (naming the CUDA error;
  // without CUDA, FailedPrecondition). Precondition: the copies of the
  // previous Queue landed (WaitAll).
  Status Queue(const std::vector<Copy>& copies, const DeviceFence* after, size_t* queued);

  // Returns once copy `i` of the last Queue (i < its *queued) has landed.
  Status Landed(size_t i) const;

  // Returns once every copy of the last Queue has landed.
  Status WaitAll() const;

  static constexpr size_t kLanes = 4;

 private:
  std::vector<void*> events_;   // cudaEvent_t per copy
  std::vector<int> event_gpu_;  // the device each event was made on
  std::vector<size_t> last_;    // per stream of the last Queue: its last copy
  size_t queued_ = 0;
};

// Queues a copy of `bytes` from `src` to `dst` (one of them memory of device
// `gpu`) on the calling thread's side stream `lane` (modulo
// DeviceCopyBatch::kLanes) of `gpu` and returns at once; `src` must stay
// unchanged and `dst` unread until WaitQueuedCopies(gpu) returns. Copies of
// one thread to one device and lane run in the order queued; copies on
// different lanes may run at the same time.
Status QueueDeviceBytes(void* dst, const void* src, size_t bytes, int gpu, size_t lane = 0);

// Returns when every copy the calling thread queued for device `gpu`, on any
// lane, is done.
Status WaitQueuedCopies(int gpu);

}  // namespace memento::runtime
