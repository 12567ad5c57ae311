// A job with a hung rank (label mpi;fault), driven by mpi_hang_test.sh. The
// last rank stops itself with SIGSTOP; the others wait on it.
//   abort        CreateMpiTransport() with no options (MEMENTO_TIMEOUT_S from the
//                environment), then a collective the stopped rank never joins:
//                the job must end (MPI_Abort), not hang.
//   abort-create the application initializes MPI; the last rank stops before
//                CreateMpiTransport(), whose communicator duplication must time out too.
//   late-peer    abort_on_timeout = false: the collective returns Timeout; the
//                stopped rank is continued a few seconds later and completes the
//                collective, while the survivors fill the stack where the timed out
//                call's buffers were. MPI must not write into that stack. The
//                survivors' broken transport then aborts the job, the late rank too.
#include <mpi.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "memento/runtime/mpi_transport.h"

extern char** environ;

namespace memento::runtime {
namespace {

// Continues this process after `seconds` from a helper shell, then stops it.
void StopForSeconds(int seconds) {
  if (seconds > 0) {
    const std::string script =
        "sleep " + std::to_string(seconds) + "; kill -CONT " + std::to_string(getpid());
    const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
    pid_t child = 0;
    if (posix_spawn(&child, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
      std::fprintf(stderr, "posix_spawn failed\n");
    }
  }
  std::fprintf(stderr, "rank stopping itself (pid %d)\n", static_cast<int>(getpid()));
  std::fflush(stderr);
  raise(SIGSTOP);
}

// Runs at the stack depth of the timed out collective: fills the stack, lets
// MPI progress (the late peer's data arrives meanwhile), and checks the fill.
__attribute__((noinline)) int FillStackAndProgress(Transport& other) {
  constexpr size_t kBytes = 64 << 10;
  volatile unsigned char fill[kBytes];
  for (size_t i = 0; i < kBytes; ++i) fill[i] = 0xA5;
  Status barrier = other.Barrier();  // completes once the stopped rank is back
  if (!barrier.ok()) {
    std::fprintf(stderr, "barrier after the timeout: %s\n", barrier.ToString().c_str());
    return 1;
  }
  for (size_t i = 0; i < kBytes; ++i) {
    if (fill[i] != 0xA5) {
      std::printf("stack corrupted %zu bytes into the fill\n", i);
      return 1;
    }
  }
  std::printf("stack intact after the late peer's data arrived\n");
  return 0;
}

__attribute__((noinline)) Status TimedOutCollective(Transport& t) {
  return t.AllTrue(true).status();
}

int Main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "abort") {
    auto t = CreateMpiTransport();
    if (!t.ok()) return 1;
    if ((*t)->rank() == (*t)->size() - 1) StopForSeconds(0);
    auto r = (*t)->AllTrue(true);
    std::printf("rank %d: AllTrue returned %s\n", (*t)->rank(), r.status().ToString().c_str());
    return 0;
  }
  if (mode == "abort-create") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == size - 1) StopForSeconds(0);
    auto t = CreateMpiTransport();
    std::printf("rank %d: CreateMpiTransport returned %s\n", rank, t.status().ToString().c_str());
    MPI_Finalize();
    return 0;
  }
  if (mode == "late-peer") {
    MpiTransportOptions options;
    options.timeout = std::chrono::seconds(2);
    options.abort_on_timeout = false;
    auto t = CreateMpiTransport(options);
    options.timeout = std::chrono::seconds(120);
    auto other = CreateMpiTransport(options);
    if (!t.ok() || !other.ok()) return 1;
    const bool stopped = (*t)->rank() == (*t)->size() - 1;
    if (stopped) StopForSeconds(6);
    Status s = TimedOutCollective(**t);
    if (stopped) {
      if (!(*other)->Barrier().ok()) return 1;
      // Wait for the survivors' abort to end this rank too. Exiting normally
      // here would race MPI_Finalize against their MPI_Abort, which can leave
      // Open MPI 4.1's mpirun deadlocked in PMIx_server_finalize after every
      // rank is gone; an abort that does not kill this rank fails the time limit.
      std::this_thread::sleep_for(std::chrono::seconds(90));
      return 0;
    }
    if (s.code() != StatusCode::kTimeout) {
      std::printf("expected Timeout, got %s\n", s.ToString().c_str());
      return 1;
    }
    const int rc = FillStackAndProgress(**other);
    std::fflush(stdout);
    return rc;  // destroying the broken transport then ends the job (MPI_Abort)
  }
  std::fprintf(stderr, "usage: mpi_hang_worker abort | abort-create | late-peer\n");
  return 2;
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
