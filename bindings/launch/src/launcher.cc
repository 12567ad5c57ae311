#include "memento/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "job_command.h"
#include "launch_session.h"
#include "memento/launch/inject_spec.h"
#include "memento/launch/job_reporter.h"
#include "memento/launch/json_text.h"
#include "memento/launch/timeline.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"
#include "memento/runtime/config.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"

namespace memento::launch {
namespace detail {

volatile std::sig_atomic_t g_interrupted = 0;

namespace {
void OnSignal(int) { g_interrupted = 1; }
}  // namespace

double Now() { return JobReporter::Now(); }

void SleepFor(double seconds) {
  // In small steps so that Ctrl-C is noticed.
  const double end = Now() + seconds;
  while (!g_interrupted && Now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The executable `name` would run as: itself if it has a '/', else the first
// match on PATH. Empty when there is none.
std::string FindExecutable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path == nullptr ? "/usr/bin:/bin" : path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& path, int lines) {
  const std::string text = ReadFile(path);
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int n = 0; n < lines && pos > 0; ++n) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
  }
  return text.substr(pos == 0 ? 0 : pos + 1);
}

std::string NodeBase(int generation) {
  const std::string host = runtime::HostName();
  return generation == 0 ? host : host + "-r" + std::to_string(generation);
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}


void Launcher::Progress(bool final_line) {
  if (o_.quiet || o_.show_output) return;
  const bool tty = isatty(STDERR_FILENO);
  const double now = Now();
  if (!tty && !final_line && now - last_progress_ < 10) return;
  last_progress_ = now;
  // "step S/T", or "step S" when the job did not say how far it runs.
  const std::string steps = std::to_string(step_) +
                            (total_steps_ > 0 ? "/" + std::to_string(total_steps_) : "");
  // Launches (mpirun / torchrun started), not attempts: an in-job recovery
  // is an attempt of the same launch, counted on its own.
  const std::string injob =
      injob_recoveries_ > 0 ? " | in-job " + std::to_string(injob_recoveries_) : "";
  char line[256];
  std::snprintf(line, sizeof(line),
                "launch %d%s | step %s | loss %.4f | step %.3f s | stall %.1f ms | "
                "failures %d | %.0f s",
                std::max(launches_, 1), injob.c_str(), steps.c_str(), loss_, step_s_,
                stall_s_ * 1e3, failures_, now - t0_);
  if (tty) {
    std::fprintf(stderr, "\r\033[K%s%s", line, final_line ? "\n" : "");
    progress_shown_ = !final_line;
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

void Launcher::Warn(const std::string& text) {
  // A progress line on a terminal is redrawn in place: cleared first.
  if (progress_shown_) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "memento launch: %s\n", text.c_str());
  std::fflush(stderr);
  progress_shown_ = false;
}

namespace {

// The attempt a per-attempt file of the status folder belongs to
// (pid.aA.rR, restore.aA.rR.json, fault.aA, raised.aA.rR), else -1.
int AttemptOfFile(const std::string& name) {
  for (const char* prefix : {"pid.a", "restore.a", "fault.a", "raised.a"}) {
    const size_t n = std::strlen(prefix);
    if (name.compare(0, n, prefix) != 0) continue;
    size_t end = n;
    while (end < name.size() && end - n < 9 &&
           std::isdigit(static_cast<unsigned char>(name[end]))) {
      ++end;
    }
    return end == n ? -1 : std::atoi(name.substr(n, end - n).c_str());
  }
  return -1;
}

// SIGKILL to a rank and every process of its group when it leads one (the
// exec wrapper and the spares do): what a lost node takes with it.
int KillRank(pid_t pid) {
  if (getpgid(pid) == pid) return killpg(pid, SIGKILL);
  return kill(pid, SIGKILL);
}

// The environment `pid` was started with, one "NAME=value" each; empty once
// the process has ended (a zombie's reads empty).
std::vector<std::string> EnvironOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::vector<std::string> env;
  for (std::string var; std::getline(in, var, '\0');) env.push_back(std::move(var));
  return env;
}

}  // namespace

int Launcher::KillRanks(int attempt, const std::vector<int>& nodes) {
  int killed = 0;
  for (int node : nodes) {
    for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
      const pid_t pid = RankPid(attempt, node * o_.ranks_per_node + lane);
      if (pid > 0 && IsRankOf(pid, attempt) && KillRank(pid) == 0) ++killed;
    }
  }
  return killed;
}

