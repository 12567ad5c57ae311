// Job ids for tests that create node stores. The pid alone is not unique: a
// long test run wraps the kernel's pid_max (32768 on many machines), and a
// store that an earlier process left behind (a crashed or killed test) would
// then be found by a later process that got the same pid, under the same job.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

namespace memento::runtime::testing {

// "<pid>-<6 random hex digits>", drawn once per process.
inline const std::string& ProcessTag() {
  static const std::string tag = [] {
    std::random_device rd;
    char nonce[8];
    std::snprintf(nonce, sizeof(nonce), "%06x", static_cast<unsigned>(rd() & 0xffffffu));
    return std::to_string(getpid()) + "-" + nonce;
  }();
  return tag;
}

}  // namespace memento::runtime::testing
