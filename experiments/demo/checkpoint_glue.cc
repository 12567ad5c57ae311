#include "checkpoint_glue.h"

#include <algorithm>
#include <mutex>

#include "memento/launch/resilient.h"
#include "memento/runtime/config.h"
#include "memento/torch/launcher.h"

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
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    runtime::FaultHooks hooks) {
  auto config = runtime::Config::FromEnv();
  if (!config.ok()) return config.status();
  // In-job recovery: auto detects the launcher's gloo rendezvous.
  auto transport = torch_adapter::CreateLauncherTransport(
      launch::InJob() ? torch_adapter::Launcher::kAuto : torch_adapter::Launcher::kMpi, *config);
  if (!transport.ok()) return transport.status();
  {
    std::lock_guard<std::mutex> lock(transports_mu);
    transports.erase(std::remove_if(transports.begin(), transports.end(),
                                    [](const auto& weak) { return weak.expired(); }),
                     transports.end());
    transports.push_back(*transport);
  }
  torch_adapter::Options options;
  // The demo draws its batches from (seed, step, rank) and uses the torch
  // generator only for the initial weights: nothing to keep.
  options.save_rng = false;
  options.hooks = std::move(hooks);
  // The demo reports to `memento launch` itself (the loss, the whole model's
  // state hash at each restore and at the end).
  options.report_to_launcher = false;
  auto ck = torch_adapter::TorchCheckpointer::Create(std::move(config).value(),
                                                     std::move(transport).value(), options);
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
