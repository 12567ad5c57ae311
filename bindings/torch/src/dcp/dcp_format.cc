#include "dcp/dcp_format.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "dcp/pickle_writer.h"
#include "extra_state.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/torch/torch_checkpointer.h"

namespace memento::torch_adapter::dcp {
namespace {

using json = nlohmann::json;
using runtime::RankFileContext;
using runtime::RemoteEntryInfo;
using runtime::RemoteEntrySource;
using runtime::RemoteEntryTarget;

constexpr char kIndexFormat[] = "memento-dcp 1";
constexpr char kFooterMagic[8] = {'M', 'D', 'C', 'P', 'I', 'D', 'X', '1'};
constexpr uint64_t kFooterBytes = 8 + 4 + 8;
constexpr uint64_t kMaxIndexBytes = 1ull << 30;
constexpr uint64_t kReadChunk = 4ull << 20;
// Records of the extra state the Python package fills for this format.
constexpr char kItemsRecord[] = "user.dcp.items";
constexpr char kPathsRecord[] = "user.dcp.paths";
constexpr char kAliasesRecord[] = "user.dcp.aliases";

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(sizes[i], 1);
  return s;
}

int64_t Numel(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}

// Elements [a, b) of a row-major array of shape p[dim:] (its other dims fixed
// at `fixed`) as blocks, in order.
void Split(const std::vector<int64_t>& p, size_t dim, int64_t a, int64_t b,
           std::vector<int64_t> fixed, std::vector<std::pair<std::vector<int64_t>,
                                                             std::vector<int64_t>>>* out) {
  if (a >= b) return;
  std::vector<int64_t> tail(p.begin() + dim, p.end());
  auto emit = [&](std::vector<int64_t> off, std::vector<int64_t> size) {
    std::vector<int64_t> o = fixed, s(fixed.size(), 1);
    o.insert(o.end(), off.begin(), off.end());
    s.insert(s.end(), size.begin(), size.end());
    out->emplace_back(std::move(o), std::move(s));
  };
  if (a == 0 && b == Numel(tail)) {
    emit(std::vector<int64_t>(tail.size(), 0), tail);
    return;
  }
  const int64_t inner = Numel(std::vector<int64_t>(p.begin() + dim + 1, p.end()));
  if (a % inner != 0) {  // the rest of a partial first row
    const int64_t row = a / inner, end = std::min(b, (row + 1) * inner);
    std::vector<int64_t> f = fixed;
    f.push_back(row);
    Split(p, dim + 1, a - row * inner, end - row * inner, f, out);
    a = end;
    if (a >= b) return;
  }
  if (b / inner > a / inner) {  // whole rows
    std::vector<int64_t> off(tail.size(), 0), size = tail;
    off[0] = a / inner;
    size[0] = b / inner - a / inner;
    emit(off, size);
    a = (b / inner) * inner;
  }
  if (a < b) {  // the start of a last row
    std::vector<int64_t> f = fixed;
    f.push_back(a / inner);
    Split(p, dim + 1, 0, b - a, f, out);
  }
}

// Reads exactly n bytes at `offset`.
Status PRead(int fd, const std::string& path, uint64_t offset, void* out, uint64_t n) {
  uint8_t* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t r = pread(fd, p, std::min(n, kReadChunk), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("read " + path + ": " + std::strerror(errno));
    }
    if (r == 0) return Status::Corruption("remote file " + path + ": truncated");
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<json> ParseIndex(const std::string& path) {
  MEMENTO_ASSIGN_OR_RETURN(std::string text, ReadIndex(path));
  json index = json::parse(text, nullptr, false);
  if (index.is_discarded() || !index.is_object() || index.value("format", "") != kIndexFormat) {
    return Status::Corruption("remote file " + path + ": its memento index is not " +
                              kIndexFormat);
  }
  return index;
}

// Whether torch.load(weights_only=True) takes the typed storage class that
// libtorch's pickler names for `dtype` (torch.FloatStorage, ...): those of
// the newer dtypes (torch.UInt16Storage, torch.Float8_e4m3fnStorage,
// torch.ComplexHalfStorage) are refused, so DCP could not read the file.
bool LegacyStorageLoads(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kLong:
    case at::kInt:
    case at::kShort:
    case at::kChar:
    case at::kByte:
    case at::kBool:
    case at::kComplexFloat:
    case at::kComplexDouble:
      return true;
    default:
      return false;
  }
}

// data.pkl as torch.save writes it today: _rebuild_tensor_v3 over an
// untyped storage (persistent id ('storage', UntypedStorage, "0", "cpu",
// bytes)) with the dtype given apart; weights_only loads it for every dtype.
std::string RebuildTensorV3(const at::Tensor& t, uint64_t storage_bytes) {
  PickleWriter w;
  w.Global("torch._utils", "_rebuild_tensor_v3");
  w.Mark();
  w.Mark();
  w.Str("storage");
  w.Global("torch.storage", "UntypedStorage");
  w.Str("0");
  w.Str("cpu");
  w.Int(static_cast<int64_t>(storage_bytes));
  w.Tuple();
  w.PersId();
  w.Int(t.storage_offset());
  w.Mark();
  for (int64_t v : t.sizes()) w.Int(v);
  w.Tuple();
  w.Mark();
  for (int64_t v : t.strides()) w.Int(v);
  w.Tuple();
  w.Bool(false);
  w.Global("collections", "OrderedDict");
  w.EmptyTuple();
  w.Reduce();
  w.Global("torch", DcpTorchAttribute(DTypeName(t.scalar_type())));
  w.Tuple();
  w.Reduce();
  return w.Finish();
}

// One block of a tensor written as a torch.save archive (what
// FileSystemReader torch.load()s). `raw_at` gets where the block's bytes
// landed in the file.
Status WriteArchive(const uint8_t* data, const Block& b, at::ScalarType dtype,
                    runtime::RemoteFileSink* out, uint64_t* raw_at) {
  Status io;
  uint64_t found = UINT64_MAX;
  try {
    at::Tensor t = at::from_blob(const_cast<uint8_t*>(data), b.sizes, b.strides,
                                 at::TensorOptions().dtype(dtype).device(at::kCPU));
    std::vector<char> pickled;
    ::torch::jit::Pickler pickler(
        [&](const char* p, size_t n) { pickled.insert(pickled.end(), p, p + n); });
    pickler.protocol();
    pickler.pushIValue(t);
    pickler.stop();
    if (!LegacyStorageLoads(dtype) && pickler.tensorData().size() == 1) {
      const std::string v3 = RebuildTensorV3(t, pickler.tensorData()[0].storage().nbytes());
      pickled.assign(v3.begin(), v3.end());
    }
    // The archive's small records (headers, data.pkl, version, ...) are
    // gathered and written in one piece before and after the tensor's bytes,
    // which go straight from the slot: a write per record would cost a system
    // call each, tens per tensor.
    std::string small;
    auto flush = [&] {
      if (io.ok() && !small.empty()) io = out->Write(small.data(), small.size());
      small.clear();
    };
    // No zip crc32: memento's crc32c covers the bytes (torch.load does not
    // check the zip's; torch.serialization.config.save.compute_crc32 = False).
    caffe2::serialize::PyTorchStreamWriter writer(
        [&](const void* p, size_t n) -> size_t {
          if (!io.ok()) return 0;
          if (p == data && n == b.bytes && b.bytes > 0 && found == UINT64_MAX) {
            flush();
            found = out->size();
            if (io.ok()) io = out->Write(p, n);
          } else {
            small.append(static_cast<const char*>(p), n);
          }
          return io.ok() ? n : 0;
        },
        /*compute_crc32=*/false);
    ::torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                         pickler.tensorData(), writer);
    writer.writeEndOfFile();
    flush();
  } catch (const std::exception& e) {
    if (!io.ok()) return io;
    return Status::Internal(std::string("writing a torch.save archive: ") + e.what());
  }
  MEMENTO_RETURN_IF_ERROR(io);
  if (b.bytes > 0 && found == UINT64_MAX) {
    return Status::Internal("writing a torch.save archive: its tensor bytes were not written "
                            "from the slot in one piece");
  }
  *raw_at = found;
  return Status::Ok();
}

