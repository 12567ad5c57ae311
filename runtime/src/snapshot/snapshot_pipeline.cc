#include "snapshot/snapshot_pipeline.h"

#include <algorithm>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {

SnapshotPipeline::SnapshotPipeline(int threads, std::vector<ChunkStage*> stages,
                                   std::function<Status(Stage, uint64_t)> hook, bool staged_device)
    : stages_(std::move(stages)), staged_device_(staged_device), hook_(std::move(hook)) {
  MEMENTO_CHECK_GE(threads, 1);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

SnapshotPipeline::~SnapshotPipeline() {
  (void)WaitCopied();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

Status SnapshotPipeline::Start(uint64_t version, int slot, const std::vector<CopyTask>* tasks,
                               void* producer_stream, void* producer_event) {
  // Every stage begins the version, even after one refused or before the
  // fence fails: the commit ends every stage, each for the version it began
  // (and a protect stage that began tells its peers the version failed).
  Status failed = Status::Ok();
  for (ChunkStage* stage : stages_) {
    Status begun = stage->Begin(version, slot, static_cast<int>(tasks->size()));
    if (!begun.ok() && failed.ok()) failed = begun;
  }
  const bool has_device = std::any_of(tasks->begin(), tasks->end(),
                                      [](const CopyTask& t) { return t.gpu != kHostMemory; });
  if (failed.ok() && has_device) {
    failed = producer_event != nullptr ? fence_.Adopt(producer_event)
                                       : fence_.Record(producer_stream);
  }
  if (!failed.ok()) return FailToStart(version, slot, failed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    MEMENTO_CHECK(!running_);
    // Written before next_ resets: a worker may claim a chunk of this
    // version without waiting on work_cv_.
    // A version of host buffers alone touches none of the device state.
    device_copies_.clear();
    host_pending_ = tasks->size();
    has_device_ = has_device;
    if (has_device && !staged_device_) {
      device_slot_.assign(tasks->size(), 0);
      for (size_t i = 0; i < tasks->size(); ++i) {
        const CopyTask& t = (*tasks)[i];
        if (CopiedByWorker(t)) continue;
        --host_pending_;
        device_slot_[i] = device_copies_.size();
        device_copies_.push_back({t.dst, t.src, t.length, t.gpu});
      }
    }
    device_queued_ = device_copies_.empty();
    device_count_ = 0;
    device_error_ = Status::Ok();
    queue_claimed_.store(false);
    tasks_ = tasks;
    version_ = version;
    slot_ = slot;
    error_ = Status::Ok();
    next_.store(0);
    first_landed_.store(false);
    remaining_ = tasks->size();
    running_ = remaining_ > 0;
    ++generation_;
    ++starts_;
  }
  work_cv_.notify_all();
  return Status::Ok();
}

Status SnapshotPipeline::StartWithoutSlot(uint64_t version, const Status& why) {
  // A stage's refusal adds nothing: the version has failed already.
  for (ChunkStage* stage : stages_) (void)stage->Begin(version, kNoSlot, 0);
  return FailToStart(version, kNoSlot, why);
}

Status SnapshotPipeline::FailToStart(uint64_t version, int slot, const Status& why) {
  // Nothing is copied; WaitCopied reports this version's failure (not the
  // previous version's outcome), so the rank votes "false" at the commit.
  std::lock_guard<std::mutex> lock(mu_);
  MEMENTO_CHECK(!running_);
  version_ = version;
  slot_ = slot;
  ++starts_;
  error_ = why.WithContext("snapshot of v" + std::to_string(version) + " not started");
  return why;
}

Status SnapshotPipeline::WaitCopied() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return !running_; });
  return error_;
}

Status SnapshotPipeline::WaitReleased() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!has_device_) {
    done_cv_.wait(lock, [this] { return !running_; });
    return error_;
  }
  done_cv_.wait(lock, [this] { return !running_ || (host_pending_ == 0 && device_queued_); });
  if (!running_ || device_copies_.empty()) return error_;
  // Every device copy is queued, each device's round-robin on its lanes, each
  // lane in order: the last copy of every lane landed means all did.
  lock.unlock();
  Status landed = batch_.WaitAll();
  lock.lock();
  if (!error_.ok()) return error_;
  if (!device_error_.ok()) return device_error_;
  return landed;
}

