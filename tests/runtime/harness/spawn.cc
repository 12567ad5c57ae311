#include "harness/spawn.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/mpi_transport.h"
#include "memento/runtime/shm_segment.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::runtime::testing {
namespace {

Harness g_harness = Harness::kThreads;

// Under processes, the children get the launch to run and the job's names.
constexpr const char* kLaunchEnv = "MEMENTO_TEST_SPAWN_LAUNCH";
constexpr const char* kJobEnv = "MEMENTO_TEST_SPAWN_JOB";
constexpr const char* kDirEnv = "MEMENTO_TEST_SPAWN_DIR";

bool IsChild() { return std::getenv(kLaunchEnv) != nullptr; }

// Per test: which launch this Spawn call is (children skip to theirs).
struct TestState {
  std::string test;  // "Suite.Name"
  int launch = 0;
  std::string job;
  std::string dir;
};

TestState& State() {
  static TestState state;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test =
      info ? std::string(info->test_suite_name()) + "." + info->name() : std::string();
  if (state.test != test) state = TestState{test, 0, "", ""};
  return state;
}

std::string Sanitize(std::string s) {
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  }
  // Job ids are at most 48 characters: "sp-" + 25 + "-" + ProcessTag() (a pid of up
  // to 7 digits, "-", 6 hex digits).
  if (s.size() > 25) s = s.substr(s.size() - 25);
  return s;
}

void RunThreads(int n, const std::function<void(RankContext&)>& body, const SpawnOptions& opts) {
  auto group = InProcessGroup::Create(n, std::chrono::seconds(20));
  std::vector<std::unique_ptr<RankContext>> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(
        std::make_unique<RankContext>(r, n, group->transport(r), [&group, r] { group->Kill(r); }));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(*ranks[r]); });
  for (auto& t : threads) t.join();
  int deaths = 0;
  for (const auto& rank : ranks) deaths += rank->crashed() ? 1 : 0;
  if (opts.expect_death) {
    EXPECT_GT(deaths, 0) << "a rank was to die in this launch";
  } else {
    EXPECT_EQ(deaths, 0) << "a rank died in a launch that expected none";
  }
}

// What a child prints when its body failed an assertion.
constexpr char kAssertionFailed[] = "spawn child: an assertion failed";

void RunProcesses(int n, int launch, const SpawnOptions& opts) {
  const TestState& st = State();
  // Open MPI in a container: root needs --allow-run-as-root, few cores need
  // --oversubscribe, and the vader BTL's CMA single-copy is refused.
  const char* mpirun = std::getenv("MPIRUN");
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  std::ostringstream cmd;
  cmd << kLaunchEnv << "=" << launch << " " << kJobEnv << "=" << st.job << " " << kDirEnv << "="
      << st.dir << " " << (mpirun ? mpirun : MEMENTO_MPIEXEC " --allow-run-as-root --oversubscribe")
      << " -np " << n << " " << std::filesystem::read_symlink("/proc/self/exe").string()
      << " --memento-harness=processes --gtest_filter=" << st.test << " 2>&1";
  std::fprintf(stderr, "--- launch %d: %s\n", launch, cmd.str().c_str());
  FILE* out = popen(cmd.str().c_str(), "r");
  ASSERT_NE(out, nullptr);
  std::string text;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof(buf), out)) text.append(buf, got);
  const int status = pclose(out);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  // The ranks' last lines, as a trace of what the launch did.
  size_t tail = text.size();
  for (int lines = 0; tail > 0 && lines < 8; --tail) lines += text[tail - 1] == '\n';
  std::fprintf(stderr, "%s", text.substr(tail).c_str());
  if (opts.expect_death) {
    // Died as the test made it die, not by failing an assertion (the threads
    // harness sees both in this process).
    EXPECT_FALSE(ok) << "a rank was to die in launch " << launch << ":\n" << text;
    EXPECT_NE(text.find(": SIGKILL"), std::string::npos)
        << "launch " << launch << " failed, but no rank was killed:\n"
        << text;
    EXPECT_EQ(text.find(kAssertionFailed), std::string::npos)
        << "a rank failed an assertion in launch " << launch << ":\n"
        << text;
  } else {
    EXPECT_TRUE(ok) << "launch " << launch << " failed:\n" << text;
  }
}

