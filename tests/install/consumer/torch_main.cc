// A downstream libtorch program on the installed memento::torch: one rank
// saves a tensor, scribbles over it, restores it in place and checks the bytes.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "memento/torch/torch_checkpointer.h"

int main() {
  using memento::torch_adapter::OrThrow;
  try {
    auto ck = OrThrow(memento::torch_adapter::TorchCheckpointer::CreateFromEnvironment());
    torch::Tensor w = torch::arange(1000, torch::kFloat32);
    const torch::Tensor expected = w.clone();
    OrThrow(ck->Register("w", w));
    OrThrow(ck->Save(1));
    OrThrow(ck->Wait());
    w.fill_(-1);
    auto restored = OrThrow(ck->Restore());
    const bool ok = restored.has_value() && restored->step == 1 && torch::equal(w, expected);
    std::printf("torch restore=%d\n", ok);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
