// The key of a parameter in libtorch's Optimizer::state(). libtorch keys that
// map by the parameter's TensorImpl: through a string of its address in older
// releases, through the address itself (void*) in newer ones. The key type is
// read off the map, so one spelling builds against either.
#pragma once

#include <torch/optim/optimizer.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace memento::torch_adapter {

using OptimizerStateMap =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

template <typename Key = OptimizerStateMap::key_type>
Key StateKey(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;  // as c10::guts::to_string wrote it
    out << param.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace memento::torch_adapter
