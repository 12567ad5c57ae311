// The engine over CUDA device buffers: snapshot with cudaMemcpyAsync into the
// node store, restore back into device memory, protection and recovery of a
// lost node whose shards lived on a GPU, and ordering of the snapshot after
// work the caller queued on the producing stream. Built only with CUDA; on a
// machine without a GPU every test reports itself skipped with the reason.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::runtime {
namespace {

uint8_t Pattern(int rank, uint64_t step, size_t entry, size_t i) {
  return static_cast<uint8_t>((i * 131 + entry * 31 + step * 7 + rank * 17 + (i >> 9)) & 0xFF);
}

// Odd sizes, one larger than a chunk, one smaller, one of several chunks,
// one of several remote reads (4 MiB) and pinned pieces (1 MiB).
const std::vector<size_t> kEntryBytes = {3 * 65536 + 17, 333, 1 << 20, (9 << 20) + 3};

class DeviceCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    SKIP_WITHOUT_GPU(&devices);
    job_ = "cuda-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
           "-" + testing::ProcessTag();
    for (char& c : job_) {
      if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
    }
    if (job_.size() > 48) job_ = job_.substr(job_.size() - 48);
  }
  void TearDown() override {
    cks_.clear();
    for (auto& rank : bufs_) {
      for (void* p : rank) cudaFree(p);
    }
    (void)CleanJob(job_);
  }

  Config MakeConfig(const std::string& scheme) const {
    Config c;
    c.job = job_;
    c.ranks_per_node = 1;
    c.scheme = scheme;
    c.chunk_bytes = 65536;
    c.threads = 2;
    c.persist_every = 0;
    c.timeout_s = 30;
    return c;
  }

  // One Checkpointer per rank over a fresh in-process group; device buffers
  // are allocated on the first launch and kept across relaunches.
  void Launch(int n, const Config& config) {
    cks_.clear();
    group_ = InProcessGroup::Create(n, std::chrono::seconds(30));
    if (bufs_.empty()) {
      bufs_.resize(n);
      for (int r = 0; r < n; ++r) {
        for (size_t bytes : kEntryBytes) {
          void* p = nullptr;
          CUDA_OK(cudaMalloc(&p, bytes));
          bufs_[r].push_back(p);
        }
      }
    }
    cks_.resize(n);
    for (int r = 0; r < n; ++r) {
      auto ck = Checkpointer::Create(config, group_->transport(r));
      ASSERT_TRUE(ck.ok()) << ck.status().ToString();
      cks_[r] = std::move(ck).value();
      for (size_t e = 0; e < kEntryBytes.size(); ++e) {
        const auto len = static_cast<int64_t>(kEntryBytes[e]);
        ASSERT_TRUE(cks_[r]
                        ->RegisterBuffer("e" + std::to_string(e), bufs_[r][e], kEntryBytes[e],
                                         {"uint8", {len}, {len}, {0}})
                        .ok());
      }
    }
  }

  void Fill(int r, uint64_t step) {
    for (size_t e = 0; e < kEntryBytes.size(); ++e) {
      std::vector<uint8_t> host(kEntryBytes[e]);
      for (size_t i = 0; i < host.size(); ++i) host[i] = Pattern(r, step, e, i);
      CUDA_OK(cudaMemcpy(bufs_[r][e], host.data(), host.size(), cudaMemcpyHostToDevice));
    }
  }
  void Scribble(int r) {
    for (size_t e = 0; e < kEntryBytes.size(); ++e) {
      CUDA_OK(cudaMemset(bufs_[r][e], 0xEE, kEntryBytes[e]));
    }
  }
  // Index of the first entry of rank r that differs from step's pattern, or -1.
  int Mismatch(int r, uint64_t step) {
    for (size_t e = 0; e < kEntryBytes.size(); ++e) {
      std::vector<uint8_t> host(kEntryBytes[e]);
      if (cudaMemcpy(host.data(), bufs_[r][e], host.size(), cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
        return static_cast<int>(e);
      }
      for (size_t i = 0; i < host.size(); ++i) {
        if (host[i] != Pattern(r, step, e, i)) return static_cast<int>(e);
      }
    }
    return -1;
  }

  template <typename Fn>
  void OnEveryRank(Fn fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < cks_.size(); ++r) threads.emplace_back(fn, static_cast<int>(r));
    for (auto& t : threads) t.join();
  }

  void SaveAll(uint64_t step) {
    std::vector<Status> out(cks_.size());
    OnEveryRank([&](int r) {
      cudaSetDevice(0);
      Fill(r, step);
      Status s = cks_[r]->Save(step);
      out[r] = s.ok() ? cks_[r]->Wait() : s;
    });
    for (size_t r = 0; r < out.size(); ++r) ASSERT_TRUE(out[r].ok()) << out[r].ToString();
  }

  std::vector<Result<RestoreReport>> RestoreAll() {
    std::vector<Result<RestoreReport>> out(cks_.size(), Status::Internal("not run"));
    OnEveryRank([&](int r) {
      cudaSetDevice(0);
      Scribble(r);
      out[r] = cks_[r]->Restore();
    });
    return out;
  }

  std::string job_;
  std::shared_ptr<InProcessGroup> group_;
  std::vector<std::unique_ptr<Checkpointer>> cks_;
  std::vector<std::vector<void*>> bufs_;
};

