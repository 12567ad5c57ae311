// ulfm_worker: one process of a job that recovers in-job over ULFM (driven
// by ulfm_test.sh under `mpirun --with-ft ulfm -np N+K`).
//
//   ulfm_worker STEPS SPARES [STEP_MS]
//
// The N working ranks train STEPS steps: each step mixes the rank's two
// buffers with an allreduce over the working communicator (a value every
// rank can also compute alone) and saves a version. A loss makes the
// survivors repair the world (UlfmWorld, RunResilient): a spare takes the
// lost rank's place, every rank restores (survivors from their own memory,
// the spare from its peers) and training goes on from the restored step.
// At the end every rank compares its buffers with the failure-free state,
// which it computes alone, and rank 0 prints which ranks kept their
// process and which were taken over:
//   "ulfm: OK generation G, replaced R, survivors kept their pids"
//
// MEMENTO_TEST_KILL="stage:step:rank[+rank...][:generation][,...]": working
// rank `rank` of `generation` (default 0) loses its node at `stage` of version
// `step` (0: any): its store is unlinked, then it SIGKILLs itself; the ranks
// after '+' (generation 0 only) lose theirs at the same instant, killed by it.
// Stages: the engine's (snapshot, seal, commit, committed, recover, ...) and
// "step" (after the step's allreduce, before Save). "stall" instead keeps the
// rank alive and out of the job for twice MEMENTO_TIMEOUT_S after that
// point, then ends its attempt: a repair that needs it must end at its
// timeout (UlfmWorld's repair deadline), not hang.
// Configuration: MEMENTO_* (Config::FromEnv). Spares run under the node
// name "spare", so that a node of them taking node i's places is a new
// machine ("spare/i" with MEMENTO_RANKS_PER_NODE), unless MEMENTO_NODE names
// one (UlfmProcessNode). A node of several ranks is replaced whole: a rank
// whose node lost another retires and ends.
// MEMENTO_TEST_SPLIT_STALL="rank:ms": working rank `rank` waits `ms` before
// the MPI_Comm_split of each repair's first round (UlfmWorld's split hook),
// so that the others' splits outlast their time limit: they must revoke the
// round and repeat it, and the job still finish in its launch.
// STEP_MS: each step also sleeps that long (a step `memento launch` can see).
//
// Under `memento launch --launcher ulfm` (MEMENTO_LAUNCH_DIR set) the job
// also reports to the launcher (launch::JobReporter::ForGeneration: steps,
// restores, the stage faults it injects); a rank's state hash is the crc32c
// of its two buffers.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "memento/erasure/crc32c.h"
#include "memento/launch/job_reporter.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "memento/runtime/ulfm_world.h"
#include "test_pattern.h"

