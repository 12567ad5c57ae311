// NcclLink in a build without CUDA or without nccl.h: never available.
#include "memento/runtime/nccl_link.h"

namespace memento::runtime {

bool NcclLinkBuilt() { return false; }

Status NcclLinkUsable() {
  return Status::FailedPrecondition("built without NCCL (CUDA off, or nccl.h not found)");
}

Result<std::shared_ptr<DeviceLink>> CreateNcclLink(Transport&, int, const NcclLinkOptions&) {
  return NcclLinkUsable();
}

}  // namespace memento::runtime
