// Runs the built `memento advise` and checks its answers, its JSON and its errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace {

#ifdef MEMENTO_CLI_PATH
using memento::testing::CliRun;
using memento::testing::RunCli;

nlohmann::json Json(const CliRun& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

constexpr const char* kJob = "advise --nodes 16 --shard 1G --step-s 1 --node-mtbf-h 20000 ";

TEST(GoodputAdviseTest, GeminiSettingReproducesItsRecoveryProbability) {
  // Gemini (SOSP'23): 16 machines, 2 replicas in groups; two simultaneous failures are
  // recoverable from CPU memory unless both hit one group: 1 - 8/C(16,2) = 14/15.
  const std::string args = std::string(kJob) +
                           "--multi-per-day 1 --multi-nodes 2 --memory-budget 2 "
                           "--schemes replica:2";
  CliRun text = RunCli(args);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("93.333%"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("replica:2"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("remote-only"), std::string::npos) << text.output;

  const auto j = Json(RunCli(args + " --json"));
  ASSERT_EQ(j["schemes"].size(), 1u) << j.dump();
  const auto& s = j["schemes"][0];
  EXPECT_EQ(s["scheme"], "replica:2");
  EXPECT_NEAR(s["serve"]["multi"].get<double>(), 14.0 / 15.0, 1e-12);
  EXPECT_NEAR(s["serve"]["node"].get<double>(), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(s["memory_factor"].get<double>(), 2.0);
  // Memory protection beats synchronous remote checkpointing here.
  EXPECT_GT(s["estimate"]["goodput"].get<double>(),
            j["remote_only"]["estimate"]["goodput"].get<double>());
  // Halving the MTBF costs goodput; re-tuning recovers some of it.
  const double g_half_same = s["mtbf_halved"]["goodput_same_intervals"].get<double>();
  const double g_half_best = s["mtbf_halved"]["goodput"].get<double>();
  EXPECT_LT(g_half_same, s["estimate"]["goodput"].get<double>());
  EXPECT_GE(g_half_best, g_half_same - 1e-12);
  EXPECT_LE(s["mtbf_halved"]["save_every_steps"].get<int>(), s["save_every_steps"].get<int>());
}

TEST(GoodputAdviseTest, MemoryBudgetFiltersSchemes) {
  const auto j = Json(RunCli(std::string(kJob) + "--json"));  // default budget 1.5 x S
  ASSERT_GE(j["schemes"].size(), 3u);
  for (const auto& s : j["schemes"]) {
    EXPECT_LE(s["memory_factor"].get<double>(), 1.5 + 1e-12) << s["scheme"];
  }
  bool replica_excluded = false;
  for (const auto& e : j["excluded"]) replica_excluded |= e["scheme"] == "replica:2";
  EXPECT_TRUE(replica_excluded) << j["excluded"].dump();
  // Sorted by goodput, best first; within 0.01 % of goodput, less memory first.
  for (size_t i = 1; i < j["schemes"].size(); ++i) {
    const auto& a = j["schemes"][i - 1];
    const auto& b = j["schemes"][i];
    const double ga = a["estimate"]["goodput"].get<double>();
    const double gb = b["estimate"]["goodput"].get<double>();
    EXPECT_GE(ga, gb - 1e-4) << a["scheme"] << " before " << b["scheme"];
    if (std::floor(ga * 1e4) == std::floor(gb * 1e4)) {
      EXPECT_LE(a["memory_factor"].get<double>(), b["memory_factor"].get<double>());
    }
  }
}

// A scheme's memory is its fullest node's, from the layout `rate` reports
// too: rs:6+3 on 16 nodes forms groups of 9 and 7, whose 4 data nodes hold
// S + 3 parity pieces of S/4 (1.75, not the nominal 1 + 3/6); rs:8+2 a group
// of 6 (1.5, not 1.25). Over the budget, the exclusion says both figures.
TEST(GoodputAdviseTest, MemoryIsTheFullestNodesOfTheLayout) {
  const auto rate = Json(RunCli("rate --nodes 16 --scheme rs:6+3 --failures 1 --json"));
  const double fullest = rate["schemes"][0]["memory_per_node"].get<double>();
  EXPECT_GT(fullest, 1.5 + 1e-9) << rate.dump();
  const std::string job = std::string(kJob) + "--schemes rs:6+3,rs:8+2 ";
  auto j = Json(RunCli(job + "--memory-budget " + std::to_string(fullest) + " --json"));
  ASSERT_EQ(j["schemes"].size(), 2u) << j.dump();
  for (const auto& s : j["schemes"]) {
    const double factor = s["memory_factor"].get<double>();
    if (s["scheme"] == "rs:6+3") {
      EXPECT_DOUBLE_EQ(factor, fullest);
    } else {
      EXPECT_GT(factor, 1.25 + 1e-9) << s["scheme"];  // rs:8+2: a last group of 6
    }
  }
  j = Json(RunCli(job + "--memory-budget 1.4 --json"));
  EXPECT_TRUE(j["schemes"].empty()) << j.dump();
  ASSERT_EQ(j["excluded"].size(), 2u) << j.dump();
  const std::string why = j["excluded"][0]["reason"].get<std::string>();
  EXPECT_NE(why.find("fullest node (nominal"), std::string::npos) << why;
}

// Kinds of failure the job does not have show no serve probability: "-" in
// the table, null in the JSON (not 100 %, which reads as "memory serves it").
TEST(GoodputAdviseTest, ServeProbabilitiesOnlyForTheFailuresGiven) {
  const std::string job = "advise --nodes 16 --shard 1G --step-s 1 --schemes xor:4,none ";
  auto j = Json(RunCli(job + "--node-mtbf-h 100 --json"));
  ASSERT_EQ(j["schemes"].size(), 2u) << j.dump();
  for (const auto& s : j["schemes"]) {
    EXPECT_TRUE(s["serve"]["node"].is_number()) << s.dump();
    EXPECT_TRUE(s["serve"]["rack"].is_null()) << s.dump();
    EXPECT_TRUE(s["serve"]["multi"].is_null()) << s.dump();
    EXPECT_EQ(s["serve"]["node"].get<double>(), s["scheme"] == "none" ? 0.0 : 1.0) << s.dump();
  }
  j = Json(RunCli(job + "--process-mtbf-h 100 --multi-per-day 1 --json"));
  for (const auto& s : j["schemes"]) {
    EXPECT_TRUE(s["serve"]["node"].is_null()) << s.dump();
    EXPECT_TRUE(s["serve"]["multi"].is_number()) << s.dump();
  }
  const CliRun text = RunCli(job + "--node-mtbf-h 100");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("  0.000%         -         -"), std::string::npos) << text.output;
}

TEST(GoodputAdviseTest, BadInputNamesTheFlag) {
  CliRun r = RunCli(std::string(kJob) + "--node-mtbf-h -5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--node-mtbf-h -5"), std::string::npos) << r.output;

  r = RunCli(std::string(kJob) + "--memory-budget 0.8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--memory-budget 0.8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(">= 1"), std::string::npos) << r.output;

  r = RunCli("advise --nodes 16 --shard 1G --step-s 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--node-mtbf-h (missing)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("failure rate"), std::string::npos) << r.output;

  r = RunCli("advise --shard 1G --step-s 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--nodes"), std::string::npos) << r.output;

  // A size is decimal digits (one '.' at most) and a binary unit: no hex,
  // sign, blank, exponent, nor less than a byte.
  for (const char* bad : {"12Q", "0x10G", "+8G", "' 8G'", "1e1G", "0x1p4", "0.5", "1.5.1G", "G"}) {
    r = RunCli(std::string(kJob) + "--shard " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("--shard"), std::string::npos) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("at least one byte"), std::string::npos) << bad << ": " << r.output;
  }
  EXPECT_EQ(
      Json(RunCli(
          "advise --nodes 16 --shard 1.5K --step-s 1 --node-mtbf-h 20000 --json"))["job"]
                                                                                  ["shard_bytes"],
      1536);
  for (const char* bad : {"0", "2000000000"}) {
    r = RunCli(std::string(kJob) + "--max-persist-every " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(std::string("--max-persist-every ") + bad), std::string::npos)
        << r.output;
  }

  r = RunCli(std::string(kJob) + "--schemes replica:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--schemes replica:1"), std::string::npos) << r.output;

  r = RunCli(std::string(kJob) + "--rack-mtbf-h 1000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--nodes-per-rack"), std::string::npos) << r.output;

  // A rate's companion alone would be ignored: refused, naming both.
  r = RunCli(std::string(kJob) + "--nodes-per-rack 4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--nodes-per-rack 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--rack-mtbf-h"), std::string::npos) << r.output;
  r = RunCli(std::string(kJob) + "--multi-nodes 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--multi-nodes 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--multi-per-day"), std::string::npos) << r.output;
  EXPECT_EQ(RunCli(std::string(kJob) + "--multi-nodes 3 --multi-per-day 0.5").exit_code, 0);

  r = RunCli(std::string(kJob) + "--bench /nonexistent/bench.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--bench"), std::string::npos) << r.output;

  // Lines of other benchmarks are passed over, whatever their "benchmark"
  // field holds (here not a string): a clear error, not a crash.
  const std::string other = ::testing::TempDir() + "advise-other-bench.jsonl";
  std::ofstream(other) << "{\"benchmark\": null}\n{\"benchmark\": 7}\n";
  r = RunCli(std::string(kJob) + "--bench " + other);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("holds no bench_cluster record"), std::string::npos) << r.output;
  std::remove(other.c_str());

  r = RunCli(std::string(kJob) + "--save-every-steps -2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--save-every-steps -2"), std::string::npos) << r.output;
  // 0 given is refused as a negative count is, not taken as the flag left out.
  for (const char* flag : {"--save-every-steps", "--persist-every-saves"}) {
    r = RunCli(std::string(kJob) + flag + " 0");
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    EXPECT_NE(r.output.find(std::string(flag) + " 0"), std::string::npos) << r.output;
  }
  // Past the largest job the tables are built for: a usage error, not bad_alloc.
  r = RunCli("advise --nodes 2000000000 --shard 1G --step-s 1 --node-mtbf-h 1000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--nodes 2000000000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1..16777216"), std::string::npos) << r.output;

  // Numbers are decimal, as everywhere in the tool: no hex, '+' or blank for
  // integers, no nan or hex float; and a leading zero is not octal (CLI11
  // alone reads "016" as 14).
  for (const char* bad : {"--nodes 0x10", "--nodes +16", "--top ' 3'", "--memory-budget nan",
                          "--node-mtbf-h inf", "--step-s 0x1p0", "--memory-budget 1.5.1"}) {
    r = RunCli("advise --nodes 16 --shard 1G --step-s 1 " + std::string(bad));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    const std::string flag = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.output.find(flag), std::string::npos) << bad << ": " << r.output;
  }
  EXPECT_EQ(RunCli(std::string(kJob) + "--memory-budget 2e0 --top 3").exit_code, 0);
  // A measured stall above the modelled protect time raises the modelled
  // times after it instead of being refused for a flag that was not given.
  const auto slow = Json(RunCli(std::string(kJob) + "--stall-s 2 --schemes xor:4 --json"));
  ASSERT_EQ(slow["schemes"].size(), 1u) << slow.dump();
  const auto& costs = slow["schemes"][0]["costs"];
  EXPECT_EQ(costs["stall_s"].get<double>(), 2.0);
  EXPECT_GE(costs["protect_s"].get<double>(), 2.0);
  EXPECT_GE(costs["persist_s"].get<double>(), costs["protect_s"].get<double>());
  r = RunCli(std::string(kJob) + "--stall-s 2 --protect-s 1");  // both given: inconsistent
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--protect-s 1"), std::string::npos) << r.output;
  const auto j =
      Json(RunCli("advise --nodes 016 --shard 1G --step-s 1 --node-mtbf-h 20000 --json"));
  EXPECT_EQ(j["job"]["nodes"], 16) << j.dump();
}

