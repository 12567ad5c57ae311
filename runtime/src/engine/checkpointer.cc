#include "memento/runtime/checkpointer.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "engine/checkpointer_impl.h"
#include "memento/common/check.h"
#include "memento/common/strings.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_identity.h"
#include "recovery/elastic_restorer.h"
#include "recovery/recovery_executor.h"
#include "recovery/report_text.h"
#include "recovery/reprotector.h"
#include "recovery/shard_io.h"
#include "snapshot/device_copy.h"
#include "snapshot/page_runs.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The CPUs online, and those this process may run on (its affinity mask).
int OnlineCpus() { return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return OnlineCpus();
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

// ---- Checkpointer: forwards to Impl -------------------------------------------------------

Result<std::unique_ptr<Checkpointer>> Checkpointer::Create(Config config,
                                                           std::shared_ptr<Transport> transport,
                                                           std::shared_ptr<RemoteStore> remote,
                                                           FaultHooks hooks) {
  MEMENTO_RETURN_IF_ERROR(config.Validate());
  if (!transport) return Status::InvalidArgument("Checkpointer::Create: transport is null");
  MEMENTO_RETURN_IF_ERROR(config.CheckShmDir());
  if (!remote && !config.remote_dir.empty() && config.remote_format != "memento") {
    // The format lives above the runtime (the torch adapter brings "dcp").
    return Status::InvalidArgument(
        "MEMENTO_REMOTE_FORMAT=" + config.remote_format +
        " needs the torch adapter (memento::torch or the Python package), which writes that "
        "format; this Checkpointer was given no remote store for it");
  }
  if (!remote && !config.remote_dir.empty()) {
    // Checked now (a file, a read-only or pseudo file system, a missing
    // parent), not at the first persist; a relative path is resolved once.
    MEMENTO_ASSIGN_OR_RETURN(remote, DirectoryRemoteStore::Open(config.remote_dir, config.job));
  }
  auto impl = std::make_unique<Impl>(std::move(config), std::move(transport), std::move(remote),
                                     std::move(hooks));
  return std::unique_ptr<Checkpointer>(new Checkpointer(std::move(impl)));
}

Checkpointer::Checkpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpointer::~Checkpointer() = default;

Status Checkpointer::RegisterBuffer(const std::string& name, void* data, uint64_t bytes,
                                    EntryLayout layout) {
  return impl_->RegisterBuffer(name, data, bytes, std::move(layout));
}
Status Checkpointer::AddChunkStage(ChunkStage* stage) { return impl_->AddChunkStage(stage); }
Status Checkpointer::Prepare() { return impl_->Prepare(); }
Status Checkpointer::Save(uint64_t step) { return impl_->Save(step); }
void Checkpointer::NoteFailedSave() { impl_->NoteFailedSave(); }
Status Checkpointer::WaitSnapshot() { return impl_->WaitSnapshot(); }
Status Checkpointer::Wait() { return impl_->Wait(); }
Status Checkpointer::WaitPersist() { return impl_->WaitPersist(); }
Result<RestoreReport> Checkpointer::Restore() { return impl_->Restore(); }
Status Checkpointer::Finish() { return impl_->Finish(); }
std::optional<uint64_t> Checkpointer::LatestCommitted() const { return impl_->LatestCommitted(); }
RunPosition Checkpointer::Position() const { return impl_->Position(); }
void Checkpointer::ContinueRun(const RunPosition& position) { impl_->ContinueRun(position); }
Protection Checkpointer::ProtectionState() const { return impl_->ProtectionState(); }

const char* ProtectionName(Protection state) {
  switch (state) {
    case Protection::kProtected:
      return "protected";
    case Protection::kReprotecting:
      return "re-protecting";
    case Protection::kUnprotected:
      return "unprotected";
  }
  return "?";
}
void Checkpointer::SetDeviceStream(void* cuda_stream) { impl_->SetDeviceStream(cuda_stream); }
void Checkpointer::SetDeviceEvent(void* cuda_event) { impl_->SetDeviceEvent(cuda_event); }
double Checkpointer::BlockedSeconds() const { return impl_->BlockedSeconds(); }
bool Checkpointer::WouldSave(uint64_t step) const { return impl_->WouldSave(step); }
IntervalStats Checkpointer::Interval() const { return impl_->Interval(); }
int Checkpointer::rank() const { return impl_->rank(); }
const std::string& Checkpointer::node() const { return impl_->node(); }

// ---- Impl ----------------------------------------------------------------------------------

Checkpointer::Impl::Impl(Config config, std::shared_ptr<Transport> transport,
                         std::shared_ptr<RemoteStore> remote, FaultHooks hooks)
    : config_(std::move(config)),
      transport_(std::move(transport)),
      remote_(std::move(remote)),
      hooks_(std::move(hooks)),
      schedule_(config_.interval, config_.node_mtbf_h, hooks_.interval_clock) {}

Checkpointer::Impl::~Impl() {
  committer_view_ = nullptr;
  committer_.reset();  // waits for the in-flight version
  persister_.reset();  // finishes queued persists
  pipeline_.reset();
  protect_stage_.reset();
  for (void* p : pinned_ptrs_) UnpinHostMemory(p);
}

Status Checkpointer::Impl::RunHook(Stage stage, uint64_t version) const {
  if (!hooks_.at_stage) return Status::Ok();
  return hooks_.at_stage(stage, version)
      .WithContext(std::string("injected at ") + StageName(stage));
}

StageHook Checkpointer::Impl::Hook() {
  if (!hooks_.at_stage) return StageHook();
  return [this](Stage s, uint64_t v) { return RunHook(s, v); };
}

bool Checkpointer::Impl::RemoteWrittenByOtherRankCount() const {
  if (!remote_) return false;
  auto newest = remote_->NewestComplete();
  if (!newest.ok() || !newest->has_value()) return false;
  auto manifest = remote_->ReadManifest(**newest);
  return manifest.ok() && manifest->world_size != transport_->size();
}

Status Checkpointer::Impl::RegisterBuffer(const std::string& name, void* data, uint64_t bytes,
                                          EntryLayout layout) {
  if (prepared_) {
    return Status::FailedPrecondition("RegisterBuffer('" + name +
                                      "'): the layout is fixed once Prepare/Save/Restore ran");
  }
  if (name.empty() || name.size() > 1024) {
    return Status::InvalidArgument("RegisterBuffer: name must have 1..1024 bytes");
  }
  if (data == nullptr && bytes > 0) {
    return Status::InvalidArgument("RegisterBuffer('" + name + "'): null data");
  }
  for (const auto& e : entries_) {
    if (e.name == name) return Status::InvalidArgument("RegisterBuffer: '" + name + "' twice");
  }
  MEMENTO_RETURN_IF_ERROR(layout.Validate().WithContext("RegisterBuffer('" + name + "')"));
  RegisteredEntry entry;
  entry.name = name;
  entry.data = static_cast<uint8_t*>(data);
  entry.bytes = bytes;
  entry.layout = std::move(layout);
  entry.gpu = bytes > 0 ? DeviceOf(data) : kHostMemory;
  entries_.push_back(std::move(entry));
  return Status::Ok();
}

Status Checkpointer::Impl::AddChunkStage(ChunkStage* stage) {
  if (prepared_) return Status::FailedPrecondition("AddChunkStage after Prepare");
  if (stage == nullptr) return Status::InvalidArgument("AddChunkStage: null stage");
  extra_stages_.push_back(stage);
  return Status::Ok();
}

Status Checkpointer::Impl::Prepare() {
  if (prepared_) return Status::Ok();
  if (entries_.empty()) {
    return Status::FailedPrecondition("no buffer registered (RegisterBuffer before Save/Restore)");
  }
  // Where Prepare's time goes (debug log): its collectives, and the store
  // (a replacement creates and reserves a fresh one, survivors map theirs).
  const auto t0 = Clock::now();
  int lane = -1;
  MEMENTO_RETURN_IF_ERROR(LearnTopology(&lane));
  MEMENTO_RETURN_IF_ERROR(GatherCatalogs(lane));
  MEMENTO_RETURN_IF_ERROR(SetUpDeviceLink());
  const auto t1 = Clock::now();
  MEMENTO_RETURN_IF_ERROR(OpenStore(lane));
  const auto t2 = Clock::now();
  BuildStages();
  if (LogEnabled(LogLevel::kDebug)) {
    char line[160];
    std::snprintf(line, sizeof(line),
                  "prepare: settings, topology, lineage and catalogs %.3f s, store %.3f s, "
                  "stages %.3f s",
                  std::chrono::duration<double>(t1 - t0).count(),
                  std::chrono::duration<double>(t2 - t1).count(), SecondsSince(t2));
    Log(LogLevel::kDebug, line);
  }
  if (continued_ && continued_->latest) committer_->SetLatest(*continued_->latest);
  prepared_ = true;
  return Status::Ok();
}

std::vector<uint64_t> Checkpointer::Impl::EntryBytes() const {
  std::vector<uint64_t> bytes;
  for (const auto& e : entries_) bytes.push_back(e.bytes);
  return bytes;
}

Status Checkpointer::Impl::OpenStore(int lane) {
  const uint32_t node_index = static_cast<uint32_t>(protection_->node());
  StoreLayout layout;
  for (const auto& e : entries_) {
    RegionSpec spec;
    spec.kind = RegionKind::kShard;
    spec.name = e.name;
    spec.capacity = e.bytes;
    spec.owner_node = node_index;
    spec.owner_lane = static_cast<uint32_t>(lane);
    spec.layout = e.layout;
    layout.regions.push_back(std::move(spec));
  }
  if (protection_->protects()) protection_->ExtendStoreLayout(&layout);
  StoreId id{config_.job, node_, static_cast<uint32_t>(lane)};
  bool attached = false;
  // While an elastic restore is pending, a store of the new topology holds
  // nothing it needs (an earlier attempt's, e.g. with slices that did not
  // tile): replaced, not refused.
  const StalePolicy policy = elastic_ ? StalePolicy::kReplace : config_.stale_policy;
  auto store = NodeStore::OpenOrCreate(id, layout, config_.slots, policy, &attached,
                                       &set_aside_, store_catalog_);
  MEMENTO_RETURN_IF_ERROR(
      AllOk(*transport_, store.status().WithContext("Prepare: node store " + id.ToString()),
            Status::FailedPrecondition("Prepare: another rank failed to open its store")));
  store_ = std::move(store).value();
  slots_ = std::make_unique<SlotAllocator>(&store_);
  Log(LogLevel::kInfo, std::string(attached ? "attached" : "created") + " node store " +
                           store_.segment_name() + " (" + std::to_string(store_.segment_bytes()) +
                           " bytes)");
  return Status::Ok();
}

void Checkpointer::Impl::BuildStages() {
  const std::vector<uint64_t> entry_bytes = EntryBytes();
  // The chunk list, fixed for the lifetime of the layout.
  std::vector<int> chunk_entry;
  std::vector<uint64_t> chunk_length;
  const uint64_t chunk = config_.chunk_bytes;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    any_device_ = any_device_ || e.device();
    for (uint64_t off = 0; off < e.bytes; off += chunk) {
      CopyTask t;
      t.src = e.data + off;
      t.length = std::min(chunk, e.bytes - off);
      t.offset = off;
      t.entry = static_cast<int>(i);
      t.gpu = e.gpu;
      tasks_.push_back(t);
      chunk_entry.push_back(t.entry);
      chunk_length.push_back(t.length);
    }
  }
  crc_stage_.Reset(static_cast<int>(entries_.size()), std::move(chunk_entry),
                   std::move(chunk_length));
  std::vector<ChunkStage*> stages{&crc_stage_};
  if (protection_->protects()) {
    protect_stage_ = std::make_unique<ProtectStage>(&*protection_, &store_, transport_.get(),
                                                    config_.chunk_bytes, &crc_stage_, entry_bytes);
    stages.push_back(protect_stage_.get());
  }
  stages.insert(stages.end(), extra_stages_.begin(), extra_stages_.end());
  const StageHook hook = Hook();
  const int threads =
      config_.SnapshotThreads(any_device_, AffinityCpus(), OnlineCpus(), protection_->lanes());
  const bool staged = config_.device_copy == "staged";
  Log(LogLevel::kInfo,
      "snapshot: " + std::to_string(threads) + " worker threads (" +
          (config_.threads > 0 ? "MEMENTO_THREADS" : "auto") + ", " +
          (any_device_ ? "device" : "host") + " buffers)" +
          (any_device_ ? std::string(", device copies ") + config_.device_copy : std::string()));
  pipeline_ =
      std::make_unique<SnapshotPipeline>(threads, std::move(stages), hook, any_device_ && staged);
  if (remote_) {
    std::vector<std::string> names;
    std::vector<EntryLayout> layouts;
    for (const auto& e : entries_) {
      names.push_back(e.name);
      layouts.push_back(e.layout);
    }
    // Rank files are numbered by place in the layout (node * lanes + lane),
    // which a node keeps across relaunches, not by world rank, which a
    // relaunch may hand out in another order: the restore of a node reads
    // the file its place wrote, as the elastic restore reads old places.
    const ProtectionLayout& pl = *protection_;
    std::vector<int> file_of_rank(static_cast<size_t>(transport_->size()), 0);
    for (int node = 0; node < pl.num_nodes(); ++node) {
      for (int l = 0; l < pl.lanes(); ++l)
        file_of_rank.at(pl.rank_of(node, l)) = pl.place_of(node, l);
    }
    persister_ = std::make_unique<Persister>(remote_, transport_, &store_, slots_.get(),
                                             std::move(names), std::move(layouts),
                                             config_.persist_keep, hook, std::move(file_of_rank));
  }
  Committer::Parts parts;
  parts.transport = transport_.get();
  parts.store = &store_;
  parts.pipeline = pipeline_.get();
  parts.crcs = &crc_stage_;
  if (protect_stage_) parts.stages.push_back(protect_stage_.get());
  parts.stages.insert(parts.stages.end(), extra_stages_.begin(), extra_stages_.end());
  parts.entry_bytes = entry_bytes;
  parts.slots = slots_.get();
  parts.persister = persister_.get();
  parts.persist_every = config_.persist_every;
  parts.hook = hook;
  parts.after_commit = [this](uint64_t version) {
    // The newest version is protected as the scheme says.
    protection_state_ = Protection::kProtected;
    ReleaseAsideStores(version);
    if (!schedule_.automatic()) return Status::Ok();
    return schedule_.Agree(transport_.get(), protection_->num_nodes(), version);
  };
  // A version protecting a restored one (a full re-protect in the
  // background) that does not commit leaves the job unprotected until a
  // later version commits.
  parts.after_failure = [this](uint64_t) {
    Protection reprotecting = Protection::kReprotecting;
    protection_state_.compare_exchange_strong(reprotecting, Protection::kUnprotected);
  };
  committer_ = std::make_unique<Committer>(std::move(parts));
  committer_view_ = committer_.get();
}

