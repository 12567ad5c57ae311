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
// and persist coordinator, the protect stage). Every MPI call of this
// class is made under one internal mutex, and every operation is issued
// non-blocking (MPI_Isend / MPI_Irecv / MPI_Iallreduce / MPI_Iallgatherv /
// MPI_Ibarrier) and completed by polling MPI_Test, releasing the mutex between
// polls. Hence:
//   - MPI_THREAD_SERIALIZED is enough (MULTIPLE is requested when we init);
//     an application that initialized MPI with FUNNELED or SINGLE gets a
//     FailedPrecondition from Create() naming the thread level;
//   - a blocked Recv does not block a concurrent Send or collective;
//   - every wait is bounded by `timeout` (MEMENTO_TIMEOUT_S): past it a
//     point-to-point receive is cancelled and Timeout is returned; a timed
//     out collective cannot be cancelled, so the transport is then marked
//     broken and every later call returns Unavailable.
// Polling costs a short sleep (tens of microseconds) per unfinished test; a
// message completes within that of its arrival.
//
// Process failures: under Open MPI's mpirun a rank killed by a signal makes
// mpirun terminate the whole job; memento's answer is a relaunch and
// Restore(), not in-job recovery (docs/architecture.md §8).
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>

#include "memento/runtime/transport.h"

namespace memento::runtime {

struct MpiTransportOptions {
  // Communicator to duplicate. MPI_COMM_WORLD by default.
  MPI_Comm comm = MPI_COMM_WORLD;
  // Bound on every wait; 0 means wait forever.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

// Creates the transport (initializing MPI if needed, see above). Errors: MPI
// failures as Internal, an insufficient thread level as FailedPrecondition.
Result<std::shared_ptr<Transport>> CreateMpiTransport(
    const MpiTransportOptions& options = MpiTransportOptions());

}  // namespace memento::runtime