void SnapshotPipeline::QueueDeviceCopies() {
  size_t queued = 0;
  Status s = batch_.Queue(device_copies_, &fence_, &queued);
  {
    std::lock_guard<std::mutex> lock(mu_);
    device_count_ = queued;
    device_error_ = s;
    device_queued_ = true;
  }
  done_cv_.notify_all();
}

Status SnapshotPipeline::LandDeviceChunk(size_t index, uint32_t* crc) {
  if (!queue_claimed_.exchange(true)) QueueDeviceCopies();
  const size_t k = device_slot_[index];
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return device_queued_; });
    if (k >= device_count_) {
      return device_error_.ok() ? Status::Internal("device chunk not queued") : device_error_;
    }
  }
  MEMENTO_RETURN_IF_ERROR(batch_.Landed(k));
  const CopyTask& task = (*tasks_.load())[index];
  erasure::Crc32cStream stream;
  stream.Update(task.dst, task.length);
  *crc = stream.value();
  return Status::Ok();
}

void SnapshotPipeline::WorkerLoop() {
  MarkRuntimeThread();
  std::unique_ptr<StagedCopier> staged;  // freed when the worker ends
  uint64_t seen = 0;
  bool has_device = false;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && running_); });
      if (stop_) return;
      seen = generation_;
      has_device = !device_copies_.empty();
    }
    // The device copies start before any chunk is hashed.
    if (has_device && !queue_claimed_.exchange(true)) QueueDeviceCopies();
    while (true) {
      size_t i = next_.fetch_add(1);
      if (i >= tasks_.load()->size()) break;
      RunTask(i, &staged);
    }
  }
}

void SnapshotPipeline::RunTask(size_t index, std::unique_ptr<StagedCopier>* staged) {
  const CopyTask& task = (*tasks_.load())[index];
  const uint64_t version = version_.load();
  Status status;
  uint32_t crc = 0;
  if (task.gpu != kHostMemory && staged_device_) {
    if (*staged == nullptr) *staged = std::make_unique<StagedCopier>(kStagedPieceBytes);
    erasure::Crc32cStream stream;
    status = (*staged)->ToHost(task.dst, task.src, task.length, task.gpu, &fence_, &stream);
    crc = stream.value();
  } else if (task.gpu != kHostMemory) {
    // Hashed in the pinned destination once landed, while the copy engine
    // moves the chunks queued after it.
    status = LandDeviceChunk(index, &crc);
  } else {
    // The store's copy is read next by the protect (from memory: a shard is
    // far larger than the cache), so it is written without reading its
    // lines first, and hashed from the source while that is in the cache.
    erasure::Crc32cStream stream;
    stream.UpdateCopy(task.dst, task.src, task.length);
    crc = stream.value();
  }
  if (status.ok()) {
    Chunk chunk;
    chunk.version = version;
    chunk.slot = slot_.load();
    chunk.entry = task.entry;
    chunk.offset = task.offset;
    chunk.length = task.length;
    chunk.data = task.dst;
    chunk.crc = crc;
    chunk.index = static_cast<int>(index);
    for (ChunkStage* stage : stages_) {
      Status s = stage->OnChunk(chunk);
      if (!s.ok() && status.ok()) status = s;
    }
    if (hook_ && !first_landed_.exchange(true)) {
      Status s = hook_(Stage::kSnapshot, version);
      if (!s.ok() && status.ok()) status = s.WithContext("fault hook at snapshot");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (CopiedByWorker(task)) --host_pending_;
  if (!status.ok() && error_.ok()) {
    error_ =
        status.WithContext("snapshot of v" + std::to_string(version) + " entry #" +
                           std::to_string(task.entry) + " offset " + std::to_string(task.offset));
  }
  if (--remaining_ == 0) running_ = false;
  // WaitReleased waits for the last host chunk, WaitCopied for the last chunk.
  if (!running_ || (CopiedByWorker(task) && host_pending_ == 0)) done_cv_.notify_all();
}

}  // namespace memento::runtime
