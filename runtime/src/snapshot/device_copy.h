// Copies between registered buffers (host or, with CUDA, device memory) and
// the node store's slots. The only place the runtime touches CUDA: with
// MEMENTO_WITH_CUDA off, device_copy_host.cc provides plain memcpy and
// reports every pointer as host memory.
//
// Thread-safety: every function may be called from any thread. With CUDA each
// calling thread uses its own non-blocking side stream (created on first use),
// so copies never serialize behind the training's default stream work.
#pragma once

#include <cstddef>

#include "memento/common/status.h"

namespace memento::runtime {

// True when `ptr` is CUDA device (or managed) memory. Always false without CUDA.
bool IsDevicePointer(const void* ptr);

// Pins [ptr, ptr + bytes) of host memory (cudaHostRegister) so that device
// copies into it run at pinned speed. Once per range; a no-op without CUDA.
// Failure is not fatal for correctness (copies are then staged by the driver):
// the caller may log and continue.
Status PinHostMemory(void* ptr, size_t bytes);
// Undoes PinHostMemory (before the mapping goes away).
void UnpinHostMemory(void* ptr);

// A point in a producing stream's queued work that device copies wait for:
// the snapshot of a version must copy what the training's stream produces,
// not what a buffer held when Save was called (the copies run on side
// streams that do not otherwise wait for the training's streams). One CUDA
// event, created on first use and reused for every version (no allocation
// per Save). Without CUDA every call is a no-op.
// Thread-safety: Record from one thread; CopyBytes may read the fence from
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

  // The recorded event (a cudaEvent_t), or nullptr before the first Record.
  void* event() const { return event_; }

 private:
  void* event_ = nullptr;
};

// Copies `bytes` from `src` to `dst`; either side may be device memory when
// `device` is true (the direction is deduced by the driver). A device copy
// starts only after `after` (may be null). Returns when the bytes are in
// place. Errors name the CUDA error.
Status CopyBytes(void* dst, const void* src, size_t bytes, bool device,
                 const DeviceFence* after = nullptr);

}  // namespace memento::runtime
