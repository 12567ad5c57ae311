#include "engine/committer.h"

#include <string>

#include "memento/runtime/log.h"

namespace memento::runtime {

Committer::Committer(Parts parts) : parts_(std::move(parts)) {
  thread_ = std::thread([this] { Loop(); });
}

Committer::~Committer() {
  (void)Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Committer::Begin() {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ = true;
}

void Committer::Submit(uint64_t version, int slot, bool persistable) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = true;
    job_ = Job{version, slot, persistable};
  }
  cv_.notify_all();
}

void Committer::SubmitTask(std::function<Status()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Committer::WaitVersion() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !in_flight_; });
}

Status Committer::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !in_flight_ && tasks_.empty() && !task_running_; });
  Status s = std::move(unreported_);
  unreported_ = Status::Ok();
  return s.ok() ? broken_ : s;
}

Status Committer::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

std::optional<uint64_t> Committer::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

void Committer::SetLatest(uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = version;
}

void Committer::Loop() {
  while (true) {
    Job job;
    std::function<Status()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || job_.has_value() || !tasks_.empty(); });
      if (!tasks_.empty()) {
        task = std::move(tasks_.front());
        tasks_.pop_front();
        task_running_ = true;
      } else if (!job_) {
        return;
      } else {
        job = std::move(*job_);
        job_.reset();
      }
    }
    if (task) {
      Status s = task();
      if (!s.ok()) {
        Log(LogLevel::kWarn, "background task on the commit thread failed: " + s.ToString());
        s = Broke(s);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!s.ok() && unreported_.ok()) unreported_ = s;
        task_running_ = false;
      }
      cv_.notify_all();
      continue;
    }
    bool committed = false;
    Status s = CommitOne(job, &committed);
    if (!committed && parts_.after_failure) parts_.after_failure(job.version);
    if (!s.ok()) {
      Log(LogLevel::kWarn, "v" + std::to_string(job.version) +
                               (committed ? " committed, then " : " not committed: ") +
                               s.ToString());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok() && unreported_.ok()) unreported_ = s;
      in_flight_ = false;
    }
    cv_.notify_all();
  }
}

Status Committer::Broke(Status failed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = failed.WithContext("checkpointing stopped (relaunch the job to restore)");
  return failed;
}

Status Committer::RunHook(Stage stage, uint64_t version) const {
  if (!parts_.hook) return Status::Ok();
  return parts_.hook(stage, version);
}

Status Committer::CommitOne(const Job& job, bool* committed) {
  const std::string v = "v" + std::to_string(job.version);
  const Status local = SealLocal(job);
  auto all = parts_.transport->AllTrue(local.ok());
  if (!all.ok()) {
    // The collective itself failed (a dead peer): the outcome elsewhere is
    // unknown, so the sealed slot stays as it is; Restore's agreement decides.
    return Broke(all.status().WithContext("commit of " + v));
  }
  if (!*all) {
    // Never restorable, and free for the next version.
    if (job.slot != kNoSlot) (void)parts_.store->Invalidate(job.slot);
    if (!local.ok()) return local.WithContext(v + " (this rank)");
    return Status::Unavailable(v + " not committed: another rank failed to seal it");
  }
  *committed = true;  // on every rank, whatever happens here next
  const Status marked = MarkCommitted(job);
  if (parts_.after_commit) {
    Status after = parts_.after_commit(job.version);
    if (!after.ok()) return Broke(after.WithContext("after the commit of " + v));
  }
  MEMENTO_RETURN_IF_ERROR(marked);
  return RunHook(Stage::kCommitted, job.version);
}

Status Committer::SealLocal(const Job& job) {
  // Every stage is ended, whatever failed before, so that each can drain its
  // version; the first failure is this rank's "false" vote.
  Status local = parts_.pipeline->WaitCopied();
  auto keep_first = [&local](const Status& s) {
    if (local.ok()) local = s;
  };
  keep_first(parts_.crcs->End(job.version, local));
  for (ChunkStage* stage : parts_.stages) keep_first(stage->End(job.version, local));
  if (local.ok()) local = RunHook(Stage::kSeal, job.version);
  for (size_t i = 0; local.ok() && i < parts_.entry_bytes.size(); ++i) {
    const int entry = static_cast<int>(i);
    local = parts_.store->SealRegion(job.slot, entry, parts_.entry_bytes[i],
                                     parts_.crcs->entry_crc(entry));
  }
  if (local.ok()) local = parts_.store->SealSlot(job.slot, job.version);
  if (local.ok()) local = RunHook(Stage::kCommit, job.version);
  return local;
}

Status Committer::MarkCommitted(const Job& job) {
  NodeStore* store = parts_.store;
  const Status marked = store->MarkCommitted(job.slot, job.version);
  if (marked.ok()) {
    // An older copy of the same version (the one a full re-protect replaced,
    // or a failed attempt left sealed) goes only now that this one is
    // committed.
    for (const SlotState& st : store->Inventory().slots) {
      if (st.slot != job.slot && (st.sealed || st.writing) && st.version == job.version) {
        (void)store->Invalidate(st.slot);
      }
    }
    // Before the version is the latest (below): the next Save, which may
    // start once it is, must find this slot held.
    parts_.slots->SetCommitted(job.slot);
  }
  // The version is committed on every rank (the vote agreed): it counts here
  // whatever marking this store did, so that every rank persists the same
  // versions; the persist exchange pairs rank 0's version with each rank's
  // record, and one rank counting one commit fewer would leave every later
  // persist of the run without a manifest. A slot that could not be marked
  // fails this rank's part of that persist (its file is not written).
  bool persist = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = job.version;
    if (job.persistable) {
      ++commits_;
      persist = parts_.persister != nullptr && parts_.persist_every > 0 &&
                commits_ % static_cast<uint64_t>(parts_.persist_every) == 0;
    }
  }
  if (persist) parts_.persister->Enqueue(job.version, job.slot);
  return marked;
}

}  // namespace memento::runtime
