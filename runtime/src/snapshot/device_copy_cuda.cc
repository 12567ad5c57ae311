// device_copy.h with CUDA: cudaMemcpyAsync on a per-thread side stream.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "snapshot/device_copy.h"

namespace memento::runtime {
namespace {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

// One non-blocking stream per copying thread and device (a stream belongs
// to the device current when it was made), destroyed with the thread.
struct ThreadStream {
  cudaStream_t stream = nullptr;
  ThreadStream() = default;
  ThreadStream(const ThreadStream&) = delete;
  ThreadStream& operator=(const ThreadStream&) = delete;
  ~ThreadStream() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The calling thread's side streams, by (device, lane).
std::map<std::pair<int, int>, ThreadStream>& ThreadStreams() {
  thread_local std::map<std::pair<int, int>, ThreadStream> streams;
  return streams;
}

// Of the calling thread's device (OnDevice made it `gpu`); `lane` picks one
// of the thread's several streams on it (DeviceCopyBatch, QueueDeviceBytes).
Result<cudaStream_t> SideStream(int gpu, int lane = 0) {
  ThreadStream& ts = ThreadStreams()[{gpu, lane}];
  if (ts.stream == nullptr) {
    cudaError_t err = cudaStreamCreateWithFlags(&ts.stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      ts.stream = nullptr;
      return CudaStatus(err, "cudaStreamCreateWithFlags");
    }
  }
  return ts.stream;
}

// Makes `stream` wait for `after` (null or never recorded: nothing to wait for).
Status WaitFor(cudaStream_t stream, const DeviceFence* after) {
  if (after == nullptr || after->event() == nullptr) return Status::Ok();
  return CudaStatus(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(after->event()), 0),
                    "cudaStreamWaitEvent on the producing stream");
}

thread_local bool t_runtime_thread = false;

// Whether device `ordinal`'s primary context is active, asked of the driver
// (the runtime API has no such query; loaded at run time, as the runtime
// itself loads it, so that nothing links the driver library). True when it
// cannot be asked.
bool PrimaryContextActive(int ordinal) {
  using GetDevice = int (*)(int*, int);
  using GetState = int (*)(int, unsigned*, int*);
  struct Driver {
    GetDevice get = nullptr;
    GetState state = nullptr;
  };
  static const Driver driver = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return d;  // kept open for the process's lifetime
    d.get = reinterpret_cast<GetDevice>(dlsym(lib, "cuDeviceGet"));
    d.state = reinterpret_cast<GetState>(dlsym(lib, "cuDevicePrimaryCtxGetState"));
    return d;
  }();
  if (driver.get == nullptr || driver.state == nullptr) return true;
  int device = 0, active = 0;
  unsigned flags = 0;
  if (driver.get(&device, ordinal) != 0 || driver.state(device, &flags, &active) != 0) return true;
  return active != 0;
}

// Makes `gpu` the calling thread's current device for the scope
// (cudaGetDevice makes no context; cudaSetDevice only `gpu`'s). An
// application thread gets back a device it was working on (one whose
// context is active); a runtime thread, and an application thread that never
// chose a device (its default 0 has no context), stay on `gpu`: going back
// would make the very context on device 0 that this avoids.
class OnDevice {
 public:
  explicit OnDevice(int gpu) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) {
      cudaGetLastError();
      current = -1;
    }
    if (current == gpu) return;
    status_ = CudaStatus(cudaSetDevice(gpu), "cudaSetDevice");
    if (status_.ok() && !t_runtime_thread && current >= 0 && PrimaryContextActive(current)) {
      restore_ = current;
    }
  }
  ~OnDevice() {
    if (restore_ >= 0 && cudaSetDevice(restore_) != cudaSuccess) cudaGetLastError();
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  const Status& status() const { return status_; }

 private:
  Status status_;
  int restore_ = -1;
};

}  // namespace

int DeviceOf(const void* ptr) {
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error of a plain host pointer
    return kHostMemory;
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return kHostMemory;
  return attr.device >= 0 ? attr.device : kHostMemory;
}

void MarkRuntimeThread() { t_runtime_thread = true; }

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

Result<void*> AllocatePinned(size_t bytes, int gpu) {
  if (gpu < 0) return Status::InvalidArgument("AllocatePinned: no device given");
  OnDevice on(gpu);
  MEMENTO_RETURN_IF_ERROR(on.status());
  void* p = nullptr;
  MEMENTO_RETURN_IF_ERROR(CudaStatus(
      cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable), "cudaHostAlloc"));
  return p;
}

void FreePinned(void* ptr) {
  if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
}

DeviceFence::~DeviceFence() {
  if (own_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(own_));
}

Status DeviceFence::Record(void* stream) {
  if (own_ == nullptr) {
    cudaEvent_t event = nullptr;
    MEMENTO_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    own_ = event;
  }
  event_ = own_;
  cudaStream_t producer = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
  return CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(event_), producer),
                    "cudaEventRecord on the producing stream");
}