// The non-tensor values the Python package put in the extra state's record
// kItemsRecord (fqn, torch.save'd bytes) as DCP bytes items, the nested
// paths of every item (kPathsRecord), and the other names of stored tensors
// (kAliasesRecord: tied weights, {name: stored entry}).
Status WriteValueItems(const uint8_t* extra, uint64_t bytes, runtime::RemoteFileSink* out,
                       json* items, json* paths, json* aliases) {
  auto records = DecodeExtraState(extra, bytes);
  if (!records.ok()) return Status::Ok();  // not yet written: nothing to add
  auto found = records->find(kItemsRecord);
  if (found != records->end()) {
    const std::string& framed = found->second;
    size_t at = 0;
    auto take = [&](size_t n, std::string* s) {
      if (framed.size() - at < n) return false;
      *s = framed.substr(at, n);
      at += n;
      return true;
    };
    while (at < framed.size()) {
      std::string len_bytes, fqn, value;
      uint32_t name_len = 0;
      uint64_t value_len = 0;
      if (!take(4, &len_bytes)) break;
      std::memcpy(&name_len, len_bytes.data(), 4);
      if (!take(name_len, &fqn) || !take(8, &len_bytes)) break;
      std::memcpy(&value_len, len_bytes.data(), 8);
      if (!take(value_len, &value)) break;
      items->push_back({{"fqn", fqn}, {"kind", "bytes"}, {"offset", out->size()},
                        {"length", value.size()}});
      MEMENTO_RETURN_IF_ERROR(out->Write(value.data(), value.size()));
    }
    if (at != framed.size()) {
      return Status::InvalidArgument("dcp: the record " + std::string(kItemsRecord) +
                                     " of the extra state is malformed");
    }
  }
  found = records->find(kPathsRecord);
  if (found != records->end()) {
    *paths = json::parse(found->second, nullptr, false);
    if (paths->is_discarded() || !paths->is_object()) {
      return Status::InvalidArgument("dcp: the record " + std::string(kPathsRecord) +
                                     " of the extra state is not a JSON object");
    }
  }
  found = records->find(kAliasesRecord);
  if (found != records->end()) {
    *aliases = json::parse(found->second, nullptr, false);
    if (aliases->is_discarded() || !aliases->is_object()) {
      return Status::InvalidArgument("dcp: the record " + std::string(kAliasesRecord) +
                                     " of the extra state is not a JSON object");
    }
  }
  return Status::Ok();
}

