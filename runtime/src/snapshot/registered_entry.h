// RegisteredEntry: one buffer the application registered (Checkpointer::
// RegisterBuffer): where its bytes live and how they are laid out. The
// snapshot copies from it; a restore copies back into it.
#pragma once

#include <cstdint>
#include <string>

#include "memento/runtime/store_layout.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {

struct RegisteredEntry {
  std::string name;
  uint8_t* data = nullptr;  // owned by the application
  uint64_t bytes = 0;
  EntryLayout layout;
  int gpu = kHostMemory;  // the CUDA device of the memory (DeviceOf)
  bool device() const { return gpu != kHostMemory; }
};

}  // namespace memento::runtime
