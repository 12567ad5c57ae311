// memento advise's flags: the job's numbers as given (flags or --config keys), checked (each
// bad value a FlagError naming its flag), and the measured costs of --bench.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <map>
#include <string>

#include "memento/placement/checkpoint_cost_model.h"
#include "memento/placement/goodput_model.h"

namespace memento::cli::advise {

inline constexpr const char* kDefaultSchemes =
    "none,replica:2,replica:3,replica:2:ring,xor:2,xor:3,xor:4,xor:6,xor:8,xor:12,xor:16,"
    "rs:4+2,rs:6+2,rs:8+2,rs:6+3,rs:8+3,rs:10+4,rs:12+4,rs:16+4";

// A bad value of one flag: the message names it.
struct FlagError {
  std::string message;
};

// Throws FlagError "<flag> <value>: <requirement>".
[[noreturn]] void Fail(const std::string& flag, const std::string& value,
                       const std::string& requirement);

// snprintf of one number.
std::string Fmt(const char* format, double v);

struct AdviseArgs {
  std::string config;
  int nodes = 0;
  std::string shard;
  double step_s = 0;
  double node_mtbf_h = NAN, process_mtbf_h = NAN, rack_mtbf_h = NAN;
  int nodes_per_rack = 0;
  double multi_per_day = 0;
  int multi_nodes = 2;
  double memory_budget = 1.5;
  std::string schemes = kDefaultSchemes;
  std::string bench;
  placement::CostInputs inputs;
  double stall_s = NAN, protect_s = NAN, persist_s = NAN, recover_local_s = NAN,
         recover_replica_s = NAN, recover_decode_s = NAN, recover_remote_s = NAN;
  int top = 6;
  bool json = false;
  bool simulate = false;
  int max_persist_every = 4096;
  int save_every = 0;     // > 0: evaluate this save interval instead of searching
  int persist_every = 0;  // > 0: and this persist interval
};

// Which flags were given (on the command line or in --config), by long name.
using Given = std::map<std::string, CLI::Option*>;

// The job's numbers, checked: every bad value is a FlagError naming its flag.
struct Job {
  placement::JobShape shape;
  placement::FailureProcess failures;
  placement::FailureProcess half;  // every MTBF halved, multi-node events doubled
};

// Applies --config (flags win), then checks every value: the first bad one
// throws FlagError naming its flag.
Job CheckArgs(AdviseArgs& a, const Given& given);

// The last record per scheme with the largest shard (then the most nodes) of a
// `bench_cluster --json` output: one JSON object per line.
std::map<std::string, placement::MeasuredCosts> ReadBench(const std::string& path);

// Adds advise's options to `cmd`, storing into *args; *given maps each long
// name to its option.
void AddAdviseOptions(CLI::App* cmd, AdviseArgs* args, Given* given);

}  // namespace memento::cli::advise