json LayoutJson(const runtime::EntryLayout& l) {
  return {{"dtype", l.dtype}, {"global_shape", l.global_shape}, {"shape", l.shape},
          {"offsets", l.offsets}};
}

}  // namespace

std::vector<Block> BlocksOfRange(const std::vector<int64_t>& sizes,
                                 const std::vector<int64_t>& strides, int64_t first, int64_t last,
                                 uint64_t element_bytes) {
  const size_t nd = sizes.size();
  // The dimensions in storage order: largest stride first.
  std::vector<size_t> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](size_t x, size_t y) { return strides[x] > strides[y]; });
  std::vector<int64_t> p(nd);
  for (size_t k = 0; k < nd; ++k) p[k] = sizes[perm[k]];
  std::vector<Block> out;
  if (Numel(sizes) == 0) {  // nothing stored: one empty block, the whole tensor
    out.push_back({std::vector<int64_t>(nd, 0), sizes, RowMajorStrides(sizes), 0, 0});
    return out;
  }
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rects;
  Split(p, 0, first, last, {}, &rects);
  const std::vector<int64_t> storage = RowMajorStrides(p);
  for (const auto& [off_p, size_p] : rects) {
    Block b;
    b.offsets.resize(nd);
    b.sizes.resize(nd);
    b.strides.resize(nd);
    const std::vector<int64_t> inner = RowMajorStrides(size_p);
    int64_t flat = 0;
    for (size_t k = 0; k < nd; ++k) {
      b.offsets[perm[k]] = off_p[k];
      b.sizes[perm[k]] = size_p[k];
      b.strides[perm[k]] = inner[k];
      flat += off_p[k] * storage[k];
    }
    b.byte_begin = static_cast<uint64_t>(flat - first) * element_bytes;
    b.bytes = static_cast<uint64_t>(Numel(size_p)) * element_bytes;
    out.push_back(std::move(b));
  }
  return out;
}

