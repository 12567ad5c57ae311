#include "memento/runtime/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "checkpointer_impl.h"
#include "device_copy.h"
#include "memento/common/check.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_identity.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

const char* RestoreSourceName(RestoreSource source) {
  switch (source) {
    case RestoreSource::kLocalMemory:
      return "local-memory";
    case RestoreSource::kRemote:
      return "remote";
    case RestoreSource::kReplica:
      return "replica";
    case RestoreSource::kDecode:
      return "decode";
  }
  return "unknown";
}

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kSnapshot:
      return "snapshot";
    case Stage::kSeal:
      return "seal";
    case Stage::kCommit:
      return "commit";
    case Stage::kCommitted:
      return "committed";
    case Stage::kPersist:
      return "persist";
    case Stage::kManifest:
      return "manifest";
    case Stage::kRecover:
      return "recover";
    case Stage::kReprotect:
      return "reprotect";
  }
  return "unknown";
}

std::string RestoreReport::ToString() const {
  std::ostringstream os;
  os << "restored v" << version << ": " << entries.size() << " entries (";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) os << ", ";
    os << entries[i].name << " " << RestoreSourceName(entries[i].source);
  }
  os << ")";
  for (const auto& n : notes) os << "; " << n;
  return os.str();
}

std::string RestoreReport::ToJson() const {
  std::ostringstream os;
  os << "{\"version\":" << version << ",\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) os << ",";
    os << "{\"name\":\"" << entries[i].name << "\",\"bytes\":" << entries[i].bytes
       << ",\"crc\":" << entries[i].crc << ",\"source\":\"" << RestoreSourceName(entries[i].source)
       << "\"}";
  }
  os << "],\"lost_nodes\":[";
  for (size_t i = 0; i < lost_nodes.size(); ++i) os << (i ? "," : "") << lost_nodes[i];
  os << "],\"source_detail\":\"" << source_detail << "\",\"bytes_sent\":" << bytes_sent
     << ",\"bytes_received\":" << bytes_received << ",\"plan_read_bytes_per_node\":[";
  for (size_t i = 0; i < plan_read_bytes_per_node.size(); ++i) {
    os << (i ? "," : "") << plan_read_bytes_per_node[i];
  }
  os << "],\"bytes_received_per_node\":[";
  for (size_t i = 0; i < bytes_received_per_node.size(); ++i) {
    os << (i ? "," : "") << bytes_received_per_node[i];
  }
  os << "],\"reprotect\":{\"mode\":\"" << reprotect_mode
     << "\",\"bytes_sent\":" << reprotect_bytes_sent
     << ",\"bytes_received\":" << reprotect_bytes_received << ",\"bytes_received_per_node\":[";
  for (size_t i = 0; i < reprotect_bytes_received_per_node.size(); ++i) {
    os << (i ? "," : "") << reprotect_bytes_received_per_node[i];
  }
  os << "]}";
  os << ",\"seconds\":{\"inventory\":" << inventory_s << ",\"plan\":" << plan_s
     << ",\"transfer\":" << transfer_s << ",\"reprotect\":" << reprotect_s << "}";
  if (!plan_json.empty()) os << ",\"plan\":" << plan_json;
  os << "}";
  return os.str();
}

// ---- Checkpointer: forwards to Impl -------------------------------------------------------

