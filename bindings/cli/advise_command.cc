// memento advise: the protection schemes, save interval and persist interval that maximise a
// job's goodput under a memory budget per node (placement/goodput_model.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "flags.h"
#include "memento/launch/json_text.h"
#include "memento/placement/checkpoint_cost_model.h"
#include "memento/placement/goodput_model.h"
#include "memento/placement/goodput_simulation.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/scheme.h"
#include "memento/placement/serve_probability.h"

namespace memento::cli {
namespace {

using nlohmann::json;
using placement::CheckpointCosts;
using placement::CheckpointPlan;
using placement::CostInputs;
using placement::FailureProcess;
using placement::GoodputEstimate;
using placement::JobShape;
using placement::kGiB;
using placement::kNever;
using placement::kSecondsPerDay;
using placement::MeasuredCosts;
using placement::Scheme;
using placement::ServeProbabilities;

constexpr double kHour = 3600;
constexpr const char* kDefaultSchemes =
    "none,replica:2,replica:3,replica:2:ring,xor:2,xor:3,xor:4,xor:6,xor:8,xor:12,xor:16,"
    "rs:4+2,rs:6+2,rs:8+2,rs:6+3,rs:8+3,rs:10+4,rs:12+4,rs:16+4";

// A bad value of one flag: the message names it.
struct FlagError {
  std::string message;
};

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
  CostInputs inputs;
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

// The last record per scheme with the largest shard (then the most nodes) of a
// `bench_cluster --json` output: one JSON object per line.
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

struct Candidate {
  std::string name;
  Scheme scheme = Scheme::None();
  bool remote_only = false;
  double memory_factor = 1;
  ServeProbabilities serve{1, 1, 1};
  CheckpointCosts costs;
  std::string cost_source;
  placement::OptimalPlan best;
  GoodputEstimate same_plan_half;  // MTBF halved, same intervals
  placement::OptimalPlan best_half;
  std::optional<placement::SimulationResult> sim;
};

json EstimateJson(const GoodputEstimate& e) {
  return {{"goodput", e.goodput},
          {"failures_per_day", e.failures_per_day},
          {"save_cycle_s", e.save_cycle_s},
          {"stall_s_per_day", e.stall_s_per_day},
          {"lost_s_per_day", e.lost_s_per_day},
          {"recovery_s_per_day", e.recovery_s_per_day},
          {"memory_served_fraction", e.memory_served_fraction}};
}

// Which kinds of failure the job has (a flag gave their rate): the others
// have no serve probability to show (the model takes them as served).
struct FailureKinds {
  bool node, rack, multi;
};
FailureKinds KindsOf(const FailureProcess& f) {
  return {f.node_mtbf_s != kNever, f.rack_mtbf_s != kNever && f.nodes_per_rack > 0,
          f.multi_events_per_day > 0};
}

json CandidateJson(const Candidate& c, double step_s, const FailureKinds& kinds) {
  const auto& plan = c.best.plan;
  auto p = [](bool given, double v) { return given ? json(v) : json(nullptr); };
  json j = {{"scheme", c.name},
            {"remote_only", c.remote_only},
            {"memory_factor", c.memory_factor},
            {"serve",
             {{"node", p(kinds.node, c.serve.node)},
              {"rack", p(kinds.rack, c.serve.rack)},
              {"multi", p(kinds.multi, c.serve.multi)}}},
            {"costs",
             {{"stall_s", c.costs.stall_s},
              {"protect_s", c.costs.protect_s},
              {"persist_s", c.costs.persist_s},
              {"relaunch_s", c.costs.relaunch_s},
              {"recover_local_s", c.costs.recover_local_s},
              {"recover_replica_s", c.costs.recover_replica_s},
              {"recover_decode_s", c.costs.recover_decode_s},
              {"recover_remote_s", c.costs.recover_remote_s},
              {"source", c.cost_source}}},
            {"save_every_steps", plan.save_every_steps},
            {"save_interval_s", plan.save_every_steps * step_s},
            {"persist_every_saves", plan.persist_every_saves},
            {"persist_interval_s", plan.persist_every_saves * c.best.estimate.save_cycle_s},
            {"estimate", EstimateJson(c.best.estimate)},
            {"mtbf_halved",
             {{"goodput_same_intervals", c.same_plan_half.goodput},
              {"goodput", c.best_half.estimate.goodput},
              {"save_every_steps", c.best_half.plan.save_every_steps},
              {"persist_every_saves", c.best_half.plan.persist_every_saves}}}};
  if (c.sim) {
    j["simulation"] = {{"goodput", c.sim->goodput},
                       {"ci95_low", c.sim->ci_low},
                       {"ci95_high", c.sim->ci_high},
                       {"replicates", c.sim->goodput_per_replicate.size()}};
  }
  return j;
}

std::string Duration(double s) {
  if (s < 120) return Fmt("%.1f s", s);
  if (s < 7200) return Fmt("%.1f min", s / 60);
  return Fmt("%.1f h", s / 3600);
}

// The job's numbers, checked: every bad value is a FlagError naming its flag.
struct Job {
  JobShape shape;
  FailureProcess failures;
  FailureProcess half;  // every MTBF halved, multi-node events doubled
};

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
  const std::pair<const char*, double> overrides[] = {
      {"--stall-s", a.stall_s},
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

std::vector<std::string> SchemeNames(const AdviseArgs& a) {
  std::vector<std::string> names;
  std::stringstream ss(a.schemes);
  for (std::string s; std::getline(ss, s, ',');) {
    if (!s.empty()) names.push_back(s);
  }
  if (names.empty()) Fail("--schemes", a.schemes, "lists no scheme");
  names.push_back("remote-only");
  return names;
}

// The costs of candidate `c`: bandwidth model, then --bench, then explicit flags.
void SetCosts(const AdviseArgs& a, const Job& job,
              const std::map<std::string, MeasuredCosts>& bench, Candidate* c) {
  const auto it = bench.find(c->remote_only ? "" : c->scheme.ToString());
  const MeasuredCosts* measured = it == bench.end() ? nullptr : &it->second;
  c->costs = placement::EstimateCosts(c->remote_only ? Scheme::None() : c->scheme,
                                      job.shape.nodes, job.shape.shard_bytes, a.inputs, measured);
  c->cost_source = measured ? measured->source : "bandwidth model";
  const std::pair<double, double*> overrides[] = {
      {a.stall_s, &c->costs.stall_s},
      {a.protect_s, &c->costs.protect_s},
      {a.persist_s, &c->costs.persist_s},
      {a.recover_local_s, &c->costs.recover_local_s},
      {a.recover_replica_s, &c->costs.recover_replica_s},
      {a.recover_decode_s, &c->costs.recover_decode_s},
      {a.recover_remote_s, &c->costs.recover_remote_s}};
  for (const auto& [given, field] : overrides) {
    if (!std::isnan(given)) *field = given;
  }
  if (c->remote_only) return;
  // A time taken from the model includes the ones before it: a save commits
  // after its stall, and is durable after its commit.
  if (std::isnan(a.protect_s)) c->costs.protect_s = std::max(c->costs.protect_s, c->costs.stall_s);
  if (std::isnan(a.persist_s))
    c->costs.persist_s = std::max(c->costs.persist_s, c->costs.protect_s);
  if (c->costs.protect_s < c->costs.stall_s) {
    Fail("--protect-s", Fmt("%g", c->costs.protect_s),
         "must be >= the stall (" + Fmt("%g", c->costs.stall_s) + " s) for " + c->name);
  }
  if (c->costs.persist_s < c->costs.protect_s) {
    Fail("--persist-s", Fmt("%g", c->costs.persist_s),
         "must be >= the protect time (" + Fmt("%g", c->costs.protect_s) + " s) for " + c->name);
  }
}

// The plan that maximises goodput, or the one given by --save-every-steps and
// --persist-every-saves (an interval not given is the best one for the given one).
placement::OptimalPlan BestOrGivenPlan(const AdviseArgs& a, const Job& job, const Candidate& c) {
  auto best = placement::OptimizeIntervals(job.shape, job.failures, c.costs, c.serve, c.scheme,
                                           c.remote_only, 1 << 24, a.max_persist_every);
  if (!best.ok()) throw FlagError{c.name + ": " + best.status().message()};
  if (a.save_every == 0 && a.persist_every == 0) return *best;
  if (a.save_every == 0 && !c.remote_only) {
    // The persist interval is given: the best save interval for it.
    auto for_p = placement::OptimizeSaveInterval(job.shape, job.failures, c.costs, c.serve,
                                                 c.scheme, a.persist_every, 1 << 24);
    if (!for_p.ok()) {
      throw FlagError{c.name + ": --persist-every-saves " + std::to_string(a.persist_every) + ": " +
                      for_p.status().message()};
    }
    return *for_p;
  }
  placement::OptimalPlan given = *best;
  if (a.save_every > 0) given.plan.save_every_steps = a.save_every;
  // Remote-only persists every save synchronously: no persist interval applies.
  if (a.persist_every > 0 && !c.remote_only) given.plan.persist_every_saves = a.persist_every;
  // The persist period (p saves of k T + stall each) must cover the persist
  // time, as in the search.
  auto period = [&](int p) {
    return p * (given.plan.save_every_steps * job.shape.step_s + c.costs.stall_s);
  };
  const bool search_persist = a.save_every > 0 && a.persist_every == 0 && !c.remote_only;
  if (search_persist) {
    // The save interval is given: the best persist interval for it.
    double best_g = -1;
    for (int p = 1; p <= a.max_persist_every; ++p) {
      if (period(p) < c.costs.persist_s) continue;
      placement::CheckpointPlan plan = given.plan;
      plan.persist_every_saves = p;
      auto e = placement::EvaluateGoodput(job.shape, job.failures, c.costs, c.serve, plan);
      if (e.ok() && e->goodput > best_g) {
        best_g = e->goodput;
        given.plan = plan;
      }
    }
    if (best_g < 0) {
      throw FlagError{c.name + ": --save-every-steps " + std::to_string(a.save_every) +
                      ": no persist interval up to --max-persist-every " +
                      std::to_string(a.max_persist_every) + " covers the persist time (" +
                      Fmt("%g", c.costs.persist_s) + " s)"};
    }
  } else if (!c.remote_only && period(given.plan.persist_every_saves) < c.costs.persist_s) {
    throw FlagError{c.name + ": a persist every " + std::to_string(given.plan.persist_every_saves) +
                    " saves of " + std::to_string(given.plan.save_every_steps) + " steps (" +
                    Fmt("%g", period(given.plan.persist_every_saves)) +
                    " s) is shorter than the persist time (" + Fmt("%g", c.costs.persist_s) +
                    " s)"};
  }
  auto e = placement::EvaluateGoodput(job.shape, job.failures, c.costs, c.serve, given.plan);
  if (!e.ok()) throw FlagError{c.name + ": " + e.status().message()};
  given.estimate = *e;
  return given;
}

// Candidate `name` with its best plan and sensitivity, or nullopt when it is excluded
// (recorded in `excluded`).
std::optional<Candidate> Evaluate(const std::string& name, const AdviseArgs& a, const Job& job,
                                  const std::map<std::string, MeasuredCosts>& bench,
                                  json* excluded) {
  Candidate c;
  c.name = name;
  c.remote_only = name == "remote-only";
  Result<placement::Topology> topology = Status::NotFound("remote-only: no layout");
  Result<placement::GroupLayout> layout = Status::NotFound("remote-only: no layout");
  if (!c.remote_only) {
    auto parsed = Scheme::Parse(name);
    if (!parsed.ok()) Fail("--schemes", name, parsed.status().message());
    c.scheme = *parsed;
    if (Status st = c.scheme.ValidateFor(a.nodes); !st.ok()) {
      excluded->push_back({{"scheme", name}, {"reason", st.message()}});
      return std::nullopt;
    }
    // The layout evaluated, built once for memory and serve probabilities; its fullest
    // node holds more than the nominal 1 + M/K when N leaves a smaller last group.
    topology = placement::TopologyFor(a.nodes, job.failures);
    if (!topology.ok()) throw FlagError{name + ": " + topology.status().message()};
    layout = placement::GroupLayout::Build(*topology, c.scheme);
    if (!layout.ok()) throw FlagError{name + ": " + layout.status().message()};
    c.memory_factor = placement::WorstNodeMemoryFactor(*layout);
    if (c.memory_factor > a.memory_budget + 1e-12) {
      excluded->push_back(
          {{"scheme", name},
           {"reason", "memory " + Fmt("%.3f", c.memory_factor) +
                          " x S on its fullest node (nominal " +
                          Fmt("%.3f", c.scheme.NominalMemoryFactor()) + ") above the budget"}});
      return std::nullopt;
    }
  }
  SetCosts(a, job, bench, &c);
  c.serve = {0, 0, 0};
  if (!c.remote_only) {
    auto serve = placement::ComputeServeProbabilities(*layout, *topology, job.failures);
    if (!serve.ok()) throw FlagError{name + ": " + serve.status().message()};
    c.serve = *serve;
  }
  c.best = BestOrGivenPlan(a, job, c);
  auto same = placement::EvaluateGoodput(job.shape, job.half, c.costs, c.serve, c.best.plan);
  auto best_half = placement::OptimizeIntervals(job.shape, job.half, c.costs, c.serve, c.scheme,
                                                c.remote_only, 1 << 24, a.max_persist_every);
  if (!same.ok() || !best_half.ok()) throw FlagError{name + ": sensitivity failed"};
  c.same_plan_half = *same;
  c.best_half = *best_half;
  return c;
}

// Best goodput first; within 0.01 % of goodput (below the model's precision), less memory.
// With --simulate, the printed plans (and remote-only) are simulated too.
void RankAndSimulate(const AdviseArgs& a, const Job& job, std::vector<Candidate>* candidates) {
  auto key = [](const Candidate& c) {
    return std::make_pair(-std::floor(c.best.estimate.goodput * 1e4), c.memory_factor);
  };
  std::stable_sort(candidates->begin(), candidates->end(),
                   [&](const Candidate& x, const Candidate& y) { return key(x) < key(y); });
  if (!a.simulate) return;
  placement::SimulationOptions opt;
  int rank = 0;  // as the table ranks them: remote-only apart
  for (Candidate& c : *candidates) {
    if (!c.remote_only && ++rank > a.top) continue;
    auto sim = placement::SimulateGoodput(job.shape, job.failures, c.costs, c.best.plan, opt);
    if (sim.ok()) c.sim = *sim;
  }
}

void PrintJson(const AdviseArgs& a, const Job& job, const std::vector<Candidate>& candidates,
               const json& excluded) {
  const placement::FailureRates rates = placement::RatesFor(job.shape, job.failures);
  json out;
  out["job"] = {{"nodes", a.nodes},
                {"shard_bytes", job.shape.shard_bytes},
                {"step_s", a.step_s},
                {"memory_budget", a.memory_budget}};
  out["failures_per_day"] = {{"process", rates.process * kSecondsPerDay},
                             {"node", rates.node * kSecondsPerDay},
                             {"rack", rates.rack * kSecondsPerDay},
                             {"multi", rates.multi * kSecondsPerDay},
                             {"multi_nodes", a.multi_nodes},
                             {"total", rates.total() * kSecondsPerDay}};
  out["schemes"] = json::array();
  const FailureKinds kinds = KindsOf(job.failures);
  for (const Candidate& c : candidates) {
    if (c.remote_only) {
      out["remote_only"] = CandidateJson(c, a.step_s, kinds);
    } else {
      out["schemes"].push_back(CandidateJson(c, a.step_s, kinds));
    }
  }
  out["excluded"] = excluded;
  std::printf("%s\n", launch::JsonText(out).c_str());
}

void PrintTable(const AdviseArgs& a, const Job& job, const std::vector<Candidate>& candidates) {
  const placement::FailureRates rates = placement::RatesFor(job.shape, job.failures);
  std::printf("memento advise: N=%d nodes, shard %.2f GiB, step %.3f s, memory budget %.2f x S\n",
              a.nodes, job.shape.shard_bytes / kGiB, a.step_s, a.memory_budget);
  std::printf(
      "failures per day: %.3g total (process %.3g, node %.3g, rack %.3g, multi-node %.3g of %d "
      "nodes)\n\n",
      rates.total() * kSecondsPerDay, rates.process * kSecondsPerDay, rates.node * kSecondsPerDay,
      rates.rack * kSecondsPerDay, rates.multi * kSecondsPerDay, a.multi_nodes);
  std::printf("%-4s %-15s %6s %9s %9s %9s %-22s %-24s %9s %17s\n", "rank", "scheme", "mem/S",
              "P(node)", "P(rack)", "P(multi)", "save every", "persist every", "goodput",
              "MTBF/2: same|best");
  const FailureKinds kinds = KindsOf(job.failures);
  auto pct = [](bool given, double v) { return given ? Fmt("%.3f%%", 100 * v) : std::string("-"); };
  int rank = 0;
  for (const Candidate& c : candidates) {
    if (c.remote_only) continue;
    if (++rank > a.top) break;
    const auto& plan = c.best.plan;
    const std::string save = std::to_string(plan.save_every_steps) + " steps (" +
                             Duration(plan.save_every_steps * a.step_s) + ")";
    const std::string persist = std::to_string(plan.persist_every_saves) + " saves (" +
                                Duration(plan.persist_every_saves * c.best.estimate.save_cycle_s) +
                                ")";
    std::printf("%-4d %-15s %6.3f %9s %9s %9s %-22s %-24s %8.4f%% %7.3f%%|%.3f%%\n", rank,
                c.name.c_str(), c.memory_factor, pct(kinds.node, c.serve.node).c_str(),
                pct(kinds.rack, c.serve.rack).c_str(), pct(kinds.multi, c.serve.multi).c_str(),
                save.c_str(), persist.c_str(), 100 * c.best.estimate.goodput,
                100 * c.same_plan_half.goodput, 100 * c.best_half.estimate.goodput);
  }
  for (const Candidate& c : candidates) {
    if (!c.remote_only) continue;
    const auto& plan = c.best.plan;
    std::printf("%-4s %-15s %6.3f %9s %9s %9s %-22s %-24s %8.4f%% %7.3f%%|%.3f%%\n", "-",
                "remote-only", 1.0, "-", "-", "-",
                (std::to_string(plan.save_every_steps) + " steps (" +
                 Duration(plan.save_every_steps * a.step_s) + ")")
                    .c_str(),
                "every save (sync)", 100 * c.best.estimate.goodput, 100 * c.same_plan_half.goodput,
                100 * c.best_half.estimate.goodput);
  }
}

// The best scheme's waste per day and costs, the simulations, the excluded schemes.
void PrintSummary(const std::vector<Candidate>& candidates, const json& excluded) {
  if (!candidates.empty()) {
    const Candidate& b = candidates.front().remote_only && candidates.size() > 1
                             ? candidates[1]
                             : candidates.front();
    const auto& e = b.best.estimate;
    std::printf(
        "\nbest: %s. Per day: %.0f s stalled, %.0f s of work redone, %.0f s recovering; %.1f%% "
        "of failures served from memory.\n",
        b.name.c_str(), e.stall_s_per_day, e.lost_s_per_day, e.recovery_s_per_day,
        100 * e.memory_served_fraction);
    std::printf(
        "costs (%s): stall %.3g s, protect %.3g s, persist %.3g s, relaunch %.3g s, recover "
        "local %.3g s, replica %.3g s, decode %.3g s, remote %.3g s\n",
        b.cost_source.c_str(), b.costs.stall_s, b.costs.protect_s, b.costs.persist_s,
        b.costs.relaunch_s, b.costs.recover_local_s, b.costs.recover_replica_s,
        b.costs.recover_decode_s, b.costs.recover_remote_s);
  }
  for (const Candidate& c : candidates) {
    if (c.sim) {
      std::printf("simulated %s: goodput %.4f%% (95%% CI %.4f%% - %.4f%%, %zu years)\n",
                  c.name.c_str(), 100 * c.sim->goodput, 100 * c.sim->ci_low, 100 * c.sim->ci_high,
                  c.sim->goodput_per_replicate.size());
    }
  }
  if (!excluded.empty()) {
    std::printf("excluded:");
    for (const auto& e : excluded) {
      std::printf(" %s (%s);", e["scheme"].get<std::string>().c_str(),
                  e["reason"].get<std::string>().c_str());
    }
    std::printf("\n");
  }
  std::printf("MTBF/2: goodput if every MTBF halves, with the same intervals | re-tuned.\n");
}

int RunAdvise(AdviseArgs& a, const Given& given) {
  const Job job = CheckArgs(a, given);
  std::map<std::string, MeasuredCosts> bench;
  if (!a.bench.empty()) bench = ReadBench(a.bench);
  std::vector<Candidate> candidates;
  json excluded = json::array();
  for (const std::string& name : SchemeNames(a)) {
    if (auto c = Evaluate(name, a, job, bench, &excluded)) candidates.push_back(std::move(*c));
  }
  RankAndSimulate(a, job, &candidates);
  if (a.json) {
    PrintJson(a, job, candidates, excluded);
  } else {
    PrintTable(a, job, candidates);
    PrintSummary(candidates, excluded);
  }
  return 0;
}

}  // namespace

void AddAdviseCommand(CLI::App& app) {
  auto args = std::make_shared<AdviseArgs>();
  auto given = std::make_shared<Given>();
  CLI::App* cmd = app.add_subcommand(
      "advise",
      "best protection schemes, save and persist intervals and expected goodput for a job");
  cmd->footer(
      "Job numbers come from flags or from --config FILE (a JSON object whose keys are the flag "
      "names, e.g. {\"nodes\": 16384, \"shard\": \"8G\", \"node_mtbf_h\": 50000}; flags win). "
      "Costs come from a bandwidth model, from --bench (bench_cluster --json output, scaled to "
      "the shard) and from explicit --*-s flags, in increasing priority.\n\n"
      "example:\n  memento advise --nodes 16384 --shard 8G --step-s 4 --node-mtbf-h 50000 "
      "--process-mtbf-h 100000 --memory-budget 1.5");
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
  cmd->callback([args, given]() {
    try {
      const int rc = RunAdvise(*args, *given);
      if (rc != 0) throw CommandFailed(rc);
    } catch (const FlagError& e) {
      std::fprintf(stderr, "memento advise: %s\n", e.message.c_str());
      throw CommandFailed(2);
    }
  });
}

}  // namespace memento::cli