Status Checkpointer::Impl::Save(uint64_t step) {
  const std::optional<uint64_t> before = last_started_;
  Status s = SaveCall(step);
  // A step the schedule passes over leaves the last failure standing.
  if (!s.ok()) {
    last_save_failed_ = true;
  } else if (last_started_ != before) {
    last_save_failed_ = false;
  }
  return s;
}

Status Checkpointer::Impl::SaveCall(uint64_t step) {
  const auto t0 = Clock::now();
  if (finished_) return Status::FailedPrecondition("Save: the checkpointer is closed (Finish)");
  MEMENTO_RETURN_IF_ERROR(Prepare());
  if (Status broken = committer_->broken(); !broken.ok()) {
    return broken.WithContext("Save(" + std::to_string(step) + ")");
  }
  // Checked before the schedule counts the call and before anything waits
  // (SaveNow checks again once the version in flight is decided).
  if (Status order = CheckStepIncreases(step); !order.ok()) return order;
  // Not this step: nothing waits, nothing is copied.
  if (!schedule_.Offer(step)) return Status::Ok();
  Status s = SaveNow(step);
  blocked_seconds_.store(blocked_seconds_.load() + SecondsSince(t0));
  schedule_.SaveReturned();
  return s;
}

Status Checkpointer::Impl::CheckStepIncreases(uint64_t step) const {
  if (const std::optional<uint64_t> latest = committer_->latest(); latest && step <= *latest) {
    return Status::InvalidArgument(
        "Save(" + std::to_string(step) + "): steps must increase; latest committed is v" +
        std::to_string(*latest) + " (after Restore, continue at its version + 1)");
  }
  return Status::Ok();
}

