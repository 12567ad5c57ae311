// The NCCL device link between two processes under mpirun -np 2: messages
// both ways through the link, then the engine's protect and the recovery of a
// lost node's device shards over it, bit-exact. Both ranks may share one GPU:
// each process gets its own NCCL_HOSTID before NCCL starts, so NCCL takes
// them for two hosts (it refuses two ranks of one host on one GPU) and joins
// them over its network transport. On a machine without a GPU every case
// reports itself skipped with the reason.
#include "memento/runtime/nccl_link.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/device_link.h"
#include "memento/runtime/mpi_transport.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "transport/mpi_test_main.h"

namespace memento::runtime {
namespace {

std::shared_ptr<Transport> g_transport;

uint8_t Byte(int rank, int k, size_t i) { return static_cast<uint8_t>(rank * 37 + k * 11 + i * 7); }

class NcclLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    SKIP_WITHOUT_GPU(&devices);
    device_ = g_transport->rank() % devices;
    ASSERT_TRUE(NcclLinkUsable().ok()) << NcclLinkUsable().ToString();
  }
  int device_ = 0;
};

TEST_F(NcclLinkTest, MessagesBothWaysArriveBitExact) {
  auto link = CreateNcclLink(*g_transport, device_);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  EXPECT_EQ((*link)->name(), "nccl");
  auto routed = std::make_shared<DeviceRoutedTransport>(g_transport, *link);
  const int me = routed->rank(), peer = 1 - me;
  // Odd sizes around the inline limit and across the staging halves; pinned
  // and pageable host memory.
  const std::vector<size_t> sizes = {DeviceRoutedTransport::kDefaultMinBytes - 1,
                                     DeviceRoutedTransport::kDefaultMinBytes + 5,
                                     (size_t{40} << 20) + 3, (size_t{9} << 20) + 1};
  for (size_t k = 0; k < sizes.size(); ++k) {
    const bool pinned = k % 2 == 0;
    uint8_t* out = nullptr;
    uint8_t* in = nullptr;
    std::vector<uint8_t> out_v, in_v;
    if (pinned) {
      CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&out), sizes[k], cudaHostAllocDefault));
      CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&in), sizes[k], cudaHostAllocDefault));
    } else {
      out_v.resize(sizes[k]);
      in_v.resize(sizes[k]);
      out = out_v.data();
      in = in_v.data();
    }
    for (size_t i = 0; i < sizes[k]; ++i) out[i] = Byte(me, static_cast<int>(k), i);
    Status sent;
    std::thread sender([&] { sent = routed->Send(peer, 7, out, sizes[k]); });
    auto got = routed->Recv(peer, 7, in, sizes[k]);
    sender.join();
    ASSERT_TRUE(sent.ok()) << sent.ToString();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(*got, sizes[k]);
    size_t wrong = 0;
    for (size_t i = 0; i < sizes[k]; ++i) wrong += in[i] != Byte(peer, static_cast<int>(k), i);
    EXPECT_EQ(wrong, 0u) << sizes[k] << " bytes from rank " << peer;
    if (pinned) {
      cudaFreeHost(out);
      cudaFreeHost(in);
    }
  }
  const auto c = routed->counters();
  EXPECT_EQ(c.sent_messages, 3u);  // all but the one under kDefaultMinBytes
  EXPECT_EQ(c.received_messages, 3u);
  std::printf("[ rank %d ] NCCL link: %llu B sent, %llu B received, staging %zu B on GPU %d\n", me,
              static_cast<unsigned long long>(c.sent_bytes),
              static_cast<unsigned long long>(c.received_bytes), (*link)->staging_bytes(), device_);
}

