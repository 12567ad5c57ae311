// `memento launch`: registers the subcommand on the CLI11 application.
#pragma once

#include <CLI/CLI.hpp>

namespace memento::cli {

// Adds `launch` to `app`. Its callback runs the job (launch/launcher.h) and
// throws CLI::RuntimeError(code) for a non-zero exit code, which
// CLI::App::exit turns into the process exit code (2 for bad options, with
// the problem named on stderr).
void AddLaunchCommand(CLI::App& app);

}  // namespace memento::cli