TEST_F(DeviceCheckpointTest, DeviceBuffersRestoreBitExactFromTheNodeStore) {
  for (const std::string copy : {"direct", "staged"}) {
    SCOPED_TRACE(copy);
    Config config = MakeConfig("none");
    config.device_copy = copy;
    Launch(1, config);
    SaveAll(3);
    SaveAll(4);
    Launch(1, config);  // a relaunch re-attaches the node store
    auto restored = RestoreAll();
    ASSERT_TRUE(restored[0].ok()) << restored[0].status().ToString();
    EXPECT_EQ(restored[0]->version, 4u);
    EXPECT_EQ(Mismatch(0, 4), -1);
    // The new checkpointer never registered the store's pages: its restore
    // threads staged the device bytes through pinned buffers of their own.
    EXPECT_NE(restored[0]->source_detail.find("device bytes staged through pinned buffers"),
              std::string::npos)
        << restored[0]->source_detail;
    cks_.clear();
    (void)CleanJob(job_);
  }
}

TEST_F(DeviceCheckpointTest, LostNodeOfDeviceShardsIsRebuiltFromPeers) {
  for (const std::string scheme : {"replica:2", "xor:3", "rs:2+2"}) {
    SCOPED_TRACE(scheme);
    const Config config = MakeConfig(scheme);
    Launch(4, config);
    SaveAll(7);
    Launch(4, config);
    ASSERT_TRUE(NodeStore::Destroy({job_, NodeIdentity(config, 2), 0}).ok());  // node 2 lost
    auto restored = RestoreAll();
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(restored[r].ok()) << "rank " << r << ": " << restored[r].status().ToString();
      EXPECT_EQ(restored[r]->version, 7u);
      EXPECT_EQ(Mismatch(r, 7), -1) << "rank " << r;
    }
    EXPECT_EQ(restored[2]->lost_nodes, std::vector<int>{2});
    cks_.clear();
    (void)CleanJob(job_);
  }
}