Result<std::string> ReadIndex(const std::string& path) {
  Fd fd(path);
  if (fd.get() < 0) {
    if (errno == ENOENT) return Status::NotFound("remote file " + path + " does not exist");
    return Status::IoError("open " + path + ": " + std::strerror(errno));
  }
  const off_t size = lseek(fd.get(), 0, SEEK_END);
  if (size < static_cast<off_t>(kFooterBytes)) {
    return Status::Corruption("remote file " + path + ": too short for a memento index");
  }
  char footer[kFooterBytes];
  MEMENTO_RETURN_IF_ERROR(PRead(fd.get(), path, size - kFooterBytes, footer, kFooterBytes));
  uint64_t len = 0;
  uint32_t crc = 0;
  std::memcpy(&len, footer, 8);
  std::memcpy(&crc, footer + 8, 4);
  if (std::memcmp(footer + 12, kFooterMagic, 8) != 0 || len > kMaxIndexBytes ||
      len > static_cast<uint64_t>(size) - kFooterBytes) {
    return Status::Corruption("remote file " + path + ": no memento index at its end");
  }
  std::string text(len, '\0');
  MEMENTO_RETURN_IF_ERROR(PRead(fd.get(), path, size - kFooterBytes - len, text.data(), len));
  if (erasure::Crc32c(text.data(), text.size()) != crc) {
    return Status::Corruption("remote file " + path + ": its memento index fails its crc32c");
  }
  return text;
}

DcpTensor Describe(const at::Tensor& stored, bool replicated, bool shard) {
  DcpTensor d;
  d.kind = replicated ? DcpTensor::Kind::kReplicated
           : shard    ? DcpTensor::Kind::kShard
                      : DcpTensor::Kind::kWhole;
  d.dtype = stored.scalar_type();
  d.sizes = stored.sizes().vec();
  d.strides = stored.strides().vec();
  return d;
}

Result<std::shared_ptr<runtime::RemoteStore>> OpenRemote(const runtime::Config& config,
                                                         std::map<std::string, DcpTensor> tensors,
                                                         std::string extra_entry) {
  runtime::DirectoryRemoteStore::Options o;
  o.format = std::make_shared<DcpFormat>(std::move(tensors), std::move(extra_entry));
  MEMENTO_ASSIGN_OR_RETURN(auto store,
                           runtime::DirectoryRemoteStore::Open(config.remote_dir, config.job, o));
  return std::shared_ptr<runtime::RemoteStore>(std::move(store));
}

DcpFormat::DcpFormat(std::map<std::string, DcpTensor> tensors, std::string extra_entry)
    : tensors_(std::move(tensors)), extra_entry_(std::move(extra_entry)) {}

Status DcpFormat::WriteRankFile(const RankFileContext& file,
                                const std::vector<RemoteEntrySource>& entries,
                                runtime::RemoteFileSink* out) {
  json jentries = json::array(), items = json::array(), paths = json::object(),
       aliases = json::object();
  for (const RemoteEntrySource& e : entries) {
    const uint32_t crc = erasure::Crc32c(e.data, e.bytes);
    if (e.crc && *e.crc != crc) {
      return Status::Corruption("WriteRankFile: entry '" + e.name + "' of v" +
                                std::to_string(file.version) +
                                " fails its sealed crc32c (its bytes changed since they were "
                                "sealed); not persisted");
    }
    json segments = json::array();
    const uint8_t* data = static_cast<const uint8_t*>(e.data);
    auto it = tensors_.find(e.name);
    if (it != tensors_.end()) {
      const DcpTensor& t = it->second;
      const uint64_t es = at::elementSize(t.dtype);
      std::vector<int64_t> global = t.sizes, base(t.sizes.size(), 0);
      int64_t first = 0, last = Numel(t.sizes);
      uint64_t skip = 0;  // bytes of the tensor before this entry's
      if (t.kind == DcpTensor::Kind::kShard) {
        global = e.layout.global_shape;
        base = e.layout.offsets;
      } else if (t.kind == DcpTensor::Kind::kReplicated) {
        skip = static_cast<uint64_t>(e.layout.offsets.at(0));
        if (skip % es != 0 || e.bytes % es != 0) {
          return Status::InvalidArgument("dcp: entry '" + e.name +
                                         "' holds a part of an element (bytes " +
                                         std::to_string(skip) + " + " + std::to_string(e.bytes) +
                                         ")");
        }
        first = static_cast<int64_t>(skip / es);
        last = first + static_cast<int64_t>(e.bytes / es);
      }
      if (last > first && static_cast<uint64_t>(last - first) * es != e.bytes) {
        return Status::InvalidArgument("dcp: entry '" + e.name + "' has " +
                                       std::to_string(e.bytes) + " bytes, its tensor " +
                                       std::to_string((last - first) * es));
      }
      for (const Block& b : BlocksOfRange(t.sizes, t.strides, first, last, es)) {
        const uint64_t archive_at = out->size();
        uint64_t raw_at = 0;
        MEMENTO_RETURN_IF_ERROR(
            WriteArchive(data + b.byte_begin, b, t.dtype, out, &raw_at)
                .WithContext("dcp: entry '" + e.name + "'"));
        std::vector<int64_t> offsets = b.offsets;
        for (size_t k = 0; k < offsets.size(); ++k) offsets[k] += base[k];
        items.push_back({{"fqn", e.name}, {"kind", "tensor"},
                         {"dtype", DTypeName(t.dtype)},
                         {"size", global}, {"offsets", offsets}, {"sizes", b.sizes},
                         {"offset", archive_at}, {"length", out->size() - archive_at}});
        if (b.bytes > 0) segments.push_back({b.byte_begin, raw_at, b.bytes});
      }
    } else {
      if (e.bytes > 0) {
        segments.push_back({0, out->size(), e.bytes});
        MEMENTO_RETURN_IF_ERROR(out->Write(e.data, e.bytes));
      }
      if (e.name == extra_entry_ && file.rank == 0) {
        MEMENTO_RETURN_IF_ERROR(WriteValueItems(data, e.bytes, out, &items, &paths, &aliases));
      }
    }
    jentries.push_back({{"name", e.name}, {"bytes", e.bytes}, {"crc", crc},
                        {"layout", LayoutJson(e.layout)}, {"segments", segments}});
  }
  json index = {{"format", kIndexFormat}, {"job", file.job},     {"version", file.version},
                {"rank", file.rank},      {"entries", jentries}, {"items", items},
                {"paths", paths},         {"aliases", aliases}};
  const std::string text = index.dump();
  char footer[kFooterBytes];
  const uint64_t len = text.size();
  const uint32_t crc = erasure::Crc32c(text.data(), text.size());
  std::memcpy(footer, &len, 8);
  std::memcpy(footer + 8, &crc, 4);
  std::memcpy(footer + 12, kFooterMagic, 8);
  MEMENTO_RETURN_IF_ERROR(out->Write(text.data(), text.size()));
  return out->Write(footer, kFooterBytes);
}

