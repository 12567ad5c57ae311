// device_copy.h without CUDA: host memory only.
#include <cstring>

#include "snapshot/device_copy.h"

namespace memento::runtime {

bool IsDevicePointer(const void*) { return false; }

Status PinHostMemory(void*, size_t) { return Status::Ok(); }

void UnpinHostMemory(void*) {}

DeviceFence::~DeviceFence() = default;

Status DeviceFence::Record(void*) { return Status::Ok(); }

Status CopyBytes(void* dst, const void* src, size_t bytes, bool device, const DeviceFence*) {
  if (device) return Status::FailedPrecondition("device memory copy requested without CUDA");
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return Status::Ok();
}

}  // namespace memento::runtime
