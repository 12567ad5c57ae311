// What the restore paths share for their reports, errors and logs: the seconds
// since a time point, and a version's short name ("v12").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace memento::runtime {

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline std::string VersionText(uint64_t version) { return "v" + std::to_string(version); }

}  // namespace memento::runtime
