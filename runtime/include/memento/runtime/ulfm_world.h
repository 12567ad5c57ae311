// UlfmWorld: in-job recovery of an MPI job over ULFM, the MPI Forum's
// fault-tolerance interface (Open MPI 5's `ftmpi` extension: revoke, shrink,
// agree), with warm spare ranks.
//
// The job is started with N + K ranks under `mpirun --with-ft ulfm`. World
// ranks 0..N-1 work (comm() spans them, numbered as in the world); the last K
// wait as spares in WaitForPlace(), their program loaded and MPI up, polling
// with sleeps so that they leave the cores to training. When a working rank is
// lost, every live process calls Repair(): it revokes the world and the working
// communicator (so that whoever is blocked in them returns), shrinks the world
// to the live processes, agrees on who was lost, and hands each lost working
// rank to a spare. The new working communicator has the same size and the same
// numbering; survivors keep their processes (and what they loaded) and roll
// back from their own memory, a spare that took a place restores from its
// peers, as a replacement node would.
//
// Nodes are replaced whole. A node's ranks share its memory, and memento
// needs the same number of ranks on every node, so a node that lost one of
// its ranks (a process that crashed, on a machine still up) is lost as a
// whole: its live ranks retire (they leave the job's communicators, so that
// they can end without the others seeing a failure) and one node of waiting
// spares takes all its places. Each process names its node at Create
// (UlfmProcessNode: the engine's NodeIdentity); without names every process
// is a node of its own.
//
// Why spares and not MPI_Comm_spawn: with Open MPI 5.0.11 from pip, a job that
// had spawned a replacement hung in MPI_Finalize (ompi_dpm_dyn_finalize) in 3
// of 10 runs of `experiments/ulfm/ulfm_respawn.c`; shrink-only repairs ended
// cleanly 10 of 10. Spares are also what a warm standby costs: nothing to
// start when a node is lost.
//
// A process failure shows up as an error of the caller's own MPI calls on
// comm() (MPI_ERRORS_RETURN is set on it) or as Unavailable from memento's
// MpiTransport over it. The caller then aborts its MpiTransport (which
// revokes memento's communicator: ranks blocked in it return) and calls
// Repair(); RunResilient() below does that around a training function.
// Available only when memento is built against an MPI with ULFM
// (MEMENTO_ULFM_MPI_HOME, docs/architecture.md §8).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::runtime {

class UlfmWorld {
 public:
  struct Repair {
    int generation = 0;         // of the working communicator after the repair
    std::vector<int> replaced;  // working ranks that a spare took over
    double seconds = 0;         // revoke to the new working communicator, this process
  };

  // A repair that has not finished within its timeout ends the process with
  // this code (as a timed out collective of MpiTransport does).
  static constexpr int kRepairTimeoutExit = 75;

  // `world`: the job's communicator (MPI_COMM_WORLD), duplicated; its last
  // `spares` ranks are spares. MPI must be initialized with
  // MPI_THREAD_MULTIPLE. `repair_timeout` bounds each RepairAfterFailure()
  // (pass Config::timeout()): past it the process ends with
  // kRepairTimeoutExit, naming the timeout, so that the job is relaunched
  // (by `memento launch` or the scheduler) instead of hanging. Errors:
  // InvalidArgument when `spares` leaves no working rank or the timeout is
  // not positive, FailedPrecondition when this MPI has no ULFM.
  // `node`: the node this process runs on (UlfmProcessNode), the same string
  // on every process of a node; empty: a node of its own.
  static Result<std::unique_ptr<UlfmWorld>> Create(MPI_Comm world, int spares,
                                                   std::chrono::milliseconds repair_timeout,
                                                   const std::string& node = "");
  ~UlfmWorld();
  UlfmWorld(const UlfmWorld&) = delete;
  UlfmWorld& operator=(const UlfmWorld&) = delete;

  // A process's role when it does not work.
  static constexpr int kSpare = -1;    // waits to take a place
  static constexpr int kRetired = -2;  // its node was lost: out of the job

  // This process's working rank; kSpare or kRetired while it waits.
  int rank() const { return rank_; }
  // Working ranks (N).
  int size() const { return size_; }
  // The working communicator; MPI_COMM_NULL for a waiting spare.
  MPI_Comm comm() const { return work_; }
  // 0 at start, one more per repair; equal on every process.
  int generation() const { return generation_; }
  // Spares still waiting.
  int spares_left() const { return static_cast<int>(std::count(roles_.begin(), roles_.end(), -1)); }

  // A waiting spare: returns true once a repair gave it a working rank,
  // false when the job finished without needing it (Finish()).
  Result<bool> WaitForPlace();

  // Every live process after a failure (working ranks call it; a waiting
  // spare's WaitForPlace() does). FailedPrecondition when a lost node finds
  // no node of spares left to take its places, or no process was lost (the
  // failure was not a process's): the job must then be relaunched, or the
  // error is the caller's own. A working rank whose node lost another rank
  // comes back retired (rank() == kRetired, comm() null): it is out of the
  // job and may end.
  Result<Repair> RepairAfterFailure();

  // The work is done: working rank 0 releases the spares still waiting. Every
  // working rank calls it.
  Status Finish();