namespace {

// The entries `index` records, checked against the file it should be.
Result<std::vector<RemoteEntryInfo>> EntriesOf(const json& index, const RankFileContext& file) {
  std::vector<RemoteEntryInfo> out;
  try {
    if (index.at("job") != file.job || index.at("version") != file.version ||
        index.at("rank") != file.rank) {
      return Status::Corruption("remote file " + file.path + " holds job " +
                                index.at("job").dump() + " version " +
                                index.at("version").dump() + " rank " + index.at("rank").dump());
    }
    for (const json& e : index.at("entries")) {
      RemoteEntryInfo info;
      info.name = e.at("name");
      info.bytes = e.at("bytes");
      info.crc = e.at("crc");
      const json& l = e.at("layout");
      info.layout.dtype = l.at("dtype");
      info.layout.global_shape = l.at("global_shape").get<std::vector<int64_t>>();
      info.layout.shape = l.at("shape").get<std::vector<int64_t>>();
      info.layout.offsets = l.at("offsets").get<std::vector<int64_t>>();
      out.push_back(std::move(info));
    }
  } catch (const json::exception& ex) {
    return Status::Corruption("remote file " + file.path + ": its memento index: " + ex.what());
  }
  return out;
}

}  // namespace

Result<std::vector<RemoteEntryInfo>> DcpFormat::ListEntries(const RankFileContext& file) {
  MEMENTO_ASSIGN_OR_RETURN(json index, ParseIndex(file.path));
  return EntriesOf(index, file);
}

