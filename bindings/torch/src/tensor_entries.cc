// Which tensors a TorchCheckpointer registers, whether they can be checkpointed,
// and how they map onto the engine's entries (checkpointer_impl.h).
#include <ATen/MemoryOverlap.h>
#include <c10/util/StringUtil.h>
#include <c10/util/string_utils.h>
#include <torch/types.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>

#include "checkpointer_impl.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/node_store.h"

namespace memento::torch_adapter {
namespace {

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

bool SameShard(const std::optional<ShardSpec>& a, const std::optional<ShardSpec>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->global_shape == b->global_shape && a->offsets == b->offsets);
}

// Whether `spec` places a tensor of `sizes` inside its global tensor.
Status CheckShard(const std::string& name, const std::vector<int64_t>& sizes,
                  const ShardSpec& spec) {
  const std::string where = "tensor '" + name + "' of shape [" + Join(sizes) + "]";
  if (sizes.empty()) {
    return Status::InvalidArgument(where +
                                   " has no dimension: it cannot be a slice of a "
                                   "global tensor (register it whole)");
  }
  if (spec.global_shape.size() != sizes.size() || spec.offsets.size() != sizes.size()) {
    return Status::InvalidArgument(where +
                                   ": its shard spec needs one global size and one "
                                   "offset per dimension (global_shape [" +
                                   Join(spec.global_shape) + "], offsets [" + Join(spec.offsets) +
                                   "])");
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (spec.offsets[d] < 0 || spec.global_shape[d] < 0 ||
        spec.offsets[d] + sizes[d] > spec.global_shape[d]) {
      return Status::InvalidArgument(
          where + " at offsets [" + Join(spec.offsets) + "] does not fit in the global shape [" +
          Join(spec.global_shape) + "] (dimension " + std::to_string(d) + ")");
    }
  }
  return Status::Ok();
}

// Whether the bytes the snapshot reads (and a restore writes) are the
// tensor's own: a tensor subclass dispatched in Python (torchao's float8 and
// NF4 weights, a wrapper of other tensors) has no data of its own, a storage
// freed in place (resize_(0), as FSDP does between uses) none left, and a
// conjugate or negative view keeps unresolved bytes that would come back as
// the other value.
Status CheckBytes(const std::string& name, const at::Tensor& t) {
  const std::string where = "tensor '" + name + "'";
  if (t.key_set().has(c10::DispatchKey::Python)) {
    return Status::InvalidArgument(where +
                                   " is a tensor subclass dispatched in Python: it has no data "
                                   "of its own to checkpoint (register the tensors it holds)");
  }
  if (t.is_conj() || t.is_neg()) {
    return Status::InvalidArgument(
        where + " is a lazy " + (t.is_conj() ? "conjugate" : "negative") +
        " view: its memory holds the unresolved values (register t.resolve_conj() / "
        "t.resolve_neg(), or the tensor it views)");
  }
  if (t.numel() == 0) return Status::Ok();
  // Bytes from the storage's start to one past the last element (strides of
  // a strided tensor are >= 0).
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const uint64_t needed = static_cast<uint64_t>(last + 1) * t.element_size();
  if (!t.has_storage() || t.storage().data() == nullptr || t.storage().nbytes() < needed) {
    const uint64_t held = t.has_storage() ? t.storage().nbytes() : 0;
    return Status::InvalidArgument(where + " of " + std::to_string(t.numel()) + " elements needs " +
                                   std::to_string(needed) + " bytes of storage and has " +
                                   std::to_string(held) +
                                   " (its storage was freed or resized; register it once its "
                                   "data is in place)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<NamedTensor>> TorchCheckpointer::Impl::Enumerate() const {
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
      if (nt.tensor.is_nested()) {
        return Status::InvalidArgument("tensor '" + nt.name +
                                       "' is a nested tensor: only strided tensors are supported "
                                       "(register its components)");
      }
      if (nt.tensor.layout() != at::kStrided || nt.tensor.is_quantized()) {
        const std::string what = nt.tensor.is_quantized() ? "quantized"
                                                          : "sparse or MKL-DNN (layout " +
                                                                c10::str(nt.tensor.layout()) + ")";
        return Status::InvalidArgument("tensor '" + nt.name + "' is " + what +
                                       ": only strided tensors are supported");
      }
      MEMENTO_RETURN_IF_ERROR(CheckBytes(nt.name, nt.tensor));
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

Status TorchCheckpointer::Impl::ApplyShards(std::vector<NamedTensor>* all) const {
  // Runs at every Save: nothing to do (and nothing allocated) without shards.
  if (shards_.empty() && std::none_of(all->begin(), all->end(),
                                      [](const NamedTensor& nt) { return nt.shard.has_value(); })) {
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

bool TorchCheckpointer::Impl::SameShape(const Tracked& t, const NamedTensor& n) {
  const at::Tensor& x = n.tensor;
  return t.entry.name == n.name && t.entry.replicated == n.replicated &&
         t.dtype == x.scalar_type() && t.sizes == x.sizes().vec() &&
         t.strides == x.strides().vec() && t.device == x.device() &&
         t.nbytes == static_cast<int64_t>(x.numel() * x.element_size()) &&
         SameShard(t.shard, n.shard) && t.entry.copy_at_save == n.copy_at_save;
}

bool TorchCheckpointer::Impl::FollowMovedStaged(const std::vector<NamedTensor>& current) {
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

bool TorchCheckpointer::Impl::Matches(const std::vector<NamedTensor>& current) const {
  if (current.size() != tracked_.size()) return false;
  for (size_t i = 0; i < current.size(); ++i) {
    if (!SameShape(tracked_[i], current[i])) return false;
    if (tracked_[i].data != current[i].tensor.data_ptr()) return false;
  }
  return true;
}

std::string TorchCheckpointer::Impl::Difference(const std::vector<NamedTensor>& current,
                                                bool* layout_changed) const {
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
        first =
            "'" + current[i].name + "' changed name, dtype, shape, strides, device or shard spec";
      }
    } else if (tracked_[i].data != current[i].tensor.data_ptr() && first.empty()) {
      first = "the storage of '" + current[i].name + "' was reallocated";
    }
  }
  return std::to_string(current.size()) + " tensors (were " + std::to_string(tracked_.size()) +
         "): " + first;
}

std::vector<ReplicatedBytes> TorchCheckpointer::Impl::Replicated() const {
  std::vector<ReplicatedBytes> out;
  for (const Tracked& t : tracked_) {
    if (t.entry.replicated)
      out.push_back({static_cast<uint64_t>(t.nbytes), at::elementSize(t.dtype)});
  }
  return out;
}

std::vector<PlannedEntry> TorchCheckpointer::Impl::PlanEntries() {
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
      PlannedEntry p{
          t.entry.name, static_cast<uint8_t*>(t.source()) + piece.begin, piece.bytes, {}};
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

std::string TorchCheckpointer::Impl::DiagnoseLayout(const std::string& error) const {
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
  bool optimizer_state = false;
  for (const auto& [name, spec] : stored) {
    if (!seen.count(name)) {
      problems.push_back("tensor '" + name + "' (" + Describe(spec) +
                         ") is in the stored checkpoint but not registered");
      // The Python package's optimizer state: "<optimizer>.state.<index>.<key>".
      const size_t at = name.find(".state.");
      optimizer_state = optimizer_state || (at != std::string::npos && at + 7 < name.size() &&
                                            std::isdigit(static_cast<unsigned char>(name[at + 7])));
    }
  }
  std::string out;
  for (size_t i = 0; i < problems.size() && i < 8; ++i) out += (i ? "; " : "") + problems[i];
  if (problems.size() > 8) out += "; and " + std::to_string(problems.size() - 8) + " more";
  if (optimizer_state) {
    // The stored checkpoint is right; the registration lacks state that the
    // saving run's optimizer created after register().
    out +=
        ". Optimizer state the optimizer did not hold at register() (a param group added "
        "after register(), or an optimizer whose state its first step creates) is saved "
        "once it exists; to restore it, create it before register() (add the group "
        "first). The stored checkpoint is intact: do not remove it";
  }
  return out;
}

}  // namespace memento::torch_adapter
