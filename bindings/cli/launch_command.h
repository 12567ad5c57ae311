// `memento launch`: registers the subcommand on the CLI11 application.
#pragma once

#include <CLI/CLI.hpp>

namespace memento::cli {

// Adds `launch` to `app`. Its callback runs the job (launch/launcher.h) and
// throws CommandFailed(code) (flags.h) for a non-zero exit code, which
// RunApp returns as the process exit code: 1 when the job failed for good
// (its own exit status and output tail are in the timeline), 130 after
// Ctrl-C, 2 for bad options (the problem named on stderr).
void AddLaunchCommand(CLI::App& app);

}  // namespace memento::cli