Status DeviceFence::Adopt(void* event) {
  if (event == nullptr) return Status::InvalidArgument("DeviceFence::Adopt: no event given");
  event_ = event;
  return Status::Ok();
}

Status CopyDeviceBytes(void* dst, const void* src, size_t bytes, int gpu,
                       const DeviceFence* after) {
  if (bytes == 0) return Status::Ok();
  if (gpu < 0) return Status::InvalidArgument("CopyDeviceBytes: no device given");
  OnDevice on(gpu);
  MEMENTO_RETURN_IF_ERROR(on.status());
  MEMENTO_ASSIGN_OR_RETURN(cudaStream_t stream, SideStream(gpu));
  MEMENTO_RETURN_IF_ERROR(WaitFor(stream, after));
  MEMENTO_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync"));
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

DeviceCopyBatch::~DeviceCopyBatch() {
  (void)WaitAll();
  for (void* e : events_) {
    if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
}

Status DeviceCopyBatch::Queue(const std::vector<Copy>& copies, const DeviceFence* after,
                              size_t* queued) {
  *queued = 0;
  queued_ = 0;
  last_.clear();
  if (events_.size() < copies.size()) {
    events_.resize(copies.size(), nullptr);
    event_gpu_.resize(copies.size(), -1);
  }
  // One run of copies of one device at a time, on that device.
  for (size_t i = 0; i < copies.size();) {
    const int gpu = copies[i].gpu;
    if (gpu < 0) return Status::InvalidArgument("DeviceCopyBatch: a copy names no device");
    OnDevice on(gpu);
    MEMENTO_RETURN_IF_ERROR(on.status());
    for (; i < copies.size() && copies[i].gpu == gpu; ++i) {
      const Copy& c = copies[i];
      const int lane = static_cast<int>(i % kLanes);
      MEMENTO_ASSIGN_OR_RETURN(cudaStream_t stream, SideStream(gpu, lane));
      // last_ holds a copy of each stream used so far: a stream not yet in
      // it waits for `after` before its first copy.
      auto last = std::find_if(last_.begin(), last_.end(), [&](size_t l) {
        return copies[l].gpu == gpu && l % kLanes == i % kLanes;
      });
      if (last == last_.end()) MEMENTO_RETURN_IF_ERROR(WaitFor(stream, after));
      if (events_[i] != nullptr && event_gpu_[i] != gpu) {
        cudaEventDestroy(static_cast<cudaEvent_t>(events_[i]));
        events_[i] = nullptr;
      }
      if (events_[i] == nullptr) {
        cudaEvent_t e = nullptr;
        MEMENTO_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                           "cudaEventCreate for a device copy"));
        events_[i] = e;
        event_gpu_[i] = gpu;
      }
      MEMENTO_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync"));
      MEMENTO_RETURN_IF_ERROR(CudaStatus(
          cudaEventRecord(static_cast<cudaEvent_t>(events_[i]), stream), "cudaEventRecord"));
      *queued = queued_ = i + 1;
      // Each stream runs in order: WaitAll waits for the last copy of each.
      if (last != last_.end()) {
        *last = i;
      } else {
        last_.push_back(i);
      }
    }
  }
  return Status::Ok();
}

Status DeviceCopyBatch::Landed(size_t i) const {
  if (i >= queued_) return Status::FailedPrecondition("DeviceCopyBatch: copy not queued");
  return CudaStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[i])),
                    "cudaEventSynchronize on a device copy");
}

Status DeviceCopyBatch::WaitAll() const {
  Status status;
  for (size_t i : last_) {
    if (i >= queued_) continue;
    Status s = Landed(i);
    if (!s.ok() && status.ok()) status = s;
  }
  return status;
}

Status QueueDeviceBytes(void* dst, const void* src, size_t bytes, int gpu, size_t lane) {
  if (bytes == 0) return Status::Ok();
  if (gpu < 0) return Status::InvalidArgument("QueueDeviceBytes: no device given");
  OnDevice on(gpu);
  MEMENTO_RETURN_IF_ERROR(on.status());
  MEMENTO_ASSIGN_OR_RETURN(cudaStream_t stream,
                           SideStream(gpu, static_cast<int>(lane % DeviceCopyBatch::kLanes)));
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                    "cudaMemcpyAsync");
}

Status WaitQueuedCopies(int gpu) {
  if (gpu < 0) return Status::InvalidArgument("WaitQueuedCopies: no device given");
  OnDevice on(gpu);
  MEMENTO_RETURN_IF_ERROR(on.status());
  Status status;
  for (auto& [key, ts] : ThreadStreams()) {
    if (key.first != gpu || ts.stream == nullptr) continue;
    Status s = CudaStatus(cudaStreamSynchronize(ts.stream), "cudaStreamSynchronize");
    if (!s.ok() && status.ok()) status = s;
  }
  return status;
}

}  // namespace memento::runtime
