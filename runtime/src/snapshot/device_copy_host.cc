// device_copy.h without CUDA: host memory only.
#include "snapshot/device_copy.h"

namespace memento::runtime {

int DeviceOf(const void*) { return kHostMemory; }

void MarkRuntimeThread() {}

Status PinHostMemory(void*, size_t) { return Status::Ok(); }

void UnpinHostMemory(void*) {}

Result<void*> AllocatePinned(size_t, int) {
  return Status::FailedPrecondition("pinned device staging requested without CUDA");
}

void FreePinned(void*) {}

DeviceFence::~DeviceFence() = default;

Status DeviceFence::Record(void*) { return Status::Ok(); }

Status DeviceFence::Adopt(void*) { return Status::Ok(); }

Status CopyDeviceBytes(void*, const void*, size_t, int, const DeviceFence*) {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

DeviceCopyBatch::~DeviceCopyBatch() = default;

Status DeviceCopyBatch::Queue(const std::vector<Copy>& copies, const DeviceFence*, size_t* queued) {
  *queued = 0;
  if (copies.empty()) return Status::Ok();
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

Status DeviceCopyBatch::Landed(size_t) const {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

Status DeviceCopyBatch::WaitAll() const { return Status::Ok(); }

Status QueueDeviceBytes(void*, const void*, size_t, int, size_t) {
  return Status::FailedPrecondition("device memory copy requested without CUDA");
}

Status WaitQueuedCopies(int) { return Status::Ok(); }

}  // namespace memento::runtime
