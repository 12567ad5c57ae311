#include "checkpoint_glue.h"

#include <algorithm>
#include <mutex>

namespace memento::demo {
namespace {

std::mutex transports_mu;
std::vector<std::weak_ptr<runtime::Transport>> transports;

}  // namespace

void AbortCheckpointerTransports() {
  std::lock_guard<std::mutex> lock(transports_mu);
  for (const auto& weak : transports) {
    if (auto t = weak.lock()) t->Abort();
  }
}

Result<std::unique_ptr<torch_adapter::TorchCheckpointer>> CreateCheckpointer(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors, runtime::FaultHooks hooks,
    runtime::Config config, std::shared_ptr<runtime::Transport> transport) {
  {
    std::lock_guard<std::mutex> lock(transports_mu);
    transports.erase(std::remove_if(transports.begin(), transports.end(),
                                    [](const auto& weak) { return weak.expired(); }),
                     transports.end());
    transports.push_back(transport);
  }
  torch_adapter::Options options;
  // The demo draws its batches from (seed, step, rank) and uses the torch
  // generator only for the initial weights: nothing to keep.
  options.save_rng = false;
  options.hooks = std::move(hooks);
  // The demo reports to `memento launch` itself (the loss, the whole model's
  // state hash at each restore and at the end).
  options.report_to_launcher = false;
  auto ck =
      torch_adapter::TorchCheckpointer::Create(std::move(config), std::move(transport), options);
  if (!ck.ok()) return ck.status();
  for (const auto& [name, t] : tensors) {
    if (!t.is_contiguous() || !t.device().is_cpu()) {
      return Status::InvalidArgument("tensor '" + name + "' must be contiguous and on the CPU");
    }
    if (Status s = (*ck)->Register(name, t); !s.ok()) return s;
  }
  return ck;
}

}  // namespace memento::demo
