// memento: command-line tool. `memento <subcommand> --help` for details.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "flags.h"
#include "launch_command.h"

int main(int argc, char** argv) {
  CLI::App app("memento: in-memory checkpoint tools. `memento <subcommand> --help` for one.",
               "memento");
  app.require_subcommand(1);
  memento::cli::AddRateCommand(app);
  memento::cli::AddInspectCommand(app);
  memento::cli::AddCleanCommand(app);
  memento::cli::AddAdviseCommand(app);
  memento::cli::AddLaunchCommand(app);
  return memento::cli::RunApp(app, argc, argv);
}