Status Checkpointer::Impl::SaveNow(uint64_t step) {
  // At most one version in flight; its outcome is Wait()'s to report. A
  // restore's background re-protect goes on: the slots it needs are pinned.
  committer_->WaitVersion();
  if (Status broken = committer_->broken(); !broken.ok()) {
    return broken.WithContext("Save(" + std::to_string(step) + ")");
  }
  MEMENTO_RETURN_IF_ERROR(CheckStepIncreases(step));
  schedule_.Saved(step);  // after Wait: the interval agreed at the last commit
  last_started_ = step;
  return StartVersion(step, /*persistable=*/true);
}

Status Checkpointer::Impl::StartVersion(uint64_t version, bool persistable) {
  const auto t0 = Clock::now();
  bool waited = false;
  const int slot = slots_->Acquire(&waited);
  // A slot freed within a few milliseconds (the persist was ending) is not
  // worth a warning that training stood still.
  constexpr double kWaitWorthSaying = 0.01;
  if (waited) {
    if (const double s = SecondsSince(t0); s >= kWaitWorthSaying) NoteSlotWait(version, s);
  }
  Status begun = RunHook(Stage::kSlot, version);
  if (begun.ok()) begun = store_.BeginWriteSlot(slot, version, lineage_);
  if (!begun.ok()) {
    // Still through every stage (without a slot) and the commit thread: the
    // protect stage tells the peers at once that this rank's part will not
    // come, and this rank votes "false" in the version's commit collective,
    // instead of leaving the others waiting for the transport's timeout
    // (which would stop checkpointing for the rest of the job).
    committer_->Begin();
    const Status failed = pipeline_->StartWithoutSlot(version, begun);
    committer_->Submit(version, kNoSlot, persistable);
    return failed;
  }
  for (CopyTask& t : tasks_) t.dst = store_.MutableRegion(slot, t.entry) + t.offset;
  if (any_device_ && pinned_slots_.count(slot) == 0) pinned_slots_[slot] = PinSlot(slot);
  committer_->Begin();
  Status started = pipeline_->Start(version, slot, &tasks_, device_stream_, device_event_);
  committer_->Submit(version, slot, persistable);
  // A stage refusing to begin still goes through the commit thread, so that
  // this rank votes "false" in the version's commit collective.
  return started;
}

