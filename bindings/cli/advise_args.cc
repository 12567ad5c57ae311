// memento advise's flags, checked: each bad value is a FlagError naming its flag.
#include "advise_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "flags.h"
#include "memento/placement/serve_probability.h"

namespace memento::cli::advise {

using nlohmann::json;
using placement::FailureProcess;
using placement::JobShape;
using placement::kNever;
using placement::MeasuredCosts;

[[noreturn]] void Fail(const std::string& flag, const std::string& value,
                       const std::string& requirement) {
  throw FlagError{flag + " " + value + ": " + requirement};
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// "4G", "512M", "1.5T", "1048576": whole bytes (K, M, G, T are binary
// units). Decimal digits with at most one '.', as every number of the tool:
// no sign, blank, hex or exponent.
namespace {

constexpr double kHour = 3600;

std::optional<double> ParseBytes(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double mult = 1;
  std::string num = text;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  const std::string units = "KMGT";
  if (const auto pos = units.find(last); pos != std::string::npos) {
    mult = std::pow(1024.0, static_cast<double>(pos + 1));
    num = text.substr(0, text.size() - 1);
  }
  size_t digits = 0, dots = 0;
  for (char c : num) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || end != num.data() + num.size()) return std::nullopt;
  const double bytes = std::floor(v * mult);
  if (!std::isfinite(bytes) || bytes < 1) return std::nullopt;
  return bytes;
}

void ApplyConfigFile(const std::string& path, const Given& options) {
  std::ifstream in(path);
  if (!in) Fail("--config", path, "cannot be opened");
  json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    Fail("--config", path, std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) Fail("--config", path, "must hold a JSON object of flag names and values");
  for (const auto& [key, value] : j.items()) {
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    const auto it = options.find(name);
    if (it == options.end() || name == "config") {
      Fail("--config", path, "unknown key \"" + key + "\" (keys are the flag names)");
    }
    CLI::Option* opt = it->second;
    if (opt->count() > 0) continue;  // the command line wins
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_boolean()) {
      text = value.get<bool>() ? "true" : "false";
    } else if (value.is_number()) {
      text = value.dump();
    } else {
      Fail("--config", path, "key \"" + key + "\" must be a number, a string or a boolean");
    }
    try {
      opt->add_result(text);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      Fail("--" + name, text, std::string("(from ") + path + ") " + e.what());
    }
  }
}

double RequirePositive(const std::string& flag, double v) {
  if (!(std::isfinite(v) && v > 0)) Fail(flag, Fmt("%g", v), "must be a number > 0");
  return v;
}

double Mtbf(const std::string& flag, double hours) {
  if (std::isnan(hours)) return kNever;
  if (!(std::isfinite(hours) && hours > 0)) {
    Fail(flag, Fmt("%g", hours), "must be > 0 hours (leave it out: no such failures)");
  }
  return hours * kHour;
}

FailureProcess FailuresFromArgs(const AdviseArgs& a) {
  FailureProcess f;
  f.node_mtbf_s = Mtbf("--node-mtbf-h", a.node_mtbf_h);
  f.process_mtbf_s = Mtbf("--process-mtbf-h", a.process_mtbf_h);
  f.rack_mtbf_s = Mtbf("--rack-mtbf-h", a.rack_mtbf_h);
  if (f.rack_mtbf_s != kNever) {
    if (a.nodes_per_rack < 1 || a.nodes_per_rack > a.nodes) {
      Fail("--nodes-per-rack", std::to_string(a.nodes_per_rack),
           "must be in [1, --nodes] when --rack-mtbf-h is given");
    }
    f.nodes_per_rack = a.nodes_per_rack;
  }
  if (!(std::isfinite(a.multi_per_day) && a.multi_per_day >= 0)) {
    Fail("--multi-per-day", Fmt("%g", a.multi_per_day), "must be >= 0");
  }
  f.multi_events_per_day = a.multi_per_day;
  if (a.multi_per_day > 0 && (a.multi_nodes < 1 || a.multi_nodes > a.nodes ||
                              a.multi_nodes > placement::kMaxTruncatedFailures)) {
    Fail("--multi-nodes", std::to_string(a.multi_nodes),
         "must be in [1, min(--nodes, " + std::to_string(placement::kMaxTruncatedFailures) + ")]");
  }
  f.multi_event_nodes = a.multi_nodes;
  return f;
}

void CheckCostArgs(const AdviseArgs& a) {
  const std::pair<const char*, double> bandwidths[] = {
      {"--snapshot-gibps", a.inputs.snapshot_gibps},
      {"--link-gibps", a.inputs.link_gibps},
      {"--decode-gibps", a.inputs.decode_gibps},
      {"--node-remote-gibps", a.inputs.node_remote_gibps},
      {"--fs-write-gibps", a.inputs.fs_write_gibps},
      {"--fs-read-gibps", a.inputs.fs_read_gibps}};
  for (const auto& [flag, v] : bandwidths) RequirePositive(flag, v);
  if (!(std::isfinite(a.inputs.relaunch_s) && a.inputs.relaunch_s >= 0)) {
    Fail("--relaunch-s", Fmt("%g", a.inputs.relaunch_s), "must be >= 0");
  }
  const std::pair<const char*, double> overrides[] = {{"--stall-s", a.stall_s},
                                                      {"--protect-s", a.protect_s},
                                                      {"--persist-s", a.persist_s},
                                                      {"--recover-local-s", a.recover_local_s},
                                                      {"--recover-replica-s", a.recover_replica_s},
                                                      {"--recover-decode-s", a.recover_decode_s},
                                                      {"--recover-remote-s", a.recover_remote_s}};
  for (const auto& [flag, v] : overrides) {
    if (!std::isnan(v) && !(std::isfinite(v) && v >= 0)) Fail(flag, Fmt("%g", v), "must be >= 0");
  }
}

}  // namespace