// Whether `pid` is still a rank of `attempt`: a pid file outlives its
// process, and once the rank is reaped its pid may be any other process's.
// The launcher gave every rank its status folder and attempt number in the
// environment, which /proc shows for as long as the process lives.
Launcher::Holder Launcher::HolderOf(pid_t pid) const {
  const std::vector<std::string> env = EnvironOf(pid);
  if (env.empty()) return Holder::kEnding;
  const bool ours =
      std::find(env.begin(), env.end(), "MEMENTO_LAUNCH_DIR=" + dir_) != env.end();
  return ours ? Holder::kThisLaunch : Holder::kOther;
}

bool Launcher::IsRankOf(pid_t pid, int attempt) const {
  const std::vector<std::string> env = EnvironOf(pid);
  auto has = [&env](const std::string& var) {
    return std::find(env.begin(), env.end(), var) != env.end();
  };
  // In-job recovery: a survivor keeps the attempt it was started in.
  return has("MEMENTO_LAUNCH_DIR=" + dir_) &&
         (InJob() || has("MEMENTO_LAUNCH_ATTEMPT=" + std::to_string(attempt)));
}

void Launcher::KillAllRanks(const Attempt& a) {
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir_, ec)) {
    const std::string name = f.path().filename().string();
    const int attempt = AttemptOfFile(name);
    if (name.rfind("pid.a", 0) != 0 || attempt < a.launch_index) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(ReadFile(f.path().string()).c_str()));
    if (pid > 0 && IsRankOf(pid, attempt)) KillRank(pid);
  }
}

void Launcher::RemoveAttemptFiles(int from) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& f : fs::directory_iterator(dir_, ec)) {
    if (AttemptOfFile(f.path().filename().string()) >= from) stale.push_back(f.path());
  }
  for (const fs::path& path : stale) fs::remove(path, ec);
}

// Whether a rank of the attempt may still run: true until every rank wrote
// its pid; a zombie (mpirun has not reaped it yet) has ended.
bool Launcher::AnyRankAlive(Attempt* a) const {
  if (a->rank_pids.empty()) {
    std::vector<pid_t> pids;
    for (int r = 0; r < o_.np; ++r) {
      const pid_t pid = RankPid(a->index, r);
      if (pid <= 0) return true;
      pids.push_back(pid);
    }
    a->rank_pids = std::move(pids);
  }
  for (const pid_t pid : a->rank_pids) {
    if (kill(pid, 0) != 0 && errno == ESRCH) continue;
    if (!IsRankOf(pid, a->index)) continue;  // reaped, and the pid reused
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') continue;
    return true;
  }
  return false;
}

// mpirun alive teardown_grace_s after its last rank ended: it hangs in its
// own teardown, not in the job, so it is killed and the attempt ends.
// Checked once a second (the ranks' pids, then /proc for each live one).
void Launcher::KillStuckMpirun(Attempt* a) {
  const double now = Now();
  if (a->exited || now < a->t_next_rank_check) return;
  a->t_next_rank_check = now + 1;
  if (AnyRankAlive(a)) {
    a->t_ranks_gone = 0;
    return;
  }
  if (a->t_ranks_gone == 0) a->t_ranks_gone = now;
  // In-job under torchrun, the agents of nodes lost in the job never reach
  // torchrun's exit barrier, where the others then wait (5 minutes) once the
  // job is done: they have nothing left to supervise and are stopped at once.
  const bool in_exit_barrier =
      o_.launcher == "torchrun" && InJob() && a->reported_done && injob_recoveries_ > 0;
  if (!in_exit_barrier && now - a->t_ranks_gone < o_.teardown_grace_s) return;
  if (!in_exit_barrier) {
    Record({{"record", "mpirun_stuck"},
            {"attempt", a->index},
            {"launch", launches_},
            {"launcher", o_.launcher},
            {"after_s", now - a->t_ranks_gone},
            {"message", o_.launcher + " did not exit after every rank had ended; killed"}});
  }
  KillProcesses(a, SIGKILL);
  WaitProcesses(a);
  a->mpirun_stuck = true;  // AfterExit: mpirun's status says nothing about the job
}

