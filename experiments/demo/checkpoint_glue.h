// The demo's only contact with memento: a libtorch checkpointer
// (memento::torch, bindings/torch) over the transport the main chose, with the
// shard's named tensors registered. Kept in one file so that the training loop never sees the
// checkpoint API beyond Restore / WaitSnapshot / Save / Wait.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/config.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/transport.h"
#include "memento/torch/torch_checkpointer.h"

namespace memento::demo {

// A checkpointer with `config` over `transport` (the job's MPI, a gloo group,
// or a repaired ULFM world's), every tensor registered under its name (in
// place: contiguous CPU tensors whose storage must stay put while the
// checkpointer lives). `hooks`: the launcher's fault injection.
// InvalidArgument for bad settings; the adapter's error otherwise.
Result<std::unique_ptr<torch_adapter::TorchCheckpointer>> CreateCheckpointer(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors, runtime::FaultHooks hooks,
    runtime::Config config, std::shared_ptr<runtime::Transport> transport);

// Aborts the transfers of every transport CreateCheckpointer was given that is
// still open (in-job recovery: the membership is gone). Any thread.
void AbortCheckpointerTransports();

}  // namespace memento::demo