Job CheckArgs(AdviseArgs& a, const Given& given) {
  if (!a.config.empty()) ApplyConfigFile(a.config, given);
  for (const char* required : {"nodes", "shard", "step-s"}) {
    if (given.at(required)->count() == 0) {
      Fail(std::string("--") + required, "(missing)", "is required (a flag or a --config key)");
    }
  }
  if (a.nodes < 1 || a.nodes > kMaxNodes) {
    Fail("--nodes", std::to_string(a.nodes), "must be in 1.." + std::to_string(kMaxNodes));
  }
  const auto shard = ParseBytes(a.shard);
  if (!shard) {
    Fail("--shard", a.shard,
         "must be a size of at least one byte: decimal digits (one '.' at most), then "
         "optionally K, M, G or T");
  }
  RequirePositive("--step-s", a.step_s);
  if (!(std::isfinite(a.memory_budget) && a.memory_budget >= 1)) {
    Fail("--memory-budget", Fmt("%g", a.memory_budget),
         "must be >= 1 (a multiple of the shard size S; every node holds its own shard)");
  }
  Job job{JobShape{a.nodes, *shard, a.step_s}, FailuresFromArgs(a), {}};
  // A rate's companion without its rate would be ignored without a word.
  const std::pair<const char*, const char*> companions[] = {{"nodes-per-rack", "rack-mtbf-h"},
                                                            {"multi-nodes", "multi-per-day"}};
  for (const auto& [companion, rate] : companions) {
    if (given.at(companion)->count() > 0 && given.at(rate)->count() == 0) {
      Fail(std::string("--") + companion, given.at(companion)->as<std::string>(),
           std::string("is used only with --") + rate + ": give both, or neither");
    }
  }
  CheckCostArgs(a);
  if (a.top < 1) Fail("--top", std::to_string(a.top), "must be >= 1");
  // Given as 0 is not "left out": refused as a negative count is.
  if (a.save_every < 0 || (given.at("save-every-steps")->count() > 0 && a.save_every == 0)) {
    Fail("--save-every-steps", std::to_string(a.save_every), "must be >= 1");
  }
  if (a.persist_every < 0 ||
      (given.at("persist-every-saves")->count() > 0 && a.persist_every == 0)) {
    Fail("--persist-every-saves", std::to_string(a.persist_every), "must be >= 1");
  }
  // Every interval up to it is evaluated per scheme.
  if (a.max_persist_every < 1 || a.max_persist_every > (1 << 20)) {
    Fail("--max-persist-every", std::to_string(a.max_persist_every),
         "must be in 1..1048576 (saves)");
  }
  // A search without a failure rate has nothing to weigh: every plan ties at
  // 100 % goodput and "none" ranks first, an answer that only misleads. A
  // given plan (--save-every-steps) is still evaluated: what it costs.
  const FailureProcess& f = job.failures;
  if (a.save_every == 0 && f.node_mtbf_s == kNever && f.process_mtbf_s == kNever &&
      f.rack_mtbf_s == kNever && f.multi_events_per_day == 0) {
    Fail("--node-mtbf-h", "(missing)",
         "give at least one failure rate (--node-mtbf-h, --process-mtbf-h, --rack-mtbf-h or "
         "--multi-per-day), or a plan to evaluate (--save-every-steps): without failures no "
         "plan is better than another");
  }
  job.half = job.failures;
  for (double* m : {&job.half.node_mtbf_s, &job.half.process_mtbf_s, &job.half.rack_mtbf_s}) {
    if (*m != kNever) *m /= 2;
  }
  job.half.multi_events_per_day *= 2;
  return job;
}