// A given plan is evaluated, not searched: without failures, goodput = 1 - stall / (k T + stall).
TEST(GoodputAdviseTest, GivenPlanIsEvaluated) {
  const auto j = Json(RunCli(
      "advise --nodes 16 --shard 1G --step-s 1 --stall-s 0.5 --protect-s 1 --persist-s 10 "
      "--schemes replica:2 --memory-budget 2 --save-every-steps 5 --persist-every-saves 3 --json"));
  ASSERT_EQ(j["schemes"].size(), 1u) << j.dump();
  const auto& s = j["schemes"][0];
  EXPECT_EQ(s["save_every_steps"], 5);
  EXPECT_EQ(s["persist_every_saves"], 3);
  EXPECT_NEAR(s["estimate"]["goodput"].get<double>(), 1 - 0.5 / 5.5, 1e-12);
  EXPECT_EQ(j["remote_only"]["save_every_steps"], 5);
  // Remote-only persists every save (synchronously): the persist interval
  // given is the memory schemes', not reported for it.
  EXPECT_EQ(j["remote_only"]["persist_every_saves"], 1) << j["remote_only"].dump();

  // A save interval given alone: the persist interval is searched for it and
  // covers the persist time (10 s here, 1.5 s per save, so at least 7 saves).
  const std::string job =
      "advise --nodes 16 --shard 1G --step-s 1 --stall-s 0.5 --protect-s 1 --persist-s 10 "
      "--schemes replica:2 --memory-budget 2 --node-mtbf-h 20000 --save-every-steps 1 ";
  const auto alone = Json(RunCli(job + "--json"));
  ASSERT_EQ(alone["schemes"].size(), 1u) << alone.dump();
  EXPECT_EQ(alone["schemes"][0]["save_every_steps"], 1);
  EXPECT_GE(alone["schemes"][0]["persist_every_saves"].get<int>(), 7) << alone.dump();
  // A persist interval given alone: the save interval is the best one for it
  // (here about half the best plan's, which persists at every save: a rarer
  // persist leaves more to redo after a loss memory cannot serve).
  const std::string by_persist =
      "advise --nodes 16 --shard 1G --step-s 1 --stall-s 0.5 --protect-s 1 --persist-s 10 "
      "--schemes replica:2 --memory-budget 2 --node-mtbf-h 2000 --multi-per-day 1 "
      "--multi-nodes 2 --persist-every-saves 64 --json";
  const auto p_alone = Json(RunCli(by_persist));
  ASSERT_EQ(p_alone["schemes"].size(), 1u) << p_alone.dump();
  const auto& ps = p_alone["schemes"][0];
  EXPECT_EQ(ps["persist_every_saves"], 64);
  const int k = ps["save_every_steps"].get<int>();
  const double g = ps["estimate"]["goodput"].get<double>();
  for (int other : {k / 2, k - 1, k + 1, 2 * k}) {
    if (other < 1 || other == k) continue;
    const auto fixed = Json(RunCli(by_persist + " --save-every-steps " + std::to_string(other)));
    EXPECT_GE(g, fixed["schemes"][0]["estimate"]["goodput"].get<double>() - 1e-12)
        << "k " << k << " against " << other;
  }
  // Both given, and the persist period shorter than the persist time: refused.
  CliRun r = RunCli(job + "--persist-every-saves 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("shorter than the persist time"), std::string::npos) << r.output;
}

TEST(GoodputAdviseTest, ConfigFileAndFlagsOverIt) {
  const std::string path = "/tmp/memento_advise_test_" + std::to_string(getpid()) + ".json";
  {
    std::ofstream out(path);
    out << R"({"nodes": 64, "shard": "2G", "step_s": 2, "node_mtbf_h": 30000,
               "process-mtbf-h": 10000, "schemes": "xor:3,rs:6+2"})";
  }
  auto j = Json(RunCli("advise --config " + path + " --json"));
  EXPECT_EQ(j["job"]["nodes"], 64);
  EXPECT_DOUBLE_EQ(j["job"]["shard_bytes"].get<double>(), 2.0 * (1 << 30));
  EXPECT_EQ(j["schemes"].size(), 2u);
  EXPECT_NEAR(j["failures_per_day"]["process"].get<double>(), 64 * 24 / 10000.0, 1e-12);
  j = Json(RunCli("advise --config " + path + " --nodes 128 --json"));
  EXPECT_EQ(j["job"]["nodes"], 128);

  {
    std::ofstream out(path);
    out << R"({"nodes": 64, "no_such_flag": 3})";
  }
  CliRun r = RunCli("advise --config " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no_such_flag"), std::string::npos) << r.output;
  {
    std::ofstream out(path);
    out << R"({"nodes": 64, "shard": "1G", "step_s": 1, "node_mtbf_h": -3})";
  }
  r = RunCli("advise --config " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--node-mtbf-h -3"), std::string::npos) << r.output;
  std::remove(path.c_str());
}

#ifdef MEMENTO_SOURCE_DIR
TEST(GoodputAdviseTest, MeasuredCostsFromBenchCluster) {
  const std::string bench =
      std::string(MEMENTO_SOURCE_DIR) + "/experiments/runtime/results_cluster.jsonl";
  const auto j = Json(RunCli(std::string(kJob) +
                             "--shard 256M --memory-budget 2 --schemes "
                             "replica:2,xor:3,rs:6+2 --bench " +
                             bench + " --json"));
  ASSERT_EQ(j["schemes"].size(), 3u);
  for (const auto& s : j["schemes"]) {
    const std::string source = s["costs"]["source"];
    if (s["scheme"] == "rs:6+2") {
      EXPECT_EQ(source, "bandwidth model");  // not measured
    } else {
      EXPECT_NE(source.find("results_cluster.jsonl"), std::string::npos) << source;
      EXPECT_NE(source.find("shard 256 MiB"), std::string::npos) << source;
      EXPECT_GT(s["costs"]["protect_s"].get<double>(), s["costs"]["stall_s"].get<double>());
    }
  }
}
#endif

// A record's restore cost is its resume_s (new store and restore back to back) where it
// has one, else prepare_s + recover_s (older records), scaled from its shard to the job's.
TEST(GoodputAdviseTest, MeasuredRestoreIsTheResumeTime) {
  const std::string path = ::testing::TempDir() + "advise-resume-bench.jsonl";
  const char* common =
      "\"benchmark\": \"bench_cluster\", \"nodes\": 16, \"shard_bytes\": 536870912, "
      "\"snapshot_s\": 0.1, \"protect_s\": 0.4, \"prepare_s\": 0.3, \"recover_s\": 0.9";
  std::ofstream(path) << "{\"scheme\": \"replica:2\", " << common << ", \"resume_s\": 1.0}\n"
                      << "{\"scheme\": \"xor:3\", " << common << "}\n";
  const auto j =
      Json(RunCli(std::string(kJob) + "--memory-budget 2 --schemes replica:2,xor:3 --bench " +
                  path + " --json"));
  std::remove(path.c_str());
  ASSERT_EQ(j["schemes"].size(), 2u) << j.dump();
  for (const auto& s : j["schemes"]) {
    const auto& costs = s["costs"];
    if (s["scheme"] == "replica:2") {
      EXPECT_DOUBLE_EQ(costs["recover_replica_s"].get<double>(), 2 * 1.0) << costs.dump();
    } else {
      EXPECT_DOUBLE_EQ(costs["recover_decode_s"].get<double>(), 2 * (0.3 + 0.9)) << costs.dump();
    }
  }
}

TEST(GoodputAdviseTest, SimulationAgreesWithTheAdvice) {
  const auto j = Json(
      RunCli("advise --nodes 64 --shard 1G --step-s 1 --node-mtbf-h 2000 --process-mtbf-h 1000 "
             "--schemes xor:3 --simulate --json"));
  const auto& s = j["schemes"][0];
  ASSERT_TRUE(s.contains("simulation")) << s.dump();
  // The 95 % interval of 20 simulated years, widened to 99.9 % (x 3.29 / 1.96).
  const double mid = s["simulation"]["goodput"].get<double>();
  const double half = (s["simulation"]["ci95_high"].get<double>() - mid) * 3.29 / 1.96;
  EXPECT_NEAR(s["estimate"]["goodput"].get<double>(), mid, half + 1e-9);
}
#endif

}  // namespace
