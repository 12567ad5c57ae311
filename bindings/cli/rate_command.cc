// memento rate: recovery probability and memory per node of protection schemes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/recovery_probability.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"

namespace memento::cli {
namespace {

using placement::GroupLayout;
using placement::Scheme;
using placement::Topology;

constexpr const char* kUsage =
    "usage: memento rate --nodes N (--scheme S | --compare S1,S2,...) [options]\n"
    "\n"
    "Probability that a job on N nodes can rebuild every shard from memory after f\n"
    "simultaneous, uniformly random node failures, and memory per node as a multiple of\n"
    "the shard size S.\n"
    "\n"
    "  --nodes N          number of nodes (>= 1)\n"
    "  --scheme S         one scheme: none, replica:M[:group|:ring], xor:K, rs:K+M\n"
    "  --compare LIST     comma-separated schemes, printed side by side (exact values)\n"
    "  --placement P      group or ring: replica placement for --scheme/--compare replica:M\n"
    "  --failures F       F, A-B or a,b,c failed nodes (default 1-4, capped at N)\n"
    "  --trials T         Monte Carlo trials per f (default 100000; 0: exact only)\n"
    "  --seed X           Monte Carlo seed (default 1)\n"
    "  --racks R          nodes in R racks (contiguous blocks): rack-aware groups, and\n"
    "                     P(recover | r whole racks lost) for r in --rack-failures\n"
    "  --rack-failures F  whole racks lost, forms as --failures (default 1)\n"
    "  --json             machine-readable output\n"
    "  --help             this text\n"
    "\n"
    "examples:\n"
    "  memento rate --nodes 16 --scheme replica:2 --failures 1-4\n"
    "  memento rate --nodes 16 --failures 1-4 --compare "
    "replica:2,replica:2:ring,xor:3,rs:6+2,rs:4+4\n";

int Usage(const std::string& message) {
  std::fprintf(stderr, "memento rate: %s\n(see memento rate --help)\n", message.c_str());
  return 2;
}

bool ParseInt(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

// "F", "A-B" or "a,b,c" with every value in [0, max]. Empty result on error.
std::vector<int> ParseCounts(const std::string& s, int max) {
  std::vector<int> out;
  for (const std::string& part : Split(s, ',')) {
    const size_t dash = part.find('-');
    int64_t a = 0;
    int64_t b = 0;
    if (dash == std::string::npos) {
      if (!ParseInt(part, 0, max, &a)) return {};
      b = a;
    } else if (!ParseInt(part.substr(0, dash), 0, max, &a) ||
               !ParseInt(part.substr(dash + 1), 0, max, &b) || b < a) {
      return {};
    }
    for (int64_t v = a; v <= b; ++v) out.push_back(static_cast<int>(v));
  }
  return out;
}

struct Options {
  int nodes = 0;
  std::vector<std::string> schemes;
  bool compare = false;
  std::string placement;
  std::string failures = "1-4";
  bool failures_given = false;
  uint64_t trials = 100000;
  uint64_t seed = 1;
  int racks = 0;
  std::string rack_failures = "1";
  bool json = false;
};

struct Row {
  int failures = 0;
  double exact = 0;
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

std::string Pct(double p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f%%", 100.0 * p);
  return buf;
}

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

void PrintJson(const Options& o, const std::vector<SchemeReport>& reports) {
  std::printf("{\"nodes\":%d,\"racks\":%d,\"trials\":%llu,\"seed\":%llu,\"schemes\":[", o.nodes,
              o.racks, static_cast<unsigned long long>(o.trials),
              static_cast<unsigned long long>(o.seed));
  auto print_rows = [](const std::vector<Row>& rows) {
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("%s{\"failures\":%d,\"exact\":%.12g", i ? "," : "", r.failures, r.exact);
      if (r.has_mc) {
        std::printf(
            ",\"monte_carlo\":{\"estimate\":%.12g,\"ci95_low\":%.12g,\"ci95_high\":%.12g,"
            "\"successes\":%llu,\"trials\":%llu}",
            r.mc.estimate, r.mc.ci_low, r.mc.ci_high,
            static_cast<unsigned long long>(r.mc.successes),
            static_cast<unsigned long long>(r.mc.trials));
      }
      std::printf("}");
    }
  };
  for (size_t s = 0; s < reports.size(); ++s) {
    const SchemeReport& r = reports[s];
    std::printf("%s{\"scheme\":\"%s\",\"memory_per_node\":%.6g,\"groups\":[", s ? "," : "",
                r.scheme.ToString().c_str(), r.memory_factor);
    for (size_t g = 0; g < r.group_sizes.size(); ++g) {
      std::printf("%s%d", g ? "," : "", r.group_sizes[g]);
    }
    std::printf("],\"rack_conflicts\":%d,\"node_failures\":[", r.rack_conflicts);
    print_rows(r.rows);
    std::printf("],\"rack_failures\":[");
    print_rows(r.rack_rows);
    std::printf("]}");
  }
  std::printf("]}\n");
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
    std::printf("%-10s %-11s", what, "exact");
    if (o.trials) std::printf(" %-11s %-25s", "monte-carlo", "95% CI");
    std::printf("\n");
    for (const Row& row : rows) {
      std::printf("%-10d %-11s", row.failures, Pct(row.exact).c_str());
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
  for (const Row& row : reports[0].rows)
    std::printf(" %10s", ("P(f=" + std::to_string(row.failures) + ")").c_str());
  for (const Row& row : reports[0].rack_rows) {
    std::printf(" %10s", ("P(r=" + std::to_string(row.failures) + ")").c_str());
  }
  std::printf("\n");
  for (const SchemeReport& r : reports) {
    std::printf("%-18s %-7.3f", r.scheme.ToString().c_str(), r.memory_factor);
    for (const Row& row : r.rows) std::printf(" %10s", Pct(row.exact).c_str());
    for (const Row& row : r.rack_rows) std::printf(" %10s", Pct(row.exact).c_str());
    std::printf("\n");
  }
  if (!reports[0].rack_rows.empty()) std::printf("(P(r=k): k whole racks lost)\n");
}

}  // namespace

int RunRate(int argc, char** argv) {
  Options o;
  std::string failures_arg;
  bool have_nodes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--json") {
      o.json = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) return Usage("unexpected argument '" + flag + "'");
    if (i + 1 >= argc) return Usage(flag + " needs a value");
    const std::string value = argv[++i];
    int64_t v = 0;
    if (flag == "--nodes") {
      if (!ParseInt(value, 1, 1 << 20, &v)) {
        return Usage("--nodes '" + value + "': expected an integer >= 1");
      }
      o.nodes = static_cast<int>(v);
      have_nodes = true;
    } else if (flag == "--scheme" || flag == "--compare") {
      if (!o.schemes.empty()) return Usage("give one of --scheme or --compare, once");
      o.compare = flag == "--compare";
      o.schemes = Split(value, ',');
      if (!o.compare && o.schemes.size() != 1) {
        return Usage("--scheme takes one scheme; use --compare S1,S2,... for several");
      }
    } else if (flag == "--placement") {
      if (value != "group" && value != "ring") {
        return Usage("--placement '" + value + "': accepted forms are group, ring");
      }
      o.placement = value;
    } else if (flag == "--failures") {
      o.failures = value;
      o.failures_given = true;
    } else if (flag == "--trials") {
      if (!ParseInt(value, 0, 1000000000, &v)) {
        return Usage("--trials '" + value + "': expected an integer in 0..1000000000");
      }
      o.trials = static_cast<uint64_t>(v);
    } else if (flag == "--seed") {
      if (!ParseInt(value, 0, INT64_MAX, &v)) {
        return Usage("--seed '" + value + "': expected a non-negative integer");
      }
      o.seed = static_cast<uint64_t>(v);
    } else if (flag == "--racks") {
      if (!ParseInt(value, 1, 1 << 20, &v)) {
        return Usage("--racks '" + value + "': expected an integer >= 1");
      }
      o.racks = static_cast<int>(v);
    } else if (flag == "--rack-failures") {
      o.rack_failures = value;
    } else {
      return Usage("unknown flag '" + flag + "'");
    }
  }
  if (!have_nodes) return Usage("--nodes N is required");
  if (o.schemes.empty()) return Usage("give --scheme S or --compare S1,S2,...");
  if (o.racks > o.nodes) {
    return Usage("--racks " + std::to_string(o.racks) + ": at most --nodes (" +
                 std::to_string(o.nodes) + ")");
  }
  std::vector<int> failures;
  if (!o.failures_given) {
    for (int f = 1; f <= std::min(4, o.nodes); ++f) failures.push_back(f);
  } else {
    failures = ParseCounts(o.failures, o.nodes);
    if (failures.empty()) {
      return Usage("--failures '" + o.failures + "': accepted forms are F, A-B or a,b,c with " +
                   "0 <= values <= --nodes (" + std::to_string(o.nodes) + ")");
    }
  }
  std::vector<int> rack_failures;
  if (o.racks) {
    rack_failures = ParseCounts(o.rack_failures, o.racks);
    if (rack_failures.empty()) {
      return Usage("--rack-failures '" + o.rack_failures + "': accepted forms are F, A-B or " +
                   "a,b,c with 0 <= values <= --racks (" + std::to_string(o.racks) + ")");
    }
  }
  auto topology = Topology::UniformWithRacks(o.nodes, 1, o.racks);
  if (!topology.ok()) return Usage(topology.status().message());