std::map<std::string, MeasuredCosts> ReadBench(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail("--bench", path, "cannot be opened");
  std::map<std::string, MeasuredCosts> out;
  std::map<std::string, std::pair<double, int>> rank;
  std::string line;
  int number = 0, used = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json r;
    try {
      r = json::parse(line);
    } catch (const std::exception& e) {
      Fail("--bench", path, "line " + std::to_string(number) + " is not JSON: " + e.what());
    }
    if (!r.is_object()) continue;
    const auto benchmark = r.find("benchmark");
    if (benchmark == r.end() || !benchmark->is_string() || *benchmark != "bench_cluster") continue;
    try {
      const std::string scheme = r.at("scheme").get<std::string>();
      MeasuredCosts m;
      m.reference_shard_bytes = r.at("shard_bytes").get<double>();
      m.stall_s = r.at("snapshot_s").get<double>();
      m.protect_s = r.at("protect_s").get<double>();
      // resume_s: the replacement's store and the restore timed back to back, as a job's
      // Restore() runs them; older records only have the two maxima apart (their sum is
      // no less).
      m.recover_s = r.contains("resume_s")
                        ? r.at("resume_s").get<double>()
                        : r.value("prepare_s", 0.0) + r.at("recover_s").get<double>();
      const int nodes = r.at("nodes").get<int>();
      char src[160];
      std::snprintf(src, sizeof(src), "%s line %d (N=%d, shard %.0f MiB, link %.2f GiB/s)",
                    path.c_str(), number, nodes, m.reference_shard_bytes / (1 << 20),
                    r.value("link_gibps", 0.0));
      m.source = src;
      const std::pair<double, int> key{m.reference_shard_bytes, nodes};
      if (!out.count(scheme) || key >= rank[scheme]) {
        out[scheme] = m;
        rank[scheme] = key;
      }
      ++used;
    } catch (const std::exception& e) {
      Fail("--bench", path,
           "line " + std::to_string(number) + " lacks a bench_cluster field: " + e.what());
    }
  }
  if (used == 0) Fail("--bench", path, "holds no bench_cluster record");
  return out;
}