// A child: run this rank's body over MPI, then leave with the verdict.
[[noreturn]] void RunChild(int n, const std::function<void(RankContext&)>& body) {
  int code = 0;
  {
    auto transport = CreateMpiTransport();
    if (!transport.ok()) {
      std::fprintf(stderr, "spawn child: %s\n", transport.status().ToString().c_str());
      std::_Exit(3);
    }
    if ((*transport)->size() != n) {
      std::fprintf(stderr, "spawn child: mpirun started %d ranks, the launch needs %d\n",
                   (*transport)->size(), n);
      std::_Exit(3);
    }
    const int rank = (*transport)->rank();
    RankContext ctx(rank, n, *transport, [rank] {
      std::fprintf(stderr, "rank %d: SIGKILL\n", rank);
      std::fflush(stderr);
      raise(SIGKILL);
    });
    body(ctx);
    code = ::testing::Test::HasFailure() ? 1 : 0;
    if (code != 0) std::fprintf(stderr, "rank %d: %s\n", rank, kAssertionFailed);
  }  // the last MpiTransport finalizes MPI
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace

Harness CurrentHarness() { return g_harness; }

const char* HarnessName(Harness harness) {
  return harness == Harness::kThreads ? "threads" : "processes";
}

Status RankContext::Crash() {
  crashed_ = true;
  kill_();
  if (g_harness == Harness::kProcesses) std::abort();  // SIGKILL did not arrive
  return Status::Unavailable("rank " + std::to_string(rank_) + " crashed");
}

void Spawn(int n, const std::function<void(RankContext&)>& body, const SpawnOptions& options) {
  TestState& st = State();
  (void)SpawnJob();
  (void)SpawnDir();
  const int launch = st.launch++;
  if (g_harness == Harness::kThreads) return RunThreads(n, body, options);
  if (!IsChild()) return RunProcesses(n, launch, options);
  if (launch == std::atoi(std::getenv(kLaunchEnv))) RunChild(n, body);
}

void OnDriver(const std::function<void()>& fn) {
  if (!IsChild()) fn();
}

const std::string& SpawnJob() {
  TestState& st = State();
  if (st.job.empty()) {
    const char* env = std::getenv(kJobEnv);
    st.job = env ? env : "sp-" + Sanitize(st.test) + "-" + ProcessTag();
  }
  return st.job;
}

const std::string& SpawnDir() {
  TestState& st = State();
  if (st.dir.empty()) {
    const char* env = std::getenv(kDirEnv);
    if (env != nullptr) {
      st.dir = env;
    } else {
      st.dir = (std::filesystem::temp_directory_path() / ("memento-" + SpawnJob())).string();
      std::filesystem::create_directories(st.dir);
    }
  }
  return st.dir;
}

void SpawnCleanup() {
  OnDriver([] {
    (void)CleanJob(SpawnJob());
    std::filesystem::remove_all(SpawnDir());
  });
}

void LoseNode(const std::string& job, const std::string& node_identity) {
  auto reports = InspectJob(job, /*verify=*/false);
  ASSERT_TRUE(reports.ok()) << reports.status().ToString();
  int lost = 0;
  for (const SegmentReport& r : *reports) {
    if (r.status.ok() && r.node == node_identity) {
      ASSERT_TRUE(ShmSegment::Unlink(r.name).ok()) << r.name;
      ++lost;
    }
  }
  ASSERT_GT(lost, 0) << "no segment of node " << node_identity << " in job " << job;
}

void InitHarness(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--memento-harness=processes") {
      g_harness = Harness::kProcesses;
    } else if (arg == "--memento-harness=threads") {
      g_harness = Harness::kThreads;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
}

}  // namespace memento::runtime::testing
