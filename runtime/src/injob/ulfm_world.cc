#include "memento/runtime/ulfm_world.h"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "memento/runtime/config.h"
#include "memento/runtime/log.h"
#include "memento/runtime/mpi_transport.h"
#include "memento/runtime/node_identity.h"

#if defined(MPIX_ERR_PROC_FAILED) && defined(MPIX_ERR_REVOKED)
#define MEMENTO_ULFM 1
#else
#define MEMENTO_ULFM 0
#endif

namespace memento::runtime {
namespace {

// Working rank 0 to a waiting spare: the job is done.
constexpr int kReleaseTag = 7001;
// Never sent: the watcher's receive only ever ends in a failure.
constexpr int kWatchTag = 7002;
// How often a waiting spare looks for a release or a failure.
constexpr std::chrono::milliseconds kSparePoll{2};
// Repairs in a row that another failure may interrupt before giving up.
constexpr int kRepairRounds = 8;

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

Status Check(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::Ok();
  return Status::Unavailable(std::string(what) + ": " + MpiError(code));
}

void FreeComm(MPI_Comm* comm) {
  if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  *comm = MPI_COMM_NULL;
}

// Every process's node name over `comm`, by rank (exact strings: a hash
// that collided would merge two nodes).
Result<std::vector<std::string>> GatherNodes(MPI_Comm comm, const std::string& node) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  const int length = static_cast<int>(node.size());
  std::vector<int> lengths(size), offsets(size);
  MEMENTO_RETURN_IF_ERROR(
      Check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm), "MPI_Allgather"));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MEMENTO_RETURN_IF_ERROR(Check(MPI_Allgatherv(node.data(), length, MPI_CHAR, all.data(),
                                               lengths.data(), offsets.data(), MPI_CHAR, comm),
                                "MPI_Allgatherv (nodes)"));
  std::vector<std::string> nodes(size);
  for (int r = 0; r < size; ++r) nodes[r] = all.substr(offsets[r], lengths[r]);
  return nodes;
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s.empty() ? "none" : s;
}

// Runs `on_expiry` on a thread of its own unless destroyed within `limit`.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::function<void()> on_expiry)
      : thread_([this, limit, on_expiry = std::move(on_expiry)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) on_expiry();
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

std::string Seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", t.count() / 1000.0);
  return text;
}

// Ends the process when the repair it guards has not finished within `limit`.
// Shrink and agreement wait for every live process: one that stays alive
// without taking part (stalled in its own code), or an MPI that hangs in
// them, would otherwise hold all the others in the repair for ever, where a
// relaunch restores from memory. Exit code: UlfmWorld::kRepairTimeoutExit.
class RepairDeadline {
 public:
  explicit RepairDeadline(std::chrono::milliseconds limit)
      : watchdog_(limit, [limit] {
          Log(LogLevel::kError,
              "in-job recovery: the repair of the job's world did not finish within " +
                  Seconds(limit) +
                  " s (MEMENTO_TIMEOUT_S): a live process did not take part, or MPI hung; "
                  "ending this process (exit " +
                  std::to_string(UlfmWorld::kRepairTimeoutExit) +
                  ") so that the job is relaunched and restores");
          std::fflush(nullptr);
          std::_Exit(UlfmWorld::kRepairTimeoutExit);
        }) {}

 private:
  Watchdog watchdog_;
};

// MPI_Comm_split of a repair round over `shrunk`, revoked when it has not
// returned within `limit`. Open MPI 5's communicator activation, the split's
// last step, intermittently never completes on a communicator that a
// second shrink made, though every live process is in it (its issue #13138
// reports the same of the shrink). *revoked: whether it was: the round must
// then be repeated over a new shrink whatever the split returned, since
// `shrunk` can no longer be the world.
int SplitWithin(std::chrono::milliseconds limit, MPI_Comm shrunk, int color, int key,
                MPI_Comm* work, bool* revoked) {
  std::atomic<bool> fired{false};
  int rc = MPI_SUCCESS;
  {
#if MEMENTO_ULFM
    const Watchdog watchdog(limit, [limit, shrunk, &fired] {
      fired = true;
      Log(LogLevel::kWarn, "ulfm: the repair's MPI_Comm_split did not return within " +
                               Seconds(limit) + " s; revoking it and repeating the round");
      MPIX_Comm_revoke(shrunk);
    });
#else
    (void)limit;
#endif
    rc = MPI_Comm_split(shrunk, color, key, work);
  }
  // A failed split's handle is undefined (Open MPI's names no communicator).
  if (rc != MPI_SUCCESS) *work = MPI_COMM_NULL;
  *revoked = fired;
  return rc;
}

}  // namespace

