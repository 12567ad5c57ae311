#include "memento/torch/torch_checkpointer.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/StringUtil.h>
#include <c10/util/string_utils.h>
#include <torch/cuda.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <sstream>
#include <thread>

#include "dcp/dcp_format.h"
#include "extra_state.h"
#include "replicated_ranges.h"
#include "generator_state.h"
#include "launch_progress.h"
#include "producer_fence.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_store.h"
#include "optimizer_steps.h"

namespace memento::torch_adapter {

using runtime::LogLevel;

namespace {

constexpr const char* kExtraEntry = "__memento__";
constexpr const char* kStepKey = "memento.step";
constexpr const char* kUserPrefix = "user.";
// The exchange of replicated ranges after a restore: its tag and message size.
constexpr int kReplicatedTag = runtime::kFirstApplicationTag;
constexpr uint64_t kGatherChunk = 64ull << 20;

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The dtype field of an entry's EntryLayout: the dtype, then the strides when
// the tensor is not contiguous and the device type when it is not the CPU
// (not its index: ranks of one node use different GPUs).
// The store keeps a layout's dtype in at most EntryLayout::kMaxDTypeBytes. A
// longer description (a permuted tensor's strides, a replicated tensor's
// shape) keeps its head and a crc32c of the whole, so that a relaunch that
// registers another layout is still refused.
std::string FitDType(const std::string& s) {
  constexpr size_t kMax = runtime::EntryLayout::kMaxDTypeBytes;
  if (s.size() <= kMax) return s;
  char tail[16];
  std::snprintf(tail, sizeof(tail), " ~%08x", erasure::Crc32c(s.data(), s.size()));
  return s.substr(0, kMax - std::strlen(tail)) + tail;
}

std::string DTypeDescription(const at::Tensor& t) {
  std::string s = DTypeName(t.scalar_type());
  if (!t.is_contiguous()) s += " strides=" + Join(t.strides().vec());
  if (!t.device().is_cpu()) s += " device=" + c10::DeviceTypeName(t.device().type(), true);
  return s;
}

std::string DTypeField(const at::Tensor& t) { return FitDType(DTypeDescription(t)); }

std::string Describe(const runtime::RegionSpec& r) {
  std::string s = r.layout.dtype.empty() ? "bytes" : r.layout.dtype;
  if (!r.layout.shape.empty()) s += " [" + Join(r.layout.shape) + "]";
  if (r.layout.global_shape != r.layout.shape) {
    s += " at [" + Join(r.layout.offsets) + "] of [" + Join(r.layout.global_shape) + "]";
  }
  return s + " (" + std::to_string(r.capacity) + " bytes)";
}

std::string U64Bytes(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

at::Tensor ByteView(void* data, int64_t bytes, at::Device device) {
  return at::from_blob(data, {bytes}, at::TensorOptions().dtype(at::kByte).device(device));
}

}  // namespace

// One registered tensor and what it looked like at registration.
struct Tracked {
  NamedTensor entry;
  void* data = nullptr;
  int64_t nbytes = 0;
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> sizes, strides;
  at::Device device = at::kCPU;
  std::optional<ShardSpec> shard;
  // Dense in its storage (contiguous when sharded) and not copied at Save:
  // registered where it lives.
  bool in_place = true;
  at::Tensor staging;  // a contiguous copy otherwise