  std::vector<SchemeReport> reports;
  for (const std::string& text : o.schemes) {
    auto scheme = Scheme::Parse(text);
    if (!scheme.ok())
      return Usage(std::string(o.compare ? "--compare" : "--scheme") + ": " +
                   scheme.status().message());
    if (!o.placement.empty()) {
      if (!scheme->is_replica()) {
        return Usage("--placement applies to replica:M schemes only, not '" + text + "'");
      }
      *scheme = scheme->WithPlacement(o.placement == "ring" ? placement::ReplicaPlacement::kRing
                                                            : placement::ReplicaPlacement::kGroup);
    }
    auto layout = GroupLayout::Build(*topology, *scheme);
    if (!layout.ok()) return Usage(layout.status().message());
    SchemeReport r{*scheme, 0, {}, layout->rack_conflicts(), {}, {}};
    for (const auto& g : layout->groups()) r.group_sizes.push_back(g.size());
    // A shard size divisible by every K' <= 16, so the factor is exact for common schemes.
    const uint64_t kShard = 720720ull * 4096;
    r.memory_factor = static_cast<double>(
                          placement::PlacementMap::Uniform(*layout, kShard).max_bytes_per_node()) /
                      static_cast<double>(kShard);
    const std::vector<double> exact = placement::ExactRecoveryProbabilities(*layout);
    for (int f : failures) {
      Row row;
      row.failures = f;
      row.exact = exact[f];
      if (o.trials && !o.compare) {
        auto mc = placement::MonteCarloRecoveryProbability(*layout, f, o.trials, o.seed);
        if (!mc.ok()) return Usage(mc.status().message());
        row.has_mc = true;
        row.mc = *mc;
      }
      r.rows.push_back(row);
    }
    for (int k : rack_failures) {
      Row row;
      row.failures = k;
      auto ex = placement::ExactRackLossProbability(*layout, *topology, k);
      if (!ex.ok()) return Usage("--rack-failures: " + ex.status().message());
      row.exact = *ex;
      if (o.trials && !o.compare) {
        auto mc = placement::MonteCarloRackLossProbability(*layout, *topology, k, o.trials, o.seed);
        if (!mc.ok()) return Usage(mc.status().message());
        row.has_mc = true;
        row.mc = *mc;
      }
      r.rack_rows.push_back(row);
    }
    reports.push_back(std::move(r));
  }
  if (o.json) {
    PrintJson(o, reports);
  } else if (o.compare) {
    PrintCompare(o, reports);
  } else {
    PrintOne(o, reports[0]);
  }
  return 0;
}

}  // namespace memento::cli