// Reaps the attempt's processes that have exited; the attempt has exited
// once all have. Its status is the first failure's, else 0.
void Launcher::ReapExited(Attempt* a) {
  bool all = true;
  for (size_t i = 0; i < a->pids.size(); ++i) {
    if (a->reaped[i]) continue;
    int status = 0;
    if (waitpid(a->pids[i], &status, WNOHANG) != a->pids[i]) {
      all = false;
      continue;
    }
    a->reaped[i] = true;
    a->exit_status[i] = status;
  }
  a->exited = all;
}

int Launcher::JobStatus(const Attempt& a) {
  for (size_t i = 0; i < a.pids.size(); ++i) {
    if (a.reaped[i] && a.exit_status[i] != 0 && a.ignore_status.count(a.pids[i]) == 0) {
      return a.exit_status[i];
    }
  }
  return a.fallback_status;
}

// A signal to every process group of the attempt still running.
void Launcher::KillProcesses(Attempt* a, int sig) {
  for (size_t i = 0; i < a->pids.size(); ++i) {
    if (!a->reaped[i]) kill(-a->pids[i], sig);
  }
}

// Blocks until every process of the attempt has exited.
void Launcher::WaitProcesses(Attempt* a) {
  for (size_t i = 0; i < a->pids.size(); ++i) {
    if (a->reaped[i]) continue;
    int status = 0;
    waitpid(a->pids[i], &status, 0);
    a->reaped[i] = true;
    a->exit_status[i] = status;
  }
  a->exited = true;
}

// torchrun: once one node's agent has failed (a rank died: a node loss, a
// stage fault, a crash) or the launcher killed a node, the job is broken;
// the other nodes' ranks would wait on it until a timeout. The whole job is
// stopped at once, as mpirun stops every rank when one dies.
void Launcher::TearDownBrokenTorchrun(Attempt* a) {
  if (o_.launcher != "torchrun" || a->exited || InJob()) return;
  const bool fault_fired = access((dir_ + "/fault.a" + std::to_string(a->index)).c_str(), F_OK) == 0;
  if (JobStatus(*a) == 0 && !a->killed_by_launcher && !fault_fired) return;
  KillAllRanks(*a);
  KillProcesses(a, SIGKILL);
}

// The job's environment, set in a child before it execs.
void Launcher::SetJobEnv(int attempt, const std::string& fault, int port) const {
  setenv("MEMENTO_JOB", o_.job.c_str(), 1);
  setenv("MEMENTO_SCHEME", o_.scheme.c_str(), 1);
  setenv("MEMENTO_RANKS_PER_NODE", std::to_string(o_.ranks_per_node).c_str(), 1);
  if (!o_.remote_dir.empty()) setenv("MEMENTO_REMOTE", o_.remote_dir.c_str(), 1);
  if (o_.persist_every >= 0) {
    setenv("MEMENTO_PERSIST_EVERY", std::to_string(o_.persist_every).c_str(), 1);
  }
  setenv("MEMENTO_LAUNCH_DIR", dir_.c_str(), 1);
  setenv("MEMENTO_LAUNCH_ATTEMPT", std::to_string(attempt).c_str(), 1);
  if (fault.empty()) {
    unsetenv("MEMENTO_LAUNCH_FAULT");
  } else {
    setenv("MEMENTO_LAUNCH_FAULT", fault.c_str(), 1);
  }
  if (Ulfm()) {
    // The job's own world repairs itself (runtime::RunResilient): not the
    // launcher's in-job path (launch::InJob() is false), and no generation
    // announced (the stage faults of later attempts: MEMENTO_LAUNCH_FAULTS).
    setenv("MEMENTO_LAUNCH_RECOVERY", "ulfm", 1);
  } else if (InJob()) {
    setenv("MEMENTO_LAUNCH_RECOVERY", "in-job", 1);
    setenv("MEMENTO_LAUNCH_GENERATION", std::to_string(attempt).c_str(), 1);
    setenv("MEMENTO_LAUNCH_INJOB_WAIT_S", std::to_string(o_.injob_timeout_s).c_str(), 1);
  }
  // The rendezvous port of an mpirun job's own torch.distributed (the exec
  // wrapper sets MASTER_ADDR / MASTER_PORT from it unless they are set).
  if (port > 0) setenv("MEMENTO_LAUNCH_MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  // When a rank dies, Open MPI sends the others SIGCONT, waits this many
  // seconds, sends SIGTERM, waits again, then SIGKILL. A memento job has
  // nothing to flush on SIGTERM (its checkpoints are in shared memory and
  // outlive the ranks), so the default 1 s grace only delays the relaunch.
  setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 0);
}

