// RegisteredEntry: one buffer the application registered (Checkpointer::
// RegisterBuffer): where its bytes live and how they are laid out. The
// snapshot copies from it; a restore copies back into it.
#pragma once

#include <cstdint>
#include <string>

#include "memento/runtime/store_layout.h"

namespace memento::runtime {

struct RegisteredEntry {
  std::string name;
  uint8_t* data = nullptr;  // owned by the application
  uint64_t bytes = 0;
  EntryLayout layout;
  bool device = false;  // device memory (CUDA)
};

}  // namespace memento::runtime
