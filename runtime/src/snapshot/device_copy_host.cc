// device_copy.h without CUDA: host memory only.
#include "snapshot/device_copy.h"

namespace memento::runtime {

int DeviceOf(const void*) { return kHostMemory; }

void MarkRuntimeThread() {}

Status PinHostMemory(void*, size_t) { return Status::Ok(); }

void UnpinHostMemory(void*) {}

DeviceFence::~DeviceFence() = default;

Status DeviceFence::Record(void*) { return Status::Ok(); }

Status CopyDeviceBytes(void*, const void*, size_t, int, const DeviceFence*) {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

}  // namespace memento::runtime