void Checkpointer::Impl::NoteSlotWait(uint64_t version, double seconds) {
  // The caller stood still for it: said loudly once, then at info. What held
  // the slots is named by the remedy: a persist (the usual case, with 2
  // slots) or a restore's background re-protect.
  const LogLevel level = slot_waits_++ == 0 ? LogLevel::kWarn : LogLevel::kInfo;
  if (!LogEnabled(level)) return;
  char took[32];
  std::snprintf(took, sizeof(took), "%.3f", seconds);
  Log(level, "v" + std::to_string(version) + " waited " + took +
                 " s for a slot of the node store: every slot but the newest committed "
                 "version's was held by a persist still writing to the remote tier (or by a "
                 "restore's re-protect). MEMENTO_SLOTS=" +
                 std::to_string(config_.slots + 1) +
                 " (one shard of memory more) lets training go on while a persist writes; "
                 "a larger MEMENTO_PERSIST_EVERY persists less often");
}

bool Checkpointer::Impl::PinSlot(int slot) {
  // Staged copies move between the device and the driver's own buffers; the
  // store is registered only for the copy engine to reach it: direct copies,
  // and the NCCL link's copies between its staging and the store.
  if (config_.device_copy == "staged" && config_.device_transport == "off") return false;
  std::vector<std::pair<uintptr_t, uint64_t>> device;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].device()) continue;
    device.push_back({reinterpret_cast<uintptr_t>(store_.MutableRegion(slot, static_cast<int>(i))),
                      entries_[i].bytes});
  }
  const auto t0 = Clock::now();
  uint64_t bytes = 0;
  int runs = 0;
  bool all = true;
  for (const PageRun& run : PageRuns(std::move(device), static_cast<uint64_t>(getpagesize()))) {
    void* p = reinterpret_cast<void*>(run.begin);
    Status pin = PinHostMemory(p, run.end - run.begin);
    if (!pin.ok()) {
      Log(LogLevel::kWarn, "pinning slot memory: " + pin.ToString());
      all = false;
      continue;
    }
    pinned_ptrs_.push_back(p);
    bytes += run.end - run.begin;
    ++runs;
  }
  Log(LogLevel::kInfo, "slot " + std::to_string(slot) + ": " + std::to_string(bytes) +
                           " bytes of device entries' pages registered with the driver (" +
                           std::to_string(runs) + " ranges) in " +
                           std::to_string(SecondsSince(t0)) + " s");
  return all;
}