bool UlfmAvailable() { return MEMENTO_ULFM != 0; }

std::string UlfmProcessNode(Config* config, MPI_Comm world, int spares) {
  int size = 0, rank = 0;
  MPI_Comm_size(world, &size);
  MPI_Comm_rank(world, &rank);
  if (rank >= size - spares && std::getenv("MEMENTO_NODE") == nullptr) config->node = "spare";
  return NodeIdentity(*config, rank);
}

Result<std::unique_ptr<UlfmWorld>> UlfmWorld::Create(MPI_Comm world, int spares,
                                                     std::chrono::milliseconds repair_timeout,
                                                     const std::string& node) {
  if (!UlfmAvailable()) {
    return Status::FailedPrecondition(
        "UlfmWorld: memento was built against an MPI without ULFM (MPIX_Comm_shrink); build "
        "with -DMEMENTO_ULFM_MPI_HOME=<an Open MPI 5 prefix>");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int level = 0;
  if (initialized) MPI_Query_thread(&level);
  if (!initialized || level != MPI_THREAD_MULTIPLE) {
    return Status::FailedPrecondition(
        "UlfmWorld: MPI must be initialized with MPI_THREAD_MULTIPLE first (the engine's threads "
        "and the repair call MPI at once)");
  }
  int world_size = 0, world_rank = 0;
  MPI_Comm_size(world, &world_size);
  MPI_Comm_rank(world, &world_rank);
  if (spares < 0 || spares >= world_size) {
    return Status::InvalidArgument("UlfmWorld: " + std::to_string(spares) + " spares of " +
                                   std::to_string(world_size) + " ranks leave no working rank");
  }
  if (repair_timeout.count() <= 0) {
    return Status::InvalidArgument("UlfmWorld: the repair timeout must be positive, not " +
                                   std::to_string(repair_timeout.count()) + " ms");
  }
  std::unique_ptr<UlfmWorld> w(new UlfmWorld());
  w->repair_timeout_ = repair_timeout;
  MEMENTO_RETURN_IF_ERROR(Check(MPI_Comm_dup(world, &w->world_), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(w->world_, MPI_ERRORS_RETURN);
  w->size_ = world_size - spares;
  w->roles_.resize(world_size);
  for (int r = 0; r < world_size; ++r) w->roles_[r] = r < w->size_ ? r : kSpare;
  w->rank_ = w->roles_[world_rank];
  // Each process's node, numbered by the first world rank on it (a process
  // without a name is a node of its own).
  MEMENTO_ASSIGN_OR_RETURN(std::vector<std::string> names, GatherNodes(w->world_, node));
  std::vector<int> node_of(world_size);
  for (int r = 0; r < world_size; ++r) {
    node_of[r] = r;
    for (int q = 0; !names[r].empty() && q < r; ++q) {
      if (names[q] == names[r]) {
        node_of[r] = node_of[q];
        break;
      }
    }
  }
  w->node_ = node_of[world_rank];
  w->rank_nodes_.assign(node_of.begin(), node_of.begin() + w->size_);
  MEMENTO_RETURN_IF_ERROR(
      Check(MPI_Comm_split(w->world_, w->rank_ >= 0 ? 0 : MPI_UNDEFINED, w->rank_, &w->work_),
            "MPI_Comm_split"));
  if (w->work_ != MPI_COMM_NULL) MPI_Comm_set_errhandler(w->work_, MPI_ERRORS_RETURN);
  return w;
}

UlfmWorld::~UlfmWorld() {
  StopWatching();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  FreeComm(&work_);
  FreeComm(&world_);
}

Result<bool> UlfmWorld::WaitForPlace() {
  if (rank_ >= 0) {
    return Status::FailedPrecondition("WaitForPlace: rank " + std::to_string(rank_) +
                                      " is not a spare");
  }
  while (true) {
    int message = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Irecv(&message, 1, MPI_INT, MPI_ANY_SOURCE, kReleaseTag, world_, &req);
    int done = 0;
    while (rc == MPI_SUCCESS && !done) {
      rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS && !done) std::this_thread::sleep_for(kSparePoll);
    }
    if (rc == MPI_SUCCESS) return false;  // released: the job finished
#if MEMENTO_ULFM
    // A process failed (the receive from any source reports it) or a repair
    // revoked the world: take part in it. The revoke completes the receive.
    MPIX_Comm_revoke(world_);
    if (req != MPI_REQUEST_NULL) MPI_Wait(&req, MPI_STATUS_IGNORE);
#endif
    MEMENTO_RETURN_IF_ERROR(RepairAfterFailure().status());
    if (rank_ >= 0) return true;
  }
}

void UlfmWorld::WatchForFailures(std::function<void()> on_failure, std::chrono::microseconds poll) {
  StopWatching();
  stop_watching_ = false;
  MPI_Comm work = work_;
  watcher_ = std::thread([this, work, poll, on_failure = std::move(on_failure)] {
    int nothing = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Irecv(&nothing, 1, MPI_INT, MPI_ANY_SOURCE, kWatchTag, world_, &req);
    int done = 0;
    while (rc == MPI_SUCCESS && !done && !stop_watching_) {
      rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) std::this_thread::sleep_for(poll);
    }
    if (rc == MPI_SUCCESS) {
      // Stopped: nothing failed.
      if (!done) {
        MPI_Cancel(&req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
      }
      return;
    }
    // A process failed, or the world was revoked by a repair: the receive
    // stays pending until this process revokes the world (the repair does).
    watch_request_ = req;
#if MEMENTO_ULFM
    if (work != MPI_COMM_NULL) MPIX_Comm_revoke(work);
#endif
    on_failure();
  });
}

void UlfmWorld::StopWatching() {
  if (!watcher_.joinable()) return;
  stop_watching_ = true;
  watcher_.join();
}

Result<UlfmWorld::Repair> UlfmWorld::RepairAfterFailure() {
#if MEMENTO_ULFM
  const auto start = std::chrono::steady_clock::now();
  const RepairDeadline deadline(repair_timeout_);
  const int old_size = size_;
  StopWatching();
  MPIX_Comm_revoke(world_);
  if (work_ != MPI_COMM_NULL) MPIX_Comm_revoke(work_);
  if (watch_request_ != MPI_REQUEST_NULL) {
    MPI_Wait(&watch_request_, MPI_STATUS_IGNORE);  // ends in error: the world is revoked
    watch_request_ = MPI_REQUEST_NULL;
  }
  // A healthy split takes milliseconds; several hung ones in a row still
  // leave the repair inside its deadline.
  const auto split_limit =
      std::max(repair_timeout_ / (2 * kRepairRounds), std::chrono::milliseconds(1));
  for (int round = 0; round < kRepairRounds; ++round) {
    MPI_Comm shrunk = MPI_COMM_NULL;
    MEMENTO_RETURN_IF_ERROR(Check(MPIX_Comm_shrink(world_, &shrunk), "MPIX_Comm_shrink"));
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    // Every live process's role, generation and node; the decision below is
    // a function of them (and of rank_nodes_, the same everywhere) alone, so
    // every process takes the same.
    int mine[3] = {rank_, generation_, node_};
    int live = 0, me = 0;
    MPI_Comm_size(shrunk, &live);
    MPI_Comm_rank(shrunk, &me);
    std::vector<int> all(3 * static_cast<size_t>(live));
    // Every step is followed by an agreement (fault-tolerant, entered by every
    // live process), so that all take the same path: a process lost during
    // the repair fails the step on some processes only, and the round is then
    // repeated over the processes still alive.
    auto everyone = [&](int rc) {
      int ok = rc == MPI_SUCCESS ? 1 : 0;
      return MPIX_Comm_agree(shrunk, &ok) == MPI_SUCCESS && ok != 0;
    };
    auto retry = [&](MPI_Comm* work) {
      FreeComm(work);
      MPIX_Comm_revoke(shrunk);
      FreeComm(&world_);
      world_ = shrunk;
    };
    MPI_Comm work = MPI_COMM_NULL;
    if (!everyone(MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, shrunk))) {
      retry(&work);
      continue;
    }
    const Decision d = Decide(all, old_size);
    const int color = d.enough && d.roles[me] >= 0 ? 0 : MPI_UNDEFINED;
    if (split_hook_) split_hook_(round, rank_);
    bool revoked = false;
    const int split = SplitWithin(split_limit, shrunk, color, d.roles[me], &work, &revoked);
    if (!everyone(revoked ? MPI_ERR_OTHER : split)) {
      retry(&work);
      continue;
    }
    // Retired ranks leave the world too: a process that is in none of the
    // job's communicators can end without the others seeing a failure.
    MPI_Comm world = shrunk;
    if (d.enough && std::count(d.roles.begin(), d.roles.end(), kRetired) > 0) {
      MPI_Comm rest = MPI_COMM_NULL;
      const int stay = d.roles[me] == kRetired ? MPI_UNDEFINED : 0;
      const int left = SplitWithin(split_limit, shrunk, stay, me, &rest, &revoked);
      if (!everyone(revoked ? MPI_ERR_OTHER : left)) {
        FreeComm(&rest);
        retry(&work);
        continue;
      }
      if (rest != MPI_COMM_NULL) MPI_Comm_set_errhandler(rest, MPI_ERRORS_RETURN);
      world = rest;
    }
    FreeComm(&work_);
    FreeComm(&world_);
    if (world != shrunk) FreeComm(&shrunk);
    return Adopt(d, me, world, work, start);
  }
  return Status::Unavailable("in-job recovery: processes kept failing through " +
                             std::to_string(kRepairRounds) + " repair rounds");
#else
  return Status::FailedPrecondition("in-job recovery: this MPI has no ULFM");
#endif
}

UlfmWorld::Decision UlfmWorld::Decide(const std::vector<int>& all, int old_size) const {
  Decision d;
  const size_t live = all.size() / 3;
  d.roles.resize(live);
  std::vector<bool> present(old_size, false);
  for (size_t p = 0; p < live; ++p) {
    d.roles[p] = all[3 * p];
    d.generation = std::max(d.generation, all[3 * p + 1] + 1);
    if (d.roles[p] >= 0) present[d.roles[p]] = true;
    d.spares += d.roles[p] == kSpare ? 1 : 0;
  }
  for (int r = 0; r < old_size; ++r) {
    if (!present[r]) d.lost.push_back(r);
  }
  d.rank_nodes = rank_nodes_;
  d.enough = Replace(all, &d.roles, &d.lost, &d.rank_nodes);
  return d;
}

Result<UlfmWorld::Repair> UlfmWorld::Adopt(const Decision& d, int me, MPI_Comm world, MPI_Comm work,
                                           std::chrono::steady_clock::time_point start) {
  const int was = rank_;
  world_ = world;
  // Per rank of the new world: the retired are not in it.
  roles_.clear();
  for (int role : d.roles) {
    if (role != kRetired || !d.enough) roles_.push_back(role);
  }
  rank_ = d.roles[me];
  if (!d.enough) {
    work_ = MPI_COMM_NULL;
    return Status::FailedPrecondition(
        "in-job recovery: working ranks " + Join(d.lost) + " lost (their nodes whole) and " +
        std::to_string(d.spares) +
        " spares left, none a whole node for them; the job must be relaunched (and restores "
        "then)");
  }
  rank_nodes_ = d.rank_nodes;
  work_ = work;
  if (work_ != MPI_COMM_NULL) MPI_Comm_set_errhandler(work_, MPI_ERRORS_RETURN);
  generation_ = d.generation;
  Repair repair;
  repair.generation = generation_;
  repair.replaced = d.lost;
  repair.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Log(LogLevel::kInfo, "ulfm: generation " + std::to_string(generation_) + ": ranks " +
                           Join(d.lost) + " taken over by spares in " +
                           std::to_string(repair.seconds) + " s; " + std::to_string(spares_left()) +
                           " spares left");
  if (rank_ == kRetired) {
    Log(LogLevel::kWarn, "ulfm: working rank " + std::to_string(was) +
                             " retired: its node lost another rank, and a node of spares "
                             "takes all its places; this process leaves the job");
  }
  if (d.lost.empty()) {
    return Status::FailedPrecondition(
        "in-job recovery: no working rank was lost; the failure was not a process's");
  }
  return repair;
}

bool UlfmWorld::Replace(const std::vector<int>& all, std::vector<int>* roles,
                        std::vector<int>* lost, std::vector<int>* rank_nodes) const {
  // A node that lost a rank is lost whole: its live ranks retire.
  std::set<int> lost_nodes;
  for (int r : *lost) lost_nodes.insert(rank_nodes_[r]);
  for (size_t p = 0; p < roles->size(); ++p) {
    const int r = (*roles)[p];
    if (r >= 0 && lost_nodes.count(rank_nodes_[r]) != 0) {
      lost->push_back(r);
      (*roles)[p] = kRetired;
    }
  }
  std::sort(lost->begin(), lost->end());
  // Each lost node's ranks, in order, go to one node of waiting spares, the
  // first (by world rank) with enough of them alive; the rest of that node
  // waits on, never taking another node's places (it would share its name).
  std::map<int, std::vector<int>> spare_nodes;  // node -> its waiting processes, in order
  for (size_t p = 0; p < roles->size(); ++p) {
    if ((*roles)[p] == kSpare) spare_nodes[all[3 * p + 2]].push_back(static_cast<int>(p));
  }
  std::map<int, std::vector<int>> lost_by_node;
  for (int r : *lost) lost_by_node[rank_nodes_[r]].push_back(r);
  std::vector<int> placed = *roles;
  for (const auto& [node, ranks] : lost_by_node) {
    auto spare = std::find_if(spare_nodes.begin(), spare_nodes.end(),
                              [&](const auto& s) { return s.second.size() >= ranks.size(); });
    if (spare == spare_nodes.end()) return false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      placed[spare->second[i]] = ranks[i];
      (*rank_nodes)[ranks[i]] = spare->first;
    }
    spare_nodes.erase(spare);
  }
  *roles = placed;
  return true;
}

