// memento launch: run a training job under mpirun or torchrun with injected node failures.
#include "launch_command.h"

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "flags.h"
#include "memento/launch/launcher.h"

namespace memento::cli {
namespace {

constexpr const char* kFooter = R"(
--inject SPEC: comma-separated events, fired in order:
  NODES@STEP            lose NODES when the job reports STEP (the launcher SIGKILLs
                        every rank of the node, then unlinks its segments)
  NODES@STEP+Ds         lose them D seconds (a decimal) after the job reports STEP:
                        in the middle of the work that follows it
  NODES@STEP:STAGE      lose them at STAGE of checkpoint version STEP: snapshot,
                        protect, commit, persist, or rand (one of the first three or step)
  NODES@recovery        lose them while the job recovers from the previous event
  NODES = N, N+M+... (lost together), rand or randK (K distinct random nodes);
  STEP = S or LO-HI (drawn at random); random draws come from --seed.
  e.g. --inject 3@10   --inject 3@10+0.4s   --inject 1+2@7:snapshot   --inject 3@5,1@recovery

The job reports its progress through MEMENTO_LAUNCH_DIR (see the README): memento's
Python package and libtorch adapter do it on their own (a step per save()); a job
that does not report still runs, relaunches and is timed, without step events.
--launcher torchrun starts one torchrun agent per virtual node (static rendezvous on
a free port, torchrun's own restarts off); under mpirun the ranks also get RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for torch.distributed.
--launcher ulfm starts `mpirun --with-ft ulfm -np N+SPARES` (an MPI with ULFM, e.g.
Open MPI 5): a job built on memento's runtime::RunResilient repairs its own world
after a loss, a spare rank taking the lost place; the launcher injects and records.

examples:
  memento launch -n 8 --scheme rs:4+2 --inject 3@10 -- build/experiments/demo/memento_demo
  memento launch -n 4 --scheme replica:2 --launcher torchrun --inject 1@5,2@recovery \
      -- python train.py
  memento launch -n 4 --scheme replica:2 --recovery in-job --spares 1 --inject 1@5 \
      -- python train.py        # train.py runs its training in memento.resilient(train)
  memento launch -n 4 --scheme xor:3 --launcher ulfm --recovery in-job --spares 2 \
      --inject 2@4,1@8:protect -- ./train_ulfm   # repairs its world (runtime::RunResilient)
  memento launch -n 8 --ranks-per-node 2 --scheme replica:2 --inject rand@5-15:rand \
      --remote /tmp/ckpt --json -- ./train
)";

struct LaunchArgs {
  launch::LaunchOptions options;
  std::string mpirun = "mpirun";
  std::string torchrun = "torchrun";
  std::string rank_exec;
};

}  // namespace

void AddLaunchCommand(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "run a job under mpirun or torchrun, inject node failures, relaunch, print the timeline");
  sub->footer(kFooter);
  auto& o = args->options;
  sub->add_option("-n,--np", o.np, "ranks (mpirun -np)")->transform(DecimalInteger());
  sub->add_option("--ranks-per-node", o.ranks_per_node, "ranks per virtual node (default 1)")
      ->transform(DecimalInteger())
      ->check(AtLeast(1, "an integer"));
  sub->add_option("--scheme", o.scheme,
                  "protection: none, replica:M[:group|:ring], xor:K, rs:K+M (default none)");
  sub->add_option("--job", o.job, "MEMENTO_JOB (default launch-<pid>-<6 random hex digits>)")
      ->check(NotEmpty());
  sub->add_option("--remote", o.remote_dir, "remote tier directory (MEMENTO_REMOTE)");
  sub->add_option("--persist-every", o.persist_every,
                  "persist every P-th checkpoint to --remote (MEMENTO_PERSIST_EVERY)")
      ->transform(DecimalInteger())
      ->check(AtLeast(0, "an integer"));
  sub->add_option("--inject", o.inject, "node failures to inject (see below)")
      ->check(NotEmpty());
  sub->add_option("--seed", o.seed, "seed of the random choices in --inject (default 1)")
      ->transform(Uint64());
  sub->add_option("--max-restarts", o.max_restarts,
                  "in-job replacements and relaunches in a row after failures nobody injected "
                  "(default 3)")
      ->transform(DecimalInteger())
      ->check(AtLeast(0, "an integer"));
  sub->add_option("--backoff", o.backoff_s,
                  "seconds before a relaunch; doubles per repeated failure (default 0.5)")
      ->check(DecimalNumber())
      ->check(AtLeast(0, "seconds"));
  sub->add_option("--teardown-grace", o.teardown_grace_s,
                  "seconds mpirun may live on after every rank ended before it is killed "
                  "(default 10)")
      ->check(DecimalNumber())
      ->check(AtLeast(0, "seconds"));
  sub->add_option("--launcher", o.launcher,
                  "what starts the job: mpirun (one mpirun, default), torchrun (one torchrun "
                  "agent per node) or ulfm (mpirun --with-ft ulfm: the job repairs its own MPI "
                  "world in-job; --spares are ranks of it)")
      ->check(CLI::IsMember({"mpirun", "torchrun", "ulfm"}));
  sub->add_option("--mpirun", args->mpirun,
                  "the mpirun command line, split at spaces (default mpirun; under --launcher "
                  "ulfm, the mpirun of the MPI with ULFM memento was built against)");
  sub->add_option("--torchrun", args->torchrun,
                  "the torchrun command line, split at spaces (default torchrun)");
  sub->add_option("--recovery", o.recovery,
                  "relaunch (default): every failure relaunches the job; in-job: the survivors "
                  "keep running and re-form the group with replacements (the job uses "
                  "memento.resilient)");
  sub->add_option("--spares", o.spares,
                  "in-job: warm spares started ahead (program loaded) to take lost places; "
                  "when none is left, a failure relaunches the job (default 0: fresh "
                  "replacements)")
      ->transform(DecimalInteger());
  sub->add_option("--injob-timeout", o.injob_timeout_s,
                  "in-job: a recovery that has not restored after this many seconds is "
                  "relaunched (default 60)")
      ->check(DecimalNumber())
      ->check(AtLeast(0, "seconds"));
  sub->add_flag("--json", o.json, "print the records as JSON lines instead of the timeline");
  sub->add_option("--records", o.records_path, "also write the JSON records to this file");
  sub->add_option("--status-dir", o.status_dir,
                  "status folder of the job (default: a temporary one, removed on success); "
                  "files of the names a launch writes there (nodes, events.jsonl, pid.a*, "
                  "restore.a*, fault.a*, attempt*.log) are replaced, nothing else is touched");
  sub->add_flag("--quiet", o.quiet, "no progress line");
  sub->add_flag("--show-output", o.show_output,
                "job output to the terminal (default: a log per launch in the status folder)");
  sub->add_flag("--keep-segments", o.keep_segments,
                "leave the job's shared-memory segments in place at the end");
  sub->add_option("--rank-exec", args->rank_exec)->group("");  // the per-rank wrapper
  sub->add_option("command", o.command, "the job: COMMAND [ARGS...] (after --)");
  sub->positionals_at_end(true);

  sub->callback([args, sub] {
    auto& o = args->options;
    if (!args->rank_exec.empty()) {
      throw CommandFailed(launch::RankExec(args->rank_exec, o.command));
    }
    if (sub->count("--np") == 0) throw CLI::RequiredError("-n,--np");
    auto split = [](const std::string& line) {
      std::istringstream words(line);
      std::vector<std::string> out;
      for (std::string w; words >> w;) out.push_back(w);
      return out;
    };
    o.mpirun = split(args->mpirun);
    o.torchrun = split(args->torchrun);
    auto code = launch::RunLaunch(o);
    if (!code.ok()) {
      std::fprintf(stderr, "memento launch: %s\n", code.status().message().c_str());
      throw CommandFailed(2);
    }
    if (*code != 0) throw CommandFailed(*code);
  });
}

}  // namespace memento::cli
