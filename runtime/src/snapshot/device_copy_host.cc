// device_copy.h without CUDA: host memory only.
#include "snapshot/device_copy.h"

namespace memento::runtime {

int DeviceOf(const void*) { return kHostMemory; }

void MarkRuntimeThread() {}

Status PinHostMemory(void*, size_t) { return Status::Ok(); }

void UnpinHostMemory(void*) {}

DeviceFence::~DeviceFence() = default;

Status DeviceFence::Record(void*) { return Status::Ok(); }

Status DeviceFence::Adopt(void*) { return Status::Ok(); }

Status CopyDeviceBytes(void*, const void*, size_t, int, const DeviceFence*) {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

Status CopyFromDevice(uint8_t*, const uint8_t*, size_t, int, const DeviceFence*, size_t,
                      const std::function<void(size_t, size_t)>&) {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

Status QueueDeviceBytes(void*, const void*, size_t, int) {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

Status WaitQueuedCopies(int) { return Status::Ok(); }

}  // namespace memento::runtime