Result<std::unique_ptr<Checkpointer>> Checkpointer::Create(Config config,
                                                           std::shared_ptr<Transport> transport,
                                                           std::shared_ptr<RemoteStore> remote,
                                                           FaultHooks hooks) {
  MEMENTO_RETURN_IF_ERROR(config.Validate());
  if (!transport) return Status::InvalidArgument("Checkpointer::Create: transport is null");
  if (!remote && !config.remote_dir.empty()) {
    remote = std::make_shared<DirectoryRemoteStore>(config.remote_dir, config.job);
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
Status Checkpointer::WaitSnapshot() { return impl_->WaitSnapshot(); }
Status Checkpointer::Wait() { return impl_->Wait(); }
Status Checkpointer::WaitPersist() { return impl_->WaitPersist(); }
Result<RestoreReport> Checkpointer::Restore() { return impl_->Restore(); }
std::optional<uint64_t> Checkpointer::LatestCommitted() const { return impl_->LatestCommitted(); }
double Checkpointer::BlockedSeconds() const { return impl_->BlockedSeconds(); }
int Checkpointer::rank() const { return impl_->rank(); }
const std::string& Checkpointer::node() const { return impl_->node(); }

// ---- Impl ----------------------------------------------------------------------------------

Checkpointer::Impl::Impl(Config config, std::shared_ptr<Transport> transport,
                         std::shared_ptr<RemoteStore> remote, FaultHooks hooks)
    : config_(std::move(config)),
      transport_(std::move(transport)),
      remote_(std::move(remote)),
      hooks_(std::move(hooks)) {
  commit_thread_ = std::thread([this] { CommitLoop(); });
}

Checkpointer::Impl::~Impl() {
  (void)Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  commit_thread_.join();
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
  entry.device = bytes > 0 && IsDevicePointer(data);
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
  const int rank = transport_->rank();
  // Node identities of every rank: this rank's lane and node index.
  node_ = NodeIdentity(config_, rank);
  MEMENTO_ASSIGN_OR_RETURN(auto gathered, transport_->Allgather(node_.data(), node_.size()));
  std::vector<std::string> identities;
  for (const auto& g : gathered) identities.emplace_back(g.begin(), g.end());
  int lane = LocalRank(config_, rank);
  if (lane < 0) lane = LocalRankAmong(identities, rank);

  // What a surviving store of this rank says about the topology it was
  // written for (node index, node count); see protection_layout.h.
  RankRecord record;
  record.identity = node_;
  record.lane = lane;
  for (const auto& e : entries_) record.shard_bytes += e.bytes;
  record.entries = static_cast<uint32_t>(entries_.size());
  {
    StoreId old_id{config_.job, node_, static_cast<uint32_t>(lane)};
    auto old = NodeStore::Attach(old_id, ShmSegment::Access::kReadOnly);
    if (old.ok()) {
      const auto& regions = old->layout().regions;
      if (!regions.empty() && regions[0].kind == RegionKind::kShard) {
        record.old_index = static_cast<int32_t>(regions[0].owner_node);
      }
      const int topo = old->layout().Find("topology");
      if (topo >= 0 && regions[topo].kind == RegionKind::kParity) {
        record.old_nodes = regions[topo].owner_node;
      }
    }
  }
  auto blob = EncodeRankRecord(record);
  MEMENTO_ASSIGN_OR_RETURN(auto records_raw, transport_->Allgather(blob.data(), blob.size()));
  std::vector<RankRecord> records;
  for (const auto& raw : records_raw) {
    MEMENTO_ASSIGN_OR_RETURN(RankRecord r, DecodeRankRecord(raw));
    records.push_back(std::move(r));
  }
  std::vector<uint64_t> entry_bytes;
  for (const auto& e : entries_) entry_bytes.push_back(e.bytes);
  MEMENTO_ASSIGN_OR_RETURN(ProtectionLayout protection,
                           ProtectionLayout::Build(config_.scheme, records, rank, entry_bytes));
  protection_.emplace(std::move(protection));
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
  auto store = NodeStore::OpenOrCreate(id, layout, config_.slots, config_.stale_policy, &attached);
  Status mine = store.status();
  MEMENTO_ASSIGN_OR_RETURN(bool all_ok, transport_->AllTrue(mine.ok()));
  if (!mine.ok()) return mine.WithContext("Prepare: node store " + id.ToString());
  if (!all_ok) return Status::FailedPrecondition("Prepare: another rank failed to open its store");
  store_ = std::move(store).value();
  Log(LogLevel::kInfo, std::string(attached ? "attached" : "created") + " node store " +
                           store_.segment_name() + " (" + std::to_string(store_.segment_bytes()) +
                           " bytes)");

  // The chunk list, fixed for the lifetime of the layout.
  std::vector<int> chunk_entry;
  std::vector<uint64_t> chunk_length;
  const uint64_t chunk = config_.chunk_bytes;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    any_device_ = any_device_ || e.device;
    for (uint64_t off = 0; off < e.bytes; off += chunk) {
      CopyTask t;
      t.src = e.data + off;
      t.length = std::min(chunk, e.bytes - off);
      t.offset = off;
      t.entry = static_cast<int>(i);
      t.device = e.device;
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
  std::function<Status(Stage, uint64_t)> hook;
  if (hooks_.at_stage) hook = [this](Stage s, uint64_t v) { return RunHook(s, v); };
  pipeline_ = std::make_unique<SnapshotPipeline>(config_.threads, std::move(stages), hook);
  if (remote_) {
    std::vector<std::string> names;
    std::vector<EntryLayout> layouts;
    for (const auto& e : entries_) {
      names.push_back(e.name);
      layouts.push_back(e.layout);
    }
    persister_ = std::make_unique<Persister>(remote_, transport_, &store_, std::move(names),
                                             std::move(layouts), config_.persist_keep, hook);
  }
  prepared_ = true;
  return Status::Ok();
}

Status Checkpointer::Impl::Save(uint64_t step) {
  const auto t0 = Clock::now();
  MEMENTO_RETURN_IF_ERROR(Prepare());
  (void)Wait();  // at most one version in flight; its outcome is Wait()'s to report
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (latest_committed_ && step <= *latest_committed_) {
      blocked_seconds_ += SecondsSince(t0);
      return Status::InvalidArgument("Save(" + std::to_string(step) +
                                     "): steps must increase; latest committed is v" +
                                     std::to_string(*latest_committed_));
    }
  }
  Status s = StartVersion(step, /*persistable=*/true);
  blocked_seconds_ += SecondsSince(t0);
  return s;
}

int Checkpointer::Impl::ChooseSlot() {
  const int slots = store_.slot_count();
  auto choose = [&](const std::vector<bool>& pinned) {
    StoreInventory inv = store_.Inventory();
    int committed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      committed = committed_slot_;
    }
    int best = -1;
    for (const SlotState& st : inv.slots) {
      const int s = st.slot;
      if (s == committed || pinned[s]) continue;
      if (best < 0) {
        best = s;
        continue;
      }
      const SlotState& b = inv.slots[best];
      // An empty / invalid slot first, else the oldest version.
      if (b.ok && (!st.ok || st.version < b.version)) best = s;
    }
    return best;
  };
  if (!persister_) {
    std::vector<bool> none(slots, false);
    int s = choose(none);
    MEMENTO_CHECK_GE(s, 0);  // slots >= 2 and only one is the committed one
    return s;
  }
  return persister_->ChooseUnpinned(slots, choose);
}

Status Checkpointer::Impl::StartVersion(uint64_t version, bool persistable) {
  const int slot = ChooseSlot();
  if (Status s = store_.BeginWriteSlot(slot, version); !s.ok()) {
    // Still through the commit thread, so that this rank votes "false" in the
    // version's commit collective instead of leaving the others waiting.
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = true;
    job_ready_ = true;
    job_version_ = version;
    job_slot_ = slot;
    job_persistable_ = persistable;
    job_status_ = s;
    cv_.notify_all();
    return s;
  }
  for (CopyTask& t : tasks_) t.dst = store_.MutableRegion(slot, t.entry) + t.offset;
  if (any_device_) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      const int region = static_cast<int>(i);
      if (!entries_[i].device || !pinned_regions_.insert({slot, region}).second) continue;
      uint8_t* p = store_.MutableRegion(slot, region);
      Status pin = PinHostMemory(p, entries_[i].bytes);
      if (pin.ok()) {
        pinned_ptrs_.push_back(p);
      } else {
        Log(LogLevel::kWarn, "pinning slot memory: " + pin.ToString());
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = true;
  }
  Status started = pipeline_->Start(version, slot, &tasks_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ready_ = true;
    job_version_ = version;
    job_slot_ = slot;
    job_persistable_ = persistable;
    job_status_ = Status::Ok();
  }
  cv_.notify_all();
  // A stage refusing to begin still goes through the commit thread, so that
  // this rank votes "false" in the version's commit collective.
  return started;
}

Status Checkpointer::Impl::WaitSnapshot() {
  if (!pipeline_) return Status::Ok();
  const auto t0 = Clock::now();
  Status s = pipeline_->WaitCopied();
  blocked_seconds_ += SecondsSince(t0);
  return s;
}

Status Checkpointer::Impl::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !in_flight_; });
  return version_status_;
}

