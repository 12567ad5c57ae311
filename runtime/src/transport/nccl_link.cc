// NcclLink: built with CUDA and nccl.h; NCCL's library is loaded at run time.
#include "memento/runtime/nccl_link.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace memento::runtime {
namespace {

// The NCCL entry points the link uses, from the library loaded at run time.
struct Nccl {
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  Status loaded = Status::Internal("not loaded");
};

const Nccl& LoadNccl() {
  static const Nccl nccl = [] {
    Nccl n;
    // RTLD_NOLOAD first: a CUDA torch has loaded its own NCCL already.
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      n.loaded = Status::FailedPrecondition(std::string("NCCL: cannot load libnccl.so.2: ") +
                                            (e != nullptr ? e : "unknown error"));
      return n;
    }
    auto sym = [&](const char* name, auto* fn) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      return *fn != nullptr;
    };
    const bool all = sym("ncclGetUniqueId", &n.get_unique_id) &&
                     sym("ncclCommInitRank", &n.comm_init_rank) && sym("ncclSend", &n.send) &&
                     sym("ncclRecv", &n.recv) && sym("ncclCommAbort", &n.comm_abort) &&
                     sym("ncclCommDestroy", &n.comm_destroy) &&
                     sym("ncclCommGetAsyncError", &n.comm_get_async_error) &&
                     sym("ncclGetErrorString", &n.get_error_string);
    n.loaded = all ? Status::Ok()
                   : Status::FailedPrecondition(
                         "NCCL: libnccl.so.2 lacks ncclSend / ncclRecv "
                         "(NCCL 2.7 or later is needed)");
    return n;
  }();
  return nccl;
}

