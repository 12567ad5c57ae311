#include "persist/persister.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "memento/common/check.h"
#include "memento/runtime/log.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

// Sends rank 0 a "still writing" record of `version` every `every` while it
// lives (none when `every` is zero): a rank file that takes longer to write
// than the transport's timeout then does not time out rank 0's wait for its
// final record (under gloo a timed-out receive leaves the transport unusable,
// and every later commit would fail). A failed send ends the beats; rank 0's
// wait then ends as it did before.
class Heartbeat {
 public:
  Heartbeat(Transport* transport, uint64_t version, std::chrono::milliseconds every)
      : transport_(transport), version_(version), every_(every) {
    if (every_.count() > 0) thread_ = std::thread([this] { Run(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    wire::PersistRecord beat;
    beat.version = version_;
    beat.writing = true;
    const std::vector<uint8_t> record = wire::EncodePersistRecord(beat);
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, every_, [this] { return stop_; })) {
      lock.unlock();
      const Status sent = transport_->Send(0, wire::kTagPersistDone, record.data(), record.size());
      lock.lock();
      if (!sent.ok()) return;
    }
  }

  Transport* const transport_;
  const uint64_t version_;
  const std::chrono::milliseconds every_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Persister::Persister(std::shared_ptr<RemoteStore> remote, std::shared_ptr<Transport> transport,
                     const NodeStore* store, SlotAllocator* slots, std::vector<std::string> names,
                     std::vector<EntryLayout> layouts, int keep, StageHook hook,
                     std::vector<int> file_of_rank)
    : remote_(std::move(remote)),
      transport_(std::move(transport)),
      store_(store),
      slots_(slots),
      names_(std::move(names)),
      layouts_(std::move(layouts)),
      keep_(keep),
      hook_(std::move(hook)),
      file_of_rank_(std::move(file_of_rank)) {
  thread_ = std::thread([this] { Loop(); });
}

Persister::~Persister() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Persister::Enqueue(uint64_t version, int slot) {
  slots_->Pin(slot);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({version, slot});
  }
  cv_.notify_all();
}

Status Persister::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  return last_;
}

void Persister::Loop() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Queued work is finished before stopping: a persist that was promised
      // is not dropped by a clean shutdown.
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    Status local;
    Status s = PersistOne(job, &local);
    if (!s.ok())
      Log(LogLevel::kWarn, "persist of v" + std::to_string(job.version) + ": " + s.ToString());
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_ = s;
      busy_ = false;
    }
    cv_.notify_all();
  }
}

Status Persister::PersistOne(const Job& job, Status* local) {
  // The run that wrote the version, for the rank file's name and the
  // manifest (rank 0's slot).
  const StoreInventory slots = store_->Inventory();
  const uint64_t lineage = slots.slots.at(job.slot).lineage;
  RankFileInfo info;
  {
    const bool beats = transport_->rank() != 0 && transport_->size() > 1;
    Heartbeat beat(transport_.get(), job.version,
                   beats ? transport_->timeout() / 4 : std::chrono::milliseconds(0));
    *local = WriteLocal(job, lineage, &info);
  }
  // The slot has been read: release it before the (possibly slow) exchange.
  slots_->Unpin(job.slot);
  return CollectAndPublish(job.version, lineage, info, *local);
}

Status Persister::WriteLocal(const Job& job, uint64_t lineage, RankFileInfo* info) {
  if (hook_) MEMENTO_RETURN_IF_ERROR(hook_(Stage::kPersist, job.version));
  std::vector<RemoteEntrySource> sources;
  sources.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, store_->ReadRegion(job.slot, static_cast<int>(i)));
    if (view.version != job.version) {
      return Status::FailedPrecondition("slot " + std::to_string(job.slot) + " holds v" +
                                        std::to_string(view.version) + ", not v" +
                                        std::to_string(job.version));
    }
    // The seal goes along: the rank file's crcs are computed from the slot's
    // bytes, so bytes damaged since the commit are refused rather than
    // persisted under crcs of their own.
    sources.push_back({names_[i], view.data, view.length, layouts_[i], view.crc});
  }
  MEMENTO_ASSIGN_OR_RETURN(
      *info, remote_->WriteRankFile(job.version, FileOf(transport_->rank()), sources, lineage));
  if (!store_->StillSealed(job.slot, job.version)) {
    // Cannot happen while the slot is pinned; guard the remote tier anyway.
    return Status::Internal("slot " + std::to_string(job.slot) + " was rewritten during persist");
  }
  return Status::Ok();
}

