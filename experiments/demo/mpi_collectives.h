// The demo's collectives over an MPI communicator (collectives.h). Apart from
// collectives.h so that the code shared by the demo's two builds includes no
// mpi.h: memento_demo compiles this against the system's MPI,
// memento_demo_ulfm against the MPI with ULFM.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>

#include "collectives.h"

namespace memento::demo {

// Over `comm` (MPI is initialized). An operation that returns an error (a
// communicator with MPI_ERRORS_RETURN, a lost rank under ULFM) calls
// `on_error` (may be empty), then throws std::runtime_error naming the
// operation and the MPI error. Under MPI's default handler an error ends the
// job instead.
std::unique_ptr<Collectives> MpiCollectives(MPI_Comm comm, std::function<void()> on_error);

}  // namespace memento::demo