namespace memento::runtime {
namespace {

struct KillPoint {
  std::string stage;
  uint64_t step = 0;
  int rank = -1;
  std::vector<int> with;  // ranks lost at the same instant ("rank+other+...")
  int generation = 0;
};

std::vector<KillPoint> ParseKills() {
  std::vector<KillPoint> kills;
  const char* env = std::getenv("MEMENTO_TEST_KILL");
  std::string list = env != nullptr ? env : "";
  size_t at = 0;
  while (at < list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(at, end - at);
    at = end + 1;
    KillPoint k;
    char stage[32] = {}, ranks[64] = {};
    unsigned long long step = 0;
    int n =
        std::sscanf(item.c_str(), "%31[a-z]:%llu:%63[0-9+]:%d", stage, &step, ranks, &k.generation);
    if (n < 3 || (std::strchr(ranks, '+') != nullptr && k.generation != 0)) {
      std::fprintf(stderr,
                   "MEMENTO_TEST_KILL: '%s' is not stage:step:rank[+rank...][:generation] "
                   "(several ranks only in generation 0)\n",
                   item.c_str());
      std::exit(2);
    }
    k.stage = stage;
    k.step = step;
    char* next = ranks;
    k.rank = static_cast<int>(std::strtol(next, &next, 10));
    while (*next == '+') k.with.push_back(static_cast<int>(std::strtol(next + 1, &next, 10)));
    kills.push_back(k);
  }
  return kills;
}

// The failure-free state: two buffers per rank, each step mixes in the step's
// allreduce (the sum over ranks of a value of (rank, step)).
uint64_t Contribution(int rank, uint64_t step) { return (rank + 1) * 1000003ull + step * 7919ull; }

uint64_t StepSum(int ranks, uint64_t step) {
  uint64_t sum = 0;
  for (int r = 0; r < ranks; ++r) sum += Contribution(r, step);
  return sum;
}

void Mix(std::vector<uint8_t>* buf, int rank, uint64_t step, uint64_t sum) {
  for (size_t i = 0; i < buf->size(); ++i) {
    (*buf)[i] = static_cast<uint8_t>((*buf)[i] * 31u + testing::Pattern(rank, step, 0, i) +
                                     (sum >> (i % 32)));
  }
}

struct Job {
  Config config;
  uint64_t steps = 0;
  int step_ms = 0;
  std::vector<KillPoint> kills;
  std::vector<int> first_pids;             // by world rank, at the start
  std::vector<std::vector<uint8_t>> bufs;  // the rank's "model", outlives every Checkpointer
};

// Working rank `rank`'s node is lost: its store unlinked, its process killed.
void Lose(const Job& job, int rank, int pid, const char* where, uint64_t step) {
  StoreId id{job.config.job, NodeIdentity(job.config, rank),
             static_cast<uint32_t>(LocalRank(job.config, rank))};
  (void)NodeStore::Destroy(id);
  std::fprintf(stderr, "ulfm_worker rank %d (pid %d): node lost at %s of v%llu\n", rank, pid, where,
               static_cast<unsigned long long>(step));
  std::fflush(stderr);
  kill(pid, SIGKILL);
}

// The kill point `k` fired on its rank: the ranks lost with it first (by the
// pids they started with: the same instant, whatever they are doing), then
// this process.
[[noreturn]] void LoseNodes(const Job& job, const KillPoint& k, const char* where, uint64_t step) {
  for (int other : k.with) Lose(job, other, job.first_pids[other], where, step);
  Lose(job, k.rank, static_cast<int>(getpid()), where, step);
  std::abort();
}

const KillPoint* KilledAt(const Job& job, const char* stage, uint64_t step, int rank,
                          int generation) {
  for (const auto& k : job.kills) {
    if (k.stage == stage && (k.step == step || k.step == 0) && k.rank == rank &&
        k.generation == generation) {
      return &k;
    }
  }
  return nullptr;
}

// crc32c of the rank's buffers, as hex.
std::string StateHash(const std::vector<std::vector<uint8_t>>& bufs) {
  erasure::Crc32cStream crc;
  for (const auto& b : bufs) crc.Update(b.data(), b.size());
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", crc.value());
  return text;
}

// One attempt: a Checkpointer over this generation's transport, a restore
// (every attempt but a fresh start's first), then the steps left.
Status Train(Job& job, std::shared_ptr<Transport> transport, const UlfmWorld& world) {
  const int rank = world.rank();
  const int generation = world.generation();
  // Inactive (every call a no-op) unless `memento launch` runs the job.
  const launch::JobReporter reporter = launch::JobReporter::ForGeneration(rank, generation);
  FaultHooks hooks;
  hooks.at_stage = [&job, rank, generation, launcher = reporter.Hooks()](Stage stage,
                                                                         uint64_t version) {
    if (launcher.at_stage) (void)launcher.at_stage(stage, version);
    if (const KillPoint* k = KilledAt(job, StageName(stage), version, rank, generation)) {
      LoseNodes(job, *k, StageName(stage), version);
    }
    return Status::Ok();
  };
  std::shared_ptr<RemoteStore> remote;
  if (!job.config.remote_dir.empty()) {
    remote = std::make_shared<DirectoryRemoteStore>(job.config.remote_dir, job.config.job);
  }
  MEMENTO_ASSIGN_OR_RETURN(auto ck, Checkpointer::Create(job.config, transport, remote, hooks));
  for (size_t e = 0; e < job.bufs.size(); ++e) {
    MEMENTO_RETURN_IF_ERROR(
        ck->RegisterBuffer("entry" + std::to_string(e), job.bufs[e].data(), job.bufs[e].size()));
  }
  // Any failure from here aborts the transport first: this Checkpointer's
  // threads may wait on survivors that wait on us.
  auto fail = [&](Status s) {
    transport->Abort();
    return s;
  };
  uint64_t first = 1;
  reporter.Start(job.steps);
  reporter.RestoreBegin();
  const double t_restore = launch::JobReporter::Now();
  auto report = ck->Restore();
  if (reporter.active()) {
    reporter.Restored(report, t_restore, launch::JobReporter::Now(), StateHash(job.bufs));
  }
  if (report.ok()) {
    first = report->version + 1;
    std::printf("rank %d (pid %d) generation %d: restored v%llu: %s\n", rank,
                static_cast<int>(getpid()), generation,
                static_cast<unsigned long long>(report->version), report->ToString().c_str());
  } else if (report.status().code() != StatusCode::kNotFound || generation > 0) {
    return fail(report.status().WithContext("Restore"));
  } else {
    for (auto& b : job.bufs) std::fill(b.begin(), b.end(), 0);
  }
  for (uint64_t step = first; step <= job.steps; ++step) {
    const double t_step = launch::JobReporter::Now();
    if (job.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(job.step_ms));
    Status waited = ck->WaitSnapshot();
    if (!waited.ok()) return fail(waited.WithContext("WaitSnapshot"));
    uint64_t mine = Contribution(rank, step), sum = 0;
    const int rc = MPI_Allreduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, world.comm());
    if (rc != MPI_SUCCESS) {
      return fail(Status::Unavailable("training allreduce of step " + std::to_string(step) +
                                      " failed (MPI error " + std::to_string(rc) + ")"));
    }
    for (size_t e = 0; e < job.bufs.size(); ++e) Mix(&job.bufs[e], rank, step, sum);
    if (const KillPoint* k = KilledAt(job, "step", step, rank, generation)) {
      LoseNodes(job, *k, "step", step);
    }
    if (KilledAt(job, "stall", step, rank, generation) != nullptr) {
      std::fprintf(stderr, "ulfm_worker rank %d (pid %d): stalls after the allreduce of v%llu\n",
                   rank, static_cast<int>(getpid()), static_cast<unsigned long long>(step));
      std::fflush(stderr);
      std::this_thread::sleep_for(2 * job.config.timeout());
      return fail(
          Status::Unavailable("stalled after the allreduce of step " + std::to_string(step)));
    }
    const double t_save = launch::JobReporter::Now();
    Status saved = ck->Save(step);
    if (!saved.ok()) return fail(saved.WithContext("Save(" + std::to_string(step) + ")"));
    reporter.Step(step, 0.0, launch::JobReporter::Now() - t_step,
                  launch::JobReporter::Now() - t_save);
  }
  Status done = ck->Wait();
  if (!done.ok()) return fail(done.WithContext("Wait"));
  if (reporter.active()) reporter.Done(job.steps, StateHash(job.bufs));
  return Status::Ok();
}

int Main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: ulfm_worker STEPS SPARES [STEP_MS]\n");
    return 2;
  }
  int level = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  const int start_pid = static_cast<int>(getpid());
  auto config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  Job job;
  job.config = *config;
  job.steps = std::stoull(argv[1]);
  job.step_ms = argc == 4 ? std::atoi(argv[3]) : 0;
  job.kills = ParseKills();
  const int spares = std::atoi(argv[2]);
  const std::string node = UlfmProcessNode(&job.config, MPI_COMM_WORLD, spares);
  auto world = UlfmWorld::Create(MPI_COMM_WORLD, spares, job.config.timeout(), node);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 2;
  }
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  // Every process's pid at the start, by world rank (working rank r is world
  // rank r, spares follow), to tell survivors from spares at the end.
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  job.first_pids.resize(world_size);
  MPI_Allgather(&start_pid, 1, MPI_INT, job.first_pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const std::vector<int>& first_pids = job.first_pids;
  if (const char* stall = std::getenv("MEMENTO_TEST_SPLIT_STALL")) {
    int stall_rank = -2, stall_ms = 0;
    if (std::sscanf(stall, "%d:%d", &stall_rank, &stall_ms) != 2 || stall_ms <= 0) {
      std::fprintf(stderr, "MEMENTO_TEST_SPLIT_STALL: '%s' is not rank:ms\n", stall);
      return 2;
    }
    (*world)->set_split_hook([stall_rank, stall_ms](int round, int rank) {
      if (round != 0 || rank != stall_rank) return;
      std::fprintf(stderr, "ulfm_worker rank %d: holds back the repair's split %d ms\n", rank,
                   stall_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
    });
  }
  Status run = RunResilient(**world, [&](std::shared_ptr<Transport> t, const UlfmWorld& w) {
    // Sizes that depend on the working rank: a spare learns its own here.
    if (job.bufs.empty()) {
      job.bufs = {std::vector<uint8_t>((1 << 20) + 4099 * w.rank()),
                  std::vector<uint8_t>(65537 + 3 * w.rank())};
    }
    return Train(job, std::move(t), w);
  });
  const int rank = (*world)->rank();
  int rc = 0;
  if (!run.ok()) {
    std::fprintf(stderr, "ulfm_worker world rank %d (pid %d): %s\n", world_rank, start_pid,
                 run.ToString().c_str());
    rc = 1;
  } else if (rank >= 0) {
    // The failure-free state, computed alone.
    int bad = 0;
    std::vector<std::vector<uint8_t>> wants;
    for (size_t e = 0; e < job.bufs.size(); ++e) {
      std::vector<uint8_t>& want = wants.emplace_back(job.bufs[e].size(), 0);
      for (uint64_t step = 1; step <= job.steps; ++step) {
        Mix(&want, rank, step, StepSum((*world)->size(), step));
      }
      if (want != job.bufs[e]) {
        std::fprintf(stderr, "rank %d: entry %zu differs from the failure-free run\n", rank, e);
        ++bad;
      }
    }
    // Which process holds each working rank now, against the start.
    std::vector<int> now((*world)->size()), bads((*world)->size());
    MPI_Gather(&start_pid, 1, MPI_INT, now.data(), 1, MPI_INT, 0, (*world)->comm());
    MPI_Gather(&bad, 1, MPI_INT, bads.data(), 1, MPI_INT, 0, (*world)->comm());
    if (rank == 0) {
      std::string replaced, kept;
      int problems = 0;
      const int n = (*world)->size();
      for (int r = 0; r < n; ++r) {
        problems += bads[r];
        const bool spare =
            std::find(first_pids.begin() + n, first_pids.end(), now[r]) != first_pids.end();
        if (now[r] != first_pids[r] && !spare) {
          std::fprintf(stderr, "rank %d is held by pid %d, neither its first process nor a spare\n",
                       r, now[r]);
          ++problems;
        }
        std::string& list = spare ? replaced : kept;
        list += (list.empty() ? "" : ",") + std::to_string(r);
      }
      // The last: rank 0's state hash of the failure-free run (what the job
      // reports to `memento launch` when it finishes).
      std::printf(
          "ulfm: %s generation %d, replaced %s, kept %s, spares left %d, failure-free state %s\n",
          problems == 0 ? "OK" : "DIFFERS", (*world)->generation(),
          replaced.empty() ? "none" : replaced.c_str(), kept.c_str(), (*world)->spares_left(),
          StateHash(wants).c_str());
      rc = problems == 0 ? 0 : 1;
      if (problems == 0) (void)CleanJob(job.config.job);
    }
  }
  world->reset();
  // The work is done and checked: a Finalize that hangs (Open MPI 5.0.11,
  // after a repair) has nothing left to lose, so the grace is short.
  return FinalizeWithin(std::chrono::seconds(3), rc);
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