Status Checkpointer::Impl::WaitSnapshot() {
  if (!pipeline_) return Status::Ok();
  const auto t0 = Clock::now();
  const double start = schedule_.automatic() ? schedule_.Now() : 0;
  buffer_hold_->WaitReleased();
  // The buffers are free once copied; the hashing of device chunks goes on
  // behind (the commit waits for it).
  Status s = pipeline_->WaitReleased();
  blocked_seconds_.store(blocked_seconds_.load() + SecondsSince(t0));
  if (schedule_.automatic()) schedule_.AddBlocked(schedule_.Now() - start);
  if (!s.ok() && snapshot_failure_seen_.exchange(pipeline_->starts()) == pipeline_->starts()) {
    s = Status::Ok();
  }
  if (s.ok() && committer_) s = committer_->broken();
  return s;
}

Status Checkpointer::Impl::Wait() { return committer_ ? committer_->Wait() : Status::Ok(); }

Status Checkpointer::Impl::WaitPersist() {
  // A failed version does not stop the persists of the committed ones before
  // it: they are waited for whatever Wait() reports, which comes first.
  Status committed = Wait();
  Status persisted = persister_ ? persister_->WaitIdle() : Status::Ok();
  return committed.ok() ? persisted : committed;
}

std::optional<uint64_t> Checkpointer::Impl::LatestCommitted() const {
  const Committer* c = committer_view_.load();
  if (c != nullptr) return c->latest();
  return continued_ ? continued_->latest : std::nullopt;  // the run ContinueRun continues
}