Status Persister::CollectAndPublish(uint64_t version, uint64_t lineage, RankFileInfo own,
                                    const Status& own_status) {
  const int rank = transport_->rank();
  const int size = transport_->size();
  own.rank = FileOf(rank);
  if (rank != 0) {
    auto record = wire::EncodePersistRecord({version, own_status.ok(), false, own});
    MEMENTO_RETURN_IF_ERROR(transport_->Send(0, wire::kTagPersistDone, record.data(), record.size()));
    return own_status;
  }
  // Indexed by file number (see file_of_rank).
  std::vector<RankFileInfo> ranks(size);
  ranks[FileOf(0)] = own;
  Status all = own_status.WithContext("rank 0");
  // The files whose writers are done (a final record came): what a failed
  // persist removes, since no manifest will name them.
  std::vector<int> done{FileOf(0)};
  std::vector<uint8_t> buf(wire::kMaxPersistRecord);
  for (int r = 1; r < size; ++r) {
    // A record of an older version is one rank 0 stopped waiting for (it
    // timed out there): drop it and read on, so that one late rank does not
    // pair every later record with the wrong version. Every rank is asked,
    // whatever failed before, so that no record stays behind for the next
    // version.
    Status rank_status;
    for (;;) {
      auto got = transport_->Recv(r, wire::kTagPersistDone, buf.data(), buf.size());
      if (!got.ok()) {
        rank_status = got.status().WithContext("waiting for rank " + std::to_string(r));
        break;
      }
      auto record = wire::DecodePersistRecord(buf.data(), *got);
      if (!record.ok()) {
        rank_status = record.status();
        break;
      }
      const uint64_t their_version = record->version;
      const bool ok = record->ok;
      // Still writing (this version: wait on; an older one rank 0 gave up
      // on: its final record is dropped below, once).
      if (record->writing && their_version <= version) continue;
      ranks[FileOf(r)] = record->file;
      if (their_version < version) {
        Log(LogLevel::kWarn, "persist v" + std::to_string(version) + ": dropping rank " +
                                 std::to_string(r) + "'s late record of v" +
                                 std::to_string(their_version));
        continue;
      }
      if (their_version == version) done.push_back(FileOf(r));
      if (their_version > version) {  // versions are persisted in commit order on every rank
        rank_status = Status::Internal("rank " + std::to_string(r) + " reported v" +
                                       std::to_string(their_version));
      } else if (!ok) {
        rank_status =
            Status::Unavailable("rank " + std::to_string(r) + " failed to write its file");
      }
      break;
    }
    ranks[FileOf(r)].rank = FileOf(r);
    if (!rank_status.ok() && all.ok()) all = rank_status;
  }
  if (all.ok() && hook_) all = hook_(Stage::kManifest, version);
  if (all.ok()) all = remote_->WriteManifest(version, size, ranks, lineage);
  if (!all.ok()) {
    if (Status discarded = remote_->DiscardUnpublished(version, lineage, done); !discarded.ok()) {
      Log(LogLevel::kWarn, "persist v" + std::to_string(version) +
                               ": removing the files no manifest names failed: " +
                               discarded.ToString());
    }
    return all.WithContext("persist v" + std::to_string(version) + ": no manifest");
  }
  Log(LogLevel::kInfo, "persisted v" + std::to_string(version) + " to " + remote_->Describe());
  // The version is persisted whatever pruning older ones does.
  Status pruned = remote_->Prune(keep_);
  if (!pruned.ok()) {
    Log(LogLevel::kWarn, "persisted v" + std::to_string(version) +
                             ", but pruning older versions failed: " + pruned.ToString());
  }
  return Status::Ok();
}

}  // namespace memento::runtime
