// DcpFormat: persisted versions as torch.distributed.checkpoint (DCP)
// checkpoints (MEMENTO_REMOTE_FORMAT=dcp).
//
// A version folder of the remote tier is then a directory that
// `torch.distributed.checkpoint.load(state_dict, checkpoint_id=FOLDER)` reads,
// on any world size, without memento, under the names a plain
// `dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict()})` of
// the same job uses (memento's entry names are those fully qualified names):
//
//   rank-<r>.<lineage>.distcp   one per rank file: each tensor block a
//                               torch.save archive (what DCP's FileSystemReader
//                               torch.load()s), the non-tensor values of the
//                               state (optimizer param_groups, schedulers,
//                               extra= values) as torch.save'd bytes in rank
//                               0's file, memento's extra state as raw bytes,
//                               then memento's index (below)
//   .metadata                   DCP's Metadata, pickled; written before
//                               memento's MANIFEST, after every rank file
//   MANIFEST                    memento's, last (DirectoryRemoteStore)
//
// How entries become DCP items: a slice of a global tensor (a DTensor shard,
// register(shards=)) is one chunk at its offsets; a whole tensor one chunk at
// zero (the same tensor on several ranks is kept once, as DCP's dedup does);
// a replicated tensor's byte piece on this rank (whole elements) is cut into
// the blocks that make up that element range, each a chunk. Tensors keep
// their strides in the archives.
//
// The index: JSON (nlohmann) {format, job, version, rank, entries: [{name,
// bytes, crc, layout, segments: [[entry offset, file offset, bytes]]}],
// items: [{fqn, kind, dtype, size, offsets, sizes, offset, length}],
// paths: {fqn: [key, ...]}}, then its length (u64), its crc32c (u32) and
// "MDCPIDX1". Reading back checks the index crc and every entry's crc32c
// (the seal it was persisted under): a damaged file is named with its entry.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memento/runtime/config.h"
#include "memento/runtime/remote_format.h"

namespace memento::torch_adapter::dcp {

// What the format needs to know of a registered tensor beyond its layout.
struct DcpTensor {
  enum class Kind { kWhole, kShard, kReplicated };
  Kind kind = Kind::kWhole;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;    // the whole local tensor's (0-dimensional kept)
  std::vector<int64_t> strides;  // of its bytes as the slot holds them (dense)
};

// A block of a tensor: where it starts (global coordinates) and its extent,
// and where its bytes begin within the stored bytes.
struct Block {
  std::vector<int64_t> offsets, sizes, strides;
  uint64_t byte_begin = 0, bytes = 0;
};

// The blocks that hold elements [first, last) of a dense tensor of `sizes`
// and `strides`, in the order its bytes are stored; offsets relative to the
// tensor. Each block is contiguous in storage.
std::vector<Block> BlocksOfRange(const std::vector<int64_t>& sizes,
                                 const std::vector<int64_t>& strides, int64_t first, int64_t last,
                                 uint64_t element_bytes);

// How DCP sees a registered tensor whose bytes the slot holds as `stored`
// laid out (the tensor itself when registered in place, else its staging copy).
DcpTensor Describe(const at::Tensor& stored, bool replicated, bool shard);

class DcpFormat : public runtime::RemoteFormat {
 public:
  // `tensors`: by entry name. `extra_entry`: the entry holding memento's extra
  // state, whose records "user.dcp.items" / "user.dcp.paths" carry the
  // non-tensor values and the nested paths (from the Python package).
  DcpFormat(std::map<std::string, DcpTensor> tensors, std::string extra_entry);

  std::string Name() const override { return "dcp"; }
  std::string RankFileSuffix() const override { return ".distcp"; }
  std::vector<std::string> VersionFiles() const override { return {".metadata"}; }
  Status WriteRankFile(const runtime::RankFileContext& file,
                       const std::vector<runtime::RemoteEntrySource>& entries,
                       runtime::RemoteFileSink* out) override;
  Result<std::vector<runtime::RemoteEntryInfo>> ListEntries(
      const runtime::RankFileContext& file) override;
  Status ReadRankFile(const runtime::RankFileContext& file,
                      const std::vector<runtime::RemoteEntryTarget>& targets) override;
  Status WriteVersionFiles(const std::string& version_dir, const runtime::RemoteManifest& manifest,
                           bool fsync) override;

 private:
  const std::map<std::string, DcpTensor> tensors_;
  const std::string extra_entry_;
};

// config's remote tier (MEMENTO_REMOTE) in this format: a DirectoryRemoteStore
// with a DcpFormat of `tensors` (by entry name).
Result<std::shared_ptr<runtime::RemoteStore>> OpenRemote(const runtime::Config& config,
                                                         std::map<std::string, DcpTensor> tensors,
                                                         std::string extra_entry);

// The pickled DCP Metadata of the rank files' indexes (dcp_metadata.cc);
// InvalidArgument naming an fqn whose chunks disagree.
Result<std::string> BuildMetadata(const std::vector<std::string>& indexes,
                                  const std::vector<std::string>& files);

// The index of the rank file at `path` (its JSON text), checked.
Result<std::string> ReadIndex(const std::string& path);

// The attribute of the torch module that is `dtype` (a DTypeName): c10's
// names of the newer dtypes are not ones (Float8_e4m3fn, UInt16, ComplexHalf
// for torch.float8_e4m3fn, torch.uint16, torch.complex32), and one unknown
// attribute makes the whole .metadata unreadable.
std::string DcpTorchAttribute(const std::string& dtype);

}  // namespace memento::torch_adapter::dcp
