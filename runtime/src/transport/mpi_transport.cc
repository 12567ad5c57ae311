#include "memento/runtime/mpi_transport.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memento/common/check.h"

namespace memento::runtime {
namespace {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

std::mutex g_init_mu;
int g_live_transports = 0;      // guarded by g_init_mu
bool g_we_initialized = false;  // guarded by g_init_mu

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

Status MpiStatus(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + MpiErrorString(code));
}

const char* ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown thread level";
}

class MpiTransport final : public Transport {
 public:
  // `serialize`: MPI runs below MPI_THREAD_MULTIPLE, so every MPI call on this
  // transport is made under one mutex. With MPI_THREAD_MULTIPLE threads call
  // MPI concurrently and each progresses its own requests.
  MpiTransport(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout, bool serialize)
      : comm_(comm), rank_(rank), size_(size), timeout_(timeout), serialize_(serialize) {}

  ~MpiTransport() override {
    std::lock_guard<std::mutex> init_lock(g_init_mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      // A broken transport may still own uncompleted collectives; freeing the
      // communicator is then still legal (MPI_Comm_free is collective-free
      // and deferred until pending operations complete).
      MPI_Comm_free(&comm_);
      if (--g_live_transports == 0 && g_we_initialized) {
        MPI_Finalize();
        g_we_initialized = false;
      }
    } else {
      --g_live_transports;
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Barrier() override {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(MpiStatus(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier"));
    }
    return WaitCollective(&req, "Barrier");
  }

  Result<bool> AllTrue(bool mine) override {
    int in = mine ? 1 : 0;
    int out = 0;
    MEMENTO_RETURN_IF_ERROR(Allreduce(&in, &out, MPI_INT, MPI_LAND, "AllTrue"));
    return out != 0;
  }

  Result<int64_t> AllReduceMax(int64_t mine) override {
    int64_t out = 0;
    MEMENTO_RETURN_IF_ERROR(Allreduce(&mine, &out, MPI_INT64_T, MPI_MAX, "AllReduceMax"));
    return out;
  }

  Result<int64_t> AllReduceMin(int64_t mine) override {
    int64_t out = 0;
    MEMENTO_RETURN_IF_ERROR(Allreduce(&mine, &out, MPI_INT64_T, MPI_MIN, "AllReduceMin"));
    return out;
  }

  Result<std::vector<Bytes>> Allgather(const void* data, size_t bytes) override {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return Status::InvalidArgument("Allgather: " + std::to_string(bytes) +
                                     " bytes exceed the MPI count limit");
    }
    int mine = static_cast<int>(bytes);
    std::vector<int> counts(size_);
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(
          MpiStatus(MPI_Iallgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_, &req),
                    "MPI_Iallgather"));
    }
    MEMENTO_RETURN_IF_ERROR(WaitCollective(&req, "Allgather (sizes)"));
    std::vector<int> displs(size_);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += counts[r];
      if (total > INT_MAX) return Status::InvalidArgument("Allgather: total exceeds INT_MAX");
    }
    Bytes all(static_cast<size_t>(total));
    Bytes send(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(
          MpiStatus(MPI_Iallgatherv(send.data(), mine, MPI_BYTE, all.data(), counts.data(),
                                    displs.data(), MPI_BYTE, comm_, &req),
                    "MPI_Iallgatherv"));
    }
    MEMENTO_RETURN_IF_ERROR(WaitCollective(&req, "Allgather"));
    std::vector<Bytes> out(size_);
    for (int r = 0; r < size_; ++r) {
      out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
    }
    return out;
  }

  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    MEMENTO_RETURN_IF_ERROR(CheckPeerTag(peer, tag, "Send"));
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return Status::InvalidArgument("Send: " + std::to_string(bytes) +
                                     " bytes exceed the MPI count limit; send in chunks");
    }
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(MpiStatus(
          MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &req), "MPI_Isend"));
    }
    MPI_Status st;
    Status s = Poll(&req, &st);
    if (s.code() == StatusCode::kTimeout) {
      // A send that never matched cannot be taken back safely; the transport
      // is no longer usable.
      broken_ = true;
    }
    return s.WithContext("Send to rank " + std::to_string(peer) + " tag " + std::to_string(tag));
  }

  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    MEMENTO_RETURN_IF_ERROR(CheckPeerTag(peer, tag, "Recv"));
    const int count =
        capacity > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(capacity);
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(
          MpiStatus(MPI_Irecv(data, count, MPI_BYTE, peer, tag, comm_, &req), "MPI_Irecv"));
    }
    MPI_Status st;
    Status s = Poll(&req, &st);
    const std::string where =
        "Recv from rank " + std::to_string(peer) + " tag " + std::to_string(tag);
    if (s.code() == StatusCode::kTimeout) {
      auto lock = Lock();
      MPI_Cancel(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      return s.WithContext(where);
    }
    if (!s.ok()) return s.WithContext(where + " (capacity " + std::to_string(capacity) + ")");
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    return static_cast<size_t>(got);
  }

 private:
  Status CheckUsable() const {
    if (broken_) {
      return Status::Unavailable(
          "MPI transport unusable after an earlier timeout or failure of a collective");
    }
    return Status::Ok();
  }

  Status CheckPeerTag(int peer, int tag, const char* op) const {
    if (peer < 0 || peer >= size_) {
      return Status::InvalidArgument(std::string(op) + ": peer " + std::to_string(peer) +
                                     " out of range 0.." + std::to_string(size_ - 1));
    }
    if (tag < 0 || tag > kMaxTag) {
      return Status::InvalidArgument(std::string(op) + ": tag " + std::to_string(tag) +
                                     " out of range 0.." + std::to_string(kMaxTag));
    }
    return Status::Ok();
  }

  Status Allreduce(const void* in, void* out, MPI_Datatype type, MPI_Op op, const char* what) {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(
          MpiStatus(MPI_Iallreduce(in, out, 1, type, op, comm_, &req), "MPI_Iallreduce"));
    }
    return WaitCollective(&req, what);
  }

  Status WaitCollective(MPI_Request* req, const char* what) {
    MPI_Status st;
    Status s = Poll(req, &st);
    if (!s.ok()) broken_ = true;
    return s.WithContext(what);
  }

  // The mutex when MPI needs serialized calls, else an empty lock.
  std::unique_lock<std::mutex> Lock() {
    return serialize_ ? std::unique_lock<std::mutex>(mu_) : std::unique_lock<std::mutex>();
  }

  // Polls `req` to completion. Open MPI's shared-memory and TCP transports
  // move a large message fragment by fragment, only inside MPI calls, so the
  // poll rate bounds the bandwidth: poll back to back first (a chunk of a few
  // MiB completes within this phase at memory speed), then yield, and only
  // for long waits sleep (doubling up to kMaxPause) so idle waiters leave the cores
  // to training.
  Status Poll(MPI_Request* req, MPI_Status* st) {
    const auto start = Clock::now();
    const auto deadline = start + timeout_;
    auto pause = std::chrono::microseconds(0);
    for (uint64_t polls = 0;; ++polls) {
      int done = 0;
      {
        auto lock = Lock();
        int rc = MPI_Test(req, &done, st);
        if (rc != MPI_SUCCESS) {
          int error_class = 0;
          MPI_Error_class(rc, &error_class);
          if (error_class == MPI_ERR_TRUNCATE) {
            return Status::InvalidArgument("message exceeds the receive capacity");
          }
          return MpiStatus(rc, "MPI_Test");
        }
      }
      if (done) return Status::Ok();
      if (polls % 256 != 255) continue;  // back-to-back tests; the clock is read every 256
      const auto now = Clock::now();
      if (timeout_.count() > 0 && now > deadline) {
        return Status::Timeout("no completion within " + std::to_string(timeout_.count()) +
                               " ms (MEMENTO_TIMEOUT_S)");
      }
      if (now - start < kSpinFor) {
        std::this_thread::yield();
        continue;
      }
      if (pause < kMaxPause) pause = std::min(kMaxPause, pause * 2 + std::chrono::microseconds(5));
      std::this_thread::sleep_for(pause);
    }
  }

  // How long a waiter polls without sleeping.
  static constexpr std::chrono::milliseconds kSpinFor{2};
  // Longest sleep between polls once a wait has outlasted kSpinFor (the
  // sleeps double up to it): a wait that long is for a peer that has not
  // sent yet, so a late poll costs little, while polling every 50 us cost
  // 30-40 % more CPU per protected GiB behind a slow link (bench_cluster
  // --link-gibps 0.1).
  static constexpr std::chrono::microseconds kMaxPause{500};

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const bool serialize_;
  std::mutex mu_;  // serializes every MPI call on comm_ when serialize_
  std::atomic<bool> broken_{false};
};

}  // namespace

Result<std::shared_ptr<Transport>> CreateMpiTransport(const MpiTransportOptions& options) {
  std::lock_guard<std::mutex> init_lock(g_init_mu);
  int initialized = 0;
  MPI_Initialized(&initialized);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::FailedPrecondition("MPI is already finalized");
  if (!initialized) {
    int provided = 0;
    MEMENTO_RETURN_IF_ERROR(MpiStatus(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    g_we_initialized = true;
  }
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED) {
    return Status::FailedPrecondition(
        std::string("MPI was initialized with ") + ThreadLevelName(level) +
        "; memento calls MPI from background threads and needs at least "
        "MPI_THREAD_SERIALIZED (use MPI_Init_thread)");
  }
  MPI_Comm dup;
  MEMENTO_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(options.comm, &dup), "MPI_Comm_dup"));
  MEMENTO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  int rank = 0, size = 0;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  ++g_live_transports;
  return std::shared_ptr<Transport>(
      new MpiTransport(dup, rank, size, options.timeout, level < MPI_THREAD_MULTIPLE));
}

}  // namespace memento::runtime
