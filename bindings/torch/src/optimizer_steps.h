// The integer state of libtorch's optimizers. Adam, AdamW, RMSprop and Adagrad
// keep `step` as an int64 field of their per-parameter state, not as a tensor:
// it travels in the extra state as (parameter index, step) pairs.
//
// Thread-safety: the hooks read and write the optimizer; call them where the
// optimizer is not stepping (Save / Restore).
#pragma once

#include <torch/optim.h>

#include <string>

#include "memento/torch/torch_checkpointer.h"

namespace memento::torch_adapter {

// Hooks that save and restore `optimizer`'s integer steps (indices as in its
// param groups, in order). Restore fails with FailedPrecondition, naming
// `prefix` and the parameter, when a saved step has no integer field to go to.
ExtraHooks OptimizerStepHooks(torch::optim::Optimizer& optimizer, const std::string& prefix);

}  // namespace memento::torch_adapter
