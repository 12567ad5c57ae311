// memento clean --job J [--force] [--json]: unlink a job's shared-memory segments on this
// machine.
// The logic lives in runtime/ (store_admin.h); this file parses flags and prints.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "job_flag.h"
#include "memento/launch/json_text.h"
#include "memento/runtime/store_admin.h"

namespace memento::cli {

void AddCleanCommand(CLI::App& app) {
  auto job = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto force = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("clean", "unlink a job's shared-memory segments on this machine");
  cmd->footer(
      "Unlinks job J's shared-memory segments on this machine: its in-memory checkpoints are\n"
      "lost. A segment a running process holds (a live rank of J) is left alone and named\n"
      "with its pid, unless --force: that job would lose the checkpoints it recovers from.\n"
      "Segments of J that another user owns are left alone and named.\n"
      "Exit code 0 when done (segments left as above included), 1 when a segment could not\n"
      "be removed, 2 on bad usage.");
  AddJobOption(cmd, job.get());
  cmd->add_flag("--force", *force,
                "also unlink the segments a running process holds (it keeps its mapping; "
                "every other process, a relaunch included, finds them gone)");
  cmd->add_flag("--json", *json, "machine-readable output (one JSON object)");
  cmd->callback([job, json, force] {
    CheckJobFlag(*job);
    std::vector<std::string> others, in_use;
    auto removed = runtime::CleanJob(*job, &others, /*keep_in_use=*/!*force, &in_use);
    if (*json) {
      // The same object whether or not every segment went; on a failure the
      // error names every segment removed and every one not.
      nlohmann::ordered_json out = {
          {"job", *job},
          {"ok", removed.ok()},
          {"removed", removed.ok() ? *removed : std::vector<std::string>{}},
          {"left_to_other_users", others},
          {"left_in_use", in_use}};
      if (!removed.ok()) out["error"] = removed.status().ToString();
      std::printf("%s\n", launch::JsonText(out, 2).c_str());
      if (!removed.ok()) throw CommandFailed(1);
      return;
    }
    for (const auto& name : others) std::printf("left %s: another user's\n", name.c_str());
    for (const auto& name : in_use) {
      std::printf("left %s: --force removes it\n", name.c_str());
    }
    if (!removed.ok()) {
      std::fprintf(stderr, "memento clean: %s\n", removed.status().ToString().c_str());
      throw CommandFailed(1);
    }
    for (const auto& name : *removed) std::printf("removed %s\n", name.c_str());
    std::printf("%zu segment(s) of job '%s' removed\n", removed->size(), job->c_str());
  });
}

}  // namespace memento::cli