Status CudaError(cudaError_t e, const char* what) {
  return Status::Internal(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// Sets the calling thread's device for a scope, and sets back the one it had.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) ok_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  cudaError_t status() const { return ok_; }

 private:
  int previous_ = -1;
  cudaError_t ok_ = cudaSuccess;
};

class NcclLink : public DeviceLink {
 public:
  NcclLink(int device, const NcclLinkOptions& options) : device_(device), options_(options) {}

  ~NcclLink() override {
    DeviceScope scope(device_);
    if (comm_ != nullptr && !comm_aborted_) {
      if (broken_.load()) {
        (void)LoadNccl().comm_abort(comm_);
      } else {
        (void)LoadNccl().comm_destroy(comm_);
      }
    }
    for (cudaEvent_t e : done_) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    if (staging_ != nullptr) (void)cudaFree(staging_);
  }

  // The device side: stream, events and staging on `device_`.
  Status Allocate() {
    DeviceScope scope(device_);
    if (scope.status() != cudaSuccess) return CudaError(scope.status(), "cudaSetDevice");
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate");
    for (cudaEvent_t& ev : done_) {
      e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (e != cudaSuccess) return CudaError(e, "cudaEventCreate");
    }
    e = cudaMalloc(&staging_, options_.staging_bytes);
    if (e != cudaSuccess) return CudaError(e, "cudaMalloc of the link's staging");
    return Status::Ok();
  }

  Status Join(const ncclUniqueId& id, int size, int rank) {
    DeviceScope scope(device_);
    const ncclResult_t r = LoadNccl().comm_init_rank(&comm_, size, id, rank);
    if (r != ncclSuccess) {
      comm_ = nullptr;
      return Status::Unavailable(std::string("NCCL: ncclCommInitRank: ") +
                                 LoadNccl().get_error_string(r));
    }
    return Status::Ok();
  }

  Status Send(int peer, const void* data, size_t bytes) override {
    return Move(peer, true, static_cast<uint8_t*>(const_cast<void*>(data)), bytes);
  }
  Status Recv(int peer, void* data, size_t bytes) override {
    return Move(peer, false, static_cast<uint8_t*>(data), bytes);
  }

  void Abort() override {
    aborted_.store(true);
    (void)Fail(Status::Unavailable("NCCL link: aborted (the group is gone)"));
  }

  std::string name() const override { return "nccl"; }
  size_t staging_bytes() const override { return options_.staging_bytes; }

 private:
  // Both sides cut the message into the same chunks (half the staging each)
  // and queue them on the link's stream: chunk k's copy and its NCCL call use
  // half k % 2, so a chunk's copy waits only for the chunk two before it.
  Status Move(int peer, bool send, uint8_t* host, size_t bytes) {
    if (broken_.load()) {
      std::lock_guard<std::mutex> lock(abort_mu_);
      return Status::Unavailable("NCCL link: " + broken_reason_);
    }
    DeviceScope scope(device_);
    if (scope.status() != cudaSuccess) return Fail(CudaError(scope.status(), "cudaSetDevice"));
    const Nccl& nccl = LoadNccl();
    const size_t half = options_.staging_bytes / 2;
    uint8_t* halves[2] = {static_cast<uint8_t*>(staging_), static_cast<uint8_t*>(staging_) + half};
    size_t k = 0;
    for (size_t off = 0; off < bytes; off += half, ++k) {
      const size_t n = std::min(half, bytes - off);
      const int b = static_cast<int>(k % 2);
      if (k >= 2) MEMENTO_RETURN_IF_ERROR(WaitFor(done_[b], peer));
      cudaError_t e;
      ncclResult_t r;
      // Enqueued under the abort lock: Abort / Fail on another thread never
      // frees the communicator under an NCCL call.
      std::unique_lock<std::mutex> lock(abort_mu_);
      if (comm_aborted_) {
        lock.unlock();
        return Fail(Status::Unavailable("NCCL link: aborted (the group is gone)"));
      }
      if (send) {
        e = cudaMemcpyAsync(halves[b], host + off, n, cudaMemcpyDefault, stream_);
        r = e == cudaSuccess ? nccl.send(halves[b], n, ncclUint8, peer, comm_, stream_)
                             : ncclSuccess;
      } else {
        r = nccl.recv(halves[b], n, ncclUint8, peer, comm_, stream_);
        e = r == ncclSuccess ? cudaMemcpyAsync(host + off, halves[b], n, cudaMemcpyDefault, stream_)
                             : cudaSuccess;
      }
      lock.unlock();
      if (e != cudaSuccess) return Fail(CudaError(e, "cudaMemcpyAsync"));
      if (r != ncclSuccess) {
        return Fail(Status::Unavailable(std::string("NCCL: ") + (send ? "ncclSend" : "ncclRecv") +
                                        ": " + nccl.get_error_string(r)));
      }
      const cudaError_t rec = cudaEventRecord(done_[b], stream_);
      if (rec != cudaSuccess) return Fail(CudaError(rec, "cudaEventRecord"));
    }
    for (size_t j = 0; j < std::min<size_t>(k, 2); ++j) {
      MEMENTO_RETURN_IF_ERROR(WaitFor(done_[(k - 1 - j) % 2], peer));
    }
    return Status::Ok();
  }

  // Polls `event` until it completes, NCCL reports an error, the link is
  // aborted (or cancelled: the routing transport was aborted) or the timeout
  // passes without it; the last three break the link.
  Status WaitFor(cudaEvent_t event, int peer) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return Fail(CudaError(q, "cudaEventQuery"));
      ncclResult_t async = ncclSuccess;
      bool gone = aborted_.load() || Cancelled();
      {
        std::lock_guard<std::mutex> lock(abort_mu_);
        gone = gone || comm_aborted_;
        if (!gone) (void)LoadNccl().comm_get_async_error(comm_, &async);
      }
      if (gone) return Fail(Status::Unavailable("NCCL link: aborted (the group is gone)"));
      if (async != ncclSuccess && async != ncclInProgress) {
        return Fail(Status::Unavailable(std::string("NCCL: ") + LoadNccl().get_error_string(async) +
                                        " with rank " + std::to_string(peer)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Fail(Status::Timeout("NCCL: no progress with rank " + std::to_string(peer) + " in " +
                                    std::to_string(options_.timeout.count()) + " ms"));
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // The link is unusable from here on (an operation may still sit on the
  // stream): the communicator is aborted, which ends it.
  Status Fail(Status s) {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (!broken_.exchange(true)) {
      broken_reason_ = s.ToString();
      if (comm_ != nullptr && !comm_aborted_) {
        (void)LoadNccl().comm_abort(comm_);
        comm_aborted_ = true;
      }
    }
    return s;
  }

  const int device_;
  const NcclLinkOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_[2] = {nullptr, nullptr};
  void* staging_ = nullptr;
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  bool comm_aborted_ = false;
  std::string broken_reason_;
};

}  // namespace

bool NcclLinkBuilt() { return true; }

Status NcclLinkUsable() {
  MEMENTO_RETURN_IF_ERROR(LoadNccl().loaded);
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    return Status::FailedPrecondition(std::string("no CUDA device (") +
                                      (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
                                      ")");
  }
  return Status::Ok();
}

Result<std::shared_ptr<DeviceLink>> CreateNcclLink(Transport& control, int device,
                                                   const NcclLinkOptions& options) {
  if (options.staging_bytes < 2 || options.staging_bytes % 2 != 0) {
    return Status::InvalidArgument("NCCL link: staging_bytes must be even and at least 2, not " +
                                   std::to_string(options.staging_bytes));
  }
  auto link = std::make_shared<NcclLink>(device, options);
  // 1. Every rank readies its side (NCCL loaded, the device's stream and
  // staging); rank 0 adds the communicator's id. One allgather tells all.
  Status mine = NcclLinkUsable();
  if (mine.ok()) mine = link->Allocate();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (mine.ok() && control.rank() == 0) {
    const ncclResult_t r = LoadNccl().get_unique_id(&id);
    if (r != ncclSuccess) {
      mine = Status::Unavailable(std::string("NCCL: ncclGetUniqueId: ") +
                                 LoadNccl().get_error_string(r));
    }
  }
  std::vector<uint8_t> blob(1 + sizeof(id));
  blob[0] = mine.ok() ? 1 : 0;
  if (mine.ok()) {
    std::memcpy(blob.data() + 1, &id, sizeof(id));
  } else {
    const std::string why = mine.ToString();
    blob.assign(why.begin(), why.end());
    blob.insert(blob.begin(), uint8_t{0});
  }
  MEMENTO_ASSIGN_OR_RETURN(auto all, control.Allgather(blob.data(), blob.size()));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || all[r][0] != 1 || all[r].size() != 1 + sizeof(id)) {
      const std::string why = all[r].empty() ? "" : std::string(all[r].begin() + 1, all[r].end());
      return Status::FailedPrecondition("NCCL link: rank " + std::to_string(r) +
                                        " cannot take part: " + why);
    }
  }
  std::memcpy(&id, all[0].data() + 1, sizeof(id));
  // 2. The communicator (collective inside NCCL), then one vote on it.
  const Status joined = link->Join(id, control.size(), control.rank());
  MEMENTO_ASSIGN_OR_RETURN(bool everyone, control.AllTrue(joined.ok()));
  if (!joined.ok()) return joined.WithContext("NCCL link");
  if (!everyone) {
    link->Abort();  // its communicator is incomplete: destroying it could wait for the others
    return Status::Unavailable("NCCL link: another rank could not join");
  }
  return std::shared_ptr<DeviceLink>(std::move(link));
}

}  // namespace memento::runtime
