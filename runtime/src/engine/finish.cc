// A run's start and end under one job id: its lineage, drawn when it first
// saves or restores (Prepare); Checkpointer::Finish, and what a later
// Restore makes of it: a run that finished normally is marked so, in its
// node stores and on the remote tier, and a later run under the same job id
// starts fresh instead of continuing it, unless Config::resume_finished.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "engine/checkpointer_impl.h"
#include "memento/runtime/log.h"
#include "memento/runtime/shm_segment.h"

namespace memento::runtime {

uint64_t Checkpointer::Impl::DrawLineage() {
  // Rank 0's draw is the run's (it travels with Prepare's topology records):
  // its start time (ns), the low bits random, distinct per run and growing
  // with the time a run started, which is how Restore picks the newest.
  const uint64_t now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  return (now & ~uint64_t{0xFFFF}) | (std::random_device()() & 0xFFFF) | 1;
}

namespace {

using RunVersion = std::pair<uint64_t, uint64_t>;  // (lineage, version)

// One rank's view in the check's allgather.
struct FinishedView {
  uint64_t has_mark = 0, mark_lineage = 0, mark_version = 0;
  uint64_t has_newest = 0, newest_lineage = 0, newest_version = 0;
};

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string LineageText(uint64_t lineage) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(lineage));
  return buf;
}

void Newer(const FinishedRun& run, std::optional<FinishedRun>* mark) {
  if (!*mark || run.lineage > (*mark)->lineage) *mark = run;
}

void Newer(const RunVersion& v, std::optional<RunVersion>* newest) {
  if (!*newest || v > **newest) *newest = v;
}

void SeeStore(const NodeStore& store, std::optional<FinishedRun>* mark,
              std::optional<RunVersion>* newest) {
  if (std::optional<FinishedRun> m = store.Finished()) Newer(*m, mark);
  for (const SlotState& slot : store.Inventory().slots) {
    if (slot.ok) Newer({slot.lineage, slot.version}, newest);
  }
}

}  // namespace

Result<RestoreReport> Checkpointer::Impl::Restore() {
  if (finished_) return Status::FailedPrecondition("Restore: the checkpointer is closed (Finish)");
  MEMENTO_RETURN_IF_ERROR(Prepare());
  // Nothing in flight while the check's collective runs (the commit thread
  // issues a version's collectives).
  (void)Wait();
  if (persister_) (void)persister_->WaitIdle();
  std::optional<FinishedRun> resumed;
  Result<RestoreReport> restored = Status::Internal("Restore: not run");
  if (elastic_) {
    MEMENTO_ASSIGN_OR_RETURN(resumed, CheckFinishedRun());
    restored = RestoreNewest(nullptr);
  } else {
    // The check's records ride on the restore's inventory allgather.
    restored = RestoreNewest(&resumed);
  }
  if (restored.ok()) {
    last_started_.reset();
    last_save_failed_ = false;  // the buffers hold a committed version again
    if (pipeline_) snapshot_failure_seen_.store(pipeline_->starts());
    if (resumed) ClearFinishedMarks(*resumed);
  }
  return restored;
}

void Checkpointer::Impl::LocalFinishedView(std::optional<FinishedRun>* mark,
                                           std::optional<RunVersion>* newest) const {
  SeeStore(store_, mark, newest);
  for (const std::string& name : elastic_aside_) {
    Result<NodeStore> aside = NodeStore::AttachAside(name);
    if (aside.ok()) SeeStore(*aside, mark, newest);
  }
  if (!remote_ || transport_->rank() != 0) return;
  Result<std::optional<FinishedRun>> remote_mark = remote_->ReadFinished();
  if (!remote_mark.ok()) {
    Log(LogLevel::kWarn,
        "remote: the finished mark is taken as absent: " + remote_mark.status().ToString());
  } else if (remote_mark->has_value()) {
    Newer(**remote_mark, mark);
  }
  Result<std::vector<uint64_t>> complete = remote_->ListComplete();
  if (!complete.ok()) return;  // the restore's inventory reports it
  for (uint64_t v : *complete) {
    Result<RemoteManifest> manifest = remote_->ReadManifest(v);
    if (manifest.ok()) Newer({manifest->lineage, v}, newest);
  }
}

