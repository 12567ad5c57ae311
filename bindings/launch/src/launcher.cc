#include "memento/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

volatile std::sig_atomic_t g_interrupted = 0;
void OnSignal(int) { g_interrupted = 1; }

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

// Follows events.jsonl: returns the complete lines added since the last call.
class EventTail {
 public:
  explicit EventTail(std::string path) : path_(std::move(path)) {}
  std::vector<json> Poll() {
    std::vector<json> out;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return out;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t start = 0;
    while (true) {
      const size_t nl = chunk.find('\n', start);
      if (nl == std::string::npos) break;
      json j = json::parse(chunk.substr(start, nl - start), nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
      start = nl + 1;
    }
    offset_ += start;
    return out;
  }

 private:
  std::string path_;
  size_t offset_ = 0;
};

class Launcher {
 public:
  Launcher(LaunchOptions o, std::vector<InjectEvent> events)
      : o_(std::move(o)), events_(std::move(events)), tail_("") {
    nodes_ = o_.np / o_.ranks_per_node;
    generation_.assign(nodes_, 0);
  }

  int Run();

 private:
  // One launch of the job, from Spawn to mpirun's exit.
  struct Attempt {
    int index = 0;
    pid_t pid = 0;
    int status = 0;  // waitpid status of mpirun
    bool exited = false;
    bool killed_by_launcher = false;  // a step event fired
    bool reported_done = false;       // the job's "done" event arrived
    bool mpirun_stuck = false;        // killed in its teardown, after every rank ended
    std::vector<pid_t> rank_pids;     // filled once every rank wrote its pid
    double t_ranks_gone = 0;          // when every rank was first seen ended; 0: not yet
    double t_next_rank_check = 0;
    double t_launch = 0, t_kill = 0, t_restore_begin = 0, t_exit = 0;
    uint64_t last_step = 0;
    uint64_t reached_before = 0;  // the furthest step reported before this launch
    std::vector<double> step_times;
    // The restore record is written once every rank reported (or at the end).
    bool restore_recorded = false;
    bool unrecoverable = false;
  };
  enum class Next { kRelaunch, kStop };

  std::string Identity(int node) const {
    return NodeBase(generation_[node]) + "/" + std::to_string(node);
  }
  const InjectEvent* Pending() const {
    return next_event_ < events_.size() ? &events_[next_event_] : nullptr;
  }
  std::string PidPath(int attempt, int rank) const {
    return dir_ + "/pid.a" + std::to_string(attempt) + ".r" + std::to_string(rank);
  }
  bool IsRankOf(pid_t pid, int attempt) const;
  pid_t RankPid(int attempt, int rank) const {
    const std::string text = ReadFile(PidPath(attempt, rank));
    return text.empty() ? 0 : static_cast<pid_t>(std::atol(text.c_str()));
  }
  // The steps of Run, in order.
  bool OpenStatusDir();
  void RecordJob();
  bool StartAttempt(Attempt* a);
  void Watch(Attempt* a);
  Next AfterExit(Attempt* a);
  int Finish();
  // Helpers of the steps.
  void PollEvents(Attempt* a);
  void InjectStepEvent(Attempt* a);
  void StopOnInterrupt(Attempt* a);
  void RecordRestore(Attempt* a, bool attempt_over);
  json TimeLost(const json& restore, const Attempt& a) const;
  void RecordInjectedFailure(const Attempt& a, const json& fault, double median_step_s);
  Next RecordUnplannedFailure(const Attempt& a, double median_step_s);
  json Summary(int segments_removed) const;
  void KillRanks(int attempt, const std::vector<int>& nodes);
  void KillAllRanks(int attempt);
  bool AnyRankAlive(Attempt* a) const;
  void KillStuckMpirun(Attempt* a);
  pid_t Spawn(int attempt);
  void Progress(bool final_line);
  void Record(json record);
  void ReadRestores(int attempt, json* restore);

  LaunchOptions o_;
  std::vector<InjectEvent> events_;
  size_t next_event_ = 0;
  int nodes_ = 0;
  std::vector<int> generation_;
  std::string dir_;
  bool own_dir_ = false;
  std::vector<json> records_;
  double t0_ = 0;
  EventTail tail_;

