// The launcher's session (one `memento launch` run), shared by launcher.cc
// (processes: start, watch, inject, stop) and launch_records.cc (the
// records: restores, failures, time lost, summary, timeline).
#pragma once

#include <sys/types.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "memento/launch/inject_spec.h"
#include "memento/launch/launcher.h"

namespace memento::launch::detail {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Set by SIGINT / SIGTERM.
extern volatile std::sig_atomic_t g_interrupted;

double Now();
void SleepFor(double seconds);
// The executable `name` would run as: itself if it has a '/', else the first
// match on PATH. Empty when there is none.
std::string FindExecutable(const std::string& name);
// The mpirun command line the job starts with: --mpirun, or under "ulfm" by
// default the mpirun of the MPI memento's ULFM support was built against.
std::vector<std::string> Mpirun(const LaunchOptions& o);
// --remote and --status-dir made (absolute --remote), --records opened for
// appending; InvalidArgument naming the flag and the path when one cannot be.
Status CheckOutputPaths(LaunchOptions* o);
std::string ReadFile(const std::string& path);
std::string Tail(const std::string& path, int lines);
std::string NodeBase(int generation);
std::string DescribeExit(int status);
int ExitCode(int status);

// Field `key` of what a job wrote, or `fallback` when it is missing or of
// another type: the launcher never throws on a job's records while the job
// runs (a NaN or infinite loss is written as null).
template <typename T>
T Field(const json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else {
    return it->is_number() ? it->template get<T>() : fallback;
  }
}

// Follows events.jsonl: returns the complete lines added since the last call
// that are JSON objects; the others are kept for TakeUnusable.
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
      const std::string line = chunk.substr(start, nl - start);
      json j = json::parse(line, nullptr, false);
      if (j.is_object()) {
        out.push_back(std::move(j));
      } else if (line.find_first_not_of(" \t\r") != std::string::npos) {
        unusable_.push_back(line);
      }
      start = nl + 1;
    }
    offset_ += start;
    return out;
  }
  // The non-blank lines Poll passed over as no JSON object, since the last call.
  std::vector<std::string> TakeUnusable() { return std::exchange(unusable_, {}); }

 private:
  std::string path_;
  size_t offset_ = 0;
  std::vector<std::string> unusable_;
};

// events.jsonl in attempt order: the events of an attempt the launcher has
// not begun yet are held until it has. Under ULFM the ranks repair their
// world themselves and can report a generation's restore and steps before
// the launcher has seen the loss that began it; read at once, its restore
// would be dropped (the attempt then has no rejoin time, its restore is
// recorded only at the job's end, and a long job is relaunched after
// --injob-timeout) and its steps counted as the attempt's before.
class AttemptEvents {
 public:
  explicit AttemptEvents(std::string path) : tail_(std::move(path)) {}
  // The events of attempts up to `attempt` (those without one: the current
  // attempt's), in the order written.
  std::vector<json> Poll(int attempt) {
    std::vector<json> out, later;
    std::vector<json> read = std::move(held_);
    for (json& ev : tail_.Poll()) read.push_back(std::move(ev));
    for (json& ev : read) {
      (Field(ev, "attempt", attempt) > attempt ? later : out).push_back(std::move(ev));
    }
    held_ = std::move(later);
    return out;
  }
  // A relaunch: the attempts of the old world that were ahead never come
  // (the relaunch's own take their numbers).
  void DropHeld() { held_.clear(); }
  std::vector<std::string> TakeUnusable() { return tail_.TakeUnusable(); }

 private:
  EventTail tail_;
  std::vector<json> held_;
};


class Launcher {
 public:
  Launcher(LaunchOptions o, std::vector<InjectEvent> events)
      : o_(std::move(o)), events_(std::move(events)), tail_("") {
    nodes_ = o_.np / o_.ranks_per_node;
    generation_.assign(nodes_, 0);
    spare_name_.assign(nodes_, "");
  }

  int Run();