double Checkpointer::Impl::BlockedSeconds() const { return blocked_seconds_.load(); }

// Set where it changes, on the thread that changes it: kReprotecting by the
// Restore that starts a background re-protect, kProtected by a commit,
// kUnprotected by a re-protect (task or version) that failed.
Protection Checkpointer::Impl::ProtectionState() const { return protection_state_.load(); }

Result<RestoreReport> Checkpointer::Impl::RestoreNewest(
    std::optional<FinishedRun>* finished_check) {
  MEMENTO_RETURN_IF_ERROR(Prepare());
  (void)Wait();
  if (persister_) (void)persister_->WaitIdle();
  schedule_.Reset();  // every rank schedules alike from the restored version on
  if (elastic_) return DroppingSetAside(RestoreElastic());
  // The restore's parts outlive Restore when its re-protect runs in the
  // background: the commit thread's task holds them.
  struct RestoreRun {
    std::unique_ptr<ShardIo> io;
    std::unique_ptr<Reprotector> reprotector;
    std::unique_ptr<RecoveryExecutor> executor;
  };
  auto run = std::make_shared<RestoreRun>();
  std::set<int> registered;
  for (const auto& [slot, all] : pinned_slots_) {
    if (all) registered.insert(slot);
  }
  run->io = std::make_unique<ShardIo>(&entries_, &store_, &*protection_, remote_.get(),
                                      transport_.get(), &device_copiers_, std::move(registered));
  Reprotector::Parts rp;
  rp.transport = transport_.get();
  rp.store = &store_;
  rp.layout = &*protection_;
  rp.io = run->io.get();
  rp.slots = slots_.get();
  rp.chunk_bytes = config_.chunk_bytes;
  rp.resnapshot = [this](uint64_t version, bool background) {
    return Resnapshot(version, background);
  };
  rp.protect = protect_stage_.get();
  rp.lineage = &lineage_;
  run->reprotector = std::make_unique<Reprotector>(std::move(rp));
  RecoveryExecutor::Parts parts;
  parts.transport = transport_.get();
  parts.store = &store_;
  parts.layout = &*protection_;
  parts.io = run->io.get();
  parts.slots = slots_.get();
  parts.reprotector = run->reprotector.get();
  parts.chunk_bytes = config_.chunk_bytes;
  parts.hook = Hook();
  parts.background = config_.background_reprotect;
  parts.buffers = buffer_hold_;
  // The restore adopts the lineage it restores from; a failed one leaves
  // this run's own.
  const uint64_t own_lineage = lineage_;
  parts.lineage = &lineage_;
  bool finished_refused = false;  // the finished-run check ruled the restore out
  if (finished_check != nullptr) {
    parts.rider = FinishedViewRecord();
    parts.on_gathered = [this, finished_check,
                         &finished_refused](const std::vector<std::vector<uint8_t>>& all) {
      Result<std::optional<FinishedRun>> check = DecideFinishedRun(all);
      finished_refused = !check.ok();
      if (!check.ok()) return check.status();
      *finished_check = *check;
      return Status::Ok();
    };
  }
  run->executor = std::make_unique<RecoveryExecutor>(std::move(parts));
  Result<RestoreReport> restored = run->executor->Run();
  if (!restored.ok()) lineage_ = own_lineage;
  if (finished_refused) return restored;
  // Before a background re-protect takes slots: nothing else writes them now.
  if (restored.ok()) DropPassedOverVersions(restored->version);
  if (restored.ok() && run->executor->reprotect_deferred()) {
    protection_state_ = Protection::kReprotecting;
    committer_->SubmitTask([this, run] {
      // No later version commits before this task ends.
      Result<bool> again = run->executor->RunDeferredReprotect();
      protection_state_ =
          again.ok() && *again ? Protection::kProtected : Protection::kUnprotected;
      return again.status();
    });
  } else if (restored.ok() && restored->protection == "protected") {
    protection_state_ = Protection::kProtected;
  } else if (restored.ok() && restored->protection == "unprotected") {
    protection_state_ = Protection::kUnprotected;
  }
  // Outcomes every rank reached alike (the planner's, from gathered data).
  const bool agreed_failure = restored.status().code() == StatusCode::kUnrecoverable ||
                              restored.status().code() == StatusCode::kNotFound;
  if (!restored.ok() && (config_.elastic || agreed_failure)) {
    // Memory of this topology could not serve and no store of another one
    // survives, and the newest remote version was written by another rank
    // count: resharded when elastic, else that is the error (the plan passed
    // over that version as unreadable). Every rank failed here; they decide
    // together, so that one whose remote read failed does not leave the
    // others in the elastic restore's collectives.
    Result<bool> other_count = transport_->AllTrue(RemoteWrittenByOtherRankCount());
    if (other_count.ok() && *other_count) {
      if (config_.elastic) return DroppingSetAside(RestoreElastic());
      return Status::ElasticRestoreNeeded(
          "no version of this topology can be restored, and the newest remote version was "
          "written by another number of ranks than this job's " +
          std::to_string(transport_->size()) + ": set MEMENTO_ELASTIC=1 to reshard it (" +
          restored.status().ToString() + ")");
    }
  }
  MEMENTO_ASSIGN_OR_RETURN(RestoreReport report, std::move(restored));
  committer_->SetLatest(report.version);  // the job's newest checkpoint, in memory or not
  return DroppingSetAside(std::move(report));
}

