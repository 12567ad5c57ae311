// BuildMetadata: torch.distributed.checkpoint's Metadata for a version, from
// the memento indexes of its rank files (what each file holds, where).
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "dcp/dcp_format.h"
#include "dcp/pickle_writer.h"

namespace memento::torch_adapter::dcp {
namespace {

using json = nlohmann::json;

constexpr char kMetadataModule[] = "torch.distributed.checkpoint.metadata";
constexpr char kFilesystemModule[] = "torch.distributed.checkpoint.filesystem";
// torch.distributed.checkpoint.filesystem.CURRENT_DCP_VERSION
constexpr char kDcpVersion[] = "1.0.0";

struct Chunk {
  std::vector<int64_t> offsets, sizes;
  std::string file;
  uint64_t offset = 0, length = 0;
};

struct TensorItem {
  std::string dtype;
  std::vector<int64_t> size;
  std::vector<Chunk> chunks;
};

struct BytesItem {
  std::string file;
  uint64_t offset = 0, length = 0;
};

void Properties(PickleWriter& w, const std::string& dtype) {
  // TensorProperties.__getstate__: (dtype, layout, requires_grad,
  // _MEM_FORMAT_ENCODING, pin_memory), the form every torch 2.x reads.
  w.Global(kMetadataModule, "TensorProperties");
  w.EmptyTuple();
  w.NewObj();
  w.Mark();
  w.Global("torch", DcpTorchAttribute(dtype));
  w.Global("torch", "strided");
  w.Bool(false);
  w.Global(kMetadataModule, "_MEM_FORMAT_ENCODING");
  w.Mark();
  w.Int(0);  // TORCH_CONTIGUOUS_FORMAT
  w.Tuple();
  w.Reduce();
  w.Bool(false);
  w.Tuple();
  w.Build();
}

void Index(PickleWriter& w, const std::string& fqn, const std::vector<int64_t>* offsets,
           int64_t index) {
  w.Object(kMetadataModule, "MetadataIndex", [&] {
    w.Str("fqn");
    w.Str(fqn);
    w.Str("offset");
    if (offsets != nullptr) {
      w.TorchSize(*offsets);
    } else {
      w.None();
    }
    w.Str("index");
    if (index >= 0) {
      w.Int(index);
    } else {
      w.None();
    }
  });
}

void StorageInfo(PickleWriter& w, const std::string& file, uint64_t offset, uint64_t length) {
  w.Object(kFilesystemModule, "_StorageInfo", [&] {
    w.Str("relative_path");
    w.Str(file);
    w.Str("offset");
    w.Int(static_cast<int64_t>(offset));
    w.Str("length");
    w.Int(static_cast<int64_t>(length));
  });
}

// Every item of a version, from its rank files' indexes; fqns in the order
// first seen.
struct Items {
  std::vector<std::string> order;
  std::map<std::string, TensorItem> tensors;
  std::map<std::string, BytesItem> bytes;
  json paths = json::object();
};

Status AddItem(const json& item, const std::string& file, Items* out) {
  const std::string fqn = item.at("fqn");
  const uint64_t offset = item.at("offset"), length = item.at("length");
  const bool is_bytes = item.at("kind") == "bytes";
  if (is_bytes ? out->tensors.count(fqn) : out->bytes.count(fqn)) {
    return Status::InvalidArgument("dcp: '" + fqn + "' is a tensor and a value");
  }
  if (is_bytes) {
    if (out->bytes.emplace(fqn, BytesItem{file, offset, length}).second) {
      out->order.push_back(fqn);
    }
    return Status::Ok();
  }
  Chunk c{item.at("offsets").get<std::vector<int64_t>>(),
          item.at("sizes").get<std::vector<int64_t>>(), file, offset, length};
  const std::string dtype = item.at("dtype");
  const std::vector<int64_t> size = item.at("size").get<std::vector<int64_t>>();
  auto [it, added] = out->tensors.try_emplace(fqn, TensorItem{dtype, size, {}});
  if (added) out->order.push_back(fqn);
  if (it->second.dtype != dtype || it->second.size != size) {
    return Status::InvalidArgument("dcp: the parts of '" + fqn + "' disagree: " +
                                   it->second.dtype + " vs " + dtype + " of size " +
                                   json(it->second.size).dump() + " vs " + json(size).dump());
  }
  // The same block on several ranks (a whole tensor each rank holds): kept
  // once, as dcp.save's dedup does.
  for (const Chunk& o : it->second.chunks) {
    if (o.offsets == c.offsets) return Status::Ok();
  }
  it->second.chunks.push_back(std::move(c));
  return Status::Ok();
}

Result<Items> CollectItems(const std::vector<std::string>& indexes,
                           const std::vector<std::string>& files) {
  Items items;
  std::map<std::string, std::string> aliases;  // name -> stored tensor
  try {
    for (size_t r = 0; r < indexes.size(); ++r) {
      const json index = json::parse(indexes[r]);
      for (const json& item : index.at("items")) {
        MEMENTO_RETURN_IF_ERROR(AddItem(item, files[r], &items));
      }
      for (const auto& [fqn, path] : index.at("paths").items()) {
        if (!items.paths.contains(fqn)) items.paths[fqn] = path;
      }
      // Rank files written before aliases were recorded have none.
      if (index.contains("aliases")) {
        for (const auto& [alias, target] : index.at("aliases").items()) {
          aliases.emplace(alias, target.get<std::string>());
        }
      }
    }
  } catch (const json::exception& ex) {
    return Status::Corruption(std::string("dcp: a rank file's memento index: ") + ex.what());
  }
  // Another name of a stored tensor (a tied weight) is an item of its own
  // over the same bytes, as dcp.save writes each key of a state dict: a plain
  // dcp.load of model.state_dict() wants every key.
  for (const auto& [alias, target] : aliases) {
    auto t = items.tensors.find(target);
    if (t == items.tensors.end() || items.tensors.count(alias) || items.bytes.count(alias)) {
      continue;
    }
    items.tensors.emplace(alias, t->second);
    items.order.push_back(alias);
  }
  return items;
}

// Metadata.state_dict_metadata: fqn -> TensorStorageMetadata | BytesStorageMetadata.
void StateDictMetadata(PickleWriter& w, const Items& items) {
  w.EmptyDict();
  w.Mark();
  for (const std::string& fqn : items.order) {
    w.Str(fqn);
    auto t = items.tensors.find(fqn);
    if (t == items.tensors.end()) {
      w.Global(kMetadataModule, "BytesStorageMetadata");
      w.EmptyTuple();
      w.NewObj();
      continue;
    }
    w.Object(kMetadataModule, "TensorStorageMetadata", [&] {
      w.Str("properties");
      Properties(w, t->second.dtype);
      w.Str("size");
      w.TorchSize(t->second.size);
      w.Str("chunks");
      w.EmptyList();
      w.Mark();
      for (const Chunk& c : t->second.chunks) {
        w.Object(kMetadataModule, "ChunkStorageMetadata", [&] {
          w.Str("offsets");
          w.TorchSize(c.offsets);
          w.Str("sizes");
          w.TorchSize(c.sizes);
        });
      }
      w.Appends();
    });
  }
  w.SetItems();
}

// Metadata.planner_data: fqn -> its path in the nested state dict
// (flatten_state_dict's mapping); a flat key where none was recorded.
void PlannerData(PickleWriter& w, const Items& items) {
  w.EmptyDict();
  w.Mark();
  for (const std::string& fqn : items.order) {
    w.Str(fqn);
    w.Mark();
    if (items.paths.contains(fqn) && items.paths[fqn].is_array()) {
      for (const json& key : items.paths[fqn]) {
        if (key.is_number_integer()) {
          w.Int(key.get<int64_t>());
        } else {
          w.Str(key.is_string() ? key.get<std::string>() : key.dump());
        }
      }
    } else {
      w.Str(fqn);
    }
    w.Tuple();
  }
  w.SetItems();
}

// Metadata.storage_data: MetadataIndex -> _StorageInfo, per chunk and value.
void StorageData(PickleWriter& w, const Items& items) {
  w.EmptyDict();
  w.Mark();
  for (const std::string& fqn : items.order) {
    auto t = items.tensors.find(fqn);
    if (t == items.tensors.end()) {
      const BytesItem& b = items.bytes.at(fqn);
      Index(w, fqn, nullptr, -1);
      StorageInfo(w, b.file, b.offset, b.length);
      continue;
    }
    for (size_t i = 0; i < t->second.chunks.size(); ++i) {
      const Chunk& c = t->second.chunks[i];
      Index(w, fqn, &c.offsets, static_cast<int64_t>(i));
      StorageInfo(w, c.file, c.offset, c.length);
    }
  }
  w.SetItems();
}

}  // namespace

std::string DcpTorchAttribute(const std::string& dtype) {
  if (dtype == "ComplexHalf") return "complex32";
  std::string out = dtype;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<std::string> BuildMetadata(const std::vector<std::string>& indexes,
                                  const std::vector<std::string>& files) {
  MEMENTO_ASSIGN_OR_RETURN(Items items, CollectItems(indexes, files));
  PickleWriter w;
  w.Object(kMetadataModule, "Metadata", [&] {
    w.Str("state_dict_metadata");
    StateDictMetadata(w, items);
    w.Str("planner_data");
    PlannerData(w, items);
    w.Str("storage_data");
    StorageData(w, items);
    w.Str("storage_meta");
    w.Object(kMetadataModule, "StorageMeta", [&] {
      w.Str("checkpoint_id");
      w.None();
      w.Str("save_id");
      w.None();
      w.Str("load_id");
      w.None();
      w.Str("modules");
      w.EmptyList();
    });
    w.Str("version");
    w.Str(kDcpVersion);
  });
  return w.Finish();
}

}  // namespace memento::torch_adapter::dcp