// The engine with device buffers on both ranks (replica:2, a node each):
// protect streams the shards over NCCL; node 1 loses its store and gets its
// shard back from rank 0's replica over NCCL, bit-exact in device memory.
TEST_F(NcclLinkTest, ALostNodesDeviceShardComesBackOverTheLink) {
  auto link = CreateNcclLink(*g_transport, device_);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  auto routed = std::make_shared<DeviceRoutedTransport>(g_transport, *link);
  const int me = routed->rank();
  CUDA_OK(cudaSetDevice(device_));
  const std::vector<size_t> bytes = {(size_t{6} << 20) + 1, 333, size_t{3} << 20};
  std::vector<void*> bufs(bytes.size(), nullptr);
  for (size_t e = 0; e < bytes.size(); ++e) CUDA_OK(cudaMalloc(&bufs[e], bytes[e]));
  auto fill = [&](int step) {
    for (size_t e = 0; e < bytes.size(); ++e) {
      std::vector<uint8_t> host(bytes[e]);
      for (size_t i = 0; i < host.size(); ++i) host[i] = Byte(me, step * 10 + int(e), i);
      ASSERT_EQ(cudaMemcpy(bufs[e], host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  };
  Config config;
  config.job = "nccl-link-" + std::to_string(getppid());
  config.ranks_per_node = 1;
  config.scheme = "replica:2";
  config.timeout_s = 60;
  auto open = [&]() -> std::unique_ptr<Checkpointer> {
    auto ck = Checkpointer::Create(config, routed);
    EXPECT_TRUE(ck.ok()) << ck.status().ToString();
    if (!ck.ok()) return nullptr;
    for (size_t e = 0; e < bytes.size(); ++e) {
      EXPECT_TRUE((*ck)->RegisterBuffer("e" + std::to_string(e), bufs[e], bytes[e]).ok());
    }
    return std::move(ck).value();
  };
  {
    auto ck = open();
    ASSERT_NE(ck, nullptr);
    for (int step : {1, 2}) {
      fill(step);
      ASSERT_TRUE(ck->Save(step).ok());
      Status s = ck->Wait();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  const uint64_t protect_sent = routed->counters().sent_bytes;
  EXPECT_GE(protect_sent, bytes[0]) << "protect did not go over the link";
  ASSERT_TRUE(g_transport->Barrier().ok());
  if (me == 1) {
    ASSERT_TRUE(NodeStore::Destroy({config.job, NodeIdentity(config, 1), 0}).ok());
  }
  for (size_t e = 0; e < bytes.size(); ++e) CUDA_OK(cudaMemset(bufs[e], 0xEE, bytes[e]));
  ASSERT_TRUE(g_transport->Barrier().ok());
  const uint64_t before = routed->counters().received_bytes;
  {
    auto ck = open();
    ASSERT_NE(ck, nullptr);
    auto report = ck->Restore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->version, 2u);
    EXPECT_TRUE(ck->Wait().ok());
  }
  if (me == 1) {
    EXPECT_GE(routed->counters().received_bytes - before, bytes[0])
        << "the lost shard did not come over the link";
  }
  for (size_t e = 0; e < bytes.size(); ++e) {
    std::vector<uint8_t> host(bytes[e]);
    CUDA_OK(cudaMemcpy(host.data(), bufs[e], host.size(), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < host.size(); ++i) wrong += host[i] != Byte(me, 20 + int(e), i);
    EXPECT_EQ(wrong, 0u) << "entry " << e << " of rank " << me;
  }
  ASSERT_TRUE(g_transport->Barrier().ok());
  if (me == 0) (void)CleanJob(config.job);
  for (void* p : bufs) cudaFree(p);
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) {
  return memento::runtime::RunMpiTests(argc, argv, &memento::runtime::g_transport, [](int rank) {
    // Before NCCL starts: a host of its own per rank (see the top of the
    // file); the two "hosts" meet over NCCL's socket transport on loopback.
    const std::string host = "memento-nccl-test-" + std::to_string(rank);
    setenv("NCCL_HOSTID", host.c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("NCCL_IB_DISABLE", "1", 0);
  });
}
