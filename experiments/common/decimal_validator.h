// CLI11 validator shared by the benchmark drivers: a count given on the
// command line is digits only. " 5", "+5" and "0x10" are refused (CLI11 alone
// would read 0x10 as hex).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>

namespace memento::experiments {

inline const CLI::Validator kDecimal(
    [](std::string& s) {
      const bool ok = !s.empty() && s.size() <= 18 &&
                      std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
      return ok ? std::string() : "'" + s + "' is not a decimal integer (digits only)";
    },
    "", "decimal");

}  // namespace memento::experiments