Status Checkpointer::Impl::WaitPersist() {
  MEMENTO_RETURN_IF_ERROR(Wait());
  if (!persister_) return Status::Ok();
  return persister_->WaitIdle();
}

std::optional<uint64_t> Checkpointer::Impl::LatestCommitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_committed_;
}

double Checkpointer::Impl::BlockedSeconds() const { return blocked_seconds_; }

void Checkpointer::Impl::CommitLoop() {
  while (true) {
    uint64_t version;
    int slot;
    bool persistable;
    Status not_started;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || job_ready_; });
      if (!job_ready_) return;
      job_ready_ = false;
      version = job_version_;
      slot = job_slot_;
      persistable = job_persistable_;
      not_started = job_status_;
    }
    Status s = CommitOne(version, slot, persistable, not_started);
    if (!s.ok())
      Log(LogLevel::kWarn, "v" + std::to_string(version) + " not committed: " + s.ToString());
    {
      std::lock_guard<std::mutex> lock(mu_);
      version_status_ = s;
      in_flight_ = false;
    }
    cv_.notify_all();
  }
}

Status Checkpointer::Impl::CommitOne(uint64_t version, int slot, bool persistable,
                                     const Status& not_started) {
  if (!not_started.ok()) {
    // Nothing was begun (no stage, no slot): vote "false" and report why.
    auto all = transport_->AllTrue(false);
    if (!all.ok()) return all.status().WithContext("commit of v" + std::to_string(version));
    return not_started.WithContext("v" + std::to_string(version) + " (this rank)");
  }
  // Seal locally; any failure becomes this rank's "false" vote.
  Status local = pipeline_->WaitCopied();
  {
    Status s = crc_stage_.End(version, local);
    if (local.ok()) local = s;
  }
  if (protect_stage_) {
    Status s = protect_stage_->End(version, local);
    if (local.ok()) local = s;
  }
  for (ChunkStage* stage : extra_stages_) {
    Status s = stage->End(version, local);
    if (local.ok()) local = s;
  }
  if (local.ok()) local = RunHook(Stage::kSeal, version);
  for (size_t i = 0; local.ok() && i < entries_.size(); ++i) {
    local = store_.SealRegion(slot, static_cast<int>(i), entries_[i].bytes,
                              crc_stage_.entry_crc(static_cast<int>(i)));
  }
  if (local.ok()) local = store_.SealSlot(slot, version);
  if (local.ok()) local = RunHook(Stage::kCommit, version);

  auto all = transport_->AllTrue(local.ok());
  if (!all.ok()) {
    // The collective itself failed (a dead peer): the outcome elsewhere is
    // unknown, so the sealed slot stays as it is; Restore's agreement decides.
    return all.status().WithContext("commit of v" + std::to_string(version));
  }
  if (!*all) {
    (void)store_.Invalidate(slot);  // never restorable, and free for the next version
    if (!local.ok()) return local.WithContext("v" + std::to_string(version) + " (this rank)");
    return Status::Unavailable("v" + std::to_string(version) +
                               " not committed: another rank failed to seal it");
  }
  MEMENTO_RETURN_IF_ERROR(store_.MarkCommitted(slot, version));
  // An older copy of the same version (the one a reseed replaced, or a failed
  // attempt left sealed) goes only now that this one is committed.
  for (const SlotState& st : store_.Inventory().slots) {
    if (st.slot != slot && (st.sealed || st.writing) && st.version == version) {
      (void)store_.Invalidate(st.slot);
    }
  }
  bool persist = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_committed_ = version;
    committed_slot_ = slot;
    if (persistable) {
      ++commits_;
      persist = persister_ && config_.persist_every > 0 &&
                commits_ % static_cast<uint64_t>(config_.persist_every) == 0;
    }
  }
  if (persist) persister_->Enqueue(version, slot);
  MEMENTO_RETURN_IF_ERROR(RunHook(Stage::kCommitted, version));
  return Status::Ok();
}

}  // namespace memento::runtime