  // Across attempts.
  int unplanned_ = 0;  // consecutive failures nobody injected
  double backoff_ = 0;
  std::vector<std::string> replaced_;  // replacements made for the next launch
  // Failures not yet recovered from (a failure during a recovery adds to the
  // previous one); the next successful restore closes them.
  std::vector<json> open_failures_;
  uint64_t reached_ = 0;   // the step the job reported last (of the newest attempt that did)
  uint64_t furthest_ = 0;  // the furthest step the job reported, over all attempts
  std::string outcome_ = "failed";
  int exit_code_ = 1;
  std::string message_;
  uint64_t final_step_ = 0;
  std::string final_hash_;

  // Live state for the progress line.
  int attempt_ = 0;
  int launches_ = 0;  // mpirun started (an interrupted backoff starts none)
  uint64_t total_steps_ = 0;
  uint64_t step_ = 0;
  double loss_ = 0, step_s_ = 0, stall_s_ = 0;
  int failures_ = 0;
  bool progress_shown_ = false;
  double last_progress_ = 0;
};

void Launcher::Record(json record) {
  record["t"] = Now() - t0_;
  if (o_.json) {
    std::printf("%s\n", JsonText(record).c_str());
    std::fflush(stdout);
  }
  records_.push_back(std::move(record));
}

void Launcher::Progress(bool final_line) {
  if (o_.quiet || o_.show_output) return;
  const bool tty = isatty(STDERR_FILENO);
  const double now = Now();
  if (!tty && !final_line && now - last_progress_ < 10) return;
  last_progress_ = now;
  char line[256];
  std::snprintf(line, sizeof(line),
                "launch %d | step %llu/%llu | loss %.4f | step %.3f s | stall %.1f ms | "
                "failures %d | %.0f s",
                attempt_ + 1, static_cast<unsigned long long>(step_),
                static_cast<unsigned long long>(total_steps_), loss_, step_s_, stall_s_ * 1e3,
                failures_, now - t0_);
  if (tty) {
    std::fprintf(stderr, "\r\033[K%s%s", line, final_line ? "\n" : "");
    progress_shown_ = !final_line;
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

void Launcher::KillRanks(int attempt, const std::vector<int>& nodes) {
  for (int node : nodes) {
    for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
      const pid_t pid = RankPid(attempt, node * o_.ranks_per_node + lane);
      if (pid > 0 && IsRankOf(pid, attempt)) kill(pid, SIGKILL);
    }
  }
}

// Whether `pid` is still a rank of `attempt`: a pid file outlives its
// process, and once the rank is reaped its pid may be any other process's.
// The launcher gave every rank its status folder and attempt number in the
// environment, which /proc shows for as long as the process lives.
bool Launcher::IsRankOf(pid_t pid, int attempt) const {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  const std::string dir = "MEMENTO_LAUNCH_DIR=" + dir_;
  const std::string index = "MEMENTO_LAUNCH_ATTEMPT=" + std::to_string(attempt);
  bool has_dir = false, has_index = false;
  for (std::string var; std::getline(in, var, '\0');) {
    has_dir = has_dir || var == dir;
    has_index = has_index || var == index;
  }
  return has_dir && has_index;
}

void Launcher::KillAllRanks(int attempt) {
  for (int r = 0; r < o_.np; ++r) {
    const pid_t pid = RankPid(attempt, r);
    if (pid > 0 && IsRankOf(pid, attempt)) kill(pid, SIGKILL);
  }
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
  if (now - a->t_ranks_gone < o_.teardown_grace_s) return;
  Record({{"record", "mpirun_stuck"},
          {"attempt", a->index},
          {"after_s", now - a->t_ranks_gone},
          {"message", "mpirun did not exit after every rank had ended; killed"}});
  kill(-a->pid, SIGKILL);
  waitpid(a->pid, &a->status, 0);
  a->exited = true;
  a->mpirun_stuck = true;  // AfterExit: mpirun's status says nothing about the job
}

pid_t Launcher::Spawn(int attempt) {
  // The node-name map the exec wrapper reads: line k = MEMENTO_NODE of node k.
  {
    std::ofstream nodes(dir_ + "/nodes", std::ios::trunc);
    for (int k = 0; k < nodes_; ++k) nodes << NodeBase(generation_[k]) << "\n";
  }
  std::string fault;
  if (const InjectEvent* ev = Pending(); ev != nullptr && ev->stage != InjectStage::kStep) {
    const bool any = ev->stage == InjectStage::kRecovery || ev->stage == InjectStage::kReprotect;
    fault = std::string(EngineStageName(ev->stage)) + ":" +
            (any ? std::string("*") : std::to_string(ev->step)) + ":" +
            std::to_string(ev->nodes.front() * o_.ranks_per_node);
  }
  std::vector<std::string> args = o_.mpirun;
  if (geteuid() == 0 && std::find(args.begin(), args.end(), "--allow-run-as-root") == args.end()) {
    args.push_back("--allow-run-as-root");
  }
  args.insert(args.end(),
              {"-np", std::to_string(o_.np), o_.self_exe, "launch", "--rank-exec", dir_, "--"});
  args.insert(args.end(), o_.command.begin(), o_.command.end());
  const std::string log = dir_ + "/attempt" + std::to_string(attempt) + ".log";

  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: its own process group (Ctrl-C reaches the launcher only), the
  // job's environment, then mpirun.
  setpgid(0, 0);
  // A launcher killed outright (SIGKILL, a closed terminal) cannot stop the
  // job: mpirun gets SIGTERM from the kernel and ends the ranks itself.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) _exit(1);  // it died before the line above
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (!o_.show_output) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
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
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  // When a rank dies, Open MPI sends the others SIGCONT, waits this many
  // seconds, sends SIGTERM, waits again, then SIGKILL. A memento job has
  // nothing to flush on SIGTERM (its checkpoints are in shared memory and
  // outlive the ranks), so the default 1 s grace only delays the relaunch.
  setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "memento launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Reads every rank's restore record of `attempt` into `restore` (a summary).
void Launcher::ReadRestores(int attempt, json* restore) {
  std::map<std::string, uint64_t> entries_by_source;
  std::set<std::string> hashes, errors;
  std::set<uint64_t> versions;
  int ranks = 0, failed = 0;
  bool not_found = false;
  double t_begin = 0, t_end = 0, reprotect_s = 0, transfer_s = 0;
  uint64_t bytes_received = 0, reprotect_bytes = 0;
  json rank0;
  std::string reprotect_mode = "none";
  for (int r = 0; r < o_.np; ++r) {
    const std::string text = ReadFile(dir_ + "/restore.a" + std::to_string(attempt) + ".r" +
                                      std::to_string(r) + ".json");
    json j = json::parse(text, nullptr, false);
    if (text.empty() || j.is_discarded()) continue;
    ++ranks;
    t_begin = ranks == 1 ? j.value("t_begin", 0.0) : std::min(t_begin, j.value("t_begin", 0.0));
    t_end = std::max(t_end, j.value("t_end", 0.0));
    if (!j.value("ok", false)) {
      ++failed;
      errors.insert(j.value("error", std::string("?")));
      not_found = not_found || j.value("not_found", false);
      continue;
    }
    versions.insert(j.value("version", uint64_t{0}));
    hashes.insert(j.value("state_hash", std::string()));
    const json& rep = j["report"];
    if (rep.is_object()) {
      for (const auto& e : rep.value("entries", json::array())) {
        entries_by_source[e.value("source", std::string("?"))] += 1;
      }
      // RestoreReport::ToJson: "reprotect" {mode, bytes_received, ...} and
      // "seconds" {transfer, reprotect, ...}.
      const json none = json::object();
      const json& re =
          rep.contains("reprotect") && rep["reprotect"].is_object() ? rep["reprotect"] : none;
      const json& secs =
          rep.contains("seconds") && rep["seconds"].is_object() ? rep["seconds"] : none;
      reprotect_s = std::max(reprotect_s, secs.value("reprotect", 0.0));
      const std::string mode = re.value("mode", std::string("none"));
      // "full" over "minimal" over "none", each possibly ", background".
      const bool full = mode.rfind("full", 0) == 0;
      if (full || (mode != "none" && reprotect_mode == "none")) reprotect_mode = mode;
      transfer_s = std::max(transfer_s, secs.value("transfer", 0.0));
      bytes_received += rep.value("bytes_received", uint64_t{0});
      reprotect_bytes += re.value("bytes_received", uint64_t{0});
      if (r == 0) rank0 = rep;
    }
  }
  if (ranks == 0) return;
  json& out = *restore;
  out["ranks_reported"] = ranks;
  out["ok"] = failed == 0 && versions.size() == 1;
  if (!errors.empty()) out["errors"] = std::vector<std::string>(errors.begin(), errors.end());
  out["nothing_to_restore"] = not_found;
  if (versions.size() == 1) out["version"] = *versions.begin();
  if (versions.size() > 1)
    out["versions"] = std::vector<uint64_t>(versions.begin(), versions.end());
  if (hashes.size() == 1) out["state_hash"] = *hashes.begin();
  out["entries_by_source"] = entries_by_source;
  out["from_remote"] = entries_by_source.count("remote") > 0;
  out["from_memory"] = !entries_by_source.empty() && entries_by_source.count("remote") == 0;
  if (rank0.is_object()) {
    out["lost_nodes"] = rank0.value("lost_nodes", json::array());
    out["source_detail"] = rank0.value("source_detail", std::string());
    out["notes"] = rank0.value("notes", json::array());
  }
  out["reprotect_mode"] = reprotect_mode;
  out["restore_s"] = std::max(0.0, t_end - t_begin - reprotect_s);
  out["reprotect_s"] = reprotect_s;
  out["transfer_s"] = transfer_s;
  out["bytes_received"] = bytes_received;
  out["reprotect_bytes_received"] = reprotect_bytes;
  out["t_begin"] = t_begin - t0_;
}

// A file the launcher or the job's reporter writes into the status folder.
bool IsStatusFile(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return name == "events.jsonl" || name == "nodes" || starts("pid.a") || starts("restore.a") ||
         starts("fault.a") || (starts("attempt") && ends(".log"));
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
  tail_ = EventTail(dir_ + "/events.jsonl");
  return true;
}

void Launcher::RecordJob() {
  std::vector<json> planned;
  for (const auto& ev : events_) {
    planned.push_back({{"event", ev.text},
                       {"nodes", ev.nodes},
                       {"step", ev.step},
                       {"stage", InjectStageName(ev.stage)},
                       {"resolved", ev.ToString()}});
  }
  Record({{"record", "job"},
          {"job", o_.job},
          {"np", o_.np},
          {"ranks_per_node", o_.ranks_per_node},
          {"nodes", nodes_},
          {"scheme", o_.scheme},
          {"remote", o_.remote_dir},
          {"persist_every", o_.persist_every},
          {"inject", planned},
          {"seed", o_.seed},
          {"command", o_.command},
          {"status_dir", dir_}});
}

// Starts mpirun for `a->index` and records the launch; false when the launch
// cannot go ahead (interrupted, fork failed), with the outcome set.
bool Launcher::StartAttempt(Attempt* a) {
  attempt_ = a->index;
  if (backoff_ > 0) SleepFor(backoff_);
  if (g_interrupted) {
    outcome_ = "interrupted";
    exit_code_ = 130;
    return false;
  }
  a->t_launch = Now();
  a->reached_before = furthest_;
  a->pid = Spawn(a->index);
  if (a->pid < 0) {
    message_ = std::string("fork failed: ") + std::strerror(errno);
    return false;
  }
  ++launches_;
  const InjectEvent* pending = Pending();
  Record({{"record", "launch"},
          {"attempt", a->index},
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
    if (waitpid(a->pid, &a->status, WNOHANG) == a->pid) a->exited = true;
    PollEvents(a);
    if (!a->restore_recorded && a->t_restore_begin > 0) RecordRestore(a, false);
    Progress(false);
    InjectStepEvent(a);
    StopOnInterrupt(a);
    KillStuckMpirun(a);
    if (!a->exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  a->t_exit = Now();
  KillAllRanks(a->index);  // nothing of this attempt may outlive it
  if (!a->restore_recorded) RecordRestore(a, true);
}

void Launcher::PollEvents(Attempt* a) {
  for (const json& ev : tail_.Poll()) {
    const std::string kind = ev.value("event", std::string());
    if (kind == "start") {
      total_steps_ = ev.value("total_steps", uint64_t{0});
    } else if (kind == "restore_begin") {
      a->t_restore_begin = ev.value("t", 0.0);
    } else if (kind == "step") {
      step_ = a->last_step = ev.value("step", uint64_t{0});
      reached_ = a->last_step;
      furthest_ = std::max(furthest_, reached_);
      loss_ = ev.value("loss", 0.0);
      step_s_ = ev.value("step_s", 0.0);
      stall_s_ = ev.value("stall_s", 0.0);
      a->step_times.push_back(step_s_);
    } else if (kind == "done") {
      a->reported_done = true;
      final_step_ = ev.value("step", uint64_t{0});
      final_hash_ = ev.value("state_hash", std::string());
    }
  }
}

// A step event: the launcher kills the node's ranks itself; a job still
// running kill_grace_s later is killed whole.
void Launcher::InjectStepEvent(Attempt* a) {
  const InjectEvent* ev = Pending();
  if (!a->exited && !a->killed_by_launcher && ev != nullptr &&
      ev->stage == InjectStage::kStep && a->last_step >= ev->step) {
    KillRanks(a->index, ev->nodes);
    a->killed_by_launcher = true;
    a->t_kill = Now();
  }
  if (!a->exited && a->killed_by_launcher && Now() - a->t_kill > o_.kill_grace_s) {
    kill(-a->pid, SIGKILL);
    KillAllRanks(a->index);
  }
}

// Ctrl-C: stop the job (mpirun forwards SIGTERM to the ranks), then make sure
// nothing of it is left.
void Launcher::StopOnInterrupt(Attempt* a) {
  if (!g_interrupted || a->exited) return;
  kill(a->pid, SIGTERM);
  const double until = Now() + 5;
  while (waitpid(a->pid, &a->status, WNOHANG) != a->pid) {
    if (Now() > until) {
      kill(-a->pid, SIGKILL);
      waitpid(a->pid, &a->status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  a->exited = true;
}

// Time lost to the failures this restore recovered from: detection of each,
// relaunch from the first failure's end to this restore (less the later
// detections), restore, re-protect, and recomputing the steps between the
// restored version and the newest step reached (all of them when nothing
// could be restored).
json Launcher::TimeLost(const json& restore, const Attempt& a) const {
  const json& first = open_failures_.front();
  const uint64_t from = restore.value("version", uint64_t{0});
  const uint64_t last = open_failures_.back().value("last_step", uint64_t{0});
  json lost, indices = json::array();
  double detection = 0;
  for (const json& f : open_failures_) {
    indices.push_back(f.value("index", 0));
    detection += f.value("detection_s", 0.0);
  }
  lost["failures"] = indices;
  lost["steps_lost"] = last > from ? last - from : 0;
  lost["detection_s"] = detection;
  const double relaunch_s = a.t_restore_begin > 0
                                ? a.t_restore_begin - first.value("t_exit_abs", a.t_launch) -
                                      (detection - first.value("detection_s", 0.0))
                                : 0.0;
  lost["relaunch_s"] = std::max(0.0, relaunch_s);
  lost["restore_s"] = restore.value("restore_s", 0.0);
  lost["reprotect_s"] = restore.value("reprotect_s", 0.0);
  lost["recompute_s"] =
      static_cast<double>(lost["steps_lost"].get<uint64_t>()) * first.value("step_s", 0.0);
  return lost;
}

// Records what the attempt's restore did, once every rank has reported (or
// when the attempt is over), and closes the books on the open failures.
void Launcher::RecordRestore(Attempt* a, bool attempt_over) {
  json restore = json::object();
  ReadRestores(a->index, &restore);
  if (restore.empty() || (!attempt_over && restore.value("ranks_reported", 0) < o_.np)) return;
  a->restore_recorded = true;
  restore["record"] = "restore";
  restore["attempt"] = a->index;
  const bool all_reported = restore.value("ranks_reported", 0) == o_.np;
  const bool started_over = restore.value("nothing_to_restore", false) && all_reported;
  if (!open_failures_.empty() && (restore.value("ok", false) || started_over)) {
    restore["lost"] = TimeLost(restore, *a);
    open_failures_.clear();
  }
  Record(restore);
  if (all_reported && !restore.value("ok", false) && !restore.value("nothing_to_restore", false)) {
    outcome_ = "unrecoverable";
    exit_code_ = 1;
    message_ = "the job could not restore its state";
    if (restore.contains("errors")) message_ += ": " + restore["errors"][0].get<std::string>();
    a->unrecoverable = true;
  }
}

// What to do once mpirun has exited: stop (finished, interrupted,
// unrecoverable, too many failures) or relaunch.
Launcher::Next Launcher::AfterExit(Attempt* a) {
  if (a->unrecoverable) return Next::kStop;
  double median_step_s = 0;
  if (!a->step_times.empty()) {
    std::sort(a->step_times.begin(), a->step_times.end());
    median_step_s = a->step_times[a->step_times.size() / 2];
  }
  if (g_interrupted) {
    outcome_ = "interrupted";
    exit_code_ = 130;
    message_ = "interrupted; the job was stopped";
    return Next::kStop;
  }
  const json fault =
      json::parse(ReadFile(dir_ + "/fault.a" + std::to_string(a->index)), nullptr, false);
  const bool stage_fired = !fault.is_discarded() && fault.is_object();
  // A job that reported done before mpirun hung in its teardown finished.
  const bool exited_ok = WIFEXITED(a->status) && WEXITSTATUS(a->status) == 0;
  const bool done_then_stuck = a->mpirun_stuck && a->reported_done;
  if ((exited_ok || done_then_stuck) && !a->killed_by_launcher && !stage_fired) {
    outcome_ = "finished";
    exit_code_ = 0;
    if (final_step_ == 0) final_step_ = a->last_step;
    return Next::kStop;
  }
  if (a->killed_by_launcher || stage_fired) {
    RecordInjectedFailure(*a, stage_fired ? fault : json(), median_step_s);
    return Next::kRelaunch;
  }
  return RecordUnplannedFailure(*a, median_step_s);
}

// An injected node loss: the node's memory goes with it. `fault`: the stage
// hook's record (null for a step event).
void Launcher::RecordInjectedFailure(const Attempt& a, const json& fault, double median_step_s) {
  const InjectEvent& ev = events_[next_event_++];
  std::vector<std::string> lost_ids, segments;
  for (int node : ev.nodes) {
    lost_ids.push_back(Identity(node));
    for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
      runtime::StoreId id{o_.job, Identity(node), static_cast<uint32_t>(lane)};
      auto name = runtime::NodeStore::SegmentName(id);
      if (runtime::NodeStore::Destroy(id).ok() && name.ok()) segments.push_back(*name);
    }
    ++generation_[node];
    replaced_.push_back("node " + std::to_string(node) + " -> " + Identity(node));
  }
  ++failures_;
  const bool stage_fired = fault.is_object();
  const double t_fail = stage_fired ? fault.value("t", a.t_exit) : a.t_kill;
  json failure = {{"record", "failure"},
                  {"index", failures_},
                  {"attempt", a.index},
                  {"injected", true},
                  {"event", ev.text},
                  {"what", ev.ToString()},
                  {"stage", InjectStageName(ev.stage)},
                  {"nodes", ev.nodes},
                  {"identities", lost_ids},
                  {"segments_unlinked", segments},
                  {"last_step", reached_},
                  {"job_exit", DescribeExit(a.status)},
                  {"detection_s", std::max(0.0, a.t_exit - t_fail)},
                  {"step_s", median_step_s},
                  {"t_fail", t_fail - t0_},
                  {"t_exit_abs", a.t_exit}};
  if (stage_fired) failure["stage_version"] = fault.value("version", uint64_t{0});
  Record(failure);
  open_failures_.push_back(failure);
  unplanned_ = 0;
  backoff_ = o_.backoff_s;
}

// A failure nobody injected: relaunched with a doubling backoff, at most
// max_restarts times in a row. A launch that trained past every step reported
// before it made progress: its failure is the first of a new row.
Launcher::Next Launcher::RecordUnplannedFailure(const Attempt& a, double median_step_s) {
  ++failures_;
  if (a.last_step > a.reached_before) unplanned_ = 0;
  ++unplanned_;
  const std::string tail_text = Tail(dir_ + "/attempt" + std::to_string(a.index) + ".log", 15);
  json failure = {{"record", "failure"},
                  {"index", failures_},
                  {"attempt", a.index},
                  {"injected", false},
                  {"what", "the job failed (" + DescribeExit(a.status) + ")"},
                  {"nodes", json::array()},
                  {"last_step", reached_},
                  {"job_exit", DescribeExit(a.status)},
                  {"exit_code", ExitCode(a.status)},
                  {"output_tail", tail_text},
                  {"detection_s", 0.0},
                  {"step_s", median_step_s},
                  {"t_fail", a.t_exit - t0_},
                  {"t_exit_abs", a.t_exit}};
  Record(failure);
  open_failures_.push_back(failure);
  if (unplanned_ > o_.max_restarts) {
    message_ = "the job failed " + std::to_string(unplanned_) +
               " times in a row without an injected failure (" + DescribeExit(a.status) +
               "); giving up after --max-restarts " + std::to_string(o_.max_restarts) +
               ". Last output:\n" + tail_text;
    return Next::kStop;
  }
  backoff_ = std::min(o_.backoff_max_s, o_.backoff_s * std::pow(2.0, unplanned_ - 1));
  return Next::kRelaunch;
}

json Launcher::Summary(int segments_removed) const {
  json summary = {{"record", "summary"},       {"outcome", outcome_},
                  {"exit_code", exit_code_},   {"final_step", final_step_},
                  {"state_hash", final_hash_}, {"failures", failures_},
                  {"launches", launches_},     {"segments_removed", segments_removed},
                  {"wall_s", Now() - t0_}};
  if (!message_.empty()) summary["message"] = message_;
  double totals[5] = {0, 0, 0, 0, 0};
  uint64_t steps_lost = 0;
  for (const json& r : records_) {
    if (r.value("record", std::string()) != "restore" || !r.contains("lost")) continue;
    const json& l = r["lost"];
    steps_lost += l.value("steps_lost", uint64_t{0});
    totals[0] += l.value("detection_s", 0.0);
    totals[1] += l.value("relaunch_s", 0.0);
    totals[2] += l.value("restore_s", 0.0);
    totals[3] += l.value("reprotect_s", 0.0);
    totals[4] += l.value("recompute_s", 0.0);
  }
  summary["steps_lost"] = steps_lost;
  summary["time_lost_s"] = {{"detection", totals[0]},
                            {"relaunch", totals[1]},
                            {"restore", totals[2]},
                            {"reprotect", totals[3]},
                            {"recompute", totals[4]}};
  return summary;
}

// The end of a launch: events that never fired, the job's segments, the
// summary, the timeline or records, and the status folder.
int Launcher::Finish() {
  Progress(true);
  for (size_t i = next_event_; i < events_.size(); ++i) {
    Record({{"record", "not_fired"}, {"event", events_[i].text}, {"what", events_[i].ToString()}});
  }
  int segments_removed = 0;
  if (!o_.keep_segments) {
    auto removed = runtime::CleanJob(o_.job);
    if (removed.ok()) segments_removed = static_cast<int>(removed->size());
  }
  Record(Summary(segments_removed));
  if (!o_.records_path.empty()) {
    std::ofstream out(o_.records_path, std::ios::trunc);
    for (const json& r : records_) out << JsonText(r) << "\n";
  }
  if (!o_.json) std::fputs(RenderTimeline(records_).c_str(), stdout);
  std::fflush(stdout);
  if (exit_code_ != 0 && !message_.empty()) {
    std::fprintf(stderr, "memento launch: %s\n", message_.c_str());
  }
  if (own_dir_) {
    std::error_code ec;
    if (exit_code_ == 0) {
      fs::remove_all(dir_, ec);
    } else {
      std::fprintf(stderr, "memento launch: job logs kept in %s\n", dir_.c_str());
    }
  }
  return exit_code_;
}

int Launcher::Run() {
  t0_ = Now();
  if (!OpenStatusDir()) return 1;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A parent that ignores SIGCHLD passes that on: children would then be
  // reaped by the kernel and waitpid could never report mpirun's status.
  signal(SIGCHLD, SIG_DFL);
  RecordJob();
  for (int index = 0;; ++index) {
    Attempt a;
    a.index = index;
    if (!StartAttempt(&a)) break;
    Watch(&a);
    if (AfterExit(&a) == Next::kStop) break;
  }
  return Finish();
}

}  // namespace

Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (o.np < 1) return Status::InvalidArgument("-n must be >= 1, got " + std::to_string(o.np));
  if (o.ranks_per_node < 1 || o.np % o.ranks_per_node != 0) {
    return Status::InvalidArgument("--ranks-per-node " + std::to_string(o.ranks_per_node) +
                                   " must be >= 1 and divide -n " + std::to_string(o.np));
  }
  const int nodes = o.np / o.ranks_per_node;
  if (Status s = runtime::ValidateSchemeSyntax(o.scheme); !s.ok()) {
    return Status::InvalidArgument("--scheme: " + s.message());
  }
  auto scheme = placement::Scheme::Parse(o.scheme);
  if (!scheme.ok()) return Status::InvalidArgument("--scheme: " + scheme.status().message());
  auto topology = placement::Topology::Uniform(nodes, o.ranks_per_node);
  if (!topology.ok()) return topology.status();
  if (auto layout = placement::GroupLayout::Build(*topology, *scheme); !layout.ok()) {
    return Status::InvalidArgument("--scheme " + o.scheme + " on " + std::to_string(nodes) +
                                   " nodes: " + layout.status().message());
  }
  if (!o.job.empty()) {
    if (Status s = runtime::ValidateJobId(o.job); !s.ok()) return s;
  }
  auto events = ParseInjectSpec(o.inject, nodes, o.seed);
  if (!events.ok()) return events.status();
  for (const auto& ev : *events) {
    if (ev.stage == InjectStage::kPersist && o.remote_dir.empty()) {
      return Status::InvalidArgument("--inject '" + ev.text +
                                     "': the persist stage needs --remote (no remote tier)");
    }
  }
  if (o.command.empty()) return Status::InvalidArgument("no command given (after --)");
  if (FindExecutable(o.command.front()).empty()) {
    return Status::NotFound("command not found: '" + o.command.front() +
                            "' (not an executable file, nor on PATH)");
  }
  if (o.mpirun.empty() || FindExecutable(o.mpirun.front()).empty()) {
    return Status::NotFound("mpirun not found: '" +
                            (o.mpirun.empty() ? std::string() : o.mpirun.front()) + "'");
  }
  if (o.max_restarts < 0) return Status::InvalidArgument("--max-restarts must be >= 0");
  if (!(o.backoff_s >= 0)) return Status::InvalidArgument("--backoff must be >= 0");
  return Status::Ok();
}

Result<int> RunLaunch(const LaunchOptions& options) {
  if (Status s = ValidateLaunchOptions(options); !s.ok()) return s;
  LaunchOptions o = options;
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
  if (!o.remote_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.remote_dir, ec);
    o.remote_dir = fs::absolute(o.remote_dir, ec).string();
  }
  MEMENTO_ASSIGN_OR_RETURN(auto events, ParseInjectSpec(o.inject, o.np / o.ranks_per_node, o.seed));
  Launcher launcher(std::move(o), std::move(events));
  return launcher.Run();
}

int RankExec(const std::string& dir, const std::vector<std::string>& command) {
  const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank_env == nullptr) rank_env = std::getenv("PMIX_RANK");
  if (rank_env == nullptr || command.empty()) {
    std::fprintf(stderr,
                 "memento launch --rank-exec: no OMPI_COMM_WORLD_RANK (run under mpirun)\n");
    return 2;
  }
  const int rank = std::atoi(rank_env);
  const char* per_node_env = std::getenv("MEMENTO_RANKS_PER_NODE");
  const int per_node =
      per_node_env != nullptr && std::atoi(per_node_env) > 0 ? std::atoi(per_node_env) : 1;
  const char* attempt = std::getenv("MEMENTO_LAUNCH_ATTEMPT");
  std::string line;
  {
    std::ifstream nodes(dir + "/nodes");  // closed before the exec
    for (int k = 0; k <= rank / per_node && std::getline(nodes, line); ++k) {
    }
  }
  if (!line.empty()) setenv("MEMENTO_NODE", line.c_str(), 1);
  {
    std::ofstream pid(dir + "/pid.a" + std::string(attempt == nullptr ? "0" : attempt) + ".r" +
                      std::to_string(rank));
    pid << getpid() << "\n";
  }
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "memento launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  return 127;
}

}  // namespace memento::launch