// Every node store lost after v5 was persisted: the remote tier serves it,
// each device entry streaming from its rank file into device memory through
// one pinned buffer pair (no host copy of the shard), bit-exact.
TEST_F(DeviceCheckpointTest, WithEveryNodeLostDeviceShardsStreamFromTheRemoteTier) {
  const std::filesystem::path remote = std::filesystem::temp_directory_path() / ("memento-" + job_);
  Config config = MakeConfig("replica:2");
  config.persist_every = 1;
  config.remote_dir = remote.string();
  Launch(2, config);
  SaveAll(5);
  std::vector<Status> persisted(2);
  OnEveryRank([&](int r) { persisted[r] = cks_[r]->WaitPersist(); });
  for (const Status& s : persisted) ASSERT_TRUE(s.ok()) << s.ToString();
  cks_.clear();
  ASSERT_TRUE(CleanJob(job_).ok());  // every node lost
  Launch(2, config);
  auto restored = RestoreAll();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(restored[r].ok()) << "rank " << r << ": " << restored[r].status().ToString();
    EXPECT_EQ(restored[r]->version, 5u);
    for (const auto& e : restored[r]->entries) EXPECT_EQ(e.source, RestoreSource::kRemote);
    EXPECT_EQ(Mismatch(r, 5), -1) << "rank " << r;
  }
  cks_.clear();
  std::filesystem::remove_all(remote);
}