void Checkpointer::Impl::DropPassedOverVersions(uint64_t restored) {
  for (const SlotState& slot : store_.Inventory().slots) {
    if ((!slot.sealed && !slot.writing) || slot.lineage != lineage_ || slot.version <= restored) {
      continue;
    }
    Status dropped = store_.Invalidate(slot.slot);
    Log(dropped.ok() ? LogLevel::kInfo : LogLevel::kWarn,
        "node store: v" + std::to_string(slot.version) + " in slot " + std::to_string(slot.slot) +
            " is newer than the restored v" + std::to_string(restored) +
            " (not restorable on every rank); invalidated so that the run writes it anew: " +
            dropped.ToString());
  }
}

Result<RestoreReport> Checkpointer::Impl::DroppingSetAside(Result<RestoreReport> restored) {
  if (!restored.ok()) return restored;
  // Restored without them: the damaged copies of this node's store can go
  // now, the one this process set aside and those earlier processes set
  // aside and could not restore past (each is a whole store's memory).
  std::vector<std::string> damaged;
  if (!set_aside_.empty()) damaged.push_back(set_aside_);
  const std::string prefix = store_.segment_name() + NodeStore::kSetAsideSuffix;
  if (Result<std::vector<std::string>> names = ShmSegment::List(prefix); names.ok()) {
    for (const std::string& name : *names) {
      if (name != set_aside_) damaged.push_back(name);
    }
  }
  for (const std::string& name : damaged) {
    Status gone = ShmSegment::Unlink(name);
    Log(gone.ok() ? LogLevel::kInfo : LogLevel::kWarn,
        "node store: removing the damaged " + name + " after the restore: " + gone.ToString());
  }
  set_aside_.clear();
  return restored;
}

