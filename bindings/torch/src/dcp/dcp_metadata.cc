// BuildMetadata: torch.distributed.checkpoint's Metadata for a version, from
// the memento indexes of its rank files (what each file holds, where).
#include <map>
#include <nlohmann/json.hpp>
#include <set>

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
  w.Global("torch", dtype);
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

}  // namespace

Result<std::string> BuildMetadata(const std::vector<std::string>& indexes,
                                  const std::vector<std::string>& files) {
  std::vector<std::string> order;  // fqns, first seen first
  std::map<std::string, TensorItem> tensors;
  std::map<std::string, BytesItem> bytes;
  json paths = json::object();
  try {
    for (size_t r = 0; r < indexes.size(); ++r) {
      const json index = json::parse(indexes[r]);
      for (const json& item : index.at("items")) {
        const std::string fqn = item.at("fqn");
        const uint64_t offset = item.at("offset"), length = item.at("length");
        if (item.at("kind") == "bytes") {
          if (tensors.count(fqn)) {
            return Status::InvalidArgument("dcp: '" + fqn + "' is a tensor and a value");
          }
          if (bytes.emplace(fqn, BytesItem{files[r], offset, length}).second) order.push_back(fqn);
          continue;
        }
        if (bytes.count(fqn)) return Status::InvalidArgument("dcp: '" + fqn + "' is a tensor and a value");
        Chunk c{item.at("offsets").get<std::vector<int64_t>>(),
                item.at("sizes").get<std::vector<int64_t>>(), files[r], offset, length};
        const std::string dtype = item.at("dtype");
        const std::vector<int64_t> size = item.at("size").get<std::vector<int64_t>>();
        auto [it, added] = tensors.try_emplace(fqn, TensorItem{dtype, size, {}});
        if (added) order.push_back(fqn);
        if (it->second.dtype != dtype || it->second.size != size) {
          return Status::InvalidArgument("dcp: the parts of '" + fqn + "' disagree: " +
                                         it->second.dtype + " vs " + dtype + " of size " +
                                         json(it->second.size).dump() + " vs " +
                                         json(size).dump());
        }
        // The same block on several ranks (a whole tensor each rank holds):
        // kept once, as dcp.save's dedup does.
        bool dup = false;
        for (const Chunk& o : it->second.chunks) dup = dup || o.offsets == c.offsets;
        if (!dup) it->second.chunks.push_back(std::move(c));
      }
      for (const auto& [fqn, path] : index.at("paths").items()) {
        if (!paths.contains(fqn)) paths[fqn] = path;
      }
    }
  } catch (const json::exception& ex) {
    return Status::Corruption(std::string("dcp: a rank file's memento index: ") + ex.what());
  }

  PickleWriter w;
  w.Object(kMetadataModule, "Metadata", [&] {
    w.Str("state_dict_metadata");
    w.EmptyDict();
    w.Mark();
    for (const std::string& fqn : order) {
      w.Str(fqn);
      auto t = tensors.find(fqn);
      if (t == tensors.end()) {
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

    // fqn -> its path in the nested state dict (flatten_state_dict's mapping).
    w.Str("planner_data");
    w.EmptyDict();
    w.Mark();
    for (const std::string& fqn : order) {
      w.Str(fqn);
      w.Mark();
      if (paths.contains(fqn) && paths[fqn].is_array()) {
        for (const json& key : paths[fqn]) {
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

    w.Str("storage_data");
    w.EmptyDict();
    w.Mark();
    for (const std::string& fqn : order) {
      auto t = tensors.find(fqn);
      if (t == tensors.end()) {
        const BytesItem& b = bytes.at(fqn);
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
