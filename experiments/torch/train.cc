// A plain libtorch training loop (one model per rank, Adam, dropout, data from
// torch's generator), checkpointed in memory by memento every step. The lines
// marked "memento" are all that memento adds (README: the diff).
//
//   MEMENTO_RANKS_PER_NODE=2 MEMENTO_SCHEME=replica:2 mpirun -np 4 memento_torch_train --steps 20
//
// Test hooks shared with the plain loop: EXAMPLE_KILL_STEP / EXAMPLE_KILL_RANKS
// make ranks SIGKILL themselves after a step; --out writes the final state.
#include <signal.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "memento/torch/torch_checkpointer.h"  // memento

namespace {

struct Net : torch::nn::Module {
  explicit Net(int width)
      : fc1(register_module("fc1", torch::nn::Linear(32, width))),
        fc2(register_module("fc2", torch::nn::Linear(width, 1))),
        drop(register_module("drop", torch::nn::Dropout(0.1))) {}
  at::Tensor forward(at::Tensor x) {
    return fc2->forward(drop->forward(torch::relu(fc1->forward(x))));
  }
  torch::nn::Linear fc1, fc2;
  torch::nn::Dropout drop;
};

int EnvRank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "RANK"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 0;
}

void MaybeDie(int64_t step, int rank) {
  const char* at = std::getenv("EXAMPLE_KILL_STEP");
  const char* ranks = std::getenv("EXAMPLE_KILL_RANKS");
  if (at == nullptr || ranks == nullptr || std::atoll(at) != step) return;
  std::string list = std::string(",") + ranks + ",";
  if (list.find("," + std::to_string(rank) + ",") == std::string::npos) return;
  std::printf("rank %d: killed at step %lld\n", rank, static_cast<long long>(step));
  std::fflush(stdout);
  kill(getpid(), SIGKILL);
}

void Append(std::ofstream& out, const at::Tensor& t) {
  at::Tensor c = t.detach().contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 20;
  int width = 64;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--steps")
      steps = std::atoll(argv[i + 1]);
    else if (flag == "--width")
      width = std::atoi(argv[i + 1]);
    else if (flag == "--out")
      out = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s (accepted: --steps N --width W --out DIR)\n", argv[i]);
      return 2;
    }
  }
  const int rank = EnvRank();
  torch::manual_seed(100 + rank);
  Net net(width);
  torch::optim::Adam optimizer(net.parameters(), torch::optim::AdamOptions(1e-3));

  using memento::torch_adapter::OrThrow;                                                  // memento
  auto ck = OrThrow(memento::torch_adapter::TorchCheckpointer::CreateFromEnvironment());  // memento
  OrThrow(ck->RegisterModule(net)), OrThrow(ck->RegisterOptimizer(optimizer));            // memento
  auto restored = OrThrow(ck->Restore());                                                 // memento
  if (restored) std::printf("rank %d: %s\n", rank, restored->report.ToString().c_str());  // memento
  at::Tensor loss;
  for (int64_t step = restored ? restored->step : 0; step < steps; ++step) {  // memento
    at::Tensor x = torch::randn({16, 32});
    at::Tensor y = x.narrow(1, 0, 1) * 0.5 - x.narrow(1, 1, 1);
    loss = torch::mse_loss(net.forward(x), y);
    loss.backward();
    OrThrow(ck->WaitSnapshot());  // memento
    optimizer.step();
    optimizer.zero_grad();
    OrThrow(ck->Save(step + 1));  // memento
    MaybeDie(step + 1, rank);
  }
  OrThrow(ck->Finish());  // memento: the normal end (the same job run again starts fresh)
  if (!out.empty()) {
    std::ofstream f(out + "/rank" + std::to_string(rank) + ".bin", std::ios::binary);
    for (const auto& t : net.parameters()) Append(f, t);
    for (const auto& nt : memento::torch_adapter::OptimizerTensors(optimizer, "", false)) {
      Append(f, nt.tensor);
    }
    Append(f, torch::rand({8}));  // the next random draws
  }
  std::printf("rank %d: done %lld steps\n", rank, static_cast<long long>(steps));
  return 0;
}
