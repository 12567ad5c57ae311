// `memento launch`: runs a training job under mpirun or torchrun, injects node failures,
// relaunches it after each failure with a replacement identity for every lost
// node, and records a timeline of what was lost and rebuilt from where.
//
// How a run goes:
//   1. The job is started as `mpirun -np NP memento launch --rank-exec DIR --
//      COMMAND...`, or under torchrun as one agent per virtual node running the
//      same wrapper (src/job_command.h): every rank first runs the exec wrapper
//      (RankExec below), which sets MEMENTO_NODE from the node-name map in DIR
//      and execs COMMAND.
//      Virtual node k is ranks k*R .. k*R+R-1 (MEMENTO_RANKS_PER_NODE=R); its
//      identity is "<host>/<k>" and, after it has been replaced g times,
//      "<host>-r<g>/<k>". Survivors keep their identity (and their memory).
//   2. The launcher follows the job's status folder (job_reporter.h) and
//      prints a progress line.
//   3. A node loss = SIGKILL of every rank of the node (by the launcher for a
//      step event; by the job's own fault hook for a stage event) and the
//      unlink of the node's segments once the job has ended (mpirun ends every
//      rank when one dies; under torchrun the launcher stops every node's
//      agent and ranks once one node failed).
//   4. Relaunch after a backoff; the job restores. With --recovery in-job
//      (src/injob.cc) a node loss is instead recovered while the survivors
//      run on: the lost ranks are replaced by warm spares or fresh processes
//      and the job (memento.resilient) re-forms its group; what cannot be
//      recovered in-job falls back to the relaunch. Failures nobody injected
//      are relaunched too, at most max_restarts times in a row (a launch that
//      trained past every step reported before starts a new row), with a
//      doubling backoff.
//   5. At the end (or on Ctrl-C / SIGTERM) the job's segments are unlinked and
//      the timeline is printed (text) or written as JSON records.
//
// Thread-safety: RunLaunch installs SIGINT/SIGTERM handlers and must run on
// the process's only thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"

namespace memento::launch {

struct LaunchOptions {
  int np = 0;              // ranks (mpirun -np)
  int ranks_per_node = 1;  // ranks per virtual node
  std::string scheme = "none";
  std::string job;         // MEMENTO_JOB; empty = "launch-<pid>-<random hex>"
  std::string remote_dir;  // MEMENTO_REMOTE; empty = none
  int persist_every = -1;  // MEMENTO_PERSIST_EVERY; -1 = the runtime's default
  std::string inject;      // --inject SPEC (inject_spec.h)
  uint64_t seed = 1;       // seed of the random choices in SPEC
  int max_restarts = 3;    // relaunches after failures that were not injected
  double backoff_s = 0.5;  // first backoff; doubles per consecutive unplanned failure
  double backoff_max_s = 30;
  double kill_grace_s = 120;  // a job still running this long after a kill is SIGKILLed
  // mpirun still running this long after every rank of the job has ended is
  // stuck in its own teardown (Open MPI 4.1 can deadlock there after an
  // MPI_Abort) and is SIGKILLed, so that the job is relaunched or finishes.
  double teardown_grace_s = 10;
  // What starts the job: "mpirun" (one mpirun for all ranks), "torchrun"
  // (one torchrun agent per virtual node, static rendezvous on a free port) or
  // "ulfm": `mpirun --with-ft ulfm -np N+spares`, a job that repairs its own
  // MPI world after a loss (runtime::RunResilient, its spares the last ranks;
  // needs --recovery in-job): the launcher injects, follows and records.
  std::string launcher = "mpirun";
  // mpirun's command line before -np; under "ulfm" the default is the mpirun
  // of the MPI memento's ULFM support was built against.
  std::vector<std::string> mpirun = {"mpirun"};
  std::vector<std::string> torchrun = {"torchrun"};  // torchrun's command line before its flags
  std::vector<std::string> command;              // the job
  std::string self_exe;                          // this program (default /proc/self/exe)
  std::string status_dir;    // empty = a fresh temporary folder, removed at the end
  std::string records_path;  // also write the JSON records here
  bool json = false;         // print JSON records (one per line) instead of the timeline
  bool quiet = false;        // no progress line
  bool show_output = false;  // job output to the terminal instead of per-attempt logs
  bool keep_segments = false;
  // "relaunch": every failure relaunches the whole job. "in-job": the
  // survivors keep running; the lost ranks are replaced (by a warm spare when
  // there are spares, else by a fresh process) and the job re-forms its
  // process group (memento.resilient); a recovery that cannot go in-job
  // falls back to a relaunch (see injob.cc).
  std::string recovery = "relaunch";
  int spares = 0;              // in-job: processes started ahead to take lost places
  double injob_timeout_s = 60;  // in-job: a recovery not restored by then is relaunched
};

// Checks the options (scheme, node count, --inject, command and mpirun found)
// without running anything. InvalidArgument / NotFound naming the problem.
Status ValidateLaunchOptions(const LaunchOptions& options);

// Runs the job to completion. Returns the exit code for the command line:
// 0 the job finished, 1 it failed (gave up after max_restarts, or its state
// was unrecoverable), 130 interrupted. Errors before anything ran (bad
// options) are returned as a Status.
Result<int> RunLaunch(const LaunchOptions& options);

// The per-rank exec wrapper (`memento launch --rank-exec DIR -- COMMAND`):
// sets MEMENTO_NODE for this rank's virtual node from DIR/nodes (the rank is
// mpirun's OMPI_COMM_WORLD_RANK or torchrun's RANK), records the process id in
// DIR, and execs COMMAND. Under mpirun it also sets torch.distributed's
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// (a free port per launch) where they are unset, so that one Python script
// runs under either launcher. Returns only on failure (exit code).
int RankExec(const std::string& dir, const std::vector<std::string>& command);

}  // namespace memento::launch