Result<RestoreReport> Checkpointer::Impl::RestoreElastic() {
  ElasticRestorer::Parts parts;
  parts.transport = transport_.get();
  parts.entries = &entries_;
  parts.layout = &*protection_;
  parts.new_catalogs = &new_catalogs_;
  parts.remote = remote_.get();
  parts.aside = elastic_aside_;
  parts.chunk_bytes = config_.chunk_bytes;
  parts.hook = Hook();
  parts.copiers = &device_copiers_;
  const uint64_t own_lineage = lineage_;
  parts.lineage = &lineage_;
  ElasticRestorer restorer(std::move(parts));
  Result<RestoreReport> restored = restorer.Run();
  if (!restored.ok()) {
    lineage_ = own_lineage;
    // Kept for a Restore() called again and for the next relaunch, until this
    // job commits a version under the new topology (it started afresh, or
    // trained on after the failure): that version is the job's newest, and
    // old stores left past it would be restored instead of it next time.
    std::lock_guard<std::mutex> lock(release_mu_);
    release_after_commit_ = elastic_aside_;
    return restored.status();
  }
  RestoreReport report = std::move(restored).value();
  // The restored version is snapshotted under the new topology, and its
  // copy, protect and commit run in the background while training resumes: the
  // next Save (one version in flight) or Wait() waits for it. The old stores
  // are released by the commit thread once it commits; if it never does, they
  // stay for the next relaunch.
  const auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lock(release_mu_);
    release_after_commit_ = std::move(elastic_aside_);
  }
  elastic_aside_.clear();
  elastic_ = false;
  // As after Save, the snapshot copies the buffers in the background:
  // WaitSnapshot() before writing them.
  protection_state_ = Protection::kReprotecting;
  Status started = StartVersion(report.version, /*persistable=*/false);
  report.stats.reprotect_mode = "full, background";
  report.stats.reprotect_s = SecondsSince(t0);
  if (started.ok()) {
    report.protection = "re-protecting";
    report.notes.push_back("v" + std::to_string(report.version) +
                           " is being protected under the new topology in the background; "
                           "the old node stores are released once it commits (Wait())");
  } else {
    // The buffers hold the version on every rank; only its snapshot did not
    // start here. This rank votes "false" in its commit (StartVersion), so
    // every rank's Wait() reports it, the old stores stay for a relaunch, and
    // the next Save protects the job under the new topology. Failing this
    // rank's Restore alone would leave the others training without it.
    Log(LogLevel::kWarn, "elastic restore: snapshotting v" + std::to_string(report.version) +
                             " on the new topology: " + started.ToString());
    report.protection = "unprotected";
    report.notes.push_back("v" + std::to_string(report.version) +
                           " could not be snapshotted under the new topology on this rank (" +
                           started.ToString() +
                           "); the old node stores are kept until a version commits");
  }
  committer_->SetLatest(report.version);
  return report;
}

void Checkpointer::Impl::ReleaseAsideStores(uint64_t committed) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(release_mu_);
    if (release_after_commit_.empty()) return;
    names.swap(release_after_commit_);
  }
  for (const std::string& name : names) {
    Status gone = ShmSegment::Unlink(name);
    Log(gone.ok() ? LogLevel::kInfo : LogLevel::kWarn,
        "elastic restore: v" + std::to_string(committed) +
            " committed on the new topology, releasing " + name + ": " + gone.ToString());
  }
}

Status Checkpointer::Impl::Resnapshot(uint64_t version, bool background) {
  protection_state_ = Protection::kReprotecting;
  Status started = StartVersion(version, /*persistable=*/false);
  if (background) return started;
  Status committed = Wait();
  return started.ok() ? committed : started;
}

}  // namespace memento::runtime
