// In-job recovery, the job's side in C++ (Python: memento.resilient).
//
//   int rc = memento::launch::Resilient([&] { return Train(); }, options);
//
// Outside `memento launch --recovery in-job` Resilient calls train() once and
// returns what it returned. Under it, a node loss does not end the surviving
// processes: the launcher kills the lost node's ranks, hands their places to
// warm spares or fresh processes, and announces the new membership in its
// status folder (injob.json: the attempt, a fresh rendezvous port, the
// replaced ranks). Every survivor then
//   1. aborts the old membership's communication: a watcher thread shuts down
//      the TCP connections this process opened since the attempt began (the
//      training's process group, memento's transport, their stores), so that a
//      rank blocked in a collective with the lost one fails at once instead of
//      waiting for a timeout, and calls options.abort for what a closed
//      connection does not end (memento's transport: Transport::Abort());
//   2. lets train() fail (an exception or a non-zero result), takes the new
//      membership's environment (MASTER_ADDR / MASTER_PORT,
//      MEMENTO_LAUNCH_ATTEMPT / _GENERATION / _FAULT) and
//   3. calls train() again in the same process: train() forms its process
//      group anew (RANK / WORLD_SIZE unchanged; rank 0 serves the new store)
//      and its Checkpointer restores (survivors from their own memory,
//      replacements from their peers).
// A warm spare (MEMENTO_LAUNCH_SPARE=1) runs options.spare_warm_up, waits until
// an announcement names its process id, takes that rank's environment (RANK,
// WORLD_SIZE, LOCAL_RANK, MEMENTO_NODE, ...) and joins. A failure that no
// announcement follows within options.wait_s is the job's own: Resilient
// rethrows the exception or returns train()'s result.
//
// Sockets: connections the process opened before the attempt began (to other
// services) are left alone; open them before calling Resilient. In in-job mode
// Resilient ignores SIGPIPE (a write to a lost peer fails with EPIPE instead of
// ending the process), as Python does.
//
// Thread-safety: call from one thread; train() may start threads, but must
// have ended them when it returns or throws (Resilient changes the
// environment between attempts). options.abort runs on the watcher thread.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace memento::launch {

struct ResilientOptions {
  // Ends the blocking operations of the old membership that a shut-down
  // connection does not end; runs on the watcher thread, at most once per
  // attempt.
  std::function<void()> abort;
  // What a warm spare does before it waits for a rank.
  std::function<void()> spare_warm_up;
  // How long a failed attempt waits for the launcher's announcement before the
  // failure is taken for the job's own; < 0: MEMENTO_LAUNCH_INJOB_WAIT_S
  // (default 30 s).
  double wait_s = -1;
};

// True when `memento launch --recovery in-job` runs this process.
bool InJob();

int Resilient(const std::function<int()>& train, const ResilientOptions& options = {});

// The parts, for tests and for jobs that drive recovery themselves.

// One announcement of injob.json.
struct Membership {
  struct Place {
    int rank = 0;
    std::string node;
    int local_rank = 0;
    long spare_pid = 0;
  };
  int attempt = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int world_size = 0;
  int ranks_per_node = 1;
  std::string fault;
  std::vector<Place> ranks;
};

// The launcher's announcements in `directory` (MEMENTO_LAUNCH_DIR).
class MembershipFile {
 public:
  explicit MembershipFile(std::string directory);
  // The current announcement; nullopt when there is none or it cannot be read.
  std::optional<Membership> Read() const;
  std::optional<Membership> NewerThan(int attempt) const;
  // Waits (inotify on the folder; polling where it is missing) until an
  // announcement newer than `attempt` appears or `timeout_s` passed.
  std::optional<Membership> WaitNewer(int attempt, double timeout_s) const;
  // A spare: waits until an announcement hands process `pid` a rank.
  std::pair<int, Membership> WaitAssignment(long pid) const;
  // Tells the launcher that `rank`'s training failed in `attempt` with `what`
  // (raised.aA.rR, its first line): with no node lost, it relaunches the job at
  // once instead of leaving every rank waiting for a membership. Best effort.
  void NoteRaised(int attempt, int rank, const std::string& what) const;
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  std::string path_;
};

// Sets the environment of `m`'s membership; with rank >= 0 also that rank's
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MEMENTO_NODE; a spare's
// MEMENTO_LAUNCH_SPARE removed). Call with no other thread running.
void AdoptMembership(const Membership& m, int rank = -1);

// {fd: "socket:[inode]"} of this process's sockets.
std::map<int, std::string> SocketInodes();
// Shuts down the read side of the TCP connections opened since `before` (the
// descriptors stay open; writes still go out, see the definition for why);
// listening sockets stay. Returns how many.
int ShutdownConnectionsSince(const std::map<int, std::string>& before);

}  // namespace memento::launch
