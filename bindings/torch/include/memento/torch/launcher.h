// Launchers: where rank, size and the transport come from.
//
//   mpi       (OMPI_COMM_WORLD_SIZE, PMI_RANK or PMIX_RANK set)
//             -> runtime::CreateMpiTransport(): a duplicated MPI_COMM_WORLD.
//   torchrun  (RANK and WORLD_SIZE set, no MPI; MASTER_ADDR / MASTER_PORT
//             needed) -> CreateGlooTransport(): libtorch's c10d
//             ProcessGroupGloo over its own key prefix of the launcher's TCP
//             store (gloo_transport.h).
//   single    neither: one rank, an in-process transport.
// Under every launcher a rank's node is its host name (or MEMENTO_NODE) and
// its lane its order among the ranks of that node; MEMENTO_RANKS_PER_NODE
// makes virtual nodes instead. The transport's timeout is Config::timeout().
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
