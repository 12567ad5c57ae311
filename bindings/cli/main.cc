// memento: command-line tool. `memento <subcommand> --help` for details.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "launch_command.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

constexpr Subcommand kSubcommands[] = {
    {"rate", "recovery probability and memory per node of protection schemes",
     memento::cli::RunRate},
    {"inspect", "list a job's shared-memory segments, versions and checksums",
     memento::cli::RunInspect},
    {"clean", "unlink a job's shared-memory segments on this machine", memento::cli::RunClean},
    {"launch", "run a job under mpirun with injected node failures; relaunch; timeline",
     nullptr},
};

void Usage(FILE* out) {
  std::fprintf(out, "usage: memento <subcommand> [options]\n\nsubcommands:\n");
  for (const auto& c : kSubcommands) std::fprintf(out, "  %-9s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`memento <subcommand> --help` for the options of one.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    Usage(stdout);
    return 0;
  }
  if (name == "launch") {
    CLI::App app{"memento"};
    memento::cli::AddLaunchCommand(app);
    app.require_subcommand(1);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    return 0;
  }
  for (const auto& c : kSubcommands) {
    if (name == c.name) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "memento: unknown subcommand '%s'\n\n", name.c_str());
  Usage(stderr);
  return 2;
}
