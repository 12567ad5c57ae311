#include "memento/torch/torch_checkpointer.h"

#include <ATen/MemoryOverlap.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
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
#include <cstring>
#include <set>
#include <sstream>

#include "extra_state.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_store.h"

namespace memento::torch_adapter {

using runtime::LogLevel;

namespace {

constexpr const char* kExtraEntry = "__memento__";
constexpr const char* kStepKey = "memento.step";
constexpr const char* kCpuRngKey = "memento.rng.cpu";
constexpr const char* kCudaRngKey = "memento.rng.cuda.";
constexpr const char* kUserPrefix = "user.";

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The dtype field of an entry's EntryLayout: the dtype, then the strides when
// the tensor is not contiguous and the device when it is not the CPU.
std::string DTypeField(const at::Tensor& t) {
  std::string s = DTypeName(t.scalar_type());
  if (!t.is_contiguous()) s += " strides=" + Join(t.strides().vec());
  if (!t.device().is_cpu()) s += " device=" + t.device().str();
  return s;
}

std::string Describe(const runtime::RegionSpec& r) {
  std::string s = r.layout.dtype.empty() ? "bytes" : r.layout.dtype;
  if (!r.layout.shape.empty()) s += " [" + Join(r.layout.shape) + "]";
  if (r.layout.global_shape != r.layout.shape) s += " of [" + Join(r.layout.global_shape) + "]";
  return s + " (" + std::to_string(r.capacity) + " bytes)";
}

std::string U64Bytes(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

at::Tensor ByteView(void* data, int64_t bytes, at::Device device) {
  return at::from_blob(data, {bytes}, at::TensorOptions().dtype(at::kByte).device(device));
}

std::string TensorBytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

at::Tensor BytesTensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// Integer optimizer state (libtorch keeps `step` as an int64 field, not a tensor).
template <typename S>
bool StepOf(torch::optim::OptimizerParamState* s, int64_t* out) {
  if (auto* p = dynamic_cast<S*>(s)) {
    *out = p->step();
    return true;
  }
  return false;
}
template <typename S>
bool SetStep(torch::optim::OptimizerParamState* s, int64_t v) {
  if (auto* p = dynamic_cast<S*>(s)) {
    p->step(v);
    return true;
  }
  return false;
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
  bool in_place = true;  // dense in its storage: registered where it lives
  at::Tensor staging;    // contiguous copy otherwise

  // Start of the bytes the engine reads and writes.
  void* source() const { return in_place ? data : staging.data_ptr(); }
};

// A byte range of a replicated tensor held by this rank.
struct Piece {
  size_t tracked = 0;
  uint64_t begin = 0;
  uint64_t bytes = 0;
};

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
    if (!engine_ || !Matches(current)) MEMENTO_RETURN_IF_ERROR(Reopen(current));
    {
      torch::NoGradGuard no_grad;
      for (Tracked& t : tracked_) {
        if (!t.in_place) t.staging.copy_(t.entry.tensor);
      }
    }
    MEMENTO_RETURN_IF_ERROR(WriteExtra(step));
    SyncProducingStreams();
    return engine_->Save(step);
  }

