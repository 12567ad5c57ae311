// MpiTransport: the Transport of a job launched with mpirun.
//
// Create() duplicates the caller's communicator (MPI_COMM_WORLD by default)
// so that memento's traffic never matches the application's, and sets
// MPI_ERRORS_RETURN on the duplicate so that an MPI failure becomes a Status
// (gloo mpi/context.cc, redset). If MPI is not initialized yet, Create()
// initializes it asking for MPI_THREAD_MULTIPLE, and the last MpiTransport
// destroyed then finalizes it; if the application initialized MPI, memento
// never finalizes it.
//
// Threads. The engine calls the transport from background threads (the commit
// and persist coordinator, the protect stage). Below MPI_THREAD_MULTIPLE
// every MPI call of every MpiTransport of the process is made under one
// mutex, and every operation is issued
// non-blocking (MPI_Isend / MPI_Irecv / MPI_Iallreduce / MPI_Iallgatherv /
// MPI_Ibarrier) and completed by polling MPI_Test, releasing the mutex between
// polls. Hence:
//   - MPI_THREAD_SERIALIZED is enough (MULTIPLE is requested when we init)
//     as long as the application makes no MPI call of its own while a
//     transport lives (its calls are not under that mutex); one that does
//     must initialize with MPI_THREAD_MULTIPLE. An application that
//     initialized MPI with FUNNELED or SINGLE gets a FailedPrecondition from
//     Create() naming the thread level;
//   - a blocked Recv does not block a concurrent Send or collective;
//   - every wait, the communicator duplication in Create() included, is
//     bounded by `timeout` (MEMENTO_TIMEOUT_S unless set): past it a
//     point-to-point receive that has not matched a message is cancelled and
//     Timeout is returned (one whose message arrives as it is cancelled
//     returns it, received); one that matched a message still in flight
//     cannot be taken back and is treated like a timed out send (below);
//   - a timed out collective or send cannot be taken back (MPI still owns the
//     request and may write into its buffers when the peer comes back). By
//     default (abort_on_timeout) the job then ends at once: a line on stderr
//     names the operation and the timeout, and MPI_Abort with exit code
//     kMpiAbortExitCode (75) makes mpirun kill every rank, hung ones
//     included, and return, so that a supervisor relaunches the job. With
//     abort_on_timeout = false the call returns Timeout, the transport is
//     broken (every later call returns Unavailable naming the first failure),
//     the buffers of the abandoned collective are kept until the process
//     ends, and destroying the transport calls MPI_Abort instead of
//     MPI_Finalize (which would wait for the hung peer forever). The
//     caller's buffer of a timed out Send must then stay valid until exit.
// Polling costs a short sleep (tens of microseconds) per unfinished test; a
// message completes within that of its arrival.
//
// Process failures: under Open MPI's mpirun a rank killed by a signal makes
// mpirun terminate the whole job; memento's answer is a relaunch and
// Restore(). Built against an MPI with ULFM (Open MPI 5, `mpirun --with-ft
// ulfm`), an operation involving a failed process returns Unavailable, and
// the transport then revokes its communicator (as Abort() does), so that the
// peers' operations on it end too; a revoked transport is freed without
// ending the job, and the job repairs itself in-job (ulfm_world.h).
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>

#include "memento/runtime/transport.h"

namespace memento::runtime {

// Exit code of a job that memento ended with MPI_Abort after a timeout
// (EX_TEMPFAIL: the job may be relaunched).
inline constexpr int kMpiAbortExitCode = 75;

struct MpiTransportOptions {
  // Communicator to duplicate. MPI_COMM_WORLD by default.
  MPI_Comm comm = MPI_COMM_WORLD;
  // Bound on every wait; 0 means wait forever. Unset: MEMENTO_TIMEOUT_S of
  // the environment (the same parser as Config, rounded up to whole
  // milliseconds), or 300 s when that is not set.
  std::optional<std::chrono::milliseconds> timeout;
  // What a timed out collective or send does: end the job with MPI_Abort
  // (true, the default) or return Timeout and break the transport (see above).
  bool abort_on_timeout = true;
};

// Creates the transport (initializing MPI if needed, see above). Errors: MPI
// failures as Internal, an insufficient thread level as FailedPrecondition, a
// malformed MEMENTO_TIMEOUT_S as InvalidArgument.
Result<std::shared_ptr<Transport>> CreateMpiTransport(
    const MpiTransportOptions& options = MpiTransportOptions());

}  // namespace memento::runtime
