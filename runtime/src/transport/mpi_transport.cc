#include "memento/runtime/mpi_transport.h"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memento/common/check.h"
#include "memento/runtime/config.h"
#include "memento/runtime/log.h"

namespace memento::runtime {
namespace {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

std::mutex g_init_mu;
int g_live_transports = 0;      // guarded by g_init_mu
bool g_we_initialized = false;  // guarded by g_init_mu
// Below MPI_THREAD_MULTIPLE at most one thread of the process may be inside
// MPI: one mutex for every transport of the process (taken after g_init_mu).
std::mutex g_serial_mu;

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

// An MPI with ULFM (Open MPI 5's ftmpi extension) reports a failed process
// as an error of the operations that involve it, and revokes communicators.
#if defined(MPIX_ERR_PROC_FAILED) && defined(MPIX_ERR_REVOKED)
constexpr bool kUlfm = true;
bool IsProcessFailure(int code) {
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  return error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_REVOKED
#ifdef MPIX_ERR_PROC_FAILED_PENDING
         || error_class == MPIX_ERR_PROC_FAILED_PENDING
#endif
      ;
}
void Revoke(MPI_Comm comm) { MPIX_Comm_revoke(comm); }
#else
constexpr bool kUlfm = false;
bool IsProcessFailure(int) { return false; }
void Revoke(MPI_Comm) {}
#endif

// A failed process (ULFM) is Unavailable, as a dead peer is on every
// transport; any other MPI error is Internal.
Status MpiStatus(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::Ok();
  if (IsProcessFailure(code)) {
    return Status::Unavailable(std::string(what) + ": " + MpiErrorString(code) +
                               " (a process of the communicator failed, or it was revoked)");
  }
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

// How long a waiter polls without sleeping.
constexpr std::chrono::milliseconds kSpinFor{2};
// Longest sleep between polls once a wait has outlasted kSpinFor (the
// sleeps double up to it): a wait that long is for a peer that has not
// sent yet, so a late poll costs little, while polling every 50 us cost
// 30-40 % more CPU per protected GiB behind a slow link (bench_cluster
// --link-gibps 0.1).
constexpr std::chrono::microseconds kMaxPause{500};

// Polls `req` to completion. Open MPI's shared-memory and TCP transports
// move a large message fragment by fragment, only inside MPI calls, so the
// poll rate bounds the bandwidth: poll back to back first (a chunk of a few
// MiB completes within this phase at memory speed), then yield, and only
// for long waits sleep (doubling up to kMaxPause) so idle waiters leave the cores
// to training. `mu`, when not null, is held around every MPI call.
// One MPI_Test of `req` (`mu`, when not null, held around it): *done says
// whether it finished; a message larger than the receive is InvalidArgument.
Status TestRequest(MPI_Request* req, int* done, MPI_Status* st, std::mutex* mu) {
  std::unique_lock<std::mutex> lock =
      mu != nullptr ? std::unique_lock<std::mutex>(*mu) : std::unique_lock<std::mutex>();
  const int rc = MPI_Test(req, done, st);
  if (rc == MPI_SUCCESS) return Status::Ok();
  int error_class = 0;
  MPI_Error_class(rc, &error_class);
  if (error_class == MPI_ERR_TRUNCATE) {
    return Status::InvalidArgument("message exceeds the receive capacity");
  }
  return MpiStatus(rc, "MPI_Test");
}

// What a wait on a revoked transport returns at once. Open MPI 5.0.11 does not
// always end a pending send when its communicator is revoked (one stayed
// pending until the timeout): the request is abandoned instead, as a timed
// out one is, and the communicator freed with it.
Status RevokedStatus() {
  return Status::Unavailable(
      "the communicator was revoked (a process failed, or in-job recovery aborted the "
      "transport); the operation is abandoned");
}

// `revoked`, when not null, ends the wait as soon as it is set.
Status PollRequest(MPI_Request* req, MPI_Status* st, std::chrono::milliseconds timeout,
                   std::mutex* mu, const std::atomic<bool>* revoked = nullptr) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto pause = std::chrono::microseconds(0);
  for (uint64_t polls = 0;; ++polls) {
    int done = 0;
    MEMENTO_RETURN_IF_ERROR(TestRequest(req, &done, st, mu));
    if (done) return Status::Ok();
    if (revoked != nullptr && *revoked) return RevokedStatus();
    if (polls % 256 != 255) continue;  // back-to-back tests; the clock is read every 256
    const auto now = Clock::now();
    if (timeout.count() > 0 && now > deadline) {
      return Status::Timeout("no completion within " + std::to_string(timeout.count()) +
                             " ms (MEMENTO_TIMEOUT_S); a peer is hung or unreachable");
    }
    if (now - start < kSpinFor) {
      std::this_thread::yield();
      continue;
    }
    if (pause < kMaxPause) pause = std::min(kMaxPause, pause * 2 + std::chrono::microseconds(5));
    std::this_thread::sleep_for(pause);
  }
}

// Ends the whole job after a wait that cannot be taken back: the message goes
// to stderr (unconditionally, whatever MEMENTO_LOG says), then MPI_Abort makes
// mpirun kill every rank, hung ones included, and exit non-zero, so that a
// supervisor sees the failure and relaunches. Never returns.
[[noreturn]] void AbortJob(int rank, const std::string& why) {
  const std::string line =
      "memento[error] rank " + std::to_string(rank) + ": " + why +
      "; aborting the job (MPI_Abort, exit code " + std::to_string(kMpiAbortExitCode) +
      ") so that mpirun returns and the job can be relaunched; the relaunched job restores "
      "its newest committed checkpoint\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kMpiAbortExitCode);
  std::_Exit(kMpiAbortExitCode);  // MPI_Abort does not return; this is for the compiler
}

// Memory that a non-blocking MPI operation reads or writes. It lives on the
// heap, owned by the operation, so that an operation abandoned at a timeout
// (a collective cannot be cancelled) keeps its buffers: when the slow peer
// comes back, MPI writes into them, never into a dead stack frame.
struct OpBuffers {
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  std::vector<int> counts;
  std::vector<int> displs;
};

class MpiTransport final : public Transport {
 public:
  // `serialize`: MPI runs below MPI_THREAD_MULTIPLE, so every MPI call on this
  // transport is made under one mutex. With MPI_THREAD_MULTIPLE threads call
  // MPI concurrently and each progresses its own requests.
  MpiTransport(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout, bool serialize,
               bool abort_on_timeout)
      : comm_(comm),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        serialize_(serialize),
        abort_on_timeout_(abort_on_timeout) {}

