#include "checkpoint_glue.h"

namespace memento::demo {

Status RegisterTensors(runtime::Checkpointer& ck,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  for (const auto& [name, t] : tensors) {
    if (!t.is_contiguous() || !t.device().is_cpu()) {
      return Status::InvalidArgument("tensor '" + name + "' must be contiguous and on the CPU");
    }
    runtime::EntryLayout layout;
    layout.dtype = std::string(c10::toString(t.scalar_type()));
    for (int64_t d : t.sizes()) layout.global_shape.push_back(d);
    layout.shape = layout.global_shape;
    layout.offsets.assign(layout.shape.size(), 0);
    MEMENTO_RETURN_IF_ERROR(ck.RegisterBuffer(name, t.data_ptr(), t.nbytes(), layout));
  }
  return Status::Ok();
}

}  // namespace memento::demo
