#include "checkpoint_glue.h"

#include "memento/runtime/config.h"
#include "memento/torch/launcher.h"

namespace memento::demo {

Result<std::unique_ptr<torch_adapter::TorchCheckpointer>> CreateCheckpointer(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    runtime::FaultHooks hooks) {
  auto config = runtime::Config::FromEnv();
  if (!config.ok()) return config.status();
  auto transport =
      torch_adapter::CreateLauncherTransport(torch_adapter::Launcher::kMpi, *config);
  if (!transport.ok()) return transport.status();
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
