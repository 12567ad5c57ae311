// memento advise: the protection schemes, save interval and persist interval that maximise a
// job's goodput under a memory budget per node (placement/goodput_model.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "advise_args.h"
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

using advise::AddAdviseOptions;
using advise::AdviseArgs;
using advise::Fail;
using advise::FlagError;
using advise::Fmt;
using advise::Given;
using advise::Job;
using advise::ReadBench;
using nlohmann::json;
using placement::CheckpointCosts;
using placement::CheckpointPlan;
using placement::FailureProcess;
using placement::GoodputEstimate;
using placement::kGiB;
using placement::kNever;
using placement::kSecondsPerDay;
using placement::MeasuredCosts;
using placement::Scheme;
using placement::ServeProbabilities;

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
  AddAdviseOptions(cmd, args.get(), given.get());
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
