// The states of torch's default generators (the CPU one and one per CUDA
// device) as records of the extra state (extra_state.h), so that a resumed
// run draws the same random numbers (dropout, sampling) as one that never
// stopped.
//
// Thread-safety: each generator is read and written under its own mutex.
#pragma once

#include <map>
#include <string>

namespace memento::torch_adapter {

// Adds "memento.rng.cpu" and "memento.rng.cuda.<i>" records to `records`.
void SaveGenerators(std::map<std::string, std::string>* records);

// Sets every generator that has a record in `records`; others stay as they are.
void RestoreGenerators(const std::map<std::string, std::string>& records);

}  // namespace memento::torch_adapter
