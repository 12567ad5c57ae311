// Ranks whose buffers live on a GPU other than device 0 (every rank of a node
// but one, with a GPU per rank): the snapshot workers and the restore copy on
// that device and never make a context on device 0, where it would take
// hundreds of MiB of every process of the node; the application thread keeps
// its current device. A process of its own (no other test has touched device
// 0 first). Needs two CUDA devices and the driver library, which answers
// whether device 0 has a context (loaded at run time: a machine without the
// driver still runs the test binary, and the test reports itself skipped).
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "memento/runtime/checkpointer.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::runtime {
namespace {

// Whether device `ordinal`'s primary context is active, through the driver
// API (the runtime API has no such query and would make the context).
class PrimaryContexts {
 public:
  PrimaryContexts() {
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return;
    init_ = reinterpret_cast<int (*)(unsigned)>(dlsym(lib_, "cuInit"));
    get_ = reinterpret_cast<int (*)(int*, int)>(dlsym(lib_, "cuDeviceGet"));
    state_ =
        reinterpret_cast<int (*)(int, unsigned*, int*)>(dlsym(lib_, "cuDevicePrimaryCtxGetState"));
    ok_ = init_ != nullptr && get_ != nullptr && state_ != nullptr && init_(0) == 0;
  }
  ~PrimaryContexts() {
    if (lib_ != nullptr) dlclose(lib_);
  }
  bool ok() const { return ok_; }
  // 1 active, 0 not, -1 unknown.
  int Active(int ordinal) const {
    int dev = 0, active = 0;
    unsigned flags = 0;
    if (get_(&dev, ordinal) != 0 || state_(dev, &flags, &active) != 0) return -1;
    return active != 0 ? 1 : 0;
  }

 private:
  void* lib_ = nullptr;
  int (*init_)(unsigned) = nullptr;
  int (*get_)(int*, int) = nullptr;
  int (*state_)(int, unsigned*, int*) = nullptr;
  bool ok_ = false;
};

TEST(OtherDevice, BuffersOnTheLastGpuMakeNoContextOnDeviceZero) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    cudaGetLastError();
    GTEST_SKIP() << "needs two CUDA devices (" << devices << " here)";
  }
  PrimaryContexts contexts;
  if (!contexts.ok()) GTEST_SKIP() << "the CUDA driver library cannot be loaded";
  ASSERT_EQ(contexts.Active(0), 0) << "device 0 has a context before the test";
  const int gpu = devices - 1;
  ASSERT_EQ(cudaSetDevice(gpu), cudaSuccess);

  const size_t bytes = (4 << 20) + 123;  // several snapshot chunks
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
  std::vector<uint8_t> want(bytes), got(bytes);
  for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  ASSERT_EQ(cudaMemcpy(buf, want.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);

  const std::string job = "cuda-other-" + testing::ProcessTag();
  Config config;
  config.job = job;
  config.ranks_per_node = 1;
  config.scheme = "none";
  config.chunk_bytes = 1 << 20;
  config.threads = 2;
  config.persist_every = 0;
  config.timeout_s = 30;
  {
    auto group = InProcessGroup::Create(1, std::chrono::seconds(30));
    auto ck = Checkpointer::Create(config, group->transport(0));
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    const auto len = static_cast<int64_t>(bytes);
    ASSERT_TRUE((*ck)->RegisterBuffer("w", buf, bytes, {"uint8", {len}, {len}, {0}}).ok());
    ASSERT_TRUE((*ck)->Save(1).ok());
    ASSERT_TRUE((*ck)->Wait().ok());
    ASSERT_EQ(cudaMemset(buf, 0xEE, bytes), cudaSuccess);
    auto report = (*ck)->Restore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->version, 1u);
  }
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, gpu) << "the application thread's device was changed";
  ASSERT_EQ(cudaMemcpy(got.data(), buf, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(got == want) << "restored bytes differ";
  EXPECT_EQ(contexts.Active(0), 0) << "a copy made a context on device 0";
  cudaFree(buf);
  (void)CleanJob(job);
}

}  // namespace
}  // namespace memento::runtime
