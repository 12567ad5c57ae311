// Subcommands of the `memento` command-line tool. Each Add*Command registers one
// subcommand on the tool's CLI11 app: its options, help text and a callback that does the
// work. A callback that fails throws CommandFailed(exit code) after printing why to stderr,
// or UsageError for bad usage (exit code 2); RunApp turns both into the process exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace memento::cli {

// memento rate: recovery probability and memory per node of schemes (placement/).
void AddRateCommand(CLI::App& app);
// memento inspect --job J: a job's shared-memory segments on this machine (runtime/).
void AddInspectCommand(CLI::App& app);
// memento clean --job J: unlink a job's shared-memory segments (runtime/).
void AddCleanCommand(CLI::App& app);
// memento advise: schemes, save and persist intervals that maximise goodput (placement/).
void AddAdviseCommand(CLI::App& app);

}  // namespace memento::cli