  // A working rank: watches the world for a failed process (or a revoke) on
  // a thread of its own, polling every `poll` (experiments/ulfm/bench_ulfm_watch
  // measures what that costs training), and then revokes comm()
  // and calls `on_failure` once (RunResilient aborts the attempt's
  // MpiTransport there). Without it a survivor whose operations involve only
  // other survivors never learns of the failure: measured with Open MPI
  // 5.0.11, a send of the protect stage to a survivor that had revoked its
  // communicator stayed pending until the timeout. StopWatching() ends it;
  // RepairAfterFailure() stops it first.
  // The default poll: each look is an MPI_Test that runs MPI's progress engine.
  // bench_ulfm_watch (2 cores, Open MPI 5.0.11): an idle rank's watcher took
  // 12 ms of CPU per second polling every 1 ms, 4.5-5 ms every 5 ms; training
  // steps were 1.04-1.05x slower at 1 ms and 1.003-1.007x at 5 ms. 5 ms adds
  // at most that to a recovery that costs 0.2 s in all.
  static constexpr std::chrono::microseconds kDefaultWatchPoll{5000};
  void WatchForFailures(std::function<void()> on_failure,
                        std::chrono::microseconds poll = kDefaultWatchPoll);
  void StopWatching();

  // Tests: called by RepairAfterFailure on every process just before each
  // round's MPI_Comm_split, with the round (0 first) and the process's
  // working rank before the repair (-1: a spare), e.g. to hold one process
  // past the split's time limit (a split that has not returned within
  // 1/16 of the repair timeout is revoked and the round repeated).
  void set_split_hook(std::function<void(int round, int rank)> hook) {
    split_hook_ = std::move(hook);
  }

 private:
  UlfmWorld() = default;

  // What a repair round decided, the same on every live process.
  struct Decision {
    std::vector<int> roles;       // per live process (shrunk world rank)
    std::vector<int> lost;        // working ranks to replace: their nodes whole
    std::vector<int> rank_nodes;  // per working rank, once replaced
    int generation = 0;
    int spares = 0;  // waiting before the repair
    bool enough = false;
  };
  // The round's decision from every live process's (role, generation, node)
  // triples in `all`, over `old_size` working ranks.
  Decision Decide(const std::vector<int>& all, int old_size) const;
  // Takes the decision on this process (`me` in the shrunk world): the new
  // world (without the retired) and working communicator, the roles, this
  // process's rank and generation. The repair, or why the job must be
  // relaunched (no whole node of spares; nothing was lost).
  Result<Repair> Adopt(const Decision& d, int me, MPI_Comm world, MPI_Comm work,
                       std::chrono::steady_clock::time_point start);
  // The repair's decision, from every live process's (role, generation,
  // node) triples in `all`: the live ranks of a node that lost one retire
  // (kRetired in *roles, added to *lost), and each lost node's ranks go to
  // one node of waiting spares (*roles, *rank_nodes). False, with *roles
  // left without places, when some lost node finds no such spares.
  bool Replace(const std::vector<int>& all, std::vector<int>* roles, std::vector<int>* lost,
               std::vector<int>* rank_nodes) const;

  MPI_Comm world_ = MPI_COMM_NULL;  // every live process
  MPI_Comm work_ = MPI_COMM_NULL;   // the working ranks
  std::vector<int> roles_;          // per world rank: its working rank, kSpare, kRetired
  int rank_ = -1;
  int node_ = 0;                 // this process's node: the first world rank on it
  std::vector<int> rank_nodes_;  // per working rank: the node of the process holding it
  int size_ = 0;
  int generation_ = 0;
  std::chrono::milliseconds repair_timeout_{0};  // Create()'s
  std::thread watcher_;
  std::atomic<bool> stop_watching_{false};
  MPI_Request watch_request_ = MPI_REQUEST_NULL;  // pending once the watcher saw a failure
  std::function<void(int, int)> split_hook_;      // may be empty
};

// Whether memento was built against an MPI with ULFM.
bool UlfmAvailable();

// Runs `train` on the working ranks until it succeeds, repairing the world
// after each process failure. `train` gets an MpiTransport over comm() (for
// its Checkpointer) and the world (generation 0: a fresh start; later: after
// a repair, every rank restores). A waiting spare enters once a repair gives
// it a place, and returns Ok without training if the job finishes first; a
// rank that a repair retired (its node lost another rank) returns Ok.
// Returns train's error when it failed without a process failure, and
// FailedPrecondition (naming the lost and the spares) when the spares ran
// out: the job must then be relaunched, and restores then.
// MPI_Finalize, bounded: past `grace` the process ends with `exit_code`
// (output flushed). Open MPI 5.0.11 hung in MPI_Finalize in about 1 of 20
// runs of a job that had repaired its world (every rank in
// ompi_mpi_finalize, the job's work done and checked); shrink-only repairs
// without the engine's traffic ended cleanly. Returns `exit_code`.
int FinalizeWithin(std::chrono::seconds grace, int exit_code);

using UlfmTrainFn = std::function<Status(std::shared_ptr<Transport>, const UlfmWorld&)>;

struct Config;
// The node a process of `world` runs on, as the engine will name it
// (NodeIdentity of its world rank), for UlfmWorld::Create. A spare (one of
// the last `spares` ranks of `world`) is a machine of its own: its
// config->node becomes "spare" unless MEMENTO_NODE names its node (as
// `memento launch` does), so that a spare node taking node i's places is
// "spare/i" with MEMENTO_RANKS_PER_NODE.
std::string UlfmProcessNode(Config* config, MPI_Comm world, int spares);
Status RunResilient(UlfmWorld& world, const UlfmTrainFn& train);

}  // namespace memento::runtime
