// The demo's training text: English-like sentences generated from a small
// grammar with a fixed seed, so the repository ships no data file and every
// rank builds the same corpus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace memento::demo {

// About `bytes` characters of text (whole sentences), the same for the same seed.
std::string GenerateCorpus(uint64_t seed, size_t bytes);

}  // namespace memento::demo