  Result<std::optional<RestoreResult>> Restore() {
    MEMENTO_ASSIGN_OR_RETURN(std::vector<NamedTensor> current, Enumerate());
    if (!engine_ || !Matches(current)) MEMENTO_RETURN_IF_ERROR(Reopen(current));
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

  runtime::Checkpointer* engine() { return engine_.get(); }
  std::vector<std::string> EntryNames() const { return entry_names_; }
  int reregistrations() const { return reregistrations_; }
  int relayouts() const { return relayouts_; }
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
        if (nt.tensor.is_sparse() || nt.tensor.is_quantized()) {
          return Status::InvalidArgument("tensor '" + nt.name +
                                         "' is sparse or quantized: only strided tensors are "
                                         "supported");
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
    return all;
  }

  static bool SameShape(const Tracked& t, const NamedTensor& n) {
    const at::Tensor& x = n.tensor;
    return t.entry.name == n.name && t.entry.replicated == n.replicated &&
           t.dtype == x.scalar_type() && t.sizes == x.sizes().vec() &&
           t.strides == x.strides().vec() && t.device == x.device() &&
           t.nbytes == static_cast<int64_t>(x.numel() * x.element_size());
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
          first = "'" + current[i].name + "' changed name, dtype, shape, strides or device";
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
      (void)engine_->Wait();
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
      t.in_place = x.is_non_overlapping_and_dense();
      if (!t.in_place) {
        t.staging = at::empty(x.sizes(), x.options().requires_grad(false));
      }
      tracked.push_back(std::move(t));
    }
    tracked_ = std::move(tracked);
    extra_buf_.assign(options_.extra_capacity, 0);

    auto engine = runtime::Checkpointer::Create(config, transport_, nullptr, options_.hooks);
    if (!engine.ok()) return engine.status();
    std::unique_ptr<runtime::Checkpointer> e = std::move(engine).value();
    entry_names_.clear();
    static uint8_t empty_byte = 0;
    auto reg = [&](const std::string& name, void* data, uint64_t bytes,
                   runtime::EntryLayout layout) -> Status {
      entry_names_.push_back(name);
      return e->RegisterBuffer(name, data != nullptr ? data : &empty_byte, bytes,
                               std::move(layout));
    };
    uint64_t replicated_total = 0;
    for (const Tracked& t : tracked_) {
      if (t.entry.replicated) {
        replicated_total += t.nbytes;
        continue;
      }
      runtime::EntryLayout layout;
      layout.dtype = DTypeField(t.entry.tensor);
      layout.global_shape = t.sizes;
      layout.shape = t.sizes;
      layout.offsets.assign(t.sizes.size(), 0);
      MEMENTO_RETURN_IF_ERROR(reg(t.entry.name, t.source(), t.nbytes, layout));
    }
    // Replicated tensors: this rank's byte range of their concatenation.
    pieces_.clear();
    const uint64_t n = transport_->size(), r = transport_->rank();
    range_begin_ = replicated_total * r / n;
    range_end_ = replicated_total * (r + 1) / n;
    uint64_t offset = 0;
    for (size_t i = 0; i < tracked_.size(); ++i) {
      const Tracked& t = tracked_[i];
      if (!t.entry.replicated) continue;
      const uint64_t lo = std::max<uint64_t>(offset, range_begin_);
      const uint64_t hi = std::min<uint64_t>(offset + t.nbytes, range_end_);
      if (lo < hi) {
        Piece p{i, lo - offset, hi - lo};
        runtime::EntryLayout layout;
        layout.dtype = DTypeField(t.entry.tensor) + " bytes";
        layout.global_shape = {t.nbytes};
        layout.shape = {static_cast<int64_t>(p.bytes)};
        layout.offsets = {static_cast<int64_t>(p.begin)};
        MEMENTO_RETURN_IF_ERROR(reg(t.entry.name + "@" + std::to_string(p.begin),
                                    static_cast<uint8_t*>(t.source()) + p.begin, p.bytes, layout));
        pieces_.push_back(p);
      }
      offset += t.nbytes;
    }
    runtime::EntryLayout extra_layout;
    extra_layout.dtype = "memento-extra";
    MEMENTO_RETURN_IF_ERROR(reg(kExtraEntry, extra_buf_.data(), extra_buf_.size(), extra_layout));
    engine_ = std::move(e);
    return Status::Ok();
  }