  ~MpiTransport() override {
    std::lock_guard<std::mutex> init_lock(g_init_mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      --g_live_transports;
      return;
    }
    if (broken_ && !revoked_) {
      // Operations of this transport never completed: MPI_Finalize (ours or
      // the application's) would wait for them forever, and the job would
      // never end. End it now, visibly. A revoked transport (ULFM) has
      // abandoned its operations on purpose, and the job repairs itself: its
      // communicator is freed and the job goes on (ulfm_world.h bounds the
      // MPI_Finalize that such a job ends with).
      AbortJob(rank_, "the MPI transport was broken by: " + BrokenReason());
    }
    auto lock = Lock();
    MPI_Comm_free(&comm_);
    if (--g_live_transports == 0 && g_we_initialized) {
      MPI_Finalize();
      g_we_initialized = false;
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
    return WaitCollective(&req, nullptr, "Barrier");
  }

  Result<bool> AllTrue(bool mine) override {
    int in = mine ? 1 : 0;
    int out = 0;
    MEMENTO_RETURN_IF_ERROR(Allreduce(&in, &out, sizeof(int), MPI_INT, MPI_LAND, "AllTrue"));
    return out != 0;
  }

  Result<int64_t> AllReduceMax(int64_t mine) override {
    int64_t out = 0;
    MEMENTO_RETURN_IF_ERROR(
        Allreduce(&mine, &out, sizeof(int64_t), MPI_INT64_T, MPI_MAX, "AllReduceMax"));
    return out;
  }

  Result<int64_t> AllReduceMin(int64_t mine) override {
    int64_t out = 0;
    MEMENTO_RETURN_IF_ERROR(
        Allreduce(&mine, &out, sizeof(int64_t), MPI_INT64_T, MPI_MIN, "AllReduceMin"));
    return out;
  }

  Result<std::vector<Bytes>> Allgather(const void* data, size_t bytes) override {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return Status::InvalidArgument("Allgather: " + std::to_string(bytes) +
                                     " bytes exceed the MPI count limit");
    }
    auto sizes = std::make_unique<OpBuffers>();
    sizes->in.resize(sizeof(int));
    const int mine = static_cast<int>(bytes);
    std::memcpy(sizes->in.data(), &mine, sizeof(int));
    sizes->counts.resize(size_);
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(
          MpiStatus(MPI_Iallgather(sizes->in.data(), 1, MPI_INT, sizes->counts.data(), 1, MPI_INT,
                                   comm_, &req),
                    "MPI_Iallgather"));
    }
    MEMENTO_RETURN_IF_ERROR(WaitCollective(&req, &sizes, "Allgather (sizes)"));
    auto op = std::make_unique<OpBuffers>();
    op->counts = std::move(sizes->counts);
    op->displs.resize(size_);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      op->displs[r] = static_cast<int>(total);
      total += op->counts[r];
      if (total > INT_MAX) return Status::InvalidArgument("Allgather: total exceeds INT_MAX");
    }
    op->out.resize(static_cast<size_t>(total));
    op->in.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(
          MpiStatus(MPI_Iallgatherv(op->in.data(), mine, MPI_BYTE, op->out.data(),
                                    op->counts.data(), op->displs.data(), MPI_BYTE, comm_, &req),
                    "MPI_Iallgatherv"));
    }
    MEMENTO_RETURN_IF_ERROR(WaitCollective(&req, &op, "Allgather"));
    std::vector<Bytes> out(size_);
    for (int r = 0; r < size_; ++r) {
      out[r].assign(op->out.begin() + op->displs[r],
                    op->out.begin() + op->displs[r] + op->counts[r]);
    }
    return out;
  }

  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    MEMENTO_ASSIGN_OR_RETURN(std::unique_ptr<PendingTransfer> op,
                             StartSend(peer, tag, data, bytes));
    return op->Wait().status();
  }

  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    MEMENTO_ASSIGN_OR_RETURN(std::unique_ptr<PendingTransfer> op,
                             StartRecv(peer, tag, data, capacity));
    return op->Wait();
  }

  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
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
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<Transfer>(this, /*is_send=*/true, peer, tag, bytes, req));
  }

  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
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
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<Transfer>(this, /*is_send=*/false, peer, tag, capacity, req));
  }

  // With ULFM: revokes the communicator, so that every rank's operations on
  // it (this process's threads' and the peers') end in error now. Without
  // ULFM nothing can wake an MPI operation: the calls end by the peer's
  // failure or the timeout.
  void Abort() override { RevokeFor("aborted: the group is re-formed without a lost rank"); }
  bool Aborted() const override { return revoked_; }

  bool TestsTransfers() const override { return true; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  // One pass of Open MPI's progress engine (MPI_Iprobe runs it and matches nothing).
  void Progress() override {
    if (broken_) return;
    int flag = 0;
    auto lock = Lock();
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
  }

 private:
  // One MPI_Isend / MPI_Irecv in flight. Waited for, it is polled to
  // completion; dropped unwaited, a send is still polled to completion (MPI
  // reads the caller's buffer until then) and a receive is cancelled (a
  // message it already took is gone with it).
  struct Transfer final : PendingTransfer {
    Transfer(MpiTransport* t, bool is_send, int peer, int tag, size_t bytes, MPI_Request req)
        : t(t), is_send(is_send), peer(peer), tag(tag), bytes(bytes), req(req) {}
    ~Transfer() override {
      if (done || completed) return;
      if (is_send) {
        (void)Wait();
      } else {
        t->CancelRecv(&req, Where());
      }
    }
    // One MPI_Test (which also runs Open MPI's progress engine once); what
    // it found is kept for Wait.
    bool Test() override {
      if (done || completed) return true;
      if (t->revoked_) {
        completed = true;
        test_status = RevokedStatus();
        return true;
      }
      int flag = 0;
      test_status = TestRequest(&req, &flag, &st, t->serialize_ ? &t->mu_ : nullptr);
      completed = flag != 0 || !test_status.ok();
      return completed;
    }
    Result<size_t> Wait() override {
      if (done) return Status::FailedPrecondition(Where() + ": already waited for");
      done = true;
      Status s = completed ? test_status : t->Poll(&req, &st);
      if (s.code() == StatusCode::kTimeout) {
        if (is_send) {
          // A send that never matched cannot be taken back safely: MPI may
          // still read the caller's buffer.
          t->Break(Where() + ": " + s.message());
        } else if (t->CancelRecv(&req, Where() + ": " + s.message(), &st)) {
          // The message matched between the last test and the cancel: it is
          // in the caller's buffer, received, not lost to a "timed out".
          int got = 0;
          auto lock = t->Lock();
          MPI_Get_count(&st, MPI_BYTE, &got);
          return static_cast<size_t>(got);
        }
        return s.WithContext(Where());
      }
      if (!s.ok()) {
        if (s.code() == StatusCode::kUnavailable) t->RevokeFor(Where() + ": " + s.message());
        return is_send ? s.WithContext(Where())
                       : s.WithContext(Where() + " (capacity " + std::to_string(bytes) + ")");
      }
      if (is_send) return bytes;
      int got = 0;
      auto lock = t->Lock();
      MPI_Get_count(&st, MPI_BYTE, &got);
      return static_cast<size_t>(got);
    }
    std::string Where() const {
      return std::string(is_send ? "Send to" : "Recv from") + " rank " + std::to_string(peer) +
             " tag " + std::to_string(tag);
    }
    MpiTransport* const t;
    const bool is_send;
    const int peer, tag;
    const size_t bytes;  // of the send / capacity of the receive
    MPI_Request req;
    MPI_Status st;
    bool done = false;       // waited for
    bool completed = false;  // found finished by Test (req is spent)
    Status test_status;      // what that Test found wrong
  };

  // Cancels a receive. One that has not matched is cancelled at once; one
  // that matched a message still in flight cannot be: if the cancel does not
  // complete within a grace period, MPI may still write into the caller's
  // buffer, and the transport is broken.
  // Returns true when the receive completed instead of being cancelled (the
  // message arrived as the cancel was made): its status is then in
  // `received`, when given.
  bool CancelRecv(MPI_Request* req, const std::string& why, MPI_Status* received = nullptr) {
    {
      auto lock = Lock();
      MPI_Cancel(req);
    }
    MPI_Status st;
    // Any other outcome completed the request: a receive that matched a
    // message larger than its buffer ends in a truncation error, and nothing
    // is left in flight.
    const Status s = PollRequest(req, &st, kCancelGrace, serialize_ ? &mu_ : nullptr, &revoked_);
    if (s.code() == StatusCode::kTimeout) {
      Break(why + " (and the cancel did not complete)");
      return false;
    }
    if (!s.ok()) return false;
    int cancelled = 1;
    {
      auto lock = Lock();
      MPI_Test_cancelled(&st, &cancelled);
    }
    if (cancelled) return false;
    if (received != nullptr) *received = st;
    return true;
  }

  Status CheckUsable() const {
    if (broken_) {
      return Status::Unavailable("MPI transport unusable after an earlier failure: " +
                                 BrokenReason());
    }
    return Status::Ok();
  }

  std::string BrokenReason() const {
    std::lock_guard<std::mutex> lock(abandoned_mu_);
    return broken_reason_;
  }

  // Marks the transport unusable after an operation that cannot be taken
  // back; with abort_on_timeout a timeout ends the job here.
  void Break(const std::string& why, bool timed_out = true) {
    {
      std::lock_guard<std::mutex> lock(abandoned_mu_);
      if (broken_reason_.empty()) broken_reason_ = why;
    }
    broken_ = true;
    if (timed_out && abort_on_timeout_) AbortJob(rank_, why);
    Log(LogLevel::kError, "mpi transport (rank " + std::to_string(rank_) + "): " + why +
                              "; the transport is unusable and its destruction aborts the job");
  }

  // A process of the communicator failed (or the transport is aborted), with
  // ULFM: the transport is broken and its communicator revoked, so that ranks
  // blocked in it (on operations that do not involve the failed process)
  // return too, instead of waiting for the timeout.
  void RevokeFor(const std::string& why) {
    if (!kUlfm) return;
    {
      std::lock_guard<std::mutex> lock(abandoned_mu_);
      if (broken_reason_.empty()) broken_reason_ = why;
    }
    broken_ = true;
    // revoked_ is set only once the communicator is revoked: a wait that sees
    // it returns without its request, and a receive still matchable then
    // could land in a buffer its caller has since freed. Once revoked, a
    // pending receive takes nothing more (Open MPI 5 completes it with
    // MPIX_ERR_REVOKED at its next test).
    std::call_once(revoke_once_, [this] {
      auto lock = Lock();
      Revoke(comm_);
    });
    revoked_ = true;
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

  Status Allreduce(const void* in, void* out, size_t bytes, MPI_Datatype type, MPI_Op op,
                   const char* what) {
    MEMENTO_RETURN_IF_ERROR(CheckUsable());
    auto buffers = std::make_unique<OpBuffers>();
    buffers->in.assign(static_cast<const uint8_t*>(in), static_cast<const uint8_t*>(in) + bytes);
    buffers->out.resize(bytes);
    MPI_Request req;
    {
      auto lock = Lock();
      MEMENTO_RETURN_IF_ERROR(MpiStatus(
          MPI_Iallreduce(buffers->in.data(), buffers->out.data(), 1, type, op, comm_, &req),
          "MPI_Iallreduce"));
    }
    MEMENTO_RETURN_IF_ERROR(WaitCollective(&req, &buffers, what));
    std::memcpy(out, buffers->out.data(), bytes);
    return Status::Ok();
  }

  // Waits for a collective. On failure the transport is broken and the
  // operation's buffers (`buffers`, may be null) are kept until the process
  // ends, since MPI may still write into them.
  Status WaitCollective(MPI_Request* req, std::unique_ptr<OpBuffers>* buffers, const char* what) {
    MPI_Status st;
    Status s = Poll(req, &st);
    if (s.ok()) return s;
    if (buffers != nullptr && *buffers != nullptr) {
      std::lock_guard<std::mutex> lock(abandoned_mu_);
      abandoned_.push_back(std::move(*buffers));
    }
    if (s.code() == StatusCode::kUnavailable) {
      RevokeFor(std::string(what) + ": " + s.message());
    } else {
      Break(std::string(what) + ": " + s.message(), s.code() == StatusCode::kTimeout);
    }
    return s.WithContext(what);
  }

  // The mutex when MPI needs serialized calls, else an empty lock.
  std::unique_lock<std::mutex> Lock() {
    return serialize_ ? std::unique_lock<std::mutex>(mu_) : std::unique_lock<std::mutex>();
  }

  Status Poll(MPI_Request* req, MPI_Status* st) {
    return PollRequest(req, st, timeout_, serialize_ ? &mu_ : nullptr, &revoked_);
  }

  // How long a cancelled receive may take to complete.
  static constexpr std::chrono::milliseconds kCancelGrace{1000};

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const bool serialize_;
  const bool abort_on_timeout_;
  std::mutex& mu_ = g_serial_mu;  // serializes every MPI call when serialize_
  std::atomic<bool> broken_{false};
  std::atomic<bool> revoked_{false};  // ULFM: comm_ revoked, every operation on it ended
  std::once_flag revoke_once_;
  mutable std::mutex abandoned_mu_;
  std::string broken_reason_;                          // guarded by abandoned_mu_
  std::vector<std::unique_ptr<OpBuffers>> abandoned_;  // guarded by abandoned_mu_; never freed
};

}  // namespace

