#include "memento/torch/launcher.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/mpi_transport.h"
#include "memento/torch/gloo_transport.h"
#include "memento/torch/torch_checkpointer.h"

namespace memento::torch_adapter {
namespace {

bool Set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

const char* LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kAuto:
      return "auto";
    case Launcher::kMpi:
      return "mpi";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kSingle:
      return "single";
  }
  return "unknown";
}

Result<Launcher> ParseLauncher(const std::string& name) {
  for (Launcher l : {Launcher::kAuto, Launcher::kMpi, Launcher::kTorchrun, Launcher::kSingle}) {
    if (name == LauncherName(l)) return l;
  }
  return Status::InvalidArgument("launcher '" + name + "' (accepted: auto, mpi, torchrun, single)");
}

Launcher DetectLauncher() {
  // In-job recovery replaces lost ranks with processes mpirun did not start, and
  // an MPI world without fault tolerance does not outlive a rank: gloo serves
  // every launcher there.
  const char* recovery = std::getenv("MEMENTO_LAUNCH_RECOVERY");
  if (recovery != nullptr && std::string(recovery) == "in-job" && Set("RANK") &&
      Set("WORLD_SIZE")) {
    return Launcher::kTorchrun;
  }
  if (Set("OMPI_COMM_WORLD_SIZE") || Set("PMIX_RANK") || Set("PMI_RANK")) return Launcher::kMpi;
  if (Set("RANK") && Set("WORLD_SIZE")) return Launcher::kTorchrun;
  return Launcher::kSingle;
}

Result<std::shared_ptr<runtime::Transport>> CreateLauncherTransport(Launcher launcher,
                                                                    const runtime::Config& config) {
  if (launcher == Launcher::kAuto) launcher = DetectLauncher();
  const std::chrono::milliseconds timeout = config.timeout();  // fractions of a ms rounded up
  switch (launcher) {
    case Launcher::kMpi: {
      runtime::MpiTransportOptions o;
      o.timeout = timeout;
      return runtime::CreateMpiTransport(o);
    }
    case Launcher::kTorchrun: {
      MEMENTO_ASSIGN_OR_RETURN(GlooTransportOptions o, GlooOptionsFromEnv(config.job, timeout));
      return CreateGlooTransport(o);
    }
    case Launcher::kSingle:
    case Launcher::kAuto:
      break;
  }
  auto group = runtime::InProcessGroup::Create(1, timeout);
  return group->transport(0);
}

Result<std::unique_ptr<TorchCheckpointer>> TorchCheckpointer::CreateFromEnvironment(
    Options options) {
  MEMENTO_ASSIGN_OR_RETURN(runtime::Config config, runtime::Config::FromEnv());
  MEMENTO_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Transport> transport,
                           CreateLauncherTransport(Launcher::kAuto, config));
  return Create(std::move(config), std::move(transport), options);
}

}  // namespace memento::torch_adapter