std::vector<uint8_t> Checkpointer::Impl::FinishedViewRecord() const {
  std::optional<FinishedRun> mark;
  std::optional<RunVersion> newest;
  LocalFinishedView(&mark, &newest);
  FinishedView mine;
  if (mark) mine = {1, mark->lineage, mark->version, 0, 0, 0};
  if (newest) {
    mine.has_newest = 1;
    mine.newest_lineage = newest->first;
    mine.newest_version = newest->second;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(&mine);
  return std::vector<uint8_t>(p, p + sizeof(mine));
}

Result<std::optional<FinishedRun>> Checkpointer::Impl::CheckFinishedRun() {
  const std::vector<uint8_t> mine = FinishedViewRecord();
  MEMENTO_ASSIGN_OR_RETURN(auto all, transport_->Allgather(mine.data(), mine.size()));
  return DecideFinishedRun(all);
}

Result<std::optional<FinishedRun>> Checkpointer::Impl::DecideFinishedRun(
    const std::vector<std::vector<uint8_t>>& all) {
  std::optional<FinishedRun> finished;
  std::optional<RunVersion> run_newest;
  for (const auto& raw : all) {
    if (raw.size() != sizeof(FinishedView)) {
      return Status::Internal("Restore: malformed finished-run record");
    }
    FinishedView v;
    std::memcpy(&v, raw.data(), sizeof(v));
    if (v.has_mark != 0) Newer(FinishedRun{v.mark_lineage, v.mark_version, 0}, &finished);
    if (v.has_newest != 0) Newer({v.newest_lineage, v.newest_version}, &run_newest);
  }
  if (!finished) return std::optional<FinishedRun>();
  // A run started after the finished one (lineages grow with start time),
  // or the finished one continued past its mark (resumed): restored as usual.
  if (run_newest && *run_newest > RunVersion{finished->lineage, finished->version}) {
    return std::optional<FinishedRun>();
  }
  const std::string job = "job '" + config_.job + "'";
  const std::string step = std::to_string(finished->version);
  const bool left = run_newest && run_newest->first == finished->lineage;
  if (config_.resume_finished && left) {
    Log(LogLevel::kInfo,
        job + ": resuming the run that finished at step " + step + " (MEMENTO_RESUME_FINISHED=1)");
    return finished;
  }
  std::string why;
  if (config_.resume_finished) {
    why = job + ": the run that finished at step " + step +
          " left no version to resume (its node stores were freed and the remote tier holds "
          "none of its versions); starting fresh";
  } else {
    why = job + ": the last run finished at step " + step +
          " (it closed normally); starting fresh instead of continuing it. To continue it, set "
          "MEMENTO_RESUME_FINISHED=1 (Python: resume_finished=True)";
  }
  Log(transport_->rank() == 0 ? LogLevel::kWarn : LogLevel::kDebug, why);
  return Status::NotFound("nothing to restore: " + why);
}

void Checkpointer::Impl::ClearFinishedMarks(const FinishedRun& run) {
  if (std::optional<FinishedRun> m = store_.Finished(); m && m->lineage == run.lineage) {
    if (Status s = store_.ClearFinished(); !s.ok()) {
      Log(LogLevel::kWarn, "node store: removing the finished mark: " + s.ToString());
    }
  }
  if (remote_ && transport_->rank() == 0) {
    if (Status s = remote_->ClearFinished(run.lineage); !s.ok()) {
      Log(LogLevel::kWarn,
          "remote: removing the finished mark (a relaunch before this run's "
          "next commit would start fresh): " +
              s.ToString());
    }
  }
}

Status Checkpointer::Impl::Finish() {
  if (finished_) return Status::Ok();
  finished_ = true;
  if (!prepared_) return Status::Ok();  // nothing was saved or restored: nothing to mark
  const std::string job = "job '" + config_.job + "'";
  Status waited = Wait();
  // The mark follows the run's last manifest. A failed last persist leaves
  // the node stores the only copy of the versions after the remote's newest.
  const Status persisted = persister_ ? persister_->WaitIdle() : Status::Ok();
  if (Status broken = committer_->broken(); !broken.ok()) {
    // The transport is unusable: no agreement is possible, and none is needed.
    Log(LogLevel::kWarn, job + ": not marked finished: checkpointing had stopped (" +
                             broken.ToString() + "); a relaunch restores as after a failure");
    return waited.ok() ? broken : waited;
  }
  const std::optional<uint64_t> latest = committer_->latest();
  const bool mine =
      waited.ok() && latest && !last_save_failed_ && (!last_started_ || *last_started_ <= *latest);
  Result<bool> all = transport_->AllTrue(mine);
  if (!all.ok()) return waited.ok() ? all.status().WithContext("Finish") : waited;
  if (!*all) {
    std::string why = !latest             ? "no version committed"
                      : last_save_failed_ ? "this rank's last save failed"
                      : !mine
                          ? "this rank's last version (v" +
                                std::to_string(last_started_.value_or(*latest)) + ") did not commit"
                          : "another rank's last version or save failed";
    Log(latest ? LogLevel::kWarn : LogLevel::kInfo,
        job + ": not marked finished (" + why + "); a relaunch restores as after a failure");
    return waited;
  }
  const FinishedRun run{lineage_, *latest, NowNs()};
  if (Status s = store_.MarkFinished(run); !s.ok()) {
    Log(LogLevel::kWarn, "node store: marking it finished: " + s.ToString());
  }
  bool remote_ok = true;
  if (remote_) {
    if (transport_->rank() == 0) {
      Status s = remote_->WriteFinished(run);
      if (!s.ok()) {
        Log(LogLevel::kWarn, job + ": the remote tier's finished mark was not written (" +
                                 s.ToString() + "); the node stores are kept, marked finished");
        remote_ok = false;
      }
    }
    if (!persisted.ok()) {
      Log(LogLevel::kWarn, job + ": the last persist failed (" + persisted.ToString() +
                               "); the node stores are kept, marked finished");
    }
    // Without the remote mark, the marks in memory are all that keep a
    // later run from restoring the remote versions of this one; without the
    // last persist, memory is all that holds its last versions.
    Result<bool> agreed = transport_->AllTrue(remote_ok && persisted.ok());
    remote_ok = agreed.ok() && *agreed;
  }
  std::string memory = "kept, marked finished";
  if (!config_.keep_finished && remote_ok) {
    Status gone = ShmSegment::Unlink(store_.segment_name());
    memory = gone.ok() ? "unlinked" : "not unlinked (" + gone.ToString() + ")";
  }
  Log(LogLevel::kInfo, job + ": run " + LineageText(run.lineage) + " finished at step " +
                           std::to_string(run.version) + "; node store " + store_.segment_name() +
                           " " + memory + (remote_ ? "; marked on the remote tier" : ""));
  // Not reported by Wait(): the run's end is not on the remote tier.
  return persisted.WithContext("Finish: the last persist failed; the node stores are kept");
}

}  // namespace memento::runtime