  // Start of the bytes the engine reads and writes.
  void* source() const { return in_place ? data : staging.data_ptr(); }
};

// A byte range of a replicated tensor held by this rank.
struct Piece {
  size_t tracked = 0;
  uint64_t begin = 0;
  uint64_t bytes = 0;
};

// One entry as registered with the engine.
struct PlannedEntry {
  std::string name;
  void* data = nullptr;
  uint64_t bytes = 0;
  runtime::EntryLayout layout;
};

bool SameShard(const std::optional<ShardSpec>& a, const std::optional<ShardSpec>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->global_shape == b->global_shape && a->offsets == b->offsets);
}

// Whether `spec` places a tensor of `sizes` inside its global tensor.
Status CheckShard(const std::string& name, const std::vector<int64_t>& sizes,
                  const ShardSpec& spec) {
  const std::string where = "tensor '" + name + "' of shape [" + Join(sizes) + "]";
  if (sizes.empty()) {
    return Status::InvalidArgument(where + " has no dimension: it cannot be a slice of a "
                                   "global tensor (register it whole)");
  }
  if (spec.global_shape.size() != sizes.size() || spec.offsets.size() != sizes.size()) {
    return Status::InvalidArgument(where + ": its shard spec needs one global size and one "
                                   "offset per dimension (global_shape [" +
                                   Join(spec.global_shape) + "], offsets [" +
                                   Join(spec.offsets) + "])");
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (spec.offsets[d] < 0 || spec.global_shape[d] < 0 ||
        spec.offsets[d] + sizes[d] > spec.global_shape[d]) {
      return Status::InvalidArgument(where + " at offsets [" + Join(spec.offsets) +
                                     "] does not fit in the global shape [" +
                                     Join(spec.global_shape) + "] (dimension " +
                                     std::to_string(d) + ")");
    }
  }
  return Status::Ok();
}

class TorchCheckpointer::Impl {
 public:
  Impl(runtime::Config config, std::shared_ptr<runtime::Transport> transport, Options options)
      : config_(std::move(config)), transport_(std::move(transport)), options_(options) {}

  ~Impl() {
    if (engine_) (void)engine_->Wait();
  }

  Status AddSource(Source source) {
    if (engine_) {
      return Status::FailedPrecondition(
          "register: tensors are registered before the first Save or Restore");
    }
    sources_.push_back(std::move(source));
    return Status::Ok();
  }

  Status AddShard(const std::string& name, ShardSpec spec) {
    if (engine_) {
      return Status::FailedPrecondition(
          "shard: tensors are registered before the first Save or Restore");
    }
    if (!shards_.emplace(name, std::move(spec)).second) {
      return Status::AlreadyExists("shard: '" + name + "' has a shard spec already");
    }
    return Status::Ok();
  }