Result<std::shared_ptr<Transport>> CreateMpiTransport(const MpiTransportOptions& options) {
  std::chrono::milliseconds timeout{0};
  if (options.timeout.has_value()) {
    timeout = *options.timeout;
  } else {
    Result<std::chrono::milliseconds> from_env = TimeoutFromEnv();
    if (!from_env.ok()) return from_env.status();
    timeout = *from_env;
  }
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
  int world_rank = 0;
  MPI_Comm_rank(options.comm, &world_rank);
  // The duplication is a collective: non-blocking, so that a peer that never
  // arrives is bounded by the timeout like every other wait.
  // Other transports' threads may be in MPI meanwhile.
  const bool serialize = level < MPI_THREAD_MULTIPLE;
  std::mutex* const serial = serialize ? &g_serial_mu : nullptr;
  auto serial_lock = [&] {
    return serialize ? std::unique_lock<std::mutex>(g_serial_mu) : std::unique_lock<std::mutex>();
  };
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request req;
  {
    auto lock = serial_lock();
    MEMENTO_RETURN_IF_ERROR(MpiStatus(MPI_Comm_idup(options.comm, &dup, &req), "MPI_Comm_idup"));
  }
  Status dup_status = PollRequest(&req, MPI_STATUS_IGNORE, timeout, serial);
  if (!dup_status.ok()) {
    const std::string why = "creating the transport (MPI_Comm_idup): " + dup_status.message();
    if (dup_status.code() == StatusCode::kTimeout && options.abort_on_timeout) {
      AbortJob(world_rank, why);
    }
    return Status(dup_status.code(), why);
  }
  int rank = 0, size = 0;
  {
    auto lock = serial_lock();
    MEMENTO_RETURN_IF_ERROR(
        MpiStatus(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
  }
  ++g_live_transports;
  return std::shared_ptr<Transport>(
      new MpiTransport(dup, rank, size, timeout, serialize, options.abort_on_timeout));
}

}  // namespace memento::runtime
