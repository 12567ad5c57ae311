// DDP deduplication: protect traffic and node memory of a replicated model +
// Adam state, registered replicated (each rank stores 1/N) vs per rank.
//
//   mpirun -np 4 memento_torch_bench_dedupe [--mib 64] [--tensors 300] [--scheme replica:2]
//
// Both modes run in the same launch. Traffic: payload bytes every rank sent
// through the transport during one Save (counted by a ForwardingTransport).
// Memory: the bytes of every node store segment of the job in /dev/shm,
// averaged per node. Prints one JSON line per mode and the ratios.
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "memento/runtime/mpi_transport.h"
#include "memento/runtime/store_admin.h"
#include "memento/torch/torch_checkpointer.h"

namespace mr = memento::runtime;
namespace mt = memento::torch_adapter;

namespace {

class CountingTransport : public mr::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  memento::Status Send(int peer, int tag, const void* data, size_t bytes) override {
    sent += bytes;
    return ForwardingTransport::Send(peer, tag, data, bytes);
  }
  std::atomic<uint64_t> sent{0};
};

// Sizes from 4 KiB up, geometric, scaled so that they sum to `total` bytes.
std::vector<int64_t> TensorElements(int count, uint64_t total) {
  std::vector<double> w(count);
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += (w[i] = std::pow(1.03, i));
  std::vector<int64_t> out(count);
  for (int i = 0; i < count; ++i) {
    out[i] = std::max<int64_t>(1024, static_cast<int64_t>(total / 4 * w[i] / sum));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 64;
  int tensors = 300;
  std::string scheme = "replica:2";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--mib")
      mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (f == "--tensors")
      tensors = std::atoi(argv[i + 1]);
    else if (f == "--scheme")
      scheme = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s (accepted: --mib --tensors --scheme)\n", argv[i]);
      return 2;
    }
  }
  auto mpi = mr::CreateMpiTransport();
  if (!mpi.ok()) {
    std::fprintf(stderr, "%s\n", mpi.status().ToString().c_str());
    return 1;
  }
  const int rank = (*mpi)->rank(), size = (*mpi)->size();
  torch::manual_seed(1);
  std::vector<at::Tensor> state;
  for (int64_t n : TensorElements(tensors, mib << 20)) state.push_back(torch::randn({n}));
  uint64_t state_bytes = 0;
  for (const auto& t : state) state_bytes += t.numel() * 4;

  double traffic[2] = {0, 0}, memory[2] = {0, 0};
  for (int replicated = 0; replicated < 2; ++replicated) {
    const std::string job = "bd-" + std::to_string(replicated) + "-" + std::to_string(getpid());
    auto counting = std::make_shared<CountingTransport>(*mpi);
    // Every rank must use the same job id: rank 0 picks it.
    auto ids = counting->Allgather(job.data(), job.size());
    const std::string agreed(ids->at(0).begin(), ids->at(0).end());
    auto config = mr::Config::FromMap(
        {{"MEMENTO_JOB", agreed}, {"MEMENTO_SCHEME", scheme}, {"MEMENTO_RANKS_PER_NODE", "1"}});
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      return 1;
    }
    {
      auto ck = mt::OrThrow(mt::TorchCheckpointer::Create(*config, counting));
      for (size_t i = 0; i < state.size(); ++i) {
        mt::OrThrow(ck->Register("t" + std::to_string(i), state[i], replicated == 1));
      }
      mt::OrThrow(ck->Save(1));  // lays out the store (first Save); protects v1
      mt::OrThrow(ck->Wait());
      const uint64_t before = counting->sent.load();
      mt::OrThrow(ck->Save(2));
      mt::OrThrow(ck->Wait());
      const uint64_t sent = counting->sent.load() - before;
      (void)counting->Barrier();
      uint64_t seg = 0;
      if (rank == 0) {
        for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
          if (e.path().filename().string().rfind("memento." + agreed + ".", 0) == 0) {
            seg += std::filesystem::file_size(e.path());
          }
        }
      }
      auto sum = counting->Allgather(&sent, sizeof(sent));
      uint64_t total_sent = 0;
      for (const auto& v : *sum) total_sent += *reinterpret_cast<const uint64_t*>(v.data());
      traffic[replicated] = static_cast<double>(total_sent) / size;
      memory[replicated] = static_cast<double>(seg) / size;
      if (rank == 0) {
        std::printf(
            "{\"mode\":\"%s\",\"ranks\":%d,\"scheme\":\"%s\",\"tensors\":%d,"
            "\"state_bytes\":%llu,\"protect_bytes_sent_per_node\":%.0f,"
            "\"store_bytes_per_node\":%.0f}\n",
            replicated ? "replicated" : "per-rank", size, scheme.c_str(), tensors,
            static_cast<unsigned long long>(state_bytes), traffic[replicated], memory[replicated]);
      }
    }
    (void)counting->Barrier();
    if (rank == 0) (void)mr::CleanJob(agreed);
  }
  if (rank == 0) {
    std::printf("{\"traffic_ratio\":%.4f,\"memory_ratio\":%.4f,\"target\":%.4f}\n",
                traffic[1] / traffic[0], memory[1] / memory[0], 1.0 / size + 0.05);
  }
  return 0;
}
