// In-job recovery (`memento launch --recovery in-job [--spares K]`): a lost
// node's ranks are replaced while the survivors keep running.
//
// How a recovery goes (the job side is memento.resilient):
//   1. The loss: a step event (the launcher kills the node's ranks) or a stage
//      event (the rank kills itself, fault.aA appears; the launcher kills the
//      rest of its node). The launcher waits until the node's ranks are gone,
//      records the failure and unlinks the node's segments (its memory goes
//      with it), as for a relaunch.
//   2. A new attempt index A' (the in-job "generation") and a fresh rendezvous
//      port. injob.json in the status folder (written to a temporary name,
//      then renamed) announces them: {"attempt": A', "master_addr",
//      "master_port", "world_size", "ranks_per_node", "ranks": {R: {"node":
//      MEMENTO_NODE, "local_rank", "spare_pid"}} (the places lost now and every
//      place handed to a spare earlier in this launch), "fault":
//      MEMENTO_LAUNCH_FAULT of the next stage event}. The survivors' watcher threads see it, abort
//      the old group's connections and re-form the group with the same rank numbers (rank 0,
//      survivor or replacement, serves the new store).
//   3. The lost ranks are taken by warm spares (started with the launch,
//      MEMENTO_LAUNCH_SPARE=1: the program loaded, waiting for a rank in
//      injob.json) or, without --spares, by fresh processes started through the
//      exec wrapper with RANK / WORLD_SIZE / LOCAL_RANK / MASTER_* set.
//   4. Every rank restores (attempt A': restore.aA'.rR.json); the restore
//      record closes the failure, its "lost" time split into detection, rejoin
//      (loss seen -> rank 0's restore begins), restore, re-protect, recompute.
// Fallback to a full relaunch (the job is stopped, the failure stays open and
// the next launch's restore closes it): --spares given and none left, the
// recovery not restored within --injob-timeout, or a rank that ended without an
// injection (then counted as an unplanned failure).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>

#include "job_command.h"
#include "launch_session.h"
#include "memento/launch/json_text.h"

