// The --job flag of `memento inspect` and `memento clean`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace memento::cli {

// Adds the required `--job J` option to `cmd`, storing into `job`.
void AddJobOption(CLI::App* cmd, std::string* job);

// UsageError "--job '<job>': ..." unless `job` is a valid job id (runtime's rules).
void CheckJobFlag(const std::string& job);

}  // namespace memento::cli