void AddAdviseOptions(CLI::App* cmd, AdviseArgs* args, Given* given) {
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last wins
  auto add = [&](const std::string& name, auto* value, const std::string& help) {
    CLI::Option* opt = cmd->add_option("--" + name, *value, help);
    using T = std::remove_pointer_t<decltype(value)>;
    if constexpr (std::is_integral_v<T>) opt->transform(DecimalInteger());  // may drop 0s
    if constexpr (std::is_floating_point_v<T>) opt->check(DecimalNumber());
    (*given)[name] = opt;
    return opt;
  };
  add("config", &args->config, "JSON file with the job's numbers (keys: flag names)");
  add("nodes", &args->nodes, "N: nodes of the job (required)");
  add("shard", &args->shard, "S: checkpoint bytes per node, e.g. 8G (required)");
  add("step-s", &args->step_s, "T: seconds per training step (required)");
  add("node-mtbf-h", &args->node_mtbf_h,
      "hours between failures of one node that lose its memory (omit: none)");
  add("process-mtbf-h", &args->process_mtbf_h,
      "hours between failures of one node's training process, memory intact (omit: none)");
  add("rack-mtbf-h", &args->rack_mtbf_h, "hours between losses of one whole rack (omit: none)");
  add("nodes-per-rack", &args->nodes_per_rack, "rack size (with --rack-mtbf-h)");
  add("multi-per-day", &args->multi_per_day,
      "job-wide events per day that lose --multi-nodes random nodes at once (default 0)");
  add("multi-nodes", &args->multi_nodes, "nodes lost per multi-node event (default 2)");
  add("memory-budget", &args->memory_budget,
      "memory per node for checkpoints, as a multiple of S (default 1.5)");
  add("schemes", &args->schemes, "comma-separated candidate schemes (default: a broad list)");
  add("bench", &args->bench, "bench_cluster --json output (JSON lines) with measured costs");
  add("snapshot-gibps", &args->inputs.snapshot_gibps, "snapshot copy GiB/s per node (default 10)");
  add("link-gibps", &args->inputs.link_gibps, "network GiB/s per node (default 12.5)");
  add("decode-gibps", &args->inputs.decode_gibps, "erasure decode GiB/s per node (default 4)");
  add("node-remote-gibps", &args->inputs.node_remote_gibps,
      "one node's GiB/s to remote storage (default 2)");
  add("fs-write-gibps", &args->inputs.fs_write_gibps,
      "remote storage aggregate write GiB/s (default 100)");
  add("fs-read-gibps", &args->inputs.fs_read_gibps,
      "remote storage aggregate read GiB/s (default 200)");
  add("relaunch-s", &args->inputs.relaunch_s,
      "seconds to relaunch the job after a failure (default 300)");
  add("stall-s", &args->stall_s, "measured stall per save (overrides the model)");
  add("protect-s", &args->protect_s, "measured save-to-commit time (overrides)");
  add("persist-s", &args->persist_s, "measured save-to-durable time (overrides)");
  add("recover-local-s", &args->recover_local_s, "measured restore from local memory");
  add("recover-replica-s", &args->recover_replica_s, "measured restore from a replica");
  add("recover-decode-s", &args->recover_decode_s, "measured restore by decode");
  add("recover-remote-s", &args->recover_remote_s, "measured restore from remote storage");
  add("top", &args->top, "schemes printed (default 6)");
  add("max-persist-every", &args->max_persist_every,
      "largest persist interval searched, in saves (default 4096)");
  add("save-every-steps", &args->save_every,
      "evaluate this save interval (steps) instead of the best one");
  add("persist-every-saves", &args->persist_every,
      "evaluate this persist interval (saves) instead of the best one");
  (*given)["json"] = cmd->add_flag("--json", args->json, "machine-readable output");
  (*given)["simulate"] = cmd->add_flag(
      "--simulate", args->simulate,
      "also simulate 20 years of the printed plans (event-driven) for a 95% interval");
}

}  // namespace memento::cli::advise
