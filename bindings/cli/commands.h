// Subcommands of the `memento` command-line tool. Each returns the process exit
// code (0 success, 1 failure, 2 bad usage) and prints its own errors to stderr.
#pragma once

namespace memento::cli {

// memento rate: recovery probability and memory per node of schemes (placement/).
int RunRate(int argc, char** argv);
// memento inspect --job J: a job's shared-memory segments on this machine (runtime/).
int RunInspect(int argc, char** argv);
// memento clean --job J: unlink a job's shared-memory segments (runtime/).
int RunClean(int argc, char** argv);

}  // namespace memento::cli
