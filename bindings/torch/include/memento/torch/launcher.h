// Launchers: where rank, size and the transport come from.
//
//   mpirun    (Open MPI: OMPI_COMM_WORLD_RANK/SIZE, or PMI_RANK / PMIX_RANK set)
//             -> runtime::CreateMpiTransport(): a duplicated MPI_COMM_WORLD.
//             The node store's node and local rank come from the host name and
//             Open MPI's local rank (or MEMENTO_NODE / MEMENTO_RANKS_PER_NODE).
//   torchrun  (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//             MASTER_PORT set, no MPI) -> CreateGlooTransport(): libtorch's
//             c10d ProcessGroupGloo over its own key prefix of the launcher's
//             TCP store (gloo_transport.h).
//   single    neither: one rank, an in-process transport.
//
// Thread-safety: plain functions; call once per process.
#pragma once

#include <memory>
#include <string>

#include "memento/common/status.h"
#include "memento/runtime/config.h"
#include "memento/runtime/transport.h"

namespace memento::torch_adapter {

enum class Launcher { kAuto, kMpi, kTorchrun, kSingle };

// "auto", "mpi", "torchrun", "single".
const char* LauncherName(Launcher launcher);
// Parses a LauncherName; InvalidArgument naming the accepted values otherwise.
Result<Launcher> ParseLauncher(const std::string& name);

// The launcher that started this process (never kAuto), from the environment.
Launcher DetectLauncher();

// The transport of `launcher` (kAuto: DetectLauncher()); its timeouts are
// config.timeout_s.
Result<std::shared_ptr<runtime::Transport>> CreateLauncherTransport(Launcher launcher,
                                                                    const runtime::Config& config);

}  // namespace memento::torch_adapter
