// The demo's only contact with memento's checkpoint API: registering named
// tensors (parameters, optimizer state) and raw bytes with the runtime's
// Checkpointer. Kept in one file so that it can move to the libtorch adapter
// (memento::torch) without touching the training loop.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "memento/runtime/checkpointer.h"

namespace memento::demo {

// Registers every tensor (contiguous, on the CPU; its storage must stay put
// while the Checkpointer lives) as one entry, with its dtype and shape.
Status RegisterTensors(runtime::Checkpointer& ck,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

}  // namespace memento::demo