  Status AddExtra(const std::string& key, ExtraHooks hooks) {
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

  void SetUser(const std::string& key, std::string bytes) { user_[key] = std::move(bytes); }
  std::optional<std::string> User(const std::string& key) const {
    auto it = user_.find(key);
    if (it == user_.end()) return std::nullopt;
    return it->second;
  }

  Status Save(uint64_t step) {
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

  Result<std::optional<RestoreResult>> Restore() {
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

  // The engine's Wait / WaitPersist, after a failure a re-registration's
  // wait took from the engine it closed (reported once, first).
  Status Wait() { return WithUnreported(engine_ ? engine_->Wait() : Status::Ok()); }
  Status WaitPersist() { return WithUnreported(engine_ ? engine_->WaitPersist() : Status::Ok()); }
  Status Finish() { return WithUnreported(engine_ ? engine_->Finish() : Status::Ok()); }

  runtime::Checkpointer* engine() { return engine_.get(); }
  // f(the engine, or null before the first Save / Restore) under the engine
  // lock, for the getters that another thread may call while the
  // application thread's Save re-registers (replaces the engine).
  template <typename F>
  auto WithEngine(F&& f) const {
    std::shared_lock<std::shared_mutex> lock(engine_mu_);
    return f(static_cast<const runtime::Checkpointer*>(engine_.get()));
  }
  std::vector<std::string> EntryNames() const {
    std::shared_lock<std::shared_mutex> lock(engine_mu_);
    return entry_names_;
  }
  // The engine's node identity, as of the application thread's last Save or
  // Restore (the engine learns it in its Prepare, on that thread). Only that
  // thread writes node_, so it reads it unlocked; no lock or copy per Save
  // once it is known.
  void NoteNode() {
    static const std::string kNone;
    const std::string& node = engine_ ? engine_->node() : kNone;
    if (node == node_) return;
    std::unique_lock<std::shared_mutex> lock(engine_mu_);
    node_ = node;
  }
  std::string node() const {
    std::shared_lock<std::shared_mutex> lock(engine_mu_);
    return node_;
  }
  int reregistrations() const { return reregistrations_.load(); }
  int relayouts() const { return relayouts_.load(); }
  runtime::Transport& transport() { return *transport_; }

 private:
  Result<std::vector<NamedTensor>> Enumerate() const {
    std::vector<NamedTensor> all;
    std::set<std::string> names;
    for (const Source& source : sources_) {
      for (NamedTensor& nt : source()) {
        if (nt.name.empty() || nt.name.size() > 1000) {
          return Status::InvalidArgument("tensor name '" + nt.name + "' must have 1..1000 bytes");
        }
        if (nt.name == kExtraEntry || nt.name.find('@') != std::string::npos) {
          return Status::InvalidArgument("tensor name '" + nt.name +
                                         "' is reserved ('__memento__', or contains '@')");
        }
        if (!nt.tensor.defined()) {
          return Status::InvalidArgument("tensor '" + nt.name + "' is undefined");
        }
        const at::Device device = nt.tensor.device();
        if (!device.is_cpu() && !device.is_cuda()) {
          return Status::InvalidArgument(
              "tensor '" + nt.name + "' is on the " + c10::DeviceTypeName(device.type(), true) +
              " device: only CPU and CUDA tensors are checkpointed (a meta tensor has no data: "
              "materialize it before registering)");
        }
        if (nt.tensor.layout() != at::kStrided || nt.tensor.is_quantized()) {
          const std::string what =
              nt.tensor.is_quantized()
                  ? "quantized"
                  : "sparse or MKL-DNN (layout " + c10::str(nt.tensor.layout()) + ")";
          return Status::InvalidArgument("tensor '" + nt.name + "' is " + what +
                                         ": only strided tensors are supported");
        }
        if (at::has_internal_overlap(nt.tensor) == at::MemOverlap::Yes) {
          return Status::InvalidArgument(
              "tensor '" + nt.name +
              "' has elements sharing memory (an expanded view, "
              "stride 0): it cannot be restored in place; register the tensor it views");
        }
        if (!names.insert(nt.name).second) {
          return Status::InvalidArgument("tensor name '" + nt.name + "' is registered twice");
        }
        all.push_back(std::move(nt));
      }
    }
    MEMENTO_RETURN_IF_ERROR(ApplyShards(&all));
    return all;
  }

  // Shard specs: SetShard's by name, then optimizer state like its parameter.
  Status ApplyShards(std::vector<NamedTensor>* all) const {
    // Runs at every Save: nothing to do (and nothing allocated) without shards.
    if (shards_.empty() && std::none_of(all->begin(), all->end(), [](const NamedTensor& nt) {
          return nt.shard.has_value();
        })) {
      return Status::Ok();
    }
    std::set<std::string> used;
    std::map<const void*, ShardSpec> by_param;
    for (NamedTensor& nt : *all) {
      auto it = shards_.find(nt.name);
      if (it != shards_.end()) {
        nt.shard = it->second;
        used.insert(nt.name);
      }
      if (nt.shard && !nt.state_of.defined()) by_param[nt.tensor.unsafeGetTensorImpl()] = *nt.shard;
    }
    for (const auto& [name, spec] : shards_) {
      if (!used.count(name)) {
        return Status::InvalidArgument("shard spec for '" + name +
                                       "': no registered tensor has that name");
      }
    }
    for (NamedTensor& nt : *all) {
      if (!nt.shard && nt.state_of.defined() && !nt.replicated &&
          nt.tensor.sizes() == nt.state_of.sizes()) {
        auto it = by_param.find(nt.state_of.unsafeGetTensorImpl());
        if (it != by_param.end()) nt.shard = it->second;
      }
      if (!nt.shard) continue;
      if (nt.replicated) {
        return Status::InvalidArgument("tensor '" + nt.name +
                                       "' is registered both replicated and sharded");
      }
      MEMENTO_RETURN_IF_ERROR(CheckShard(nt.name, nt.tensor.sizes().vec(), *nt.shard));
    }
    return Status::Ok();
  }

  static bool SameShape(const Tracked& t, const NamedTensor& n) {
    const at::Tensor& x = n.tensor;
    return t.entry.name == n.name && t.entry.replicated == n.replicated &&
           t.dtype == x.scalar_type() && t.sizes == x.sizes().vec() &&
           t.strides == x.strides().vec() && t.device == x.device() &&
           t.nbytes == static_cast<int64_t>(x.numel() * x.element_size()) &&
           SameShard(t.shard, n.shard) && t.entry.copy_at_save == n.copy_at_save;
  }

  // Matches, once staged tensors that moved are followed to where they are
  // now: the engine reads and writes their staging copies, never their
  // memory, so a module that assigns a buffer a new tensor every step (a
  // counter, `self.count = self.count + 1`) needs no new registration.
  bool FollowMovedStaged(const std::vector<NamedTensor>& current) {
    if (current.size() != tracked_.size()) return false;
    for (size_t i = 0; i < current.size(); ++i) {
      if (!SameShape(tracked_[i], current[i])) return false;
      if (tracked_[i].in_place && tracked_[i].data != current[i].tensor.data_ptr()) return false;
    }
    for (size_t i = 0; i < current.size(); ++i) {
      if (tracked_[i].in_place || tracked_[i].data == current[i].tensor.data_ptr()) continue;
      tracked_[i].entry = current[i];
      tracked_[i].data = current[i].tensor.data_ptr();
    }
    return true;
  }

  // Same names, layouts and data pointers as registered.
  bool Matches(const std::vector<NamedTensor>& current) const {
    if (current.size() != tracked_.size()) return false;
    for (size_t i = 0; i < current.size(); ++i) {
      if (!SameShape(tracked_[i], current[i])) return false;
      if (tracked_[i].data != current[i].tensor.data_ptr()) return false;
    }
    return true;
  }

  // Why `current` differs from the registration, for the log.
  std::string Difference(const std::vector<NamedTensor>& current, bool* layout_changed) const {
    *layout_changed = current.size() != tracked_.size();
    std::string first;
    for (size_t i = 0; i < std::max(current.size(), tracked_.size()); ++i) {
      if (i >= current.size() || i >= tracked_.size()) {
        if (first.empty()) {
          first = i >= tracked_.size() ? "'" + current[i].name + "' appeared"
                                       : "'" + tracked_[i].entry.name + "' disappeared";
        }
        continue;
      }
      if (!SameShape(tracked_[i], current[i])) {
        *layout_changed = true;
        if (first.empty()) {
          first = "'" + current[i].name +
                  "' changed name, dtype, shape, strides, device or shard spec";
        }
      } else if (tracked_[i].data != current[i].tensor.data_ptr() && first.empty()) {
        first = "the storage of '" + current[i].name + "' was reallocated";
      }
    }
    return std::to_string(current.size()) + " tensors (were " + std::to_string(tracked_.size()) +
           "): " + first;
  }

  // Opens an engine over `current` (closing the previous one).
  Status Reopen(const std::vector<NamedTensor>& current) {
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
      MEMENTO_RETURN_IF_ERROR(e->RegisterBuffer(p.name, p.data != nullptr ? p.data : &empty_byte,
                                                p.bytes, p.layout));
    }
    if (!engine_lock.owns_lock()) engine_lock.lock();
    entry_names_ = std::move(names);
    engine_ = std::move(e);
    return Status::Ok();
  }

  // The replicated tracked tensors, in order (replicated_ranges.h).
  std::vector<ReplicatedBytes> Replicated() const {
    std::vector<ReplicatedBytes> out;
    for (const Tracked& t : tracked_) {
      if (t.entry.replicated) out.push_back({static_cast<uint64_t>(t.nbytes), at::elementSize(t.dtype)});
    }
    return out;
  }

  // The engine's entries for tracked_ (and pieces_): whole tensors, slices of
  // global tensors, this rank's byte pieces of the replicated tensors, and the
  // extra state.
  std::vector<PlannedEntry> PlanEntries() {
    std::vector<PlannedEntry> out;
    for (const Tracked& t : tracked_) {
      if (t.entry.replicated) continue;
      PlannedEntry p{t.entry.name, t.source(), static_cast<uint64_t>(t.nbytes), {}};
      p.layout.shape = t.sizes;
      if (t.shard) {
        p.layout.dtype = DTypeName(t.dtype);
        p.layout.global_shape = t.shard->global_shape;
        p.layout.offsets = t.shard->offsets;
      } else {
        // Whole on this rank. A 0-dimensional tensor (Adam's step) is laid out
        // as one element: an empty global shape would make it opaque bytes,
        // which an elastic restore cannot take onto another rank count.
        p.layout.dtype = DTypeField(t.entry.tensor);
        if (p.layout.shape.empty()) p.layout.shape = {1};
        p.layout.global_shape = p.layout.shape;
        p.layout.offsets.assign(p.layout.shape.size(), 0);
      }
      out.push_back(std::move(p));
    }
    // Replicated tensors: this rank's byte range of their concatenation.
    pieces_.clear();
    const uint64_t n = transport_->size(), r = transport_->rank();
    const std::vector<ReplicatedBytes> replicated = Replicated();
    range_begin_ = ReplicatedRangeBegin(replicated, r, n);
    range_end_ = ReplicatedRangeBegin(replicated, r + 1, n);
    uint64_t offset = 0;
    for (size_t i = 0; i < tracked_.size(); ++i) {
      const Tracked& t = tracked_[i];
      if (!t.entry.replicated) continue;
      const uint64_t lo = std::max<uint64_t>(offset, range_begin_);
      const uint64_t hi = std::min<uint64_t>(offset + t.nbytes, range_end_);
      if (lo < hi) {
        Piece piece{i, lo - offset, hi - lo};
        PlannedEntry p{t.entry.name, static_cast<uint8_t*>(t.source()) + piece.begin, piece.bytes,
                       {}};
        // The bytes of a tensor of this shape: a relaunch that registers
        // another shape of as many bytes is refused, not reinterpreted.
        p.layout.dtype =
            FitDType(DTypeDescription(t.entry.tensor) + " shape=[" + Join(t.sizes) + "] bytes");
        p.layout.global_shape = {t.nbytes};
        p.layout.shape = {static_cast<int64_t>(piece.bytes)};
        p.layout.offsets = {static_cast<int64_t>(piece.begin)};
        out.push_back(std::move(p));
        pieces_.push_back(piece);
      }
      offset += t.nbytes;
    }
    // The extra state: one whole copy per rank, so that an elastic restore
    // hands each new rank an old rank's copy.
    const int64_t cap = static_cast<int64_t>(extra_buf_.size());
    out.push_back({kExtraEntry, extra_buf_.data(), extra_buf_.size(),
                   runtime::EntryLayout{"memento-extra", {cap}, {cap}, {0}}});
    return out;
  }

  Status WriteExtra(uint64_t step) {
    std::map<std::string, std::string> records;
    records[kStepKey] = U64Bytes(step);
    if (options_.save_rng) SaveGenerators(&records);
    for (const auto& [key, hooks] : extras_) records[key] = hooks.save();
    for (const auto& [key, bytes] : user_) records[kUserPrefix + key] = bytes;
    return EncodeExtraState(records, extra_buf_.data(), extra_buf_.size());
  }

  Status ReadExtra(uint64_t* step) {
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

  // Every rank restored its own range of the replicated bytes and sends it to
  // every other rank, point to point: after an elastic restore the engine's
  // commit thread may still be running the collectives of the version it
  // protects in the background, which a collective here would interleave with.
  Status GatherReplicated() {
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
          received = Status::Corruption("restore: rank " + std::to_string(peer) + " sent " +
                                        std::to_string(*got) +
                                        " bytes of replicated tensors, expected " +
                                        std::to_string(want));
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

  Status WithUnreported(Status now) {
    Status first = std::move(unreported_);
    unreported_ = Status::Ok();
    if (first.ok()) return now;
    if (now.ok()) return first;
    return Status(first.code(), first.message() + "; then: " + now.ToString());
  }

  // The devices of the registered CUDA tensors.
  std::set<c10::DeviceIndex> CudaDevices() const {
    std::set<c10::DeviceIndex> devices;
    for (const Tracked& t : tracked_) {
      if (t.device.is_cuda()) devices.insert(t.device.index());
    }
    return devices;
  }

  // Compares this rank's stored shard layout (the segment named in the
  // engine's `error`) with the registration; names the differing tensors, or
  // "" when it cannot tell.
  std::string DiagnoseLayout(const std::string& error) const {
    const size_t at = error.find("/memento.");
    if (at == std::string::npos) return "";
    const size_t end = error.find_first_of(" :,;", at);
    const std::string segment = error.substr(at, end == std::string::npos ? end : end - at);
    auto store = runtime::NodeStore::AttachByName(segment, runtime::ShmSegment::Access::kReadOnly);
    if (!store.ok()) return "";
    std::map<std::string, runtime::RegionSpec> stored;
    for (const runtime::RegionSpec& r : store->layout().regions) {
      if (r.kind == runtime::RegionKind::kShard) stored[r.name] = r;
    }
    // What the engine registered.
    std::vector<std::string> problems;
    std::set<std::string> seen;
    for (const PlannedEntry& p : planned_) {
      seen.insert(p.name);
      auto it = stored.find(p.name);
      runtime::RegionSpec now;
      now.name = p.name;
      now.capacity = p.bytes;
      now.layout = p.layout;
      if (it == stored.end()) {
        problems.push_back("tensor '" + p.name + "' (" + Describe(now) +
                           ") is registered but not in the stored checkpoint");
      } else if (p.name == kExtraEntry && it->second.capacity != p.bytes) {
        problems.push_back(
            "the extra state ('" + p.name + "') has " + std::to_string(it->second.capacity) +
            " bytes in the stored checkpoint and " + std::to_string(p.bytes) +
            " now: relaunch with extra_capacity " + std::to_string(it->second.capacity) +
            " to restore it (a new "
            "extra_capacity takes effect for a job that starts over)");
      } else if (it->second.capacity != p.bytes || it->second.layout.dtype != p.layout.dtype ||
                 it->second.layout.shape != p.layout.shape ||
                 it->second.layout.global_shape != p.layout.global_shape ||
                 it->second.layout.offsets != p.layout.offsets) {
        problems.push_back("tensor '" + p.name + "': stored " + Describe(it->second) +
                           ", registered " + Describe(now));
      }
    }
    for (const auto& [name, spec] : stored) {
      if (!seen.count(name)) {
        problems.push_back("tensor '" + name + "' (" + Describe(spec) +
                           ") is in the stored checkpoint but not registered");
      }
    }
    std::string out;
    for (size_t i = 0; i < problems.size() && i < 8; ++i) out += (i ? "; " : "") + problems[i];
    if (problems.size() > 8) out += "; and " + std::to_string(problems.size() - 8) + " more";
    return out;
  }

  runtime::Config config_;
  std::shared_ptr<runtime::Transport> transport_;
  Options options_;
  std::vector<Source> sources_;
  std::map<std::string, ExtraHooks> extras_;
  std::map<std::string, std::string> user_;
  std::vector<Tracked> tracked_;
  std::map<std::string, ShardSpec> shards_;  // SetShard's, by entry name
  std::vector<Piece> pieces_;
  std::vector<PlannedEntry> planned_;  // what the engine was given
  uint64_t range_begin_ = 0, range_end_ = 0;
  std::vector<uint8_t> extra_buf_;
  ProducerFence fence_;  // before engine_: the engine's copies wait for its event
  // Written by the application thread (Reopen) under engine_mu_, held
  // exclusively; read by it without the lock, and by the getters of other
  // threads under it, shared.
  std::unique_ptr<runtime::Checkpointer> engine_;
  std::vector<std::string> entry_names_;
  std::string node_;
  mutable std::shared_mutex engine_mu_;
  Status unreported_;  // a closed engine's failure, not yet returned by Wait
  std::atomic<int> reregistrations_{0};
  std::atomic<int> relayouts_{0};
};

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
