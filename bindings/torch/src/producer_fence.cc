#include "producer_fence.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <exception>
#include <string>

namespace memento::torch_adapter {
namespace {

const c10::impl::DeviceGuardImplInterface* CudaGuard() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

}  // namespace

ProducerFence::~ProducerFence() { Destroy(); }

void ProducerFence::Destroy() {
  if (event_ != nullptr) CudaGuard()->destroyEvent(event_, device_);
  event_ = nullptr;
  device_ = -1;
}

Status ProducerFence::BeforeSave(const std::set<c10::DeviceIndex>& cuda,
                                 runtime::Checkpointer* engine) {
  used_event_ = false;
  if (cuda.empty()) {
    engine->SetDeviceEvent(nullptr);
    return Status::Ok();
  }
  if (cuda.size() > 1) {
    // One event per Save serves one device: wait on the host instead.
    engine->SetDeviceEvent(nullptr);
    Synchronize(cuda);
    return Status::Ok();
  }
  const c10::DeviceIndex device = *cuda.begin();
  if (device != device_) {
    engine->SetDeviceEvent(nullptr);  // the engine must not wait for a destroyed event
    Destroy();
    device_ = device;
  }
  const c10::impl::DeviceGuardImplInterface* guard = CudaGuard();
  try {
    // Creates the event on first use, then records it on the current stream.
    guard->record(&event_, guard->getStream(c10::Device(c10::DeviceType::CUDA, device)), device,
                  c10::EventFlag::PYTORCH_DEFAULT);
  } catch (const std::exception& e) {
    engine->SetDeviceEvent(nullptr);
    return Status::Internal("save: recording an event on the current stream of cuda:" +
                            std::to_string(device) + ": " + e.what());
  }
  engine->SetDeviceEvent(event_);
  used_event_ = true;
  return Status::Ok();
}

void ProducerFence::Synchronize(const std::set<c10::DeviceIndex>& cuda) {
  const c10::impl::DeviceGuardImplInterface* guard = cuda.empty() ? nullptr : CudaGuard();
  for (c10::DeviceIndex device : cuda) {
    guard->synchronizeStream(guard->getStream(c10::Device(c10::DeviceType::CUDA, device)));
  }
}

}  // namespace memento::torch_adapter
