// Stable flattened names of modules and optimizers (torch_checkpointer.h,
// "Entry names"), and the creation of Adam / AdamW state before the first step.
#include <set>
#include <tuple>
#include <vector>

#include <c10/util/string_utils.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "memento/torch/torch_checkpointer.h"
#include "optimizer_state_key.h"

namespace memento::torch_adapter {
namespace {

void Add(std::vector<NamedTensor>& out, const std::string& name, const at::Tensor& t,
         bool replicated, const at::Tensor& state_of = at::Tensor()) {
  if (t.defined()) out.push_back({name, t, replicated, std::nullopt, state_of});
}

// What makes two tensors one entry: views of the same storage with the same
// offset, sizes, strides and dtype (the same tensor under two names). A
// tensor without bytes is keyed by its own object: nothing to share.
using TensorAlias =
    std::tuple<const void*, int64_t, std::vector<int64_t>, std::vector<int64_t>, int>;
TensorAlias AliasOf(const at::Tensor& t) {
  const bool has_bytes = t.has_storage() && t.numel() > 0 && t.storage().data() != nullptr;
  const void* base = has_bytes ? t.storage().data() : static_cast<const void*>(t.unsafeGetTensorImpl());
  return {base, has_bytes ? t.storage_offset() : -1, t.sizes().vec(), t.strides().vec(),
          static_cast<int>(t.scalar_type())};
}

}  // namespace

std::string DTypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kLong:
      return "int64";
    case at::kInt:
      return "int32";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    case at::kComplexFloat:
      return "complex64";
    case at::kComplexDouble:
      return "complex128";
    default:
      return c10::toString(type);
  }
}

std::vector<NamedTensor> ModuleTensors(const torch::nn::Module& module, const std::string& prefix,
                                       bool replicated) {
  std::vector<NamedTensor> out;
  // A tensor registered under several names (a tied weight: an output head
  // sharing the embedding's, which named_parameters lists under both) is one
  // entry, under its first name; restoring it in place restores every name.
  std::set<TensorAlias> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().defined() || !seen.insert(AliasOf(item.value())).second) continue;
    Add(out, prefix + item.key(), item.value(), replicated);
  }
  // The forward pass may change buffers (running statistics) before the
  // next WaitSnapshot: they are copied at Save.
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (!item.value().defined() || !seen.insert(AliasOf(item.value())).second) continue;
    Add(out, prefix + item.key(), item.value(), /*replicated=*/false);
    out.back().copy_at_save = true;
  }
  return out;
}

std::vector<NamedTensor> OptimizerTensors(torch::optim::Optimizer& optimizer,
                                          const std::string& prefix, bool replicated) {
  std::vector<NamedTensor> out;
  auto& state = optimizer.state();
  size_t index = 0;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      const std::string base = prefix + "state." + std::to_string(index++) + ".";
      auto it = state.find(StateKey(param));
      if (it == state.end()) continue;
      torch::optim::OptimizerParamState* s = it->second.get();
      if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(s)) {
        Add(out, base + "exp_avg", a->exp_avg(), replicated, param);
        Add(out, base + "exp_avg_sq", a->exp_avg_sq(), replicated, param);
        Add(out, base + "max_exp_avg_sq", a->max_exp_avg_sq(), replicated, param);
      } else if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(s)) {
        Add(out, base + "exp_avg", w->exp_avg(), replicated, param);
        Add(out, base + "exp_avg_sq", w->exp_avg_sq(), replicated, param);
        Add(out, base + "max_exp_avg_sq", w->max_exp_avg_sq(), replicated, param);
      } else if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(s)) {
        Add(out, base + "momentum_buffer", g->momentum_buffer(), replicated, param);
      } else if (auto* r = dynamic_cast<torch::optim::RMSpropParamState*>(s)) {
        Add(out, base + "square_avg", r->square_avg(), replicated, param);
        Add(out, base + "momentum_buffer", r->momentum_buffer(), replicated, param);
        Add(out, base + "grad_avg", r->grad_avg(), replicated, param);
      } else if (auto* d = dynamic_cast<torch::optim::AdagradParamState*>(s)) {
        Add(out, base + "sum", d->sum(), replicated, param);
      }
    }
  }
  return out;
}

namespace {

// SGD::step takes a parameter's first gradient as its momentum buffer
// (libtorch 1.13 sgd.cpp); a zero buffer gives 0 * momentum + (1 - dampening)
// * gradient, the same value when dampening is 0 (up to the sign of a zero).
int PrimeSgdMomentum(torch::optim::SGD& sgd) {
  torch::NoGradGuard no_grad;
  int created = 0;
  auto& state = sgd.state();
  for (auto& group : sgd.param_groups()) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (options.momentum() == 0 || options.dampening() != 0) continue;
    for (auto& p : group.params()) {
      const auto key = StateKey(p);
      if (state.find(key) != state.end()) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(torch::zeros_like(p, at::MemoryFormat::Preserve));
      state[key] = std::move(s);
      ++created;
    }
  }
  return created;
}

}  // namespace

int PrimeOptimizerState(torch::optim::Optimizer& optimizer) {
  if (auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer)) return PrimeSgdMomentum(*sgd);
  const bool adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  const bool adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr;
  if (!adam && !adamw) return 0;
  torch::NoGradGuard no_grad;
  int created = 0;
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    bool amsgrad = false;
    if (adam) {
      amsgrad = static_cast<torch::optim::AdamOptions&>(group.options()).amsgrad();
    } else {
      amsgrad = static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad();
    }
    for (auto& p : group.params()) {
      const auto key = StateKey(p);
      if (state.find(key) != state.end()) continue;
      // The same tensors Adam::step / AdamW::step create for a parameter
      // without state (libtorch adam.cpp / adamw.cpp).
      if (adam) {
        auto s = std::make_unique<torch::optim::AdamParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (amsgrad) s->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        state[key] = std::move(s);
      } else {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (amsgrad) s->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        state[key] = std::move(s);
      }
      ++created;
    }
  }
  return created;
}

}  // namespace memento::torch_adapter
