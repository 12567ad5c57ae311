// The remote tier in torch.distributed.checkpoint's format
// (MEMENTO_REMOTE_FORMAT=dcp): tensor blocks, rank files written and read
// back through DirectoryRemoteStore, damage named, half-written versions
// never listed, and a 4-rank job restored from such a tier alone.
#include <sys/stat.h>
#include <torch/types.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dcp/dcp_format.h"
#include "gtest/gtest.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/torch/torch_checkpointer.h"
#include "torch_test_util.h"

namespace memento::torch_adapter {
namespace {

using dcp::Block;
using dcp::BlocksOfRange;
using dcp::DcpFormat;
using dcp::DcpTensor;
using runtime::Config;
using runtime::DirectoryRemoteStore;
using runtime::RemoteEntrySource;
using runtime::RemoteEntryTarget;
using testing::BitEqual;
using testing::JobGuard;
using testing::UniqueJob;
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/memento-dcp-XXXXXX";
    path = mkdtemp(buf);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Every block of elements [first, last) of `t`: the elements the block's
// offsets and sizes name in `t` are the bytes at byte_begin, laid out by the
// block's strides; blocks follow each other in storage and cover the range.
void CheckBlocks(const at::Tensor& t, int64_t first, int64_t last) {
  SCOPED_TRACE("sizes " + c10::str(t.sizes()) + " strides " + c10::str(t.strides()) + " [" +
               std::to_string(first) + ", " + std::to_string(last) + ")");
  const uint64_t es = t.element_size();
  std::vector<Block> blocks =
      BlocksOfRange(t.sizes().vec(), t.strides().vec(), first, last, es);
  uint64_t at = 0;
  auto* base = static_cast<uint8_t*>(t.data_ptr()) + first * es;
  for (const Block& b : blocks) {
    EXPECT_EQ(b.byte_begin, at);
    at::Tensor expect = t;
    for (size_t d = 0; d < b.offsets.size(); ++d) {
      expect = expect.narrow(static_cast<int64_t>(d), b.offsets[d], b.sizes[d]);
    }
    at::Tensor got = at::from_blob(base + b.byte_begin, b.sizes, b.strides, t.options());
    EXPECT_TRUE(BitEqual(expect, got)) << "block at " << c10::str(b.offsets);
    at += b.bytes;
  }
  EXPECT_EQ(at, static_cast<uint64_t>(last - first) * es);
}

TEST(DcpBlocks, CoverAnElementRangeInStorageOrder) {
  at::Tensor m = torch::arange(7 * 143, at::kFloat).reshape({7, 143});
  CheckBlocks(m, 0, 7 * 143);  // one block, the whole tensor
  EXPECT_EQ(BlocksOfRange({7, 143}, {143, 1}, 0, 1001, 4).size(), 1u);
  CheckBlocks(m, 250, 751);    // a row's end, whole rows, a row's start
  EXPECT_EQ(BlocksOfRange({7, 143}, {143, 1}, 250, 751, 4).size(), 3u);
  CheckBlocks(m, 286, 572);    // exactly rows 2..3
  EXPECT_EQ(BlocksOfRange({7, 143}, {143, 1}, 286, 572, 4).size(), 1u);
  CheckBlocks(m, 300, 310);    // within one row
  at::Tensor cube = torch::arange(3 * 4 * 5, at::kLong).reshape({3, 4, 5});
  for (int64_t a = 0; a < 60; a += 7) {
    for (int64_t b = a + 1; b <= 60; b += 11) CheckBlocks(cube, a, b);
  }
  // A transposed (permuted, dense) tensor: blocks follow its storage order.
  at::Tensor tr = torch::arange(6 * 9, at::kDouble).reshape({6, 9}).t();
  ASSERT_FALSE(tr.is_contiguous());
  CheckBlocks(tr, 0, 54);
  CheckBlocks(tr, 5, 40);
  // A 0-dimensional tensor is one block of no dimensions; an empty one is one
  // empty block.
  std::vector<Block> scalar = BlocksOfRange({}, {}, 0, 1, 4);
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_TRUE(scalar[0].sizes.empty());
  EXPECT_EQ(scalar[0].bytes, 4u);
  std::vector<Block> empty = BlocksOfRange({0, 3}, {3, 1}, 0, 0, 4);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].bytes, 0u);
}

std::shared_ptr<DcpFormat> OneTensorFormat() {
  std::map<std::string, DcpTensor> tensors;
  tensors["model.w"] = {DcpTensor::Kind::kWhole, at::kFloat, {4, 5}, {5, 1}};
  return std::make_shared<DcpFormat>(tensors, "__memento__");
}

DirectoryRemoteStore::Options WithOneTensorFormat() {
  DirectoryRemoteStore::Options o;
  o.format = OneTensorFormat();
  return o;
}

