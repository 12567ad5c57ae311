// ProducerFence: orders the engine's snapshot of CUDA tensors after the work
// the training queued on its current streams, without making the
// application thread wait for that work.
//
// The engine copies device tensors on side streams of its own. Before each
// Save, the current stream of the tensors' device gets an event recorded
// (through c10's device guard, so no CUDA header or library is needed here)
// and the engine's copies wait for that event on the device. Tensors on
// several devices of one rank fall back to waiting for each device's current
// stream on the host. Before a Restore, which writes the tensors on the
// engine's streams, the host waits for the current streams, as the work
// queued there (initialisation, optimizer priming) must not overwrite the
// restored bytes.
//
// Thread-safety: the application thread only (as Save and Restore).
#pragma once

#include <c10/core/Device.h>

#include <set>

#include "memento/common/status.h"
#include "memento/runtime/checkpointer.h"

namespace memento::torch_adapter {

class ProducerFence {
 public:
  ProducerFence() = default;
  // Destroys the event: after the engine that waits for it (declare the
  // fence before the engine it serves).
  ~ProducerFence();
  ProducerFence(const ProducerFence&) = delete;
  ProducerFence& operator=(const ProducerFence&) = delete;

  // Before engine->Save: `cuda` are the devices of the registered CUDA
  // tensors (empty: nothing to do).
  Status BeforeSave(const std::set<c10::DeviceIndex>& cuda, runtime::Checkpointer* engine);

  // Before engine->Restore: waits for the current streams of `cuda`.
  static void Synchronize(const std::set<c10::DeviceIndex>& cuda);

  // Whether the last BeforeSave handed an event to the engine (tests).
  bool used_event() const { return used_event_; }

 private:
  void Destroy();

  void* event_ = nullptr;  // a cudaEvent_t made by c10's CUDA guard
  c10::DeviceIndex device_ = -1;
  bool used_event_ = false;
};

}  // namespace memento::torch_adapter
