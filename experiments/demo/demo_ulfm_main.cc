// memento_demo_ulfm: the demo GPT (trainer.h) as an MPI job that repairs its
// own world over ULFM (runtime::UlfmWorld, runtime::RunResilient).
//
//   mpirun --with-ft ulfm -np N+K memento_demo_ulfm --spares K [demo options]
//   memento launch -n N --launcher ulfm --recovery in-job --spares K
//       -- memento_demo_ulfm --spares K [demo options]
//
// The last K ranks of the world wait as warm spares (libtorch loaded, MPI
// up). When a node is lost the survivors revoke, shrink and split the world,
// a spare takes each lost place with the same rank, and every rank restores:
// the survivors from their own memory, a spare from its peers. The training's
// collectives and memento's transport stay on MPI (the repaired working
// communicator), so a step costs what it costs under a plain mpirun, and the
// state is bit-identical to memento_demo's. With no spare left for a loss
// every process ends with 1 and a relaunch (by `memento launch`) restores.
// Built only when memento is built against an MPI with ULFM
// (MEMENTO_ULFM_MPI_HOME): it links that MPI, not the system's.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "memento/launch/job_reporter.h"
#include "memento/runtime/config.h"
#include "memento/runtime/ulfm_world.h"
#include "mpi_collectives.h"
#include "trainer.h"

namespace memento::demo {
namespace {

// One generation of the world: the trainer over its working communicator and
// the transport RunResilient opened on it.
Status TrainGeneration(const Args& a, const runtime::Config& config,
                       std::shared_ptr<runtime::Transport> transport,
                       const runtime::UlfmWorld& world) {
  try {
    // A failed collective aborts memento's transport before the trainer (and
    // its checkpointer, whose threads may wait on the lost rank) unwinds.
    auto comm = MpiCollectives(world.comm(), [transport] { transport->Abort(); });
    RecordProcess(a.pids, world.rank(), world.generation());
    Trainer trainer(a, *comm, launch::JobReporter::ForGeneration(world.rank(), world.generation()),
                    [&]() -> Result<Connection> {
                      return Connection{config, transport};
                    });
    const int rc = trainer.Run();
    if (rc == 0) return Status::Ok();
    transport->Abort();
    return Status::Unavailable("rank " + std::to_string(world.rank()) + " generation " +
                               std::to_string(world.generation()) + ": the training ended with " +
                               std::to_string(rc));
  } catch (const std::exception& e) {
    transport->Abort();
    return Status::Unavailable(e.what());
  }
}

int Main(int argc, char** argv) {
  Args a;
  int spares = 0;
  CLI::App app{"memento_demo_ulfm: the demo GPT, recovering in-job over ULFM with warm spares"};
  AddArgs(app, a);
  app.add_option("--spares", spares, "the last K ranks of the world wait as spares (default 0)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  CLI11_PARSE(app, argc, argv);
  if (std::string problem = CheckArgs(a); !problem.empty()) {
    std::fprintf(stderr, "%s\n", problem.c_str());
    return 2;
  }
  if (!a.baseline_remote.empty()) {
    std::fprintf(stderr,
                 "--baseline-remote: no memento, so nothing to recover in-job; "
                 "run memento_demo for the remote-only baseline\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  auto config = runtime::Config::FromEnv();
  if (provided < MPI_THREAD_MULTIPLE || !config.ok()) {
    std::fprintf(stderr, "memento_demo_ulfm: %s\n",
                 config.ok() ? "needs MPI_THREAD_MULTIPLE" : config.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // A spare is a new machine ("spare/i" when it takes node i's places, with
  // MEMENTO_RANKS_PER_NODE), unless the launcher named its node; a node is
  // replaced whole.
  const std::string node = runtime::UlfmProcessNode(&*config, MPI_COMM_WORLD, spares);
  auto world = runtime::UlfmWorld::Create(MPI_COMM_WORLD, spares, config->timeout(), node);
  if (!world.ok()) {
    std::fprintf(stderr, "memento_demo_ulfm: %s\n", world.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const Status run = runtime::RunResilient(
      **world, [&](std::shared_ptr<runtime::Transport> t, const runtime::UlfmWorld& w) {
        return TrainGeneration(a, *config, std::move(t), w);
      });
  int rc = 0;
  if (!run.ok()) {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::fprintf(stderr, "memento_demo_ulfm world rank %d: %s\n", world_rank,
                 run.ToString().c_str());
    rc = 1;
  }
  world->reset();
  // The work is done (or lost): a Finalize that hangs after a repair (Open
  // MPI 5.0.11, runtime::FinalizeWithin) has nothing left to lose.
  return runtime::FinalizeWithin(std::chrono::seconds(3), rc);
}

}  // namespace
}  // namespace memento::demo

int main(int argc, char** argv) { return memento::demo::Main(argc, argv); }
