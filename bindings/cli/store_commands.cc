// memento inspect / memento clean: a job's node-store segments on this machine.
// The logic lives in runtime/ (store_admin.h); this file parses flags and prints.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "memento/runtime/store_admin.h"

namespace memento::cli {
namespace {

struct StoreArgs {
  std::string job;
  bool verify = false;
  bool help = false;
};

// Returns false (after printing why) on bad usage.
bool ParseStoreArgs(const char* cmd, int argc, char** argv, bool allow_verify, StoreArgs* out) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      out->help = true;
    } else if (a == "--job" && i + 1 < argc) {
      out->job = argv[++i];
    } else if (a.rfind("--job=", 0) == 0) {
      out->job = a.substr(6);
    } else if (allow_verify && a == "--verify") {
      out->verify = true;
    } else {
      std::fprintf(stderr, "memento %s: unexpected argument '%s'\n", cmd, a.c_str());
      return false;
    }
  }
  if (!out->help && out->job.empty()) {
    std::fprintf(stderr, "memento %s: --job J is required\n", cmd);
    return false;
  }
  return true;
}

}  // namespace

int RunInspect(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: memento inspect --job J [--verify]\n"
      "  Lists job J's shared-memory segments on this machine: node, lane, bytes,\n"
      "  and per slot the version, sealed/committed state and per-region checksums.\n"
      "  --verify  also recompute every sealed region's crc32c (reads all data).\n"
      "  Exit code 0 when every segment and sealed region validates, 1 otherwise.\n";
  StoreArgs args;
  if (!ParseStoreArgs("inspect", argc, argv, /*allow_verify=*/true, &args)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto reports = runtime::InspectJob(args.job, args.verify);
  if (!reports.ok()) {
    std::fprintf(stderr, "memento inspect: %s\n", reports.status().ToString().c_str());
    return 1;
  }
  std::fputs(runtime::FormatReports(*reports).c_str(), stdout);
  for (const auto& r : *reports) {
    if (!r.status.ok()) return 1;
    for (const auto& slot : r.verified) {
      for (const auto& s : slot) {
        if (!s.ok()) return 1;
      }
    }
  }
  return 0;
}

int RunClean(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: memento clean --job J\n"
      "  Unlinks job J's shared-memory segments on this machine (its in-memory\n"
      "  checkpoints are lost; processes that still map them keep their mapping).\n";
  StoreArgs args;
  if (!ParseStoreArgs("clean", argc, argv, /*allow_verify=*/false, &args)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto removed = runtime::CleanJob(args.job);
  if (!removed.ok()) {
    std::fprintf(stderr, "memento clean: %s\n", removed.status().ToString().c_str());
    return 1;
  }
  for (const auto& name : *removed) std::printf("removed %s\n", name.c_str());
  std::printf("%zu segment(s) of job '%s' removed\n", removed->size(), args.job.c_str());
  return 0;
}

}  // namespace memento::cli
