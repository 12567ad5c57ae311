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

// Copies `bytes` from `src` to `dst`; either side may be device memory when
// `device` is true (the direction is deduced by the driver). Returns when
// the bytes are in place. Errors name the CUDA error.
Status CopyBytes(void* dst, const void* src, size_t bytes, bool device);

}  // namespace memento::runtime