Status UlfmWorld::Finish() {
  if (rank_ != 0) return Status::Ok();
  for (size_t w = 0; w < roles_.size(); ++w) {
    if (roles_[w] >= 0) continue;
    const int release = 1;
    MEMENTO_RETURN_IF_ERROR(
        Check(MPI_Send(&release, 1, MPI_INT, static_cast<int>(w), kReleaseTag, world_),
              "MPI_Send (release a spare)"));
  }
  return Status::Ok();
}

int FinalizeWithin(std::chrono::seconds grace, int exit_code) {
  std::fflush(nullptr);
  std::thread([grace, exit_code] {
    std::this_thread::sleep_for(grace);
    const char line[] = "memento[warn] MPI_Finalize did not return; ending the process\n";
    (void)!std::fwrite(line, 1, sizeof(line) - 1, stderr);
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }).detach();
  MPI_Finalize();
  return exit_code;
}

Status RunResilient(UlfmWorld& world, const UlfmTrainFn& train) {
  if (world.rank() < 0) {
    MEMENTO_ASSIGN_OR_RETURN(bool placed, world.WaitForPlace());
    if (!placed) return Status::Ok();
  }
  while (true) {
    MpiTransportOptions options;
    options.comm = world.comm();
    // A failure must come back as a Status here, not end the job.
    options.abort_on_timeout = false;
    Status failed;
    {
      auto transport = CreateMpiTransport(options);
      if (!transport.ok()) {
        failed = transport.status();
      } else {
        std::shared_ptr<Transport> t = *transport;
        world.WatchForFailures([t] { t->Abort(); });
        failed = train(t, world);
        world.StopWatching();
        if (failed.ok()) return world.Finish();
        t->Abort();
      }
    }
    Log(LogLevel::kWarn, "ulfm: rank " + std::to_string(world.rank()) + " generation " +
                             std::to_string(world.generation()) + " failed: " + failed.ToString() +
                             "; repairing");
    auto repair = world.RepairAfterFailure();
    if (!repair.ok()) return repair.status().WithContext(failed.ToString());
    // Its node was lost with another of its ranks: out of the job, it is
    // done (its node's places are a node of spares' now).
    if (world.rank() == UlfmWorld::kRetired) return Status::Ok();
  }
}

}  // namespace memento::runtime