 private:
  // One launch of the job, from Spawn to the exit of the processes it started
  // (mpirun, or one torchrun agent per node).
  struct Attempt {
    int index = 0;
    int launch_index = 0;  // the attempt that started pids[0..]: its log holds their output
    std::vector<pid_t> pids;      // each the leader of its own process group
    std::vector<bool> reaped;
    std::vector<int> exit_status;  // each reaped process's waitpid status
    int fallback_status = 0;       // the job's status when no process's says it failed
    bool exited = false;  // every process reaped
    bool killed_by_launcher = false;  // a step event fired
    bool reported_done = false;       // the job's "done" event arrived
    bool mpirun_stuck = false;        // killed in its teardown, after every rank ended
    std::vector<pid_t> rank_pids;     // filled once every rank wrote its pid
    double t_ranks_gone = 0;          // when every rank was first seen ended; 0: not yet
    double t_next_rank_check = 0;
    double t_launch = 0, t_kill = 0, t_restore_begin = 0, t_exit = 0;
    uint64_t last_step = 0;
    double t_step_reached = 0;  // when the pending step event's step was reported; 0: not yet
    double t_step_report = 0;   // the same, of the step event that fired last
    uint64_t reached_before = 0;  // the furthest step reported before this launch
    std::vector<double> step_times;
    // The restore record is written once every rank reported (or at the end).
    bool restore_recorded = false;
    bool unrecoverable = false;
    // In-job recovery: processes whose exit status says nothing about the job
    // (a lost node's torchrun agent, killed replacements).
    std::set<pid_t> ignore_status;
    double t_injob = 0;            // when the running in-job recovery began; 0: none
    bool injob_fallback = false;   // an in-job recovery failed: relaunch
    std::string fallback_reason;
    bool stopped_unrecoverable = false;  // in-job: the ranks were stopped
    double t_next_death_check = 0;
    double t_raised = 0;  // in-job: when a rank's raised.aA.rR was first seen; 0: none
    double t_next_raised_check = 0;
    // In-job: every place handed to a warm spare in this launch, by rank
    // ("node", "local_rank", "spare_pid"); each announcement names them all.
    nlohmann::json spare_places = nlohmann::json::object();

    void AddProcess(pid_t pid) {
      pids.push_back(pid);
      reaped.push_back(false);
      exit_status.push_back(0);
    }
  };
  enum class Next { kRelaunch, kStop };