  Status WriteExtra(uint64_t step) {
    std::map<std::string, std::string> records;
    records[kStepKey] = U64Bytes(step);
    if (options_.save_rng) {
      {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        records[kCpuRngKey] = TensorBytes(gen.get_state());
      }
      if (torch::cuda::is_available()) {
        for (size_t i = 0; i < torch::cuda::device_count(); ++i) {
          auto gen = at::globalContext().defaultGenerator(
              at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
          std::lock_guard<std::mutex> lock(gen.mutex());
          records[kCudaRngKey + std::to_string(i)] = TensorBytes(gen.get_state());
        }
      }
    }
    for (const auto& [key, hooks] : extras_) records[key] = hooks.save();
    for (const auto& [key, bytes] : user_) records[kUserPrefix + key] = bytes;
    return EncodeExtraState(records, extra_buf_.data(), extra_buf_.size());
  }

  Status ReadExtra(uint64_t* step) {
    MEMENTO_ASSIGN_OR_RETURN(auto records, DecodeExtraState(extra_buf_.data(), extra_buf_.size()));
    auto it = records.find(kStepKey);
    if (it != records.end() && it->second.size() == 8) std::memcpy(step, it->second.data(), 8);
    if (options_.save_rng) {
      if (auto c = records.find(kCpuRngKey); c != records.end()) {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(BytesTensor(c->second));
      }
      if (torch::cuda::is_available()) {
        for (size_t i = 0; i < torch::cuda::device_count(); ++i) {
          auto c = records.find(kCudaRngKey + std::to_string(i));
          if (c == records.end()) continue;
          auto gen = at::globalContext().defaultGenerator(
              at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
          std::lock_guard<std::mutex> lock(gen.mutex());
          gen.set_state(BytesTensor(c->second));
        }
      }
    }
    for (auto& [key, hooks] : extras_) {
      auto r = records.find(key);
      if (r == records.end()) {
        return Status::NotFound("restore: the checkpoint has no extra state '" + key + "'");
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

  // Every rank restored its own range of the replicated bytes; one Allgather
  // hands every rank the others'.
  Status GatherReplicated() {
    if (transport_->size() == 1) return Status::Ok();
    uint64_t total = 0;
    for (const Tracked& t : tracked_) {
      if (t.entry.replicated) total += t.nbytes;
    }
    if (total == 0) return Status::Ok();
    std::vector<uint8_t> mine(range_end_ - range_begin_);
    uint64_t pos = 0;
    for (const Piece& p : pieces_) {
      const Tracked& t = tracked_[p.tracked];
      at::Tensor dst = ByteView(mine.data() + pos, p.bytes, at::kCPU);
      dst.copy_(ByteView(static_cast<uint8_t*>(t.source()) + p.begin, p.bytes, t.device));
      pos += p.bytes;
    }
    MEMENTO_ASSIGN_OR_RETURN(auto all, transport_->Allgather(mine.data(), mine.size()));
    const uint64_t n = transport_->size();
    for (uint64_t r = 0; r < n; ++r) {
      if (r == static_cast<uint64_t>(transport_->rank())) continue;
      const uint64_t lo = total * r / n, hi = total * (r + 1) / n;
      if (all[r].size() != hi - lo) {
        return Status::Corruption(
            "restore: rank " + std::to_string(r) + " sent " + std::to_string(all[r].size()) +
            " bytes of replicated tensors, expected " + std::to_string(hi - lo));
      }
      uint64_t offset = 0;
      for (const Tracked& t : tracked_) {
        if (!t.entry.replicated) continue;
        const uint64_t a = std::max(offset, lo), b = std::min<uint64_t>(offset + t.nbytes, hi);
        if (a < b) {
          at::Tensor dst =
              ByteView(static_cast<uint8_t*>(t.source()) + (a - offset), b - a, t.device);
          dst.copy_(ByteView(all[r].data() + (a - lo), b - a, at::kCPU));
        }
        offset += t.nbytes;
      }
    }
    return Status::Ok();
  }

  // The engine's snapshot copies device tensors on its own streams: first
  // wait for what the producing (current) stream of each device has queued.
  void SyncProducingStreams() {
    std::set<c10::DeviceIndex> done;
    for (const Tracked& t : tracked_) {
      if (!t.device.is_cuda() || !done.insert(t.device.index()).second) continue;
      const c10::impl::DeviceGuardImplInterface* impl =
          c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
      impl->synchronizeStream(impl->getStream(t.device));
    }
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
    // What the engine registered (rebuilt the same way as in Reopen).
    std::vector<std::string> problems;
    std::set<std::string> seen;
    auto check = [&](const std::string& name, const std::string& dtype,
                     const std::vector<int64_t>& global, const std::vector<int64_t>& shape,
                     uint64_t bytes) {
      seen.insert(name);
      auto it = stored.find(name);
      runtime::RegionSpec now;
      now.name = name;
      now.capacity = bytes;
      now.layout.dtype = dtype;
      now.layout.global_shape = global;
      now.layout.shape = shape;
      if (it == stored.end()) {
        problems.push_back("tensor '" + name + "' (" + Describe(now) +
                           ") is registered but not in the stored checkpoint");
      } else if (it->second.capacity != bytes || it->second.layout.dtype != dtype ||
                 it->second.layout.shape != shape || it->second.layout.global_shape != global) {
        problems.push_back("tensor '" + name + "': stored " + Describe(it->second) +
                           ", registered " + Describe(now));
      }
    };
    for (const Tracked& t : tracked_) {
      if (!t.entry.replicated) {
        check(t.entry.name, DTypeField(t.entry.tensor), t.sizes, t.sizes, t.nbytes);
      }
    }
    for (const Piece& p : pieces_) {
      const Tracked& t = tracked_[p.tracked];
      check(t.entry.name + "@" + std::to_string(p.begin), DTypeField(t.entry.tensor) + " bytes",
            {t.nbytes}, {static_cast<int64_t>(p.bytes)}, p.bytes);
    }
    check(kExtraEntry, "memento-extra", {}, {}, extra_buf_.size());
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
  std::vector<Piece> pieces_;
  uint64_t range_begin_ = 0, range_end_ = 0;
  std::vector<std::string> entry_names_;
  std::vector<uint8_t> extra_buf_;
  std::unique_ptr<runtime::Checkpointer> engine_;
  int reregistrations_ = 0;
  int relayouts_ = 0;
};

TorchCheckpointer::TorchCheckpointer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TorchCheckpointer::~TorchCheckpointer() = default;

Result<std::unique_ptr<TorchCheckpointer>> TorchCheckpointer::Create(
    runtime::Config config, std::shared_ptr<runtime::Transport> transport, Options options) {
  MEMENTO_RETURN_IF_ERROR(config.Validate());
  if (!transport) return Status::InvalidArgument("TorchCheckpointer: no transport");
  if (options.extra_capacity < 4096) {
    return Status::InvalidArgument("extra_capacity " + std::to_string(options.extra_capacity) +
                                   " is below 4096 bytes");
  }
  return std::unique_ptr<TorchCheckpointer>(new TorchCheckpointer(
      std::make_unique<Impl>(std::move(config), std::move(transport), options)));
}

Status TorchCheckpointer::Register(const std::string& name, const at::Tensor& tensor,
                                   bool replicated) {
  NamedTensor nt{name, tensor, replicated};
  return impl_->AddSource([nt] { return std::vector<NamedTensor>{nt}; });
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
  // Integer state: (parameter index, step) pairs.
  ExtraHooks hooks;
  hooks.save = [&optimizer] {
    std::string out;
    auto& state = optimizer.state();
    int64_t index = 0;
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) {
        auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
        int64_t step = 0;
        if (it != state.end() &&
            (StepOf<torch::optim::AdamParamState>(it->second.get(), &step) ||
             StepOf<torch::optim::AdamWParamState>(it->second.get(), &step) ||
             StepOf<torch::optim::RMSpropParamState>(it->second.get(), &step) ||
             StepOf<torch::optim::AdagradParamState>(it->second.get(), &step))) {
          out.append(reinterpret_cast<const char*>(&index), 8);
          out.append(reinterpret_cast<const char*>(&step), 8);
        }
        ++index;
      }
    }
    return out;
  };
  hooks.restore = [&optimizer, prefix](const std::string& bytes) -> Status {
    std::map<int64_t, int64_t> steps;
    for (size_t i = 0; i + 16 <= bytes.size(); i += 16) {
      int64_t index = 0, step = 0;
      std::memcpy(&index, bytes.data() + i, 8);
      std::memcpy(&step, bytes.data() + i + 8, 8);
      steps[index] = step;
    }
    auto& state = optimizer.state();
    int64_t index = 0;
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) {
        auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
        auto s = steps.find(index);
        if (it != state.end() && s != steps.end()) {
          auto* st = it->second.get();
          if (!(SetStep<torch::optim::AdamParamState>(st, s->second) ||
                SetStep<torch::optim::AdamWParamState>(st, s->second) ||
                SetStep<torch::optim::RMSpropParamState>(st, s->second) ||
                SetStep<torch::optim::AdagradParamState>(st, s->second))) {
            return Status::FailedPrecondition("restore: optimizer '" + prefix + "' parameter " +
                                              std::to_string(index) +
                                              " has no integer step to restore");
          }
        }
        ++index;
      }
    }
    return Status::Ok();
  };
  return impl_->AddExtra("memento.optimizer." + prefix, std::move(hooks));
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
Result<std::optional<RestoreResult>> TorchCheckpointer::Restore() { return impl_->Restore(); }
Status TorchCheckpointer::Save(uint64_t step) { return impl_->Save(step); }
Status TorchCheckpointer::WaitSnapshot() {
  return impl_->engine() ? impl_->engine()->WaitSnapshot() : Status::Ok();
}
Status TorchCheckpointer::Wait() {
  return impl_->engine() ? impl_->engine()->Wait() : Status::Ok();
}
Status TorchCheckpointer::WaitPersist() {
  return impl_->engine() ? impl_->engine()->WaitPersist() : Status::Ok();
}
std::optional<uint64_t> TorchCheckpointer::LatestCommitted() const {
  return impl_->engine() ? impl_->engine()->LatestCommitted() : std::nullopt;
}
double TorchCheckpointer::BlockedSeconds() const {
  return impl_->engine() ? impl_->engine()->BlockedSeconds() : 0.0;
}
runtime::IntervalStats TorchCheckpointer::Interval() const {
  return impl_->engine() ? impl_->engine()->Interval() : runtime::IntervalStats();
}
std::vector<std::string> TorchCheckpointer::EntryNames() const { return impl_->EntryNames(); }
int TorchCheckpointer::reregistrations() const { return impl_->reregistrations(); }
int TorchCheckpointer::relayouts() const { return impl_->relayouts(); }
int TorchCheckpointer::rank() const { return impl_->transport().rank(); }
int TorchCheckpointer::size() const { return impl_->transport().size(); }
const std::string& TorchCheckpointer::node() const {
  static const std::string kNone;
  return impl_->engine() ? impl_->engine()->node() : kNone;
}
runtime::Checkpointer* TorchCheckpointer::engine() { return impl_->engine(); }

}  // namespace memento::torch_adapter