pid_t Launcher::ForkJobProcess(const std::vector<std::string>& args, int attempt,
                               const std::string& fault, int port,
                               const std::vector<std::pair<std::string, std::string>>& extra) {
  const std::string log = dir_ + "/attempt" + std::to_string(attempt) + ".log";
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  // The parent makes the child's group too (the child's own call may come
  // later): a kill of the group right after the fork must reach it. Once
  // the child has exec'd this fails, harmlessly.
  if (pid > 0) setpgid(pid, pid);
  if (pid != 0) return pid;
  // Child: its own process group (Ctrl-C reaches the launcher only), the
  // job's environment, then the command.
  setpgid(0, 0);
  // A launcher killed outright (SIGKILL, a closed terminal) cannot stop the
  // job: mpirun / torchrun get SIGTERM from the kernel and end the ranks.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) _exit(1);  // it died before the line above
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (!hup_ignored_) signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);  // ignored here; an ignored signal stays so across exec
  if (!o_.show_output) {
    // Appended to by every process of the attempt.
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      close(null_fd);
    }
  }
  SetJobEnv(attempt, fault, port);
  for (const auto& [name, value] : extra) {
    setenv(name.c_str(), value.c_str(), 1);
    // A spare is named in injob.json by this pid, which a wrapper script's
    // program (not exec'd) does not have: it reads it here.
    if (name == "MEMENTO_LAUNCH_SPARE") {
      setenv("MEMENTO_LAUNCH_SPARE_PID", std::to_string(getpid()).c_str(), 1);
    }
  }
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& arg : copy) argv.push_back(arg.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "memento launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Starts the attempt's processes (one mpirun, or a torchrun agent per node),
// each in a process group of its own; false when a fork failed.
bool Launcher::Spawn(Attempt* a) {
  const int attempt = a->index;
  // The node-name map the exec wrapper reads: line k = MEMENTO_NODE of node
  // k (a relaunch keeps a ULFM spare's name, and so its memory, for the node
  // it took); under ULFM, the spares' virtual nodes follow (world ranks N + j).
  ulfm_spares_used_ = 0;
  ulfm_launch_ = attempt;
  {
    std::ofstream nodes(dir_ + "/nodes", std::ios::trunc);
    for (int k = 0; k < nodes_; ++k) nodes << NodeName(k) << "\n";
    for (int m = 0; Ulfm() && m < o_.spares / o_.ranks_per_node; ++m) {
      nodes << UlfmSpareName(attempt, m) << "\n";
    }
  }
  const std::string fault = PendingFaultEnv();
  const int port = FreePort();
  const std::string log = dir_ + "/attempt" + std::to_string(attempt) + ".log";
  if (!o_.show_output) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) close(fd);
  }
  std::vector<std::pair<std::string, std::string>> extra;
  if (Ulfm()) {
    extra.emplace_back("MEMENTO_LAUNCH_FAULTS", UlfmFaultsEnv(attempt));
    // Open MPI 5 keeps a shared-memory file per process in /dev/shm that only
    // MPI_Finalize removes: every lost rank would leave 16 MiB behind. This
    // launch's go into a folder of its own, removed when it ends.
    std::error_code ec;
    if (std::getenv("OMPI_MCA_btl_sm_backing_directory") == nullptr &&
        fs::is_directory("/dev/shm", ec)) {
      const std::string shm = "/dev/shm/memento-mpi." + o_.job + ".a" + std::to_string(attempt);
      if (fs::create_directories(shm, ec) || fs::is_directory(shm, ec)) {
        mpi_shm_dir_ = shm;
        extra.emplace_back("OMPI_MCA_btl_sm_backing_directory", shm);
      }
    }
  }
  for (std::vector<std::string>& args : JobCommands(o_, dir_, port)) {
    const pid_t pid = ForkJobProcess(args, attempt, fault, port, extra);
    if (pid < 0) {
      KillProcesses(a, SIGKILL);
      WaitProcesses(a);
      return false;
    }
    a->AddProcess(pid);
  }
  if (InJob() && !Ulfm()) StartSpares(attempt);
  return true;
}

