// memento rate: recovery probability and memory per node of protection schemes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "memento/launch/json_text.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/recovery_probability.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"

namespace memento::cli {
namespace {

using Json = nlohmann::ordered_json;
using placement::GroupLayout;
using placement::Scheme;
using placement::Topology;

// Flag values as given; numbers are parsed strictly in the callback.
struct RateFlags {
  std::string nodes;
  std::string scheme;
  std::string compare;
  std::string placement;
  std::string failures;
  std::string trials = "100000";
  std::string seed = "1";
  std::string racks;
  std::string rack_failures = "1";
  bool json = false;
};

struct Options {
  int nodes = 0;
  std::vector<std::string> schemes;
  bool compare = false;
  std::string placement;
  std::vector<int> failures;
  uint64_t trials = 0;
  uint64_t seed = 0;
  int racks = 0;
  std::vector<int> rack_failures;
  bool json = false;
};

struct Row {
  int failures = 0;
  bool has_exact = true;  // false: out of the exact computation's range (Monte Carlo only)
  double exact = 0;       // P(recover)
  double lose = 0;        // P(some shard lost) = 1 - exact, kept apart for its precision
  bool has_mc = false;
  placement::MonteCarloEstimate mc;
};

struct SchemeReport {
  Scheme scheme;
  double memory_factor;  // max bytes per node / S
  std::vector<int> group_sizes;
  int rack_conflicts = 0;
  std::vector<Row> rows;       // node failures
  std::vector<Row> rack_rows;  // whole racks lost
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(',', start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

// A probability as a percentage with three decimals, except where that would round a value
// that is not exactly 0 or 1 onto 0.000% or 100.000%: then "1 - 7.00e-07" (one minus the
// loss probability, as a fraction) or "3.20e-07%", with three significant digits.
std::string Pct(double p, double lose) {
  char buf[48];
  if (lose > 0 && lose < 5e-6) {
    std::snprintf(buf, sizeof(buf), "1 - %.2e", lose);
  } else if (p > 0 && p < 5e-6) {
    std::snprintf(buf, sizeof(buf), "%.2e%%", 100.0 * p);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3f%%", 100.0 * p);
  }
  return buf;
}

// Monte Carlo values and rack-loss ratios: within rounding noise of 1 they print as 100%.
std::string Pct(double p) { return Pct(p, p > 1 - 1e-12 ? 0 : 1 - p); }

std::string GroupSummary(const std::vector<int>& sizes) {
  std::string s;
  size_t i = 0;
  while (i < sizes.size()) {
    size_t j = i;
    while (j < sizes.size() && sizes[j] == sizes[i]) ++j;
    if (!s.empty()) s += " + ";
    s += std::to_string(j - i) + " x " + std::to_string(sizes[i]);
    i = j;
  }
  return s + " nodes";
}

Json RowsJson(const std::vector<Row>& rows) {
  Json out = Json::array();
  for (const Row& r : rows) {
    Json row = {{"failures", r.failures}};
    row["exact"] = r.has_exact ? Json(r.exact) : Json(nullptr);
    row["exact_loss"] = r.has_exact ? Json(r.lose) : Json(nullptr);
    if (r.has_mc) {
      row["monte_carlo"] = {{"estimate", r.mc.estimate},
                            {"ci95_low", r.mc.ci_low},
                            {"ci95_high", r.mc.ci_high},
                            {"successes", r.mc.successes},
                            {"trials", r.mc.trials}};
    }
    out.push_back(std::move(row));
  }
  return out;
}

void PrintJson(const Options& o, const std::vector<SchemeReport>& reports) {
  Json out = {{"nodes", o.nodes}, {"racks", o.racks}, {"trials", o.trials}, {"seed", o.seed}};
  Json& schemes = out["schemes"] = Json::array();
  for (const SchemeReport& r : reports) {
    schemes.push_back({{"scheme", r.scheme.ToString()},
                       {"memory_per_node", r.memory_factor},
                       {"groups", r.group_sizes},
                       {"rack_conflicts", r.rack_conflicts},
                       {"node_failures", RowsJson(r.rows)},
                       {"rack_failures", RowsJson(r.rack_rows)}});
  }
  std::printf("%s\n", launch::JsonText(out).c_str());
}

void PrintOne(const Options& o, const SchemeReport& r) {
  std::printf("scheme %s on %d nodes%s: groups %s; memory per node %.3f x shard\n",
              r.scheme.ToString().c_str(), o.nodes,
              o.racks ? (" in " + std::to_string(o.racks) + " racks").c_str() : "",
              GroupSummary(r.group_sizes).c_str(), r.memory_factor);
  if (o.racks && r.rack_conflicts) {
    std::printf("note: %d groups hold two nodes of one rack (the racks do not allow better)\n",
                r.rack_conflicts);
  }
  auto table = [&](const char* what, const std::vector<Row>& rows) {
    if (rows.empty()) return;
    std::printf("%-10s %-12s", what, "exact");
    if (o.trials) std::printf(" %-11s %-25s", "monte-carlo", "95% CI");
    std::printf("\n");
    for (const Row& row : rows) {
      std::printf("%-10d %-12s", row.failures,
                  row.has_exact ? Pct(row.exact, row.lose).c_str() : "n/a");
      if (row.has_mc) {
        std::printf(" %-11s [%s, %s]", Pct(row.mc.estimate).c_str(), Pct(row.mc.ci_low).c_str(),
                    Pct(row.mc.ci_high).c_str());
      }
      std::printf("\n");
    }
  };
  table("failures", r.rows);
  if (!r.rack_rows.empty()) std::printf("\n");
  table("racks lost", r.rack_rows);
  if (o.trials) {
    std::printf("(Monte Carlo: %llu trials per row, seed %llu)\n",
                static_cast<unsigned long long>(o.trials), static_cast<unsigned long long>(o.seed));
  }
}

void PrintCompare(const Options& o, const std::vector<SchemeReport>& reports) {
  std::printf("recovery probability after f random node failures, %d nodes%s\n", o.nodes,
              o.racks ? (", " + std::to_string(o.racks) + " racks").c_str() : "");
  std::printf("%-18s %-7s", "scheme", "mem x S");
  for (const Row& row : reports[0].rows) {
    std::printf(" %12s", ("P(f=" + std::to_string(row.failures) + ")").c_str());
  }
  for (const Row& row : reports[0].rack_rows) {
    std::printf(" %12s", ("P(r=" + std::to_string(row.failures) + ")").c_str());
  }
  std::printf("\n");
  for (const SchemeReport& r : reports) {
    std::printf("%-18s %-7.3f", r.scheme.ToString().c_str(), r.memory_factor);
    for (const Row& row : r.rows) std::printf(" %12s", Pct(row.exact, row.lose).c_str());
    for (const Row& row : r.rack_rows) std::printf(" %12s", Pct(row.exact, row.lose).c_str());
    std::printf("\n");
  }
  if (!reports[0].rack_rows.empty()) std::printf("(P(r=k): k whole racks lost)\n");
}

// Flag values to options; UsageError naming the flag and value on bad input.
Options Resolve(const RateFlags& f) {
  Options o;
  o.json = f.json;
  o.nodes = static_cast<int>(ParseInteger("--nodes", f.nodes, 1, kMaxNodes,
                                          "an integer in 1.." + std::to_string(kMaxNodes)));
  if (f.scheme.empty() && f.compare.empty())
    throw UsageError("give --scheme S or --compare S1,S2,...");
  o.compare = !f.compare.empty();
  o.schemes = SplitCommas(o.compare ? f.compare : f.scheme);
  if (!o.compare && o.schemes.size() != 1) {
    throw UsageError("--scheme takes one scheme; use --compare S1,S2,... for several");
  }
  if (!f.placement.empty() && f.placement != "group" && f.placement != "ring") {
    throw UsageError("--placement '" + f.placement + "': accepted forms are group, ring");
  }
  o.placement = f.placement;
  o.trials = static_cast<uint64_t>(
      ParseInteger("--trials", f.trials, 0, 1000000000, "an integer in 0..1000000000"));
  o.seed =
      static_cast<uint64_t>(ParseInteger("--seed", f.seed, 0, INT64_MAX, "a non-negative integer"));
  if (!f.racks.empty()) {
    o.racks = static_cast<int>(
        ParseInteger("--racks", f.racks, 1, o.nodes,
                     "an integer in 1..--nodes (" + std::to_string(o.nodes) + ")"));
  }
  if (f.failures.empty()) {
    for (int k = 1; k <= std::min(4, o.nodes); ++k) o.failures.push_back(k);
  } else {
    o.failures = ParseCounts("--failures", f.failures, o.nodes, "--nodes");
  }
  if (o.racks) {
    o.rack_failures = ParseCounts("--rack-failures", f.rack_failures, o.racks, "--racks");
  }
  return o;
}

// The scheme `text` of --scheme/--compare with --placement applied. A replica scheme that
// names its placement (replica:2:ring) and a different --placement conflict.
Scheme ResolveScheme(const Options& o, const std::string& text) {
  const std::string flag = o.compare ? "--compare" : "--scheme";
  auto scheme = Scheme::Parse(text);
  if (!scheme.ok()) throw UsageError(flag + ": " + scheme.status().message());
  if (o.placement.empty()) return *scheme;
  if (!scheme->is_replica()) {
    throw UsageError("--placement applies to replica:M schemes only, not '" + text + "'");
  }
  const auto wanted = o.placement == "ring" ? placement::ReplicaPlacement::kRing
                                            : placement::ReplicaPlacement::kGroup;
  const bool names_placement = std::count(text.begin(), text.end(), ':') == 2;
  if (names_placement && scheme->placement() != wanted) {
    throw UsageError("--placement " + o.placement + " conflicts with " + flag + " '" + text +
                     "' (give the placement once)");
  }
  return scheme->WithPlacement(wanted);
}

SchemeReport Evaluate(const Options& o, const Topology& topology, const std::string& text) {
  const Scheme scheme = ResolveScheme(o, text);
  auto layout = GroupLayout::Build(topology, scheme);
  if (!layout.ok()) throw UsageError(layout.status().message());
  SchemeReport r{scheme, 0, {}, layout->rack_conflicts(), {}, {}};
  for (const auto& g : layout->groups()) r.group_sizes.push_back(g.size());
  r.memory_factor = placement::WorstNodeMemoryFactor(*layout);
  if (!o.failures.empty()) {
    // Exact up to the largest f asked for whose count of failure sets is in range: an
    // f beyond it leaves the smaller ones exact (only its own row has no exact value).
    std::vector<int> asked = o.failures;
    std::sort(asked.rbegin(), asked.rend());
    Result<placement::ExactRecovery> exact = Status::NotFound("no --failures");
    Status first_refusal;
    for (int f : asked) {
      exact = placement::ExactRecoveryProbabilities(*layout, f);
      if (exact.ok()) break;
      if (first_refusal.ok()) first_refusal = exact.status();
    }
    const int exact_up_to = exact.ok() ? static_cast<int>(exact->recover.size()) - 1 : -1;
    // Out of range, the Monte Carlo estimate is still worth printing when one was asked for.
    if (exact_up_to < asked.front() && (o.trials == 0 || o.compare)) {
      throw UsageError("--failures: " + first_refusal.message());
    }
    for (int f : o.failures) {
      Row row;
      row.failures = f;
      row.has_exact = f <= exact_up_to;
      if (row.has_exact) {
        row.exact = exact->recover[f];
        row.lose = exact->lose[f];
      }
      if (o.trials && !o.compare) {
        auto mc = placement::MonteCarloRecoveryProbability(*layout, f, o.trials, o.seed);
        if (!mc.ok()) throw UsageError(mc.status().message());
        row.has_mc = true;
        row.mc = *mc;
      }
      r.rows.push_back(row);
    }
  }
  for (int k : o.rack_failures) {
    Row row;
    row.failures = k;
    auto ex = placement::ExactRackLossProbability(*layout, topology, k);
    if (!ex.ok()) throw UsageError("--rack-failures: " + ex.status().message());
    row.exact = *ex;
    row.lose = 1 - *ex;  // a ratio of counts up to 10^6: no precision lost here
    if (o.trials && !o.compare) {
      auto mc = placement::MonteCarloRackLossProbability(*layout, topology, k, o.trials, o.seed);
      if (!mc.ok()) throw UsageError(mc.status().message());
      row.has_mc = true;
      row.mc = *mc;
    }
    r.rack_rows.push_back(row);
  }
  return r;
}

void Run(const RateFlags& flags) {
  const Options o = Resolve(flags);
  auto topology = Topology::UniformWithRacks(o.nodes, 1, o.racks);
  if (!topology.ok()) throw UsageError(topology.status().message());
  std::vector<SchemeReport> reports;
  for (const std::string& text : o.schemes) reports.push_back(Evaluate(o, *topology, text));
  if (o.json) {
    PrintJson(o, reports);
  } else if (o.compare) {
    PrintCompare(o, reports);
  } else {
    PrintOne(o, reports[0]);
  }
}

}  // namespace

void AddRateCommand(CLI::App& app) {
  auto f = std::make_shared<RateFlags>();
  CLI::App* cmd =
      app.add_subcommand("rate", "recovery probability and memory per node of protection schemes");
  cmd->footer(
      "Probability that a job on N nodes can rebuild every shard from memory after f\n"
      "simultaneous, uniformly random node failures (exact, and by Monte Carlo with a 95 %\n"
      "confidence interval), and memory per node as a multiple of the shard size S.\n"
      "A probability that would round to 100.000% without being 1 prints as 1 - x (x the\n"
      "loss probability, a fraction); Monte Carlo rows need --trials > 0 and --scheme.\n"
      "\n"
      "examples:\n"
      "  memento rate --nodes 16 --scheme replica:2 --failures 1-4\n"
      "  memento rate --nodes 16 --failures 1-4 --compare "
      "replica:2,replica:2:ring,xor:3,rs:6+2,rs:4+4\n"
      "  memento rate --nodes 1000000 --scheme rs:8+2 --failures 1-64 --trials 0");
  cmd->add_option("--nodes", f->nodes, "number of nodes (1.." + std::to_string(kMaxNodes) + ")")
      ->required()
      ->type_name("N");
  CLI::Option* scheme = cmd->add_option("--scheme", f->scheme,
                                        "one scheme: none, replica:M[:group|:ring], xor:K, rs:K+M")
                            ->type_name("S")
                            ->check(NotEmpty());
  CLI::Option* compare =
      cmd->add_option("--compare", f->compare,
                      "comma-separated schemes, printed side by side (exact values only)")
          ->type_name("S1,S2,..")
          ->check(NotEmpty());
  scheme->excludes(compare);
  cmd->add_option("--placement", f->placement,
                  "replica placement for replica:M schemes that do not name one")
      ->type_name("group|ring")
      ->check(NotEmpty());
  cmd->add_option("--failures", f->failures,
                  "failed nodes: F, A-B or a,b,c (default 1-4, capped at N)")
      ->type_name("F")
      ->check(NotEmpty());
  cmd->add_option("--trials", f->trials, "Monte Carlo trials per f (0: exact only)")
      ->type_name("T")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Monte Carlo seed")->type_name("X")->capture_default_str();
  CLI::Option* racks =
      cmd->add_option("--racks", f->racks,
                      "nodes in R racks (contiguous blocks): rack-aware groups, and the\n"
                      "probability after r whole racks are lost, r in --rack-failures")
          ->type_name("R")
          ->check(NotEmpty());
  cmd->add_option("--rack-failures", f->rack_failures, "whole racks lost, forms as --failures")
      ->type_name("F")
      ->capture_default_str()
      ->needs(racks);
  cmd->add_flag("--json", f->json, "machine-readable output (one JSON object)");
  cmd->callback([f] { Run(*f); });
}

}  // namespace memento::cli
