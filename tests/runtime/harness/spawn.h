// One test body, two harnesses (after gloo's base_test / multiproc_test): a
// multi-rank test body written once runs
//   - as threads over the in-process transport (label local), or
//   - as processes under real mpirun over MpiTransport (labels mpi;fault),
// chosen by the test binary's command line (--memento-harness=threads|processes).
//
//   TEST(Fault, KillDuringSnapshot) {
//     const std::string job = SpawnJob();
//     Spawn(4, [&](RankContext& ctx) { ...train; a hook calls ctx.Crash() on rank 1... },
//           {/*expect_death=*/true});
//     Spawn(4, [&](RankContext& ctx) { ...Restore, check bytes... });
//   }
//
// Each Spawn is one launch of the job. Under processes, Spawn runs
// `$MPIRUN -np n <this binary> --gtest_filter=<this test>` with
// MEMENTO_TEST_SPAWN_LAUNCH=k: every child re-runs the test body from the top,
// skips launches before k, runs launch k's body as its MPI rank and exits.
// Code between launches that must run once (checks on the driver, corrupting
// or losing a node's store) goes into OnDriver(fn), which the children skip.
//
// Failures in both harnesses: a rank's Crash() (SIGKILL under mpirun; under
// threads its transport dies, so peers see Unavailable), and LoseNode (unlinks
// the node's segments) between launches.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::runtime::testing {

enum class Harness { kThreads, kProcesses };

// The harness of this test binary (--memento-harness=..., threads by default).
Harness CurrentHarness();
const char* HarnessName(Harness harness);

class RankContext {
 public:
  RankContext(int rank, int size, std::shared_ptr<Transport> transport,
              std::function<void()> kill)
      : rank_(rank), size_(size), transport_(std::move(transport)), kill_(std::move(kill)) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::shared_ptr<Transport>& transport() const { return transport_; }

  // The crash of this rank, from any of its threads (e.g. a FaultHook).
  // Processes: SIGKILL, never returns. Threads: the rank's transport dies
  // (every peer's wait on it fails with Unavailable), and an Unavailable is
  // returned for the caller to fail with; the body should then return
  // (crashed()).
  Status Crash();
  bool crashed() const { return crashed_.load(); }

 private:
  int rank_;
  int size_;
  std::shared_ptr<Transport> transport_;
  std::function<void()> kill_;
  std::atomic<bool> crashed_{false};
};

struct SpawnOptions {
  // A rank crashes in this launch (RankContext::Crash): the launch is
  // expected to end with that rank gone (mpirun then fails the whole job).
  bool expect_death = false;
};

// Runs `body` on `n` ranks as one launch of the job (see above). Failures of
// the body's gtest assertions on any rank fail the test.
void Spawn(int n, const std::function<void(RankContext&)>& body,
           const SpawnOptions& options = SpawnOptions());

// Runs `fn` once, in the driver (not in the children re-running the body).
void OnDriver(const std::function<void()>& fn);

// A job id unique to this test and driver, the same in every child.
const std::string& SpawnJob();
// A scratch directory (e.g. a remote tier) of this test, the same in every
// child; removed with SpawnCleanup.
const std::string& SpawnDir();
// Unlinks the job's segments and removes SpawnDir (driver only; call at the end).
void SpawnCleanup();

// Node loss: unlinks every segment of `job` on virtual node `node_identity`.
void LoseNode(const std::string& job, const std::string& node_identity);

// Parses and removes --memento-harness=...; for main().
void InitHarness(int* argc, char** argv);

}  // namespace memento::runtime::testing