  // MEMENTO_NODE of node k now: a ULFM spare's that took its place, else
  // the host's name for its generation.
  std::string NodeName(int node) const {
    return spare_name_[node].empty() ? NodeBase(generation_[node]) : spare_name_[node];
  }
  std::string Identity(int node) const { return NodeName(node) + "/" + std::to_string(node); }
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
  // The median of the attempt's step times (0: none reported): a failure's
  // cost per step to recompute.
  static double MedianStepS(const Attempt& a);
  void RecordInjectedFailure(const Attempt& a, const json& fault);
  Next RecordUnplannedFailure(const Attempt& a);
  json RecordFailureNobodyInjected(const Attempt& a, const json& fields);
  json Summary(int segments_removed) const;
  // In-job: a rank of the attempt whose training raised (raised.aA.rR), and
  // the first line of what it raised.
  bool RankRaised(const Attempt& a, int* rank, std::string* what) const;
  // FallBack for a failure nobody injected: relaunched and counted as any.
  void FallBackUnplanned(Attempt* a, const std::string& reason);
  // Who `pid` is: a process of this launch's job (its status folder in the
  // environment), another running process, or one ending or gone (no
  // environment to read).
  enum class Holder { kThisLaunch, kOther, kEnding };
  Holder HolderOf(pid_t pid) const;
  void ReleaseOwnSegments();
  // SIGKILL to the ranks of `nodes` still running in `attempt`; how many.
  int KillRanks(int attempt, const std::vector<int>& nodes);
  // SIGKILL to every rank the launch's attempts recorded (pid.aA.rR, A from
  // the launch's own index on) that still runs: under ULFM also the world's
  // spares and the generations it repaired without the launcher.
  void KillAllRanks(const Attempt& a);
  // Removes the per-attempt files (pid, restore, fault, raised) of attempts
  // `from` and later.
  void RemoveAttemptFiles(int from);
  // A line on stderr; a progress line on a terminal is cleared first (the
  // next one is drawn below it).
  void Warn(const std::string& text);
  bool AnyRankAlive(Attempt* a) const;
  void KillStuckMpirun(Attempt* a);
  void ReapExited(Attempt* a);
  // The job's exit status: the first failed one among its processes reaped
  // whose status is the job's (not in ignore_status, which also sets aside a
  // process reaped before the launcher learned it was lost), else
  // fallback_status; 0: every one exited 0.
  static int JobStatus(const Attempt& a);
  void KillProcesses(Attempt* a, int sig);
  void WaitProcesses(Attempt* a);
  void TearDownBrokenTorchrun(Attempt* a);
  bool Spawn(Attempt* a);
  // The environment every process of the job gets (in the child, before exec).
  void SetJobEnv(int attempt, const std::string& fault, int port) const;
  // Forks `args` in a process group of its own with the job's environment,
  // output to the attempt's log; `extra` sets more variables. -1 on failure.
  pid_t ForkJobProcess(const std::vector<std::string>& args, int attempt, const std::string& fault,
                       int port, const std::vector<std::pair<std::string, std::string>>& extra);
  // In-job recovery (injob.cc).
  bool InJob() const { return o_.recovery == "in-job"; }
  // The job repairs its own MPI world (--launcher ulfm): its spares are ranks
  // of the one mpirun, and the launcher only follows and injects.
  bool Ulfm() const { return o_.launcher == "ulfm"; }
  int SparesLeft() const {
    return Ulfm() ? o_.spares - ulfm_spares_used_ : static_cast<int>(spares_.size());
  }
  // MEMENTO_NODE of the ULFM spares' virtual node m of the launch `attempt`.
  std::string UlfmSpareName(int attempt, int m) const;
  std::string UlfmFaultsEnv(int attempt) const;
  void StartSpares(int attempt);
  void StopSpares();
  void WatchInJob(Attempt* a);
  // The pending event's nodes lost (`fault`: its stage hook's record, null
  // for a step event), or with `ended_rank` that rank's node, nobody having
  // injected it: their places handed on within the running job.
  void RecoverInJob(Attempt* a, const json& fault, int ended_rank = -1);
  bool ReplaceRanks(Attempt* a, const std::vector<int>& nodes, int port);
  // The in-job recovery's record (the places in replaced_, `from_spares` of
  // them taken by spares, the rendezvous `port` announced), and the attempt's
  // state as at a launch, for the generation the recovery began.
  void BeginGeneration(Attempt* a, int from_spares, int port);
  bool FollowUlfmRepair(Attempt* a, int rank);
  // In-job recovery from a rank that ended with nobody injecting it (its node
  // replaced, or under ULFM the world's repair followed); false: relaunch.
  bool RecoverEndedRank(Attempt* a, int rank);
  void RecordRankEnded(const Attempt& a, int rank, const std::string& identity,
                       const std::string& job_exit);
  std::string OutputTail(const Attempt& a) const;
  void AdoptReplacement(Attempt* a, pid_t pid);
  void FallBack(Attempt* a, const std::string& reason);
  bool RankDied(Attempt* a, int* rank);
  std::string FaultSpec(const InjectEvent& ev) const;
  std::string PendingFaultEnv() const;
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
  AttemptEvents tail_;
  int next_index_ = 0;            // the next attempt index (launches and in-job recoveries)
  std::vector<pid_t> spares_;     // warm spares not handed a rank yet
  // --launcher ulfm: spare ranks of the running launch handed a place, that
  // launch's attempt index, and per node the name of the spare node that
  // holds it now (empty: NodeBase(generation_)).
  int ulfm_spares_used_ = 0;
  int ulfm_launch_ = 0;
  std::string mpi_shm_dir_;  // the launch's folder for Open MPI's shared-memory files
  std::vector<std::string> spare_name_;
  int injob_recoveries_ = 0;

  // Across attempts.
  int unplanned_ = 0;  // consecutive failures nobody injected
  double backoff_ = 0;
  std::vector<std::string> replaced_;  // replacements made for the next launch
  // Failures not yet recovered from (a failure during a recovery adds to the
  // previous one); the next successful restore closes them.
  std::vector<json> open_failures_;
  uint64_t reached_ = 0;   // the step the job reported last (of the newest attempt that did)
  uint64_t furthest_ = 0;  // the furthest step the job reported, over all attempts
  bool hup_ignored_ = false;  // SIGHUP came ignored (nohup): kept so
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
  int warnings_ = 0;  // about the job's events: the first few are shown
  double last_progress_ = 0;
};

}  // namespace memento::launch::detail
