#include "memento/torch/torch_checkpointer.h"

#include <torch/cuda.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "checkpointer_impl.h"
#include "dcp/dcp_format.h"
#include "extra_state.h"
#include "generator_state.h"
#include "launch_progress.h"
#include "memento/runtime/log.h"
#include "optimizer_steps.h"
#include "producer_fence.h"
#include "replicated_ranges.h"

namespace memento::torch_adapter {

using runtime::LogLevel;

namespace {

constexpr const char* kStepKey = "memento.step";
constexpr const char* kUserPrefix = "user.";
// The exchange of replicated ranges after a restore: its tag and message size.
constexpr int kReplicatedTag = runtime::kFirstApplicationTag;
constexpr uint64_t kGatherChunk = 64ull << 20;

std::string U64Bytes(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

at::Tensor ByteView(void* data, int64_t bytes, at::Device device) {
  return at::from_blob(data, {bytes}, at::TensorOptions().dtype(at::kByte).device(device));
}

}  // namespace

TorchCheckpointer::Impl::~Impl() {
  if (engine_) (void)engine_->Wait();
}

Status TorchCheckpointer::Impl::AddSource(Source source) {
  if (engine_) {
    return Status::FailedPrecondition(
        "register: tensors are registered before the first Save or Restore");
  }
  sources_.push_back(std::move(source));
  return Status::Ok();
}

Status TorchCheckpointer::Impl::AddShard(const std::string& name, ShardSpec spec) {
  if (engine_) {
    return Status::FailedPrecondition(
        "shard: tensors are registered before the first Save or Restore");
  }
  if (!shards_.emplace(name, std::move(spec)).second) {
    return Status::AlreadyExists("shard: '" + name + "' has a shard spec already");
  }
  return Status::Ok();
}

Status TorchCheckpointer::Impl::AddExtra(const std::string& key, ExtraHooks hooks) {
  if (key.empty() || key.rfind("memento.", 0) == 0 || key.rfind(kUserPrefix, 0) == 0) {
    if (key.rfind("memento.optimizer.", 0) != 0) {
      return Status::InvalidArgument("extra state key '" + key + "' is empty or reserved");
    }
  }
  if (!extras_.emplace(key, std::move(hooks)).second) {
    return Status::AlreadyExists("extra state key '" + key + "' is registered twice");
  }
  return Status::Ok();
}

std::optional<std::string> TorchCheckpointer::Impl::User(const std::string& key) const {
  auto it = user_.find(key);
  if (it == user_.end()) return std::nullopt;
  return it->second;
}

Status TorchCheckpointer::Impl::Save(uint64_t step) {
  // A step the engine will not save (Config::interval) costs no staging copy.
  if (engine_ && !engine_->WouldSave(step)) return engine_->Save(step);
  // The previous snapshot must be complete before the staging copies and the
  // extra state are rewritten; its failure is reported by Wait(), not here.
  if (engine_) (void)engine_->WaitSnapshot();
  MEMENTO_ASSIGN_OR_RETURN(std::vector<NamedTensor> current, Enumerate());
  if (!engine_ || !FollowMovedStaged(current)) MEMENTO_RETURN_IF_ERROR(Reopen(current));
  {
    torch::NoGradGuard no_grad;
    for (Tracked& t : tracked_) {
      if (!t.in_place) t.staging.copy_(t.entry.tensor);
    }
  }
  MEMENTO_RETURN_IF_ERROR(WriteExtra(step));
  MEMENTO_RETURN_IF_ERROR(fence_.BeforeSave(CudaDevices(), engine_.get()));
  return engine_->Save(step);
}

Result<std::optional<RestoreResult>> TorchCheckpointer::Impl::Restore() {
  MEMENTO_ASSIGN_OR_RETURN(std::vector<NamedTensor> current, Enumerate());
  if (engine_ && !FollowMovedStaged(current)) {
    bool layout_changed = false;
    const std::string why = Difference(current, &layout_changed);
    if (layout_changed) {
      // Laying the store out anew would drop the very versions asked for.
      return Status::FailedPrecondition(
          "restore: the registered tensors changed since the node store was laid out (" + why +
          "); its versions hold the earlier set and a restore never lays it out anew: restore "
          "before the set changes (e.g. before the first step creates optimizer state), or "
          "relaunch");
    }
  }
  if (!engine_ || !Matches(current)) MEMENTO_RETURN_IF_ERROR(Reopen(current));
  unreported_ = Status::Ok();  // as the engine's Restore, which waits for what is in flight
  // Restore writes device tensors on the engine's streams: after what the
  // producing streams have queued (initialisation, optimizer priming).
  ProducerFence::Synchronize(CudaDevices());
  Result<runtime::RestoreReport> report = engine_->Restore();
  if (!report.ok()) {
    const Status& s = report.status();
    if (s.code() == StatusCode::kNotFound) return std::optional<RestoreResult>();
    if (s.code() == StatusCode::kFailedPrecondition) {
      std::string diagnosis = DiagnoseLayout(s.message());
      if (!diagnosis.empty()) {
        return Status::FailedPrecondition(
            "restore: the registered tensors do not match the "
            "stored checkpoint: " +
            diagnosis + " (" + s.message() + ")");
      }
    }
    return s;
  }
  MEMENTO_RETURN_IF_ERROR(GatherReplicated());
  {
    torch::NoGradGuard no_grad;
    for (Tracked& t : tracked_) {
      if (!t.in_place) t.entry.tensor.copy_(t.staging);
    }
  }
  RestoreResult result;
  result.report = std::move(report).value();
  result.step = result.report.version;
  MEMENTO_RETURN_IF_ERROR(ReadExtra(&result.step));
  return std::optional<RestoreResult>(std::move(result));
}

void TorchCheckpointer::Impl::NoteNode() {
  static const std::string kNone;
  const std::string& node = engine_ ? engine_->node() : kNone;
  if (node == node_) return;
  std::unique_lock<std::shared_mutex> lock(engine_mu_);
  node_ = node;
}

Status TorchCheckpointer::Impl::Reopen(const std::vector<NamedTensor>& current) {
  runtime::Config config = config_;
  std::optional<runtime::RunPosition> continued;
  // Held from the old engine's end to the new one's start: a getter on
  // another thread waits for the new engine rather than see none.
  std::unique_lock<std::shared_mutex> engine_lock(engine_mu_, std::defer_lock);
  if (engine_) {
    bool layout_changed = false;
    const std::string why = Difference(current, &layout_changed);
    ++reregistrations_;
    if (layout_changed) {
      ++relayouts_;
      config.stale_policy = runtime::StalePolicy::kReplace;
    }
    runtime::Log(LogLevel::kWarn,
                 std::string("torch: re-registering (") + why + "); " +
                     (layout_changed ? "the node store is laid out anew, older versions are "
                                       "dropped"
                                     : "same layout, the node store is re-attached"));
    // The version in flight's failure is Wait()'s to report, as it would
    // have been without the new engine.
    Status waited = engine_->Wait();
    if (!waited.ok() && unreported_.ok()) unreported_ = waited;
    // Same layout: the new engine continues this run (its lineage and
    // latest version), so that the versions already committed stay the
    // newest run's for a restore after a crash in the next Save.
    if (!layout_changed) continued = engine_->Position();
    engine_lock.lock();
    engine_.reset();
  }
  if (transport_->size() < 1) return Status::InvalidArgument("transport has no ranks");
  std::vector<Tracked> tracked;
  tracked.reserve(current.size());
  for (const NamedTensor& nt : current) {
    Tracked t;
    t.entry = nt;
    const at::Tensor& x = nt.tensor;
    t.data = x.data_ptr();
    t.nbytes = static_cast<int64_t>(x.numel() * x.element_size());
    t.dtype = x.scalar_type();
    t.sizes = x.sizes().vec();
    t.strides = x.strides().vec();
    t.device = x.device();
    t.shard = nt.shard;
    // A slice of a global tensor is kept row-major, whatever its strides.
    t.in_place =
        !nt.copy_at_save && (t.shard ? x.is_contiguous() : x.is_non_overlapping_and_dense());
    if (!t.in_place) {
      t.staging = at::empty(x.sizes(), x.options().requires_grad(false));
    }
    tracked.push_back(std::move(t));
  }
  tracked_ = std::move(tracked);
  extra_buf_.assign(options_.extra_capacity, 0);

  planned_ = PlanEntries();
  std::shared_ptr<runtime::RemoteStore> remote;  // null: the engine opens memento's own
  if (!config.remote_dir.empty() && config.remote_format == "dcp") {
    std::map<std::string, dcp::DcpTensor> tensors;
    for (const Tracked& t : tracked_) {
      tensors[t.entry.name] = dcp::Describe(t.in_place ? t.entry.tensor : t.staging,
                                            t.entry.replicated, t.shard.has_value());
    }
    MEMENTO_ASSIGN_OR_RETURN(remote, dcp::OpenRemote(config, std::move(tensors), kExtraEntry));
  }
  auto engine = runtime::Checkpointer::Create(config, transport_, remote, options_.hooks);
  if (!engine.ok()) return engine.status();
  std::unique_ptr<runtime::Checkpointer> e = std::move(engine).value();
  if (continued) e->ContinueRun(*continued);
  std::vector<std::string> names;
  static uint8_t empty_byte = 0;
  for (const PlannedEntry& p : planned_) {
    names.push_back(p.name);
    MEMENTO_RETURN_IF_ERROR(
        e->RegisterBuffer(p.name, p.data != nullptr ? p.data : &empty_byte, p.bytes, p.layout));
  }
  if (!engine_lock.owns_lock()) engine_lock.lock();
  entry_names_ = std::move(names);
  engine_ = std::move(e);
  return Status::Ok();
}

Status TorchCheckpointer::Impl::WriteExtra(uint64_t step) {
  std::map<std::string, std::string> records;
  records[kStepKey] = U64Bytes(step);
  if (options_.save_rng) SaveGenerators(&records);
  for (const auto& [key, hooks] : extras_) records[key] = hooks.save();
  for (const auto& [key, bytes] : user_) records[kUserPrefix + key] = bytes;
  return EncodeExtraState(records, extra_buf_.data(), extra_buf_.size());
}

Status TorchCheckpointer::Impl::ReadExtra(uint64_t* step) {
  MEMENTO_ASSIGN_OR_RETURN(auto records, DecodeExtraState(extra_buf_.data(), extra_buf_.size()));
  auto it = records.find(kStepKey);
  if (it != records.end() && it->second.size() == 8) std::memcpy(step, it->second.data(), 8);
  if (options_.save_rng) RestoreGenerators(records);
  for (auto& [key, hooks] : extras_) {
    auto r = records.find(key);
    if (r == records.end()) {
      // Not NotFound: that is "never committed, a fresh start", and the
      // tensors already hold the restored version.
      return Status::FailedPrecondition(
          "restore: the checkpoint has no extra state '" + key +
          "' (registered since it was saved); the tensors were restored, the extra state "
          "was not");
    }
    MEMENTO_RETURN_IF_ERROR(hooks.restore(r->second));
  }
  user_.clear();
  const std::string prefix = kUserPrefix;
  for (auto& [key, bytes] : records) {
    if (key.rfind(prefix, 0) == 0) user_[key.substr(prefix.size())] = bytes;
  }
  return Status::Ok();
}

Status TorchCheckpointer::Impl::GatherReplicated() {
  const int n = transport_->size(), me = transport_->rank();
  if (n == 1) return Status::Ok();
  const std::vector<ReplicatedBytes> replicated = Replicated();
  if (ReplicatedRangeBegin(replicated, n, n) == 0) return Status::Ok();  // none
  std::vector<uint8_t> mine(range_end_ - range_begin_);
  uint64_t pos = 0;
  for (const Piece& p : pieces_) {
    const Tracked& t = tracked_[p.tracked];
    at::Tensor dst = ByteView(mine.data() + pos, p.bytes, at::kCPU);
    dst.copy_(ByteView(static_cast<uint8_t*>(t.source()) + p.begin, p.bytes, t.device));
    pos += p.bytes;
  }
  // Sends block until matched: they run on their own thread while this one receives.
  Status sent;
  std::thread sender([&] {
    for (int k = 1; k < n && sent.ok(); ++k) {
      const int peer = (me + k) % n;
      for (uint64_t off = 0; off < mine.size() && sent.ok(); off += kGatherChunk) {
        sent = transport_->Send(peer, kReplicatedTag, mine.data() + off,
                                std::min<uint64_t>(kGatherChunk, mine.size() - off));
      }
    }
  });
  Status received;
  std::vector<uint8_t> theirs;
  for (int k = 1; k < n && received.ok(); ++k) {
    const int peer = (me - k + n) % n;
    const uint64_t lo = ReplicatedRangeBegin(replicated, peer, n);
    const uint64_t hi = ReplicatedRangeBegin(replicated, peer + 1, n);
    theirs.resize(hi - lo);
    for (uint64_t off = 0; off < theirs.size() && received.ok(); off += kGatherChunk) {
      const uint64_t want = std::min<uint64_t>(kGatherChunk, theirs.size() - off);
      Result<size_t> got = transport_->Recv(peer, kReplicatedTag, theirs.data() + off, want);
      if (!got.ok()) {
        received = got.status();
      } else if (*got != want) {
        received = Status::Corruption(
            "restore: rank " + std::to_string(peer) + " sent " + std::to_string(*got) +
            " bytes of replicated tensors, expected " + std::to_string(want));
      }
    }
    if (!received.ok()) break;
    uint64_t offset = 0;
    for (const Tracked& t : tracked_) {
      if (!t.entry.replicated) continue;
      const uint64_t a = std::max(offset, lo), b = std::min<uint64_t>(offset + t.nbytes, hi);
      if (a < b) {
        at::Tensor dst =
            ByteView(static_cast<uint8_t*>(t.source()) + (a - offset), b - a, t.device);
        dst.copy_(ByteView(theirs.data() + (a - lo), b - a, at::kCPU));
      }
      offset += t.nbytes;
    }
  }
  sender.join();
  MEMENTO_RETURN_IF_ERROR(received.WithContext("restore: gathering the replicated tensors"));
  return sent.WithContext("restore: sending this rank's replicated bytes");
}

Status TorchCheckpointer::Impl::WithUnreported(Status now) {
  Status first = std::move(unreported_);
  unreported_ = Status::Ok();
  if (first.ok()) return now;
  if (now.ok()) return first;
  return Status(first.code(), first.message() + "; then: " + now.ToString());
}

std::set<c10::DeviceIndex> TorchCheckpointer::Impl::CudaDevices() const {
  std::set<c10::DeviceIndex> devices;
  for (const Tracked& t : tracked_) {
    if (t.device.is_cuda()) devices.insert(t.device.index());
  }
  return devices;
}

TorchCheckpointer::TorchCheckpointer(std::unique_ptr<Impl> impl,
                                     std::unique_ptr<LaunchProgress> progress)
    : impl_(std::move(impl)), progress_(std::move(progress)) {}
TorchCheckpointer::~TorchCheckpointer() = default;

Result<std::unique_ptr<TorchCheckpointer>> TorchCheckpointer::Create(
    runtime::Config config, std::shared_ptr<runtime::Transport> transport, Options options) {
  MEMENTO_RETURN_IF_ERROR(config.Validate());
  MEMENTO_RETURN_IF_ERROR(config.CheckShmDir());
  if (!transport) return Status::InvalidArgument("TorchCheckpointer: no transport");
  if (options.extra_capacity < 4096) {
    return Status::InvalidArgument("extra_capacity " + std::to_string(options.extra_capacity) +
                                   " is below 4096 bytes");
  }
  std::unique_ptr<LaunchProgress> progress;
  if (options.report_to_launcher) {
    progress = std::make_unique<LaunchProgress>(transport->rank(), options.total_steps);
    if (!options.hooks.at_stage) options.hooks.at_stage = progress->Hooks().at_stage;
  }
  return std::unique_ptr<TorchCheckpointer>(new TorchCheckpointer(
      std::make_unique<Impl>(std::move(config), std::move(transport), options),
      std::move(progress)));
}

Status TorchCheckpointer::Register(const std::string& name, const at::Tensor& tensor,
                                   bool replicated) {
  NamedTensor nt{name, tensor, replicated, std::nullopt, at::Tensor()};
  return impl_->AddSource([nt] { return std::vector<NamedTensor>{nt}; });
}

Status TorchCheckpointer::Register(const std::string& name, const at::Tensor& tensor,
                                   ShardSpec shard) {
  NamedTensor nt{name, tensor, false, std::move(shard), at::Tensor()};
  return impl_->AddSource([nt] { return std::vector<NamedTensor>{nt}; });
}

Status TorchCheckpointer::SetShard(const std::string& name, ShardSpec shard) {
  return impl_->AddShard(name, std::move(shard));
}

Status TorchCheckpointer::RegisterModule(torch::nn::Module& module, const std::string& prefix,
                                         bool replicated) {
  return impl_->AddSource(
      [&module, prefix, replicated] { return ModuleTensors(module, prefix, replicated); });
}

Status TorchCheckpointer::RegisterOptimizer(torch::optim::Optimizer& optimizer,
                                            const std::string& prefix, bool replicated) {
  PrimeOptimizerState(optimizer);
  MEMENTO_RETURN_IF_ERROR(impl_->AddSource([&optimizer, prefix, replicated] {
    return OptimizerTensors(optimizer, prefix, replicated);
  }));
  return impl_->AddExtra("memento.optimizer." + prefix, OptimizerStepHooks(optimizer, prefix));
}

Status TorchCheckpointer::RegisterSource(Source source) {
  return impl_->AddSource(std::move(source));
}
Status TorchCheckpointer::RegisterExtra(const std::string& key, ExtraHooks hooks) {
  return impl_->AddExtra(key, std::move(hooks));
}
void TorchCheckpointer::SetUserState(const std::string& key, std::string bytes) {
  impl_->SetUser(key, std::move(bytes));
}
std::optional<std::string> TorchCheckpointer::UserState(const std::string& key) const {
  return impl_->User(key);
}
Result<std::optional<RestoreResult>> TorchCheckpointer::Restore() {
  if (progress_) progress_->RestoreBegin();
  Result<std::optional<RestoreResult>> r = impl_->Restore();
  impl_->NoteNode();
  if (progress_) {
    progress_->Restored(!r.ok()            ? Result<runtime::RestoreReport>(r.status())
                        : r->has_value() ? Result<runtime::RestoreReport>((*r)->report)
                                         : Status::NotFound("nothing to restore"));
  }
  return r;
}
Status TorchCheckpointer::Save(uint64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = impl_->Save(step);
  // A failure before the engine's Save (staging, extra state) is this rank's
  // last save failing too: the engine's Finish must not mark the run.
  if (!s.ok()) NoteFailedSave();
  impl_->NoteNode();
  if (progress_ && s.ok()) {
    progress_->AddStall(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    progress_->Step(step);
  }
  return s;
}
Status TorchCheckpointer::WaitSnapshot() {
  if (!impl_->engine()) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = impl_->engine()->WaitSnapshot();
  if (progress_) {
    progress_->AddStall(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return s;
}
void TorchCheckpointer::SetLoss(double loss) {
  if (progress_) progress_->SetLoss(loss);
}
void TorchCheckpointer::AddCallerStall(double seconds) {
  if (progress_) progress_->AddStall(seconds);
}
void TorchCheckpointer::ReportDone(const std::string& state_hash) {
  if (progress_) progress_->Done(state_hash);
}
Status TorchCheckpointer::Wait() { return impl_->Wait(); }
Status TorchCheckpointer::WaitPersist() { return impl_->WaitPersist(); }
Status TorchCheckpointer::Finish() { return impl_->Finish(); }
void TorchCheckpointer::NoteFailedSave() {
  if (runtime::Checkpointer* engine = impl_->engine()) engine->NoteFailedSave();
}
std::optional<uint64_t> TorchCheckpointer::LatestCommitted() const {
  return impl_->WithEngine([](const runtime::Checkpointer* e) {
    return e != nullptr ? e->LatestCommitted() : std::nullopt;
  });
}

runtime::Protection TorchCheckpointer::ProtectionState() const {
  return impl_->WithEngine([](const runtime::Checkpointer* e) {
    return e != nullptr ? e->ProtectionState() : runtime::Protection::kProtected;
  });
}
double TorchCheckpointer::BlockedSeconds() const {
  return impl_->WithEngine(
      [](const runtime::Checkpointer* e) { return e != nullptr ? e->BlockedSeconds() : 0.0; });
}
runtime::IntervalStats TorchCheckpointer::Interval() const {
  return impl_->WithEngine([](const runtime::Checkpointer* e) {
    return e != nullptr ? e->Interval() : runtime::IntervalStats();
  });
}
std::vector<std::string> TorchCheckpointer::EntryNames() const { return impl_->EntryNames(); }
int TorchCheckpointer::reregistrations() const { return impl_->reregistrations(); }
int TorchCheckpointer::relayouts() const { return impl_->relayouts(); }
int TorchCheckpointer::rank() const { return impl_->transport().rank(); }
int TorchCheckpointer::size() const { return impl_->transport().size(); }
std::string TorchCheckpointer::node() const { return impl_->node(); }
runtime::Checkpointer* TorchCheckpointer::engine() { return impl_->engine(); }

}  // namespace memento::torch_adapter