std::string Launcher::UlfmSpareName(int attempt, int m) const {
  // Per launch: a relaunch's spares must not meet a store an earlier launch's left.
  return NodeBase(0) + "-a" + std::to_string(attempt) + "-spare" + std::to_string(m);
}

// "A=STAGE:VERSION:RANK,..." for the stage events still to come, each in the
// attempt it will be armed in: every event the job survives in-job is one
// repair of its world, one attempt more.
std::string Launcher::UlfmFaultsEnv(int attempt) const {
  std::string out;
  for (size_t j = next_event_; j < events_.size(); ++j) {
    const InjectEvent& ev = events_[j];
    if (ev.stage == InjectStage::kStep) continue;
    // Every rank of the lost nodes goes with the first: the job's world would
    // otherwise repair once per rank the launcher kills later.
    std::string with;
    for (int node : ev.nodes) {
      for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
        const int r = node * o_.ranks_per_node + lane;
        if (r != ev.nodes.front() * o_.ranks_per_node) with += "+" + std::to_string(r);
      }
    }
    out += (out.empty() ? "" : ",") + std::to_string(attempt + static_cast<int>(j - next_event_)) +
           "=" + FaultSpec(ev) + with;
  }
  return out;
}

// MEMENTO_LAUNCH_FAULT of a stage event: "STAGE:VERSION:RANK".
std::string Launcher::FaultSpec(const InjectEvent& ev) const {
  const bool any = ev.stage == InjectStage::kRecovery || ev.stage == InjectStage::kReprotect;
  return std::string(EngineStageName(ev.stage)) + ":" +
         (any ? std::string("*") : std::to_string(ev.step)) + ":" +
         std::to_string(ev.nodes.front() * o_.ranks_per_node);
}

// MEMENTO_LAUNCH_FAULT for the next injection when it is a stage event, else empty.
std::string Launcher::PendingFaultEnv() const {
  const InjectEvent* ev = Pending();
  return ev == nullptr || ev->stage == InjectStage::kStep ? "" : FaultSpec(*ev);
}

// A file the launcher or the job's reporter writes into the status folder.
bool IsStatusFile(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return name == "events.jsonl" || name == "nodes" || name == "injob.json" || starts("pid.a") ||
         starts("restore.a") || starts("fault.a") || starts("raised.a") ||
         (starts("attempt") && ends(".log"));
}

bool Launcher::OpenStatusDir() {
  if (o_.status_dir.empty()) {
    std::string templ = (fs::temp_directory_path() / "memento-launch-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      std::fprintf(stderr, "memento launch: cannot create a status folder: %s\n",
                   std::strerror(errno));
      return false;
    }
    dir_ = templ;
    own_dir_ = true;
  } else {
    std::error_code ec;
    dir_ = fs::absolute(o_.status_dir, ec).string();  // the ranks may change directory
    fs::create_directories(dir_, ec);
    // Only what an earlier launch left there goes: the folder may hold
    // anything else of the user's.
    for (const auto& f : fs::directory_iterator(dir_, ec)) {
      if (IsStatusFile(f.path().filename().string())) fs::remove(f.path(), ec);
    }
  }
  tail_ = AttemptEvents(dir_ + "/events.jsonl");
  return true;
}

// Starts mpirun for `a->index` and records the launch; false when the launch
// cannot go ahead (interrupted, fork failed), with the outcome set.
bool Launcher::StartAttempt(Attempt* a) {
  attempt_ = a->index;
  if (backoff_ > 0) SleepFor(backoff_);
  if (g_interrupted) {
    outcome_ = "interrupted";
    exit_code_ = 130;
    message_ = "interrupted; the job was stopped";
    return false;
  }
  a->t_launch = Now();
  a->reached_before = furthest_;
  // A ULFM world numbers its own generations from its launch's index: one
  // that repaired itself before it was stopped may have written files under
  // the numbers this launch takes (a stale pid file reads as a rank of it that
  // ended, a stale restore as its restore).
  RemoveAttemptFiles(a->index);
  if (!Spawn(a)) {
    message_ = std::string("fork failed: ") + std::strerror(errno);
    return false;
  }
  ++launches_;
  const InjectEvent* pending = Pending();
  Record({{"record", "launch"},
          {"attempt", a->index},
          {"launch", launches_},
          {"backoff_s", backoff_},
          {"replaced", replaced_},
          {"fault_env", pending != nullptr && pending->stage != InjectStage::kStep
                            ? pending->ToString()
                            : std::string()}});
  replaced_.clear();
  return true;
}