namespace memento::launch::detail {
namespace {

// Whether `pid` has ended (gone, or a zombie its parent has not reaped).
bool Ended(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return stat.empty() ||
         (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

bool WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

void Launcher::StartSpares(int attempt) {
  for (int i = 0; i < o_.spares; ++i) {
    const pid_t pid = ForkJobProcess(o_.command, attempt, "", 0, {{"MEMENTO_LAUNCH_SPARE", "1"}});
    if (pid > 0) spares_.push_back(pid);
  }
}

void Launcher::StopSpares() {
  for (const pid_t pid : spares_) kill(-pid, SIGKILL);
  for (const pid_t pid : spares_) waitpid(pid, nullptr, 0);
  spares_.clear();
}

// A rank of the running attempt that ended before the job reported done
// (checked 4 times a second); false while every rank runs.
bool Launcher::RankDied(Attempt* a, int* rank) {
  const double now = Now();
  if (now < a->t_next_death_check || a->reported_done) return false;
  a->t_next_death_check = now + 0.25;
  for (int r = 0; r < o_.np; ++r) {
    const pid_t pid = RankPid(a->index, r);
    if (pid <= 0 || !Ended(pid)) continue;
    PollEvents(a);  // a rank ends normally only after the done event
    if (a->reported_done) return false;
    *rank = r;
    return true;
  }
  return false;
}

bool Launcher::RankRaised(const Attempt& a, int* rank, std::string* what) const {
  for (int r = 0; r < o_.np; ++r) {
    std::ifstream in(dir_ + "/raised.a" + std::to_string(a.index) + ".r" + std::to_string(r));
    if (!in) continue;
    std::getline(in, *what);
    *rank = r;
    return true;
  }
  return false;
}

void Launcher::FallBack(Attempt* a, const std::string& reason) {
  Record({{"record", "injob_fallback"}, {"attempt", a->index}, {"reason", reason}});
  a->injob_fallback = true;
  a->fallback_reason = reason;
  KillAllRanks(*a);
  KillProcesses(a, SIGKILL);
}

void Launcher::WatchInJob(Attempt* a) {
  if (a->exited || a->injob_fallback || a->stopped_unrecoverable) return;
  if (a->unrecoverable) {
    // Neither memory nor the remote tier can serve the new membership; its
    // ranks would wait for an announcement that never comes. AfterExit stops.
    a->stopped_unrecoverable = true;
    KillAllRanks(*a);
    KillProcesses(a, SIGKILL);
    return;
  }
  const InjectEvent* ev = Pending();
  if (ev != nullptr && ev->stage != InjectStage::kStep) {
    const json fault =
        json::parse(ReadFile(dir_ + "/fault.a" + std::to_string(a->index)), nullptr, false);
    if (!fault.is_discarded() && fault.is_object()) return RecoverInJob(a, fault);
  }
  if (a->killed_by_launcher) return RecoverInJob(a, json());
  if (a->t_injob > 0 && a->restore_recorded) a->t_injob = 0;
  if (a->t_injob > 0 && Now() - a->t_injob > o_.injob_timeout_s) {
    char reason[128];
    std::snprintf(reason, sizeof(reason), "the in-job recovery did not restore within %.0f s",
                  o_.injob_timeout_s);
    return FallBack(a, reason);
  }
  int rank = 0;
  std::string raised;
  if (RankDied(a, &rank)) {
    // Nobody injected it: a machine that failed, a process that crashed.
    // Recovered in-job as a lost node while that can be, else relaunched
    // (and counted) as after any unplanned failure.
    if (RecoverEndedRank(a, rank)) return;
    FallBackUnplanned(a, "rank " + std::to_string(rank) + " ended without an injected failure");
  } else if (!a->reported_done && Now() >= a->t_next_raised_check) {
    a->t_next_raised_check = Now() + 0.25;
    // A rank's training raised and no node was lost: the job's own failure
    // (a bug, a bad batch), which no membership answers; its ranks would
    // wait --injob-timeout for one. A second first, for a loss that made it
    // raise to be seen (its rank's death, a stage fault).
    // During the recovery from an injected loss it is that recovery which
    // failed: relaunched as such (not counted against --max-restarts).
    if (RankRaised(*a, &rank, &raised)) {
      if (a->t_raised == 0) a->t_raised = Now();
      if (Now() - a->t_raised >= 1.0) {
        const std::string what = "rank " + std::to_string(rank) + " failed (" + raised + ")";
        if (a->t_injob > 0) return FallBack(a, what + " during the in-job recovery");
        FallBackUnplanned(a, what + " with no node lost");
      }
    }
  }
}

void Launcher::FallBackUnplanned(Attempt* a, const std::string& reason) {
  FallBack(a, reason);
  a->fallback_reason.clear();  // AfterExit: an unplanned failure
  a->fallback_status = 1 << 8;  // as "exit status 1", unless a process's says more
}

// A rank ended with nobody injecting it. A rank that keeps ending (a bug,
// not a machine) would be replaced without end: such recoveries count with
// the relaunches against --max-restarts in a row (RecordFailureNobodyInjected),
// a generation that trained past every step reported before it starting a
// new row.
bool Launcher::RecoverEndedRank(Attempt* a, int rank) {
  if (a->last_step > a->reached_before) unplanned_ = 0;
  if (unplanned_ >= o_.max_restarts) return false;
  if (Ulfm()) return FollowUlfmRepair(a, rank);
  RecoverInJob(a, json(), rank);
  return true;
}

void Launcher::RecoverInJob(Attempt* a, const json& fault, int ended_rank) {
  const bool injected = ended_rank < 0;
  const std::vector<int> nodes =
      injected ? Pending()->nodes : std::vector<int>{ended_rank / o_.ranks_per_node};
  // Every rank of the lost nodes ends before its place is handed on.
  KillRanks(a->index, nodes);
  std::vector<pid_t> lost;
  for (int node : nodes) {
    for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
      const pid_t pid = RankPid(a->index, node * o_.ranks_per_node + lane);
      if (pid > 0) lost.push_back(pid);
    }
    // torchrun: the node's agent fails with its workers.
    if (o_.launcher == "torchrun" && node < static_cast<int>(a->pids.size())) {
      a->ignore_status.insert(a->pids[node]);
    }
  }
  a->ignore_status.insert(lost.begin(), lost.end());
  // Not waited for: a SIGKILL cannot be caught or delayed, so from here on
  // the lost ranks run none of their own code and their places can be
  // handed on while the kernel tears them down (20-40 ms on 2 loaded cores,
  // which a relaunch must wait for and an in-job recovery need not). Their
  // connections close when they are gone; the survivors drop theirs to the
  // old group anyway (launch::Resilient, memento.resilient).
  ReapExited(a);
  a->t_exit = Now();
  if (injected) {
    RecordInjectedFailure(*a, fault);  // the node's memory goes
  } else {
    // A replacement is another machine: the node's next generation. What the
    // ended rank's node held stays (nobody said the machine went), unused.
    const int node = nodes.front();
    const std::string identity = Identity(node);
    ++generation_[node];
    replaced_.push_back("node " + std::to_string(node) + " -> " + Identity(node));
    RecordRankEnded(*a, ended_rank, identity, "runs on (the node is replaced in-job)");
  }
  const int old_index = a->index;
  a->index = next_index_++;
  attempt_ = a->index;
  // Under ULFM every rank records itself for each generation of its world
  // (JobReporter::ForGeneration); a second writer could be read half-done.
  for (int r = 0; r < o_.np && !Ulfm(); ++r) {
    if (std::find(nodes.begin(), nodes.end(), r / o_.ranks_per_node) != nodes.end()) continue;
    std::ofstream(PidPath(a->index, r)) << RankPid(old_index, r) << "\n";
  }
  {
    std::ofstream names(dir_ + "/nodes", std::ios::trunc);
    for (int k = 0; k < nodes_; ++k) names << NodeBase(generation_[k]) << "\n";
  }
  const int port = FreePort();
  const int spares_before = SparesLeft();
  if (!ReplaceRanks(a, nodes, port)) return;
  BeginGeneration(a, spares_before - SparesLeft(), port);
}

void Launcher::BeginGeneration(Attempt* a, int from_spares, int port) {
  ++injob_recoveries_;
  Record({{"record", "injob"},
          {"attempt", a->index},
          {"replaced", replaced_},
          {"from_spares", from_spares},
          {"spares_left", SparesLeft()},
          {"master_port", port},
          {"fault_env", PendingFaultEnv()}});
  replaced_.clear();
  a->killed_by_launcher = false;
  a->t_raised = 0;
  a->t_restore_begin = 0;
  a->restore_recorded = false;
  // A step event fires at a step the new generation reports, as after a
  // relaunch: not at once for a step the old one had passed.
  a->last_step = 0;
  a->rank_pids.clear();
  a->t_launch = a->t_injob = Now();
  a->reached_before = furthest_;
}

// Under ULFM the world repairs every loss itself, also one nobody injected
// (a machine that failed, a process that crashed): a spare takes the rank
// that ended and the world goes on as its next generation. The launcher
// records the failure and follows that generation as an in-job recovery; a
// relaunch would stop a job that recovers. Not when no spare is left (the
// world gives up: relaunch), nor while stage faults are still to come: they
// are armed by generation number at the launch (MEMENTO_LAUNCH_FAULTS), and a
// repair nobody planned would move each to another loss's generation.
bool Launcher::FollowUlfmRepair(Attempt* a, int rank) {
  // The world replaces the rank's node whole (its other ranks retire), with
  // a node of spares.
  if (SparesLeft() < o_.ranks_per_node) return false;
  for (size_t j = next_event_; j < events_.size(); ++j) {
    if (events_[j].stage != InjectStage::kStep) return false;
  }
  a->t_exit = Now();
  const int node = rank / o_.ranks_per_node;
  RecordRankEnded(*a, rank, Identity(node), "runs on (its world repairs itself)");
  // The spare node is the place's node now, for a relaunch to keep its
  // memory (UlfmWorld hands a lost node to the first node of spares left).
  spare_name_[node] = UlfmSpareName(ulfm_launch_, ulfm_spares_used_ / o_.ranks_per_node);
  ulfm_spares_used_ += o_.ranks_per_node;
  a->index = next_index_++;
  attempt_ = a->index;
  replaced_.push_back("node " + std::to_string(node) + " -> " + Identity(node));
  // The world's own membership: no port announced.
  BeginGeneration(a, o_.ranks_per_node, 0);
  return true;
}

// A replacement (a warm spare handed a place, or a fresh process) becomes a
// process of the attempt. It is a rank, not the job: its end says nothing of
// the job's outcome (a stage fault's SIGKILL can be reaped before its fault
// file is read; an unplanned end is RankDied's to see).
void Launcher::AdoptReplacement(Attempt* a, pid_t pid) {
  a->AddProcess(pid);
  a->ignore_status.insert(pid);
}

// Announces the new membership and starts (or hands to spares) the lost
// ranks; false when it fell back to a relaunch.
bool Launcher::ReplaceRanks(Attempt* a, const std::vector<int>& nodes, int port) {
  const size_t needed = nodes.size() * static_cast<size_t>(o_.ranks_per_node);
  if ((o_.spares > 0 || Ulfm()) && static_cast<size_t>(SparesLeft()) < needed) {
    FallBack(a, "no warm spare left for " + std::to_string(needed) + " lost rank(s)");
    return false;
  }
  if (Ulfm()) {
    // The job's world hands the places to its first spares itself.
    ulfm_spares_used_ += static_cast<int>(needed);
    return true;
  }
  const std::string fault = PendingFaultEnv();
  json ranks = json::object();  // the places lost now
  for (int node : nodes) {
    for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
      const int rank = node * o_.ranks_per_node + lane;
      // "node": MEMENTO_NODE as the exec wrapper sets it (the runtime adds
      // "/<node index>" for virtual nodes).
      json place = {{"node", NodeBase(generation_[node])}, {"local_rank", lane}, {"spare_pid", 0}};
      if (o_.spares > 0) {
        const pid_t pid = spares_.front();
        spares_.erase(spares_.begin());
        place["spare_pid"] = pid;
        std::ofstream(PidPath(a->index, rank)) << pid << "\n";
        AdoptReplacement(a, pid);
      }
      ranks[std::to_string(rank)] = place;
    }
  }
  // A spare handed a place earlier in this launch may not have read its
  // announcement before this one replaced it: it finds its place here too (a
  // spare that already took it re-forms with its rank as a survivor does).
  // Fresh replacements are started with theirs.
  json announced = ranks;
  if (o_.spares > 0) {
    for (const auto& [rank, place] : ranks.items()) a->spare_places[rank] = place;
    announced = a->spare_places;
  }
  const json membership = {
      {"attempt", a->index}, {"master_addr", "127.0.0.1"},          {"master_port", port},
      {"world_size", o_.np}, {"ranks_per_node", o_.ranks_per_node}, {"ranks", announced},
      {"fault", fault}};
  if (!WriteAtomically(dir_ + "/injob.json", JsonText(membership))) {
    FallBack(a, "cannot write " + dir_ + "/injob.json");
    return false;
  }
  if (o_.spares > 0) return true;
  std::vector<std::string> args = {o_.self_exe, "launch", "--rank-exec", dir_, "--"};
  args.insert(args.end(), o_.command.begin(), o_.command.end());
  for (const auto& [rank, place] : ranks.items()) {
    const pid_t pid = ForkJobProcess(
        args, a->index, fault, 0,
        {{"RANK", rank},
         {"WORLD_SIZE", std::to_string(o_.np)},
         {"LOCAL_RANK", std::to_string(place["local_rank"].get<int>())},
         {"LOCAL_WORLD_SIZE", std::to_string(o_.ranks_per_node)},
         {"MASTER_ADDR", "127.0.0.1"},
         {"MASTER_PORT", std::to_string(port)}});
    if (pid < 0) {
      FallBack(a, "cannot start a replacement for rank " + rank);
      return false;
    }
    AdoptReplacement(a, pid);
  }
  return true;
}

}  // namespace memento::launch::detail
