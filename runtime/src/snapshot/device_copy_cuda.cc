// device_copy.h with CUDA: cudaMemcpyAsync on a per-thread side stream.
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "snapshot/device_copy.h"

namespace memento::runtime {
namespace {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

// One non-blocking stream per copying thread, destroyed with the thread.
struct ThreadStream {
  cudaStream_t stream = nullptr;
  ~ThreadStream() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

Result<cudaStream_t> SideStream() {
  thread_local ThreadStream ts;
  if (ts.stream == nullptr) {
    cudaError_t err = cudaStreamCreateWithFlags(&ts.stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      ts.stream = nullptr;
      return CudaStatus(err, "cudaStreamCreateWithFlags");
    }
  }
  return ts.stream;
}

}  // namespace

bool IsDevicePointer(const void* ptr) {
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error of a plain host pointer
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

Status PinHostMemory(void* ptr, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  cudaError_t err = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
  if (err == cudaErrorHostMemoryAlreadyRegistered) {
    cudaGetLastError();
    return Status::Ok();
  }
  return CudaStatus(err, "cudaHostRegister");
}

void UnpinHostMemory(void* ptr) {
  if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
}

DeviceFence::~DeviceFence() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Status DeviceFence::Record(void* stream) {
  if (event_ == nullptr) {
    cudaEvent_t event = nullptr;
    MEMENTO_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    event_ = event;
  }
  cudaStream_t producer = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
  return CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(event_), producer),
                    "cudaEventRecord on the producing stream");
}

Status CopyBytes(void* dst, const void* src, size_t bytes, bool device, const DeviceFence* after) {
  if (bytes == 0) return Status::Ok();
  if (!device) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  MEMENTO_ASSIGN_OR_RETURN(cudaStream_t stream, SideStream());
  if (after != nullptr && after->event() != nullptr) {
    MEMENTO_RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(after->event()), 0),
                   "cudaStreamWaitEvent on the producing stream"));
  }
  MEMENTO_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync"));
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace memento::runtime