// Follows the job until mpirun exits: its events, the progress line, step
// injections and Ctrl-C.
void Launcher::Watch(Attempt* a) {
  while (!a->exited) {
    ReapExited(a);
    PollEvents(a);
    if (!a->restore_recorded && a->t_restore_begin > 0) RecordRestore(a, false);
    Progress(false);
    InjectStepEvent(a);
    TearDownBrokenTorchrun(a);
    if (InJob()) WatchInJob(a);
    StopOnInterrupt(a);
    KillStuckMpirun(a);
    // Every loss is seen within this period (a loop costs a few reads of the
    // status folder).
    if (!a->exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  a->t_exit = Now();
  KillAllRanks(*a);  // nothing of this attempt may outlive it
  StopSpares();
  if (!mpi_shm_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(mpi_shm_dir_, ec);
    mpi_shm_dir_.clear();
  }
  if (!a->restore_recorded) RecordRestore(a, true);
}

void Launcher::PollEvents(Attempt* a) {
  std::vector<json> events = tail_.Poll(a->index);
  // A record the job wrote that the launcher cannot use is passed over (the
  // job runs on), and named, so that events that never show are explained.
  for (const std::string& line : tail_.TakeUnusable()) {
    if (++warnings_ <= 5) {
      Warn("passed over a line of events.jsonl that is no JSON object: " + line.substr(0, 200));
    } else if (warnings_ == 6) {
      Warn("further lines of events.jsonl passed over are not shown");
    }
  }
  for (const json& ev : events) {
    const std::string kind = Field(ev, "event", std::string());
    if (kind == "start") {
      total_steps_ = Field(ev, "total_steps", uint64_t{0});
    } else if (kind == "restore_begin") {
      // One of an attempt that a loss has already ended (it arrives after the
      // next in-job attempt began) must not time the new attempt's restore.
      if (Field(ev, "attempt", a->index) == a->index) a->t_restore_begin = Field(ev, "t", 0.0);
    } else if (kind == "step") {
      // A survivor reports the step it reached in the old generation until it
      // sees the announcement of the new one: that step is not the new
      // generation's (a step event would fire during its rejoin).
      if (Field(ev, "attempt", a->index) < a->index) continue;
      const auto step = ev.find("step");
      if (step == ev.end() || !step->is_number_unsigned()) continue;  // no step count
      const uint64_t previous = a->last_step;
      step_ = a->last_step = step->get<uint64_t>();
      reached_ = a->last_step;
      furthest_ = std::max(furthest_, reached_);
      // A diverged loss (NaN, inf) arrives as null: shown as nan, not as 0.
      const auto loss = ev.find("loss");
      loss_ = loss != ev.end() && loss->is_null() ? std::nan("") : Field(ev, "loss", 0.0);
      step_s_ = Field(ev, "step_s", 0.0);
      stall_s_ = Field(ev, "stall_s", 0.0);
      // A job that saves every K steps reports every K steps: its step_s spans
      // them (the time recomputing one step costs is the share of one).
      const uint64_t spanned = previous > 0 && step_ > previous ? step_ - previous : 1;
      a->step_times.push_back(step_s_ / static_cast<double>(spanned));
    } else if (kind == "done") {
      a->reported_done = true;
      final_step_ = Field(ev, "step", uint64_t{0});
      final_hash_ = Field(ev, "state_hash", std::string());
    }
  }
}

// A step event: the launcher kills the node's ranks itself (its delay after
// the step was reported); a job still running kill_grace_s later is killed whole.
// A job that reported its end, or whose ranks there are gone, is not failed:
// the event did not fire (a loss after the run ended would relaunch a finished
// job from nothing, its stores freed by its close()).
void Launcher::InjectStepEvent(Attempt* a) {
  const InjectEvent* ev = Pending();
  if (!a->exited && !a->killed_by_launcher && !a->reported_done && ev != nullptr &&
      ev->stage == InjectStage::kStep && a->last_step >= ev->step) {
    if (a->t_step_reached == 0) a->t_step_reached = Now();
    if (Now() - a->t_step_reached >= ev->delay_s) {
      if (KillRanks(a->index, ev->nodes) == 0) return;  // they ended meanwhile
      a->killed_by_launcher = true;
      a->t_kill = Now();
      a->t_step_report = a->t_step_reached;
      a->t_step_reached = 0;
    }
  }
  if (!a->exited && a->killed_by_launcher && Now() - a->t_kill > o_.kill_grace_s) {
    KillProcesses(a, SIGKILL);
    KillAllRanks(*a);
  }
}

// Ctrl-C: stop the job (mpirun forwards SIGTERM to the ranks), then make sure
// nothing of it is left.
void Launcher::StopOnInterrupt(Attempt* a) {
  if (!g_interrupted || a->exited) return;
  for (size_t i = 0; i < a->pids.size(); ++i) {
    if (!a->reaped[i]) kill(a->pids[i], SIGTERM);
  }
  const double until = Now() + 5;
  for (ReapExited(a); !a->exited; ReapExited(a)) {
    if (Now() > until) {
      KillProcesses(a, SIGKILL);
      KillAllRanks(*a);
      WaitProcesses(a);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int Launcher::Run() {
  t0_ = Now();
  if (!OpenStatusDir()) return 1;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // The terminal or ssh session closed: as Ctrl-C, unless SIGHUP came ignored
  // (nohup), which the launcher and the job then keep.
  struct sigaction hup {};
  sigaction(SIGHUP, nullptr, &hup);
  hup_ignored_ = hup.sa_handler == SIG_IGN;
  if (!hup_ignored_) sigaction(SIGHUP, &sa, nullptr);
  // A reader of the timeline that went away (`| head`) makes writes fail
  // (EPIPE) instead of ending the launcher before it cleaned up.
  signal(SIGPIPE, SIG_IGN);
  // A parent that ignores SIGCHLD passes that on: children would then be
  // reaped by the kernel and waitpid could never report mpirun's status.
  signal(SIGCHLD, SIG_DFL);
  // This process's own rank in an outer job (memento launch run as an srun
  // or mpirun task) is not its children's: a rank exec takes the first of
  // OMPI_COMM_WORLD_RANK, PMIX_RANK and RANK, and an in-job replacement or a
  // torchrun worker inheriting the outer one would run as that rank.
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("PMIX_RANK");
  RecordJob();
  while (true) {
    Attempt a;
    a.index = a.launch_index = next_index_++;
    tail_.DropHeld();
    if (!StartAttempt(&a)) break;
    Watch(&a);
    if (AfterExit(&a) == Next::kStop) break;
  }
  return Finish();
}

}  // namespace detail

using detail::CheckOutputPaths;
using detail::Mpirun;
namespace fs = std::filesystem;

Result<int> RunLaunch(const LaunchOptions& options) {
  if (Status s = ValidateLaunchOptions(options); !s.ok()) return s;
  LaunchOptions o = options;
  o.mpirun = Mpirun(o);
  if (o.job.empty()) {
    // The pid alone is reused over a machine's uptime; a store left by an
    // earlier launch that was killed must never be taken for this job's.
    char nonce[8];
    std::snprintf(nonce, sizeof(nonce), "%06x",
                  static_cast<unsigned>(std::random_device{}() & 0xffffffu));
    o.job = "launch-" + std::to_string(getpid()) + "-" + nonce;
  }
  if (o.self_exe.empty()) {
    std::error_code ec;
    o.self_exe = fs::read_symlink("/proc/self/exe", ec).string();
    if (ec) return Status::IoError("cannot find this program's path (/proc/self/exe)");
  }
  MEMENTO_RETURN_IF_ERROR(CheckOutputPaths(&o));
  MEMENTO_ASSIGN_OR_RETURN(auto events, ParseInjectSpec(o.inject, o.np / o.ranks_per_node, o.seed));
  detail::Launcher launcher(std::move(o), std::move(events));
  return launcher.Run();
}

}  // namespace memento::launch