// A job of 4 nodes (replica:2) relaunched with Config::elastic on 3: every
// rank registers its new slice of a global device tensor cut along dim 0 (an
// odd size: the slices straddle the old ones), and the restore assembles it
// from the old stores and moves it into device memory (through pinned buffer
// pairs), bit-exact.
TEST_F(DeviceCheckpointTest, AnElasticRestoreAssemblesDeviceSlicesBitExact) {
  constexpr int64_t kGlobal = (3 << 20) + 12345;  // uint8 elements
  auto value = [](int64_t i) { return static_cast<uint8_t>((i * 131 + (i >> 11) * 7) & 0xFF); };
  std::vector<void*> slices;  // this launch's device buffers, by rank
  std::vector<std::pair<int64_t, int64_t>> spans;
  auto open = [&](int n, const Config& config) {
    cks_.clear();
    for (void* p : slices) cudaFree(p);
    slices.assign(n, nullptr);
    spans.assign(n, {0, 0});
    group_ = InProcessGroup::Create(n, std::chrono::seconds(30));
    cks_.resize(n);
    for (int r = 0; r < n; ++r) {
      const int64_t base = kGlobal / n, extra = kGlobal % n;
      const int64_t begin = r * base + std::min<int64_t>(r, extra);
      const int64_t len = base + (r < extra ? 1 : 0);
      spans[r] = {begin, len};
      CUDA_OK(cudaMalloc(&slices[r], len));
      auto ck = Checkpointer::Create(config, group_->transport(r));
      ASSERT_TRUE(ck.ok()) << ck.status().ToString();
      cks_[r] = std::move(ck).value();
      ASSERT_TRUE(cks_[r]
                      ->RegisterBuffer("w", slices[r], static_cast<size_t>(len),
                                       {"uint8", {kGlobal}, {len}, {begin}})
                      .ok());
    }
  };
  Config config = MakeConfig("replica:2");
  open(4, config);
  for (int r = 0; r < 4; ++r) {
    std::vector<uint8_t> host(spans[r].second);
    for (int64_t i = 0; i < spans[r].second; ++i) host[i] = value(spans[r].first + i);
    CUDA_OK(cudaMemcpy(slices[r], host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<Status> saved(4);
  OnEveryRank([&](int r) {
    cudaSetDevice(0);
    Status s = cks_[r]->Save(5);
    saved[r] = s.ok() ? cks_[r]->Wait() : s;
  });
  for (const Status& s : saved) ASSERT_TRUE(s.ok()) << s.ToString();

  config.elastic = true;
  open(3, config);
  std::vector<Result<RestoreReport>> restored(3, Status::Internal("not run"));
  OnEveryRank([&](int r) {
    cudaSetDevice(0);
    CUDA_OK(cudaMemset(slices[r], 0xEE, spans[r].second));
    restored[r] = cks_[r]->Restore();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(restored[r].ok()) << "rank " << r << ": " << restored[r].status().ToString();
    EXPECT_EQ(restored[r]->version, 5u);
    EXPECT_TRUE(restored[r]->elastic);
    std::vector<uint8_t> host(spans[r].second);
    CUDA_OK(cudaMemcpy(host.data(), slices[r], host.size(), cudaMemcpyDeviceToHost));
    int64_t bad = -1;
    for (int64_t i = 0; i < spans[r].second && bad < 0; ++i) {
      if (host[i] != value(spans[r].first + i)) bad = i;
    }
    EXPECT_EQ(bad, -1) << "rank " << r << ": first wrong byte of its slice";
  }
  cks_.clear();
  for (void* p : slices) cudaFree(p);
}

// The caller queues the step's last write on the producing stream behind
// 200 ms of host work and calls Save at once: the snapshot must copy what the
// stream produces, not what the buffer held when Save was called. The fence:
// the legacy default stream; a non-blocking stream of the caller's, which the
// legacy stream does not cover, named by SetDeviceStream; or an event the
// caller records on that stream, named by SetDeviceEvent (the torch adapter's way).
enum class Fence { kLegacyDefault, kOwnStream, kCallersEvent };

const char* FenceName(Fence f) {
  switch (f) {
    case Fence::kLegacyDefault:
      return "LegacyDefault";
    case Fence::kOwnStream:
      return "NonBlockingStream";
    case Fence::kCallersEvent:
      return "CallersEvent";
  }
  return "Unknown";
}
void PrintTo(Fence f, std::ostream* os) { *os << FenceName(f); }

// With each MEMENTO_DEVICE_COPY: direct (one worker queues every chunk) and
// staged (each worker queues its own pieces, each after the fence).
class ProducerStreamTest : public DeviceCheckpointTest,
                           public ::testing::WithParamInterface<std::tuple<Fence, bool>> {};

TEST_P(ProducerStreamTest, SnapshotIsOrderedAfterTheProducingStream) {
  const Fence fence = std::get<0>(GetParam());
  Config config = MakeConfig("none");
  config.device_copy = std::get<1>(GetParam()) ? "staged" : "direct";
  Launch(1, config);
  SaveAll(1);
  Fill(0, 1);
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  if (fence != Fence::kLegacyDefault) {
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  if (fence == Fence::kOwnStream) cks_[0]->SetDeviceStream(stream);
  CUDA_OK(cudaLaunchHostFunc(
      stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr));
  for (size_t e = 0; e < kEntryBytes.size(); ++e) {
    CUDA_OK(cudaMemsetAsync(bufs_[0][e], 0x5A, kEntryBytes[e], stream));
  }
  if (fence == Fence::kCallersEvent) {
    CUDA_OK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    CUDA_OK(cudaEventRecord(event, stream));
    cks_[0]->SetDeviceEvent(event);
  }
  ASSERT_TRUE(cks_[0]->Save(2).ok());
  // Save queues the copies behind the fence: the stream is still busy.
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "Save waited for the producing stream";
  cudaGetLastError();
  ASSERT_TRUE(cks_[0]->Wait().ok());
  CUDA_OK(cudaDeviceSynchronize());
  Launch(1, config);
  auto restored = RestoreAll();
  ASSERT_TRUE(restored[0].ok()) << restored[0].status().ToString();
  ASSERT_EQ(restored[0]->version, 2u);
  for (size_t e = 0; e < kEntryBytes.size(); ++e) {
    std::vector<uint8_t> host(kEntryBytes[e]);
    CUDA_OK(cudaMemcpy(host.data(), bufs_[0][e], host.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < host.size(); ++i) {
      ASSERT_EQ(host[i], 0x5A) << "entry " << e << " byte " << i
                               << ": the snapshot ran ahead of the producing stream";
    }
  }
  cks_.clear();  // the engine waits for the event no longer
  if (event != nullptr) cudaEventDestroy(event);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Fences, ProducerStreamTest,
                         ::testing::Combine(::testing::Values(Fence::kLegacyDefault,
                                                              Fence::kOwnStream,
                                                              Fence::kCallersEvent),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(FenceName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "Staged" : "Direct");
                         });

}  // namespace
}  // namespace memento::runtime
