// Runs the built `memento` command line tool (MEMENTO_CLI_PATH) for the tests of its
// subcommands: exit code and output.
#pragma once

#include <string>

namespace memento::testing {

struct CliRun {
  int exit_code;       // -1 when it did not exit normally
  std::string output;  // stdout and stderr
};

// `memento <args> 2>&1` through the shell.
CliRun RunCli(const std::string& args);

}  // namespace memento::testing