RemoteEntrySource Source(const std::string& name, const at::Tensor& t) {
  RemoteEntrySource e;
  e.name = name;
  e.data = t.data_ptr();
  e.bytes = t.numel() * t.element_size();
  e.layout.dtype = "float32";
  e.layout.shape = t.sizes().vec();
  e.layout.global_shape = e.layout.shape;
  e.layout.offsets.assign(e.layout.shape.size(), 0);
  return e;
}

Status Persist(DirectoryRemoteStore& store, uint64_t version, const at::Tensor& w,
               bool manifest) {
  auto info = store.WriteRankFile(version, 0, {Source("model.w", w)}, 7);
  if (!info.ok()) return info.status();
  if (!manifest) return Status::Ok();
  return store.WriteManifest(version, 1, {*info}, 7);
}

// A byte of an entry's payload flipped in the file: the read fails naming the
// file and the entry, and CheckDcpFile finds it too; a version whose manifest
// was never written (a writer killed mid-persist) is not listed and has no
// .metadata for DCP to find; pruning takes .metadata with the version.
TEST(DcpFormatStore, DamageIsNamedAndHalfWrittenVersionsAreNeverListed) {
  TempDir dir;
  DirectoryRemoteStore store(dir.path, "job", WithOneTensorFormat());
  at::Tensor w = torch::arange(20, at::kFloat).reshape({4, 5});
  ASSERT_TRUE(Persist(store, 1, w, true).ok());
  ASSERT_TRUE(Persist(store, 2, w * 2, false).ok());  // rank files, no manifest
  auto complete = store.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_EQ(*complete, std::vector<uint64_t>{1});
  EXPECT_TRUE(fs::exists(store.VersionDir(1) + "/.metadata"));
  EXPECT_FALSE(fs::exists(store.VersionDir(2) + "/.metadata"));

  at::Tensor back = torch::zeros({4, 5});
  ASSERT_TRUE(store.ReadRankFile(1, 0, {{"model.w", back.data_ptr(), 80}}).ok());
  EXPECT_TRUE(BitEqual(back, w));
  auto listed = store.ListEntries(1, 0);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "model.w");
  EXPECT_EQ((*listed)[0].layout.shape, (std::vector<int64_t>{4, 5}));

  const std::string file = store.RankFilePath(1, 0, 7);
  bool memento = false;
  EXPECT_TRUE(CheckDcpFile(file, &memento).ok());
  EXPECT_TRUE(memento);
  auto index = dcp::ReadIndex(file);
  ASSERT_TRUE(index.ok());
  const uint64_t payload = nlohmann::json::parse(*index)["entries"][0]["segments"][0][1];
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(payload + 9));
    char c = 0x55;
    f.write(&c, 1);
  }
  Status s = store.ReadRankFile(1, 0, {{"model.w", back.data_ptr(), 80}});
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(file), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("'model.w'"), std::string::npos) << s.ToString();
  s = CheckDcpFile(file, &memento);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(file), std::string::npos) << s.ToString();

  // Newer complete versions: v1 is pruned with its .metadata, folder and all.
  ASSERT_TRUE(Persist(store, 3, w, true).ok());
  ASSERT_TRUE(Persist(store, 4, w, true).ok());
  ASSERT_TRUE(store.Prune(2).ok());
  EXPECT_FALSE(fs::exists(store.VersionDir(1)));
  EXPECT_TRUE(fs::exists(store.VersionDir(4) + "/.metadata"));
  // Persisting v4 again withdraws its manifest and .metadata first.
  ASSERT_TRUE(store.WriteRankFile(4, 0, {Source("model.w", w)}, 7).ok());
  EXPECT_FALSE(fs::exists(store.VersionDir(4) + "/.metadata"));
  EXPECT_FALSE(fs::exists(store.ManifestPath(4)));
}

