// The interface every fuzz target implements: libFuzzer's entry point, plus
// valid inputs built by the real writers, which the replay driver and
// `--write-seeds` use as the seed corpus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace memento::fuzz {

// Valid (and near-valid) inputs for this target.
std::vector<std::string> Seeds();

// Stops the process (a fuzz finding) with a message: a decoder returned
// success for data it should have refused, or broke an invariant.
[[noreturn]] void Fail(const std::string& what);

}  // namespace memento::fuzz
