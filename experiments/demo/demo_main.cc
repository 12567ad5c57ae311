// memento_demo: the demo GPT (trainer.h) under mpirun, or under `memento
// launch` (progress, injected failures, relaunches).
//
// Under a plain mpirun (or `memento launch --recovery relaunch`) the
// collectives run over MPI_COMM_WORLD and memento's transport is MPI's. Under
// `memento launch --recovery in-job` the ranks do not initialize MPI: the
// training's collectives and memento's transport run over gloo groups that are
// formed again, in the same processes, after each node loss
// (launch::Resilient); the results are bit-identical to the MPI run's.
// memento_demo_ulfm (demo_ulfm_main.cc) keeps MPI and repairs its world over
// ULFM instead.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "checkpoint_glue.h"
#include "collectives.h"
#include "memento/launch/job_reporter.h"
#include "memento/launch/resilient.h"
#include "memento/torch/launcher.h"
#include "mpi_collectives.h"
#include "trainer.h"

namespace memento::demo {
namespace {

// Each attempt's settings from the environment and the transport of `launcher`.
ConnectFn ConnectFromEnv(torch_adapter::Launcher launcher) {
  return [launcher]() -> Result<Connection> {
    MEMENTO_ASSIGN_OR_RETURN(runtime::Config config, runtime::Config::FromEnv());
    MEMENTO_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Transport> transport,
                             torch_adapter::CreateLauncherTransport(launcher, config));
    return Connection{std::move(config), std::move(transport)};
  };
}

// Under `memento launch --recovery in-job`: every attempt forms a gloo group
// of its own (rank 0 serves the store at the attempt's MASTER_PORT) and trains
// on it; after a node loss launch::Resilient runs it again in this process.
int RunInJob(const Args& a) {
  auto config = runtime::Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "memento_demo: %s\n", config.status().ToString().c_str());
    return 2;
  }
  const std::chrono::milliseconds timeout = config->timeout();
  launch::ResilientOptions options;
  options.abort = [] { AbortCheckpointerTransports(); };
  try {
    return launch::Resilient(
        [&] {
          const char* generation = std::getenv("MEMENTO_LAUNCH_GENERATION");
          auto comm = GlooCollectives(
              std::string("memento_demo/g") + (generation != nullptr ? generation : "0") + "/",
              timeout);
          RecordProcess(a.pids, comm->rank());
          // auto: the launcher's gloo rendezvous.
          Trainer trainer(a, *comm, launch::JobReporter::FromEnv(comm->rank()),
                          ConnectFromEnv(torch_adapter::Launcher::kAuto));
          return trainer.Run();
        },
        options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memento_demo: %s\n", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace memento::demo

int main(int argc, char** argv) {
  memento::demo::Args a;
  CLI::App app{"memento_demo: a small GPT trained data-parallel, checkpointed by memento"};
  memento::demo::AddArgs(app, a);
  CLI11_PARSE(app, argc, argv);
  if (std::string problem = memento::demo::CheckArgs(a); !problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    return 2;
  }
  // In-job recovery: replacements join processes mpirun did not start, and an
  // MPI world does not outlive a rank; gloo serves the whole job.
  if (memento::launch::InJob()) return memento::demo::RunInJob(a);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "memento_demo needs MPI_THREAD_MULTIPLE (got level %d)\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rc = 0;
  {
    auto comm = memento::demo::MpiCollectives(MPI_COMM_WORLD, nullptr);
    memento::demo::RecordProcess(a.pids, comm->rank());
    memento::demo::Trainer trainer(
        a, *comm, memento::launch::JobReporter::FromEnv(comm->rank()),
        memento::demo::ConnectFromEnv(memento::torch_adapter::Launcher::kMpi));
    rc = trainer.Run();
  }
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return 0;
}