// Persisting a version again withdraws its .metadata before its manifest: one
// that cannot be removed (here a folder in its place, which unlink refuses)
// fails the write and leaves the committed version complete and readable.
TEST(DcpFormatStore, APersistAgainThatCannotWithdrawTheMetadataKeepsTheVersion) {
  TempDir dir;
  DirectoryRemoteStore store(dir.path, "job", WithOneTensorFormat());
  at::Tensor w = torch::arange(20, at::kFloat).reshape({4, 5});
  ASSERT_TRUE(Persist(store, 5, w, true).ok());
  const std::string metadata = store.VersionDir(5) + "/.metadata";
  fs::remove(metadata);
  fs::create_directories(metadata + "/held");
  auto again = store.WriteRankFile(5, 0, {Source("model.w", w * 3)}, 7);
  EXPECT_EQ(again.status().code(), StatusCode::kIoError) << again.status().ToString();
  EXPECT_NE(again.status().message().find(".metadata"), std::string::npos)
      << again.status().ToString();
  EXPECT_EQ(*store.ListComplete(), std::vector<uint64_t>{5}) << "a failed write withdrew v5";
  at::Tensor back = torch::zeros({4, 5});
  Status s = store.ReadRankFile(5, 0, {{"model.w", back.data_ptr(), 80}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(BitEqual(back, w));
}

TEST(DcpFormatStore, TheRuntimeAloneRefusesTheFormat) {
  TempDir dir;
  auto c = Config::FromMap({{"MEMENTO_JOB", "dcp-refused"},
                            {"MEMENTO_REMOTE", dir.path},
                            {"MEMENTO_REMOTE_FORMAT", "dcp"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto group = runtime::InProcessGroup::Create(1);
  auto ck = runtime::Checkpointer::Create(*c, group->transport(0), nullptr);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("torch adapter"), std::string::npos);
  auto bad = Config::FromMap({{"MEMENTO_REMOTE_FORMAT", "safetensors"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MEMENTO_REMOTE_FORMAT"), std::string::npos);
}

// 4 ranks persist replicated tensors (cut into element ranges), a slice of a
// global tensor, a transposed tensor, a 0-dimensional one and a tensor of
// their own as DCP; with every node store gone, a new job restores them from
// that remote tier alone, bit for bit.
TEST(DcpFormatRanks, AJobRestoresFromADcpRemoteTierAlone) {
  constexpr int kRanks = 4;
  TempDir dir;
  JobGuard guard{UniqueJob("dcp")};
  auto config = Config::FromMap({{"MEMENTO_JOB", guard.job},
                                 {"MEMENTO_RANKS_PER_NODE", "1"},
                                 {"MEMENTO_CHUNK_BYTES", "64K"},
                                 {"MEMENTO_TIMEOUT_S", "60"},
                                 {"MEMENTO_REMOTE", dir.path},
                                 {"MEMENTO_REMOTE_FORMAT", "dcp"},
                                 {"MEMENTO_PERSIST_EVERY", "1"}});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto expect = [](int r) {
    std::map<std::string, at::Tensor> t;
    t["model.w"] = torch::arange(1001, at::kFloat).reshape({7, 143});
    t["model.b"] = torch::arange(13, at::kLong);
    t["model.slice"] = torch::arange(6, at::kDouble).reshape({2, 3}) + 6 * r;
    t["model.tr"] = (torch::arange(12, at::kFloat).reshape({3, 4}) + r).t();
    t["optimizer.state.0.step"] = torch::tensor(5.0f + r);
    return t;
  };
  for (int phase = 0; phase < 2; ++phase) {
    auto errors = testing::RunRanks(kRanks, [&](int r, std::shared_ptr<runtime::Transport> tr) {
      auto ck = TorchCheckpointer::Create(*config, tr);
      if (!ck.ok()) return "create: " + ck.status().ToString();
      std::map<std::string, at::Tensor> t = expect(r);
      if (phase == 1) {
        for (auto& [name, x] : t) x.zero_();
      }
      Status s = (*ck)->Register("model.w", t["model.w"], true);
      if (s.ok()) s = (*ck)->Register("model.b", t["model.b"], true);
      if (s.ok()) s = (*ck)->Register("model.slice", t["model.slice"], ShardSpec{{8, 3}, {2 * r, 0}});
      if (s.ok()) s = (*ck)->Register("model.tr", t["model.tr"]);
      if (s.ok()) s = (*ck)->Register("optimizer.state.0.step", t["optimizer.state.0.step"]);
      if (!s.ok()) return "register: " + s.ToString();
      if (phase == 0) {
        s = (*ck)->Save(3);
        if (s.ok()) s = (*ck)->Wait();
        if (s.ok()) s = (*ck)->WaitPersist();
        return s.ok() ? std::string() : "save: " + s.ToString();
      }
      auto rr = (*ck)->Restore();
      if (!rr.ok() || !*rr) return "restore: " + (rr.ok() ? "nothing" : rr.status().ToString());
      for (const auto& e : (*rr)->report.entries) {
        if (e.source != runtime::RestoreSource::kRemote) return "not from remote: " + e.name;
      }
      if ((*rr)->step != 3) return "step " + std::to_string((*rr)->step);
      for (const auto& [name, x] : expect(r)) {
        if (!BitEqual(t[name], x)) return "differs: " + name;
      }
      return std::string();
    });
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(errors[r], "") << "phase " << phase << " rank " << r;
    if (phase == 0) {
      // Every node's memory gone: only the remote tier is left.
      ASSERT_TRUE(runtime::CleanJob(guard.job).ok());
      const std::string version = DirectoryRemoteStore(dir.path, guard.job).VersionDir(3);
      EXPECT_TRUE(fs::exists(version + "/.metadata"));
      int distcp = 0;
      for (const auto& f : fs::directory_iterator(version)) {
        distcp += f.path().extension() == ".distcp";
      }
      EXPECT_EQ(distcp, kRanks);
    }
  }
}

}  // namespace
}  // namespace memento::torch_adapter
