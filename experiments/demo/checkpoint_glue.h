// The demo's only contact with memento: a libtorch checkpointer
// (memento::torch, bindings/torch) over MPI with the shard's named tensors
// registered. Kept in one file so that the training loop never sees the
// checkpoint API beyond Restore / WaitSnapshot / Save / Wait.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/stage.h"
#include "memento/torch/torch_checkpointer.h"

namespace memento::demo {

// Reads the runtime's settings from the environment (Config::FromEnv), opens
// the MPI transport (MPI is initialized already; under in-job recovery the
// gloo transport of RANK / WORLD_SIZE / MASTER_*) and registers every tensor
// under its name (in place: contiguous CPU tensors whose storage must stay put
// while the checkpointer lives). `hooks`: the launcher's fault injection.
// InvalidArgument for bad settings; the transport's or adapter's error otherwise.
Result<std::unique_ptr<torch_adapter::TorchCheckpointer>> CreateCheckpointer(
    const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    runtime::FaultHooks hooks);

// Aborts the transfers of every transport CreateCheckpointer opened that is
// still open (in-job recovery: the membership is gone). Any thread.
void AbortCheckpointerTransports();

}  // namespace memento::demo
