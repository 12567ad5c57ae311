#include "optimizer_steps.h"

#include <cstring>
#include <map>

#include "optimizer_state_key.h"

namespace memento::torch_adapter {
namespace {

template <typename S>
bool StepOf(torch::optim::OptimizerParamState* s, int64_t* out) {
  if (auto* p = dynamic_cast<S*>(s)) {
    *out = p->step();
    return true;
  }
  return false;
}
template <typename S>
bool SetStep(torch::optim::OptimizerParamState* s, int64_t v) {
  if (auto* p = dynamic_cast<S*>(s)) {
    p->step(v);
    return true;
  }
  return false;
}

}  // namespace

ExtraHooks OptimizerStepHooks(torch::optim::Optimizer& optimizer, const std::string& prefix) {
  ExtraHooks hooks;
  hooks.save = [&optimizer] {
    std::string out;
    auto& state = optimizer.state();
    int64_t index = 0;
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) {
        auto it = state.find(StateKey(p));
        int64_t step = 0;
        if (it != state.end() &&
            (StepOf<torch::optim::AdamParamState>(it->second.get(), &step) ||
             StepOf<torch::optim::AdamWParamState>(it->second.get(), &step) ||
             StepOf<torch::optim::RMSpropParamState>(it->second.get(), &step) ||
             StepOf<torch::optim::AdagradParamState>(it->second.get(), &step))) {
          out.append(reinterpret_cast<const char*>(&index), 8);
          out.append(reinterpret_cast<const char*>(&step), 8);
        }
        ++index;
      }
    }
    return out;
  };
  hooks.restore = [&optimizer, prefix](const std::string& bytes) -> Status {
    std::map<int64_t, int64_t> steps;
    for (size_t i = 0; i + 16 <= bytes.size(); i += 16) {
      int64_t index = 0, step = 0;
      std::memcpy(&index, bytes.data() + i, 8);
      std::memcpy(&step, bytes.data() + i + 8, 8);
      steps[index] = step;
    }
    auto& state = optimizer.state();
    int64_t index = 0;
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) {
        auto it = state.find(StateKey(p));
        auto s = steps.find(index);
        if (it != state.end() && s != steps.end()) {
          auto* st = it->second.get();
          if (!(SetStep<torch::optim::AdamParamState>(st, s->second) ||
                SetStep<torch::optim::AdamWParamState>(st, s->second) ||
                SetStep<torch::optim::RMSpropParamState>(st, s->second) ||
                SetStep<torch::optim::AdagradParamState>(st, s->second))) {
            return Status::FailedPrecondition("restore: optimizer '" + prefix + "' parameter " +
                                              std::to_string(index) +
                                              " has no integer step to restore");
          }
        }
        ++index;
      }
    }
    return Status::Ok();
  };
  return hooks;
}

}  // namespace memento::torch_adapter
