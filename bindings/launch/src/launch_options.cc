// `memento launch`'s options: the command line checked before anything runs
// (ValidateLaunchOptions), and the paths the launch writes made or refused
// (CheckOutputPaths).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "launch_session.h"
#include "memento/launch/inject_spec.h"
#include "memento/launch/launcher.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"
#include "memento/runtime/config.h"

namespace memento::launch {
namespace fs = std::filesystem;

namespace detail {
namespace {

// A folder the launch writes into: made when missing; refused by flag name and
// path when it cannot be (a file in the way, no permission), before any rank
// runs (a run that found out at its end would lose its records; a job whose
// remote tier is a file fails at every launch).
Status CheckFolder(const char* flag, const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Status::InvalidArgument(std::string(flag) + " '" + path + "': " + ec.message());
  if (!fs::is_directory(path, ec)) {
    return Status::InvalidArgument(std::string(flag) + " '" + path + "': not a directory");
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return Status::InvalidArgument(std::string(flag) + " '" + path +
                                   "': not writable: " + std::strerror(errno));
  }
  return Status::Ok();
}

// The records file is opened for appending (made when missing, nothing of it
// changed yet) to find out now whether it can be written.
Status CheckRecordsFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return Status::InvalidArgument("--records '" + path + "': is a directory");
  }
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return Status::InvalidArgument("--records '" + path + "': " + std::strerror(errno));
  }
  std::fclose(f);
  return Status::Ok();
}

}  // namespace

// The mpirun command line the job starts with: --mpirun, or under "ulfm" by
// default the mpirun of the MPI memento's ULFM support was built against.
std::vector<std::string> Mpirun(const LaunchOptions& o) {
  if (o.launcher != "ulfm" || o.mpirun != std::vector<std::string>{"mpirun"}) return o.mpirun;
#ifdef MEMENTO_ULFM_MPIRUN
  return {MEMENTO_ULFM_MPIRUN};  // the MPI this memento's ULFM support was built against
#else
  return {""};
#endif
}

Status CheckOutputPaths(LaunchOptions* o) {
  if (!o->remote_dir.empty()) {
    MEMENTO_RETURN_IF_ERROR(CheckFolder("--remote", o->remote_dir));
    std::error_code ec;
    o->remote_dir = fs::absolute(o->remote_dir, ec).string();
  }
  if (!o->status_dir.empty()) MEMENTO_RETURN_IF_ERROR(CheckFolder("--status-dir", o->status_dir));
  if (!o->records_path.empty()) MEMENTO_RETURN_IF_ERROR(CheckRecordsFile(o->records_path));
  return Status::Ok();
}

}  // namespace detail

using detail::FindExecutable;
using detail::Mpirun;

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
  if (!o.job.empty() && !runtime::ValidateJobId(o.job).ok()) {
    return Status::InvalidArgument("--job '" + o.job +
                                   "': a job id is 1..48 characters from [A-Za-z0-9_-]");
  }
  auto events = ParseInjectSpec(o.inject, nodes, o.seed);
  if (!events.ok()) return events.status();
  for (const auto& ev : *events) {
    if (ev.stage == InjectStage::kPersist && o.remote_dir.empty()) {
      return Status::InvalidArgument("--inject '" + ev.text +
                                     "': the persist stage needs --remote (no remote tier)");
    }
  }
  // MEMENTO_REMOTE in the launcher's environment reaches the job as well.
  const char* env_remote = std::getenv("MEMENTO_REMOTE");
  if (o.persist_every > 0 && o.remote_dir.empty() && (env_remote == nullptr || !*env_remote)) {
    return Status::InvalidArgument("--persist-every " + std::to_string(o.persist_every) +
                                   ": there is no remote tier to persist to (give --remote DIR)");
  }
  if (o.command.empty()) return Status::InvalidArgument("no command given (after --)");
  if (FindExecutable(o.command.front()).empty()) {
    return Status::NotFound("command not found: '" + o.command.front() +
                            "' (not an executable file, nor on PATH)");
  }
  if (o.launcher != "mpirun" && o.launcher != "torchrun" && o.launcher != "ulfm") {
    return Status::InvalidArgument("--launcher '" + o.launcher +
                                   "' (accepted: mpirun, torchrun, ulfm)");
  }
  if (o.launcher == "ulfm" && o.recovery != "in-job") {
    return Status::InvalidArgument(
        "--launcher ulfm recovers in-job (the job repairs its own MPI world): give "
        "--recovery in-job");
  }
  if (o.recovery == "in-job" && o.spares % o.ranks_per_node != 0) {
    return Status::InvalidArgument("--spares " + std::to_string(o.spares) +
                                   " must be a multiple of --ranks-per-node " +
                                   std::to_string(o.ranks_per_node) +
                                   " (spares replace whole nodes; the rest could never serve)");
  }
  const std::vector<std::string> starter = o.launcher == "torchrun" ? o.torchrun : Mpirun(o);
  if (starter.empty() || FindExecutable(starter.front()).empty()) {
    const char* hint =
        o.launcher == "torchrun" ? " (give its path with --torchrun, e.g. .venv/bin/torchrun)"
        : o.launcher == "ulfm"   ? " (an mpirun with ULFM, e.g. Open MPI 5's, given with --mpirun; "
                                   "by default the one memento was built against, "
                                   "MEMENTO_ULFM_MPI_HOME)"
                                 : "";
    return Status::NotFound(o.launcher + " not found: '" +
                            (starter.empty() ? std::string() : starter.front()) + "'" + hint);
  }
  if (o.max_restarts < 0) return Status::InvalidArgument("--max-restarts must be >= 0");
  if (o.recovery != "relaunch" && o.recovery != "in-job") {
    return Status::InvalidArgument("--recovery '" + o.recovery +
                                   "' (accepted: relaunch, in-job)");
  }
  if (o.spares < 0) return Status::InvalidArgument("--spares must be >= 0");
  if (o.spares > 0 && o.recovery != "in-job") {
    return Status::InvalidArgument("--spares " + std::to_string(o.spares) +
                                   " needs --recovery in-job (a relaunch starts every rank anew)");
  }
  if (!(o.injob_timeout_s > 0)) return Status::InvalidArgument("--injob-timeout must be > 0");
  if (!(o.backoff_s >= 0)) return Status::InvalidArgument("--backoff must be >= 0");
  return Status::Ok();
}

}  // namespace memento::launch