Status DcpFormat::ReadRankFile(const RankFileContext& file,
                               const std::vector<RemoteEntryTarget>& targets) {
  MEMENTO_ASSIGN_OR_RETURN(json index, ParseIndex(file.path));
  MEMENTO_ASSIGN_OR_RETURN(std::vector<RemoteEntryInfo> listed, EntriesOf(index, file));
  const std::string where = "remote file " + file.path;
  std::map<std::string, const RemoteEntryTarget*> by_name;
  for (const auto& t : targets) by_name[t.name] = &t;
  Fd fd(file.path);
  if (fd.get() < 0) return Status::IoError("open " + file.path + ": " + std::strerror(errno));
  std::vector<uint8_t> scratch;
  std::map<std::string, bool> found;
  try {
    const json& entries = index.at("entries");
    for (size_t i = 0; i < entries.size(); ++i) {
      const RemoteEntryInfo& info = listed[i];
      auto it = by_name.find(info.name);
      const RemoteEntryTarget* target = it == by_name.end() ? nullptr : it->second;
      if (target != nullptr && target->capacity != info.bytes) {
        return Status::InvalidArgument(where + " entry '" + info.name + "' has " +
                                       std::to_string(info.bytes) + " bytes, target holds " +
                                       std::to_string(target->capacity));
      }
      if (target != nullptr && target->data == nullptr && !target->sink && info.bytes > 0) {
        return Status::InvalidArgument(where + " entry '" + info.name +
                                       "': a target with neither data nor sink");
      }
      erasure::Crc32cStream crc;
      uint64_t expect_at = 0;
      for (const json& s : entries[i].at("segments")) {
        const uint64_t at = s.at(0), file_at = s.at(1), bytes = s.at(2);
        if (at != expect_at || at + bytes > info.bytes) {
          return Status::Corruption(where + " entry '" + info.name + "': bad segment list");
        }
        expect_at = at + bytes;
        for (uint64_t done = 0; done < bytes;) {
          const uint64_t piece = std::min(bytes - done, kReadChunk);
          uint8_t* dst;
          if (target != nullptr && target->data != nullptr) {
            dst = static_cast<uint8_t*>(target->data) + at + done;
          } else {
            scratch.resize(piece);
            dst = scratch.data();
          }
          MEMENTO_RETURN_IF_ERROR(PRead(fd.get(), file.path, file_at + done, dst, piece));
          crc.Update(dst, piece);
          if (target != nullptr && target->data == nullptr) target->sink(at + done, dst, piece);
          done += piece;
        }
      }
      if (expect_at != info.bytes) {
        return Status::Corruption(where + " entry '" + info.name + "': segments hold " +
                                  std::to_string(expect_at) + " of its " +
                                  std::to_string(info.bytes) + " bytes");
      }
      if (crc.value() != info.crc) {
        return Status::Corruption(where + " entry '" + info.name + "': payload crc32c " +
                                  Hex(crc.value()) + ", recorded " + Hex(info.crc));
      }
      if (target != nullptr) found[info.name] = true;
    }
  } catch (const json::exception& ex) {
    return Status::Corruption(where + ": its memento index: " + ex.what());
  }
  for (const auto& t : targets) {
    if (!found.count(t.name)) return Status::NotFound(where + " has no entry '" + t.name + "'");
  }
  return Status::Ok();
}

Status DcpFormat::WriteVersionFiles(const std::string& version_dir,
                                    const runtime::RemoteManifest& manifest, bool fsync) {
  std::vector<std::string> indexes, files;
  for (const runtime::RankFileInfo& r : manifest.ranks) {
    MEMENTO_ASSIGN_OR_RETURN(std::string text, ReadIndex(version_dir + "/" + r.file));
    indexes.push_back(std::move(text));
    files.push_back(r.file);
  }
  MEMENTO_ASSIGN_OR_RETURN(std::string pickled, BuildMetadata(indexes, files));
  return runtime::DirectoryRemoteStore::WriteFileAtomically(version_dir + "/.metadata", pickled,
                                                            fsync);
}

}  // namespace memento::torch_adapter::dcp

namespace memento::torch_adapter {

Status CheckDcpFile(const std::string& path, bool* memento) {
  *memento = false;
  {
    dcp::Fd fd(path);
    if (fd.get() < 0) return Status::IoError("open " + path + ": " + std::strerror(errno));
    const off_t size = lseek(fd.get(), 0, SEEK_END);
    char magic[8] = {};
    if (size < static_cast<off_t>(dcp::kFooterBytes)) return Status::Ok();
    MEMENTO_RETURN_IF_ERROR(dcp::PRead(fd.get(), path, size - 8, magic, 8));
    if (std::memcmp(magic, dcp::kFooterMagic, 8) != 0) return Status::Ok();  // dcp.save's
  }
  *memento = true;
  MEMENTO_ASSIGN_OR_RETURN(nlohmann::json index, dcp::ParseIndex(path));
  runtime::RankFileContext file;
  try {
    file = {index.at("job"), index.at("version"), index.at("rank"), path};
  } catch (const nlohmann::json::exception& ex) {
    return Status::Corruption("remote file " + path + ": its memento index: " + ex.what());
  }
  dcp::DcpFormat format({}, "");
  return format.ReadRankFile(file, {});
}

}  // namespace memento::torch_adapter
