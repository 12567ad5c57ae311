// Runs the built `memento rate` and checks its output (text and JSON) and exit codes.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace {

#ifdef MEMENTO_CLI_PATH
using memento::testing::CliRun;
using memento::testing::RunCli;

TEST(RateCommandTest, SchemeReportsExactMonteCarloAndMemory) {
  CliRun r = RunCli("rate --nodes 16 --scheme replica:2 --failures 1-4 --trials 20000 --seed 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memory per node 2.000 x shard"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("93.333%"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("80.000%"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("95% CI"), std::string::npos) << r.output;
  CliRun ring =
      RunCli("rate --nodes 16 --scheme replica:2 --placement ring --failures 2 --trials 0");
  EXPECT_EQ(ring.exit_code, 0) << ring.output;
  EXPECT_NE(ring.output.find("86.667%"), std::string::npos) << ring.output;
}

TEST(RateCommandTest, CompareTable) {
  CliRun r = RunCli(
      "rate --nodes 16 --failures 1-4 --compare replica:2,replica:2:ring,xor:3,rs:6+2,rs:4+4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"replica:2 ", "replica:2:ring", "xor:3", "rs:6+2", "rs:4+4", "P(f=4)",
                        "1.333", "86.667%"}) {
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  }
}

TEST(RateCommandTest, JsonAndRacks) {
  CliRun r = RunCli(
      "rate --nodes 16 --scheme xor:3 --failures 2 --racks 4 --rack-failures 1-2 "
      "--trials 1000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("nodes"), 16);
  EXPECT_EQ(j.at("racks"), 4);
  EXPECT_EQ(j.at("trials"), 1000);
  ASSERT_EQ(j.at("schemes").size(), 1u);
  const nlohmann::json& s = j["schemes"][0];
  EXPECT_EQ(s.at("scheme"), "xor:3");
  EXPECT_EQ(s.at("groups"), nlohmann::json({4, 4, 4, 4}));
  EXPECT_NEAR(s.at("memory_per_node").get<double>(), 4.0 / 3, 1e-12);
  const nlohmann::json& row = s.at("node_failures").at(0);
  EXPECT_EQ(row.at("failures"), 2);
  // xor:3 on 4 groups of 4, f = 2: lost iff both in one group: 1 - 4 C(4,2) / C(16,2).
  EXPECT_NEAR(row.at("exact").get<double>(), 0.8, 1e-12);
  EXPECT_NEAR(row.at("exact_loss").get<double>(), 0.2, 1e-12);
  const nlohmann::json& mc = row.at("monte_carlo");
  EXPECT_EQ(mc.at("trials"), 1000);
  EXPECT_LE(mc.at("ci95_low").get<double>(), mc.at("estimate").get<double>());
  EXPECT_GE(mc.at("ci95_high").get<double>(), mc.at("estimate").get<double>());
  ASSERT_EQ(s.at("rack_failures").size(), 2u);
  EXPECT_EQ(s["rack_failures"][0].at("failures"), 1);
  EXPECT_EQ(s["rack_failures"][0].at("exact"), 1.0);  // rack-aware groups survive one rack
  // 6 racks of 10 nodes (2, 2, 1, 2, 2, 1): all six can be lost.
  CliRun six = RunCli(
      "rate --nodes 10 --scheme replica:2 --failures 1 --racks 6 --rack-failures 1,6 --trials 0 "
      "--json");
  ASSERT_EQ(six.exit_code, 0) << six.output;
  const nlohmann::json sj = nlohmann::json::parse(six.output).at("schemes").at(0);
  EXPECT_EQ(sj.at("rack_conflicts"), 0) << sj.dump();
  EXPECT_EQ(sj.at("rack_failures").at(0).at("exact"), 1.0) << sj.dump();
  EXPECT_EQ(sj.at("rack_failures").at(1).at("failures"), 6) << sj.dump();
  EXPECT_EQ(sj.at("rack_failures").at(1).at("exact"), 0.0) << sj.dump();
  // --compare --json: every scheme, exact values only.
  CliRun c = RunCli("rate --nodes 1000000 --compare replica:2,rs:4+4 --failures 2,5 --json");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const nlohmann::json cj = nlohmann::json::parse(c.output);
  ASSERT_EQ(cj.at("schemes").size(), 2u);
  EXPECT_EQ(cj["schemes"][1].at("scheme"), "rs:4+4");
  const nlohmann::json& rs5 = cj["schemes"][1].at("node_failures").at(1);
  EXPECT_EQ(rs5.at("failures"), 5);
  EXPECT_FALSE(rs5.contains("monte_carlo"));
  EXPECT_GT(rs5.at("exact_loss").get<double>(), 0.0);  // ~5e-22, not rounded away
  EXPECT_LT(rs5.at("exact_loss").get<double>(), 1e-20);
}

// A probability within 5e-6 of 1 prints as 1 - x, never as 100.000%.
TEST(RateCommandTest, NearOneIsNotPrintedAsHundredPercent) {
  CliRun r = RunCli("rate --nodes 1000000 --scheme replica:2 --failures 1-2 --trials 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1          100.000%"), std::string::npos) << r.output;  // exactly 1
  EXPECT_NE(r.output.find("2          1 - 1.00e-06"), std::string::npos) << r.output;
  CliRun c = RunCli("rate --nodes 1000000 --compare replica:2:ring,rs:8+2 --failures 2,3");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("1 - 2.00e-06"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("1 - 7.20e-11"), std::string::npos) << c.output;
}

// An f whose failure sets are too many to count exactly leaves the others exact; with
// Monte Carlo it has that estimate alone; without, the command names the f refused.
TEST(RateCommandTest, AnFTooLargeForTheExactValueLeavesTheSmallerOnesExact) {
  CliRun r = RunCli("rate --nodes 100000 --scheme replica:2 --failures 2,3000 --trials 10 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = nlohmann::json::parse(r.output)["schemes"][0]["node_failures"];
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["failures"], 2);
  EXPECT_NEAR(rows[0]["exact"].get<double>(), 1 - 1 / 99999.0, 1e-12) << rows.dump();
  EXPECT_TRUE(rows[1]["exact"].is_null()) << rows.dump();
  EXPECT_TRUE(rows[1]["monte_carlo"].is_object()) << rows.dump();
  r = RunCli("rate --nodes 100000 --scheme replica:2 --failures 2,3000 --trials 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("C(100000, 3000)"), std::string::npos) << r.output;
}

// Numbers are decimal digits only; each refusal names the flag and the value.
TEST(RateCommandTest, NonDecimalNumbersAreRefusedByName) {
  struct Case {
    const char* args;
    const char* message;
    const char* absent = nullptr;  // not in the output
  } cases[] = {
      {"--nodes ' 5' --scheme none", "--nodes ' 5'"},
      {"--nodes +5 --scheme none", "--nodes '+5'"},
      {"--nodes 0x10 --scheme none", "--nodes '0x10'"},
      {"--nodes 16 --scheme none --trials 1e3", "--trials '1e3'"},
      {"--nodes 16 --scheme none --seed -1", "--seed '-1'"},
      {"--nodes 16 --scheme none --racks 010x", "--racks '010x'"},
      {"--nodes 16 --scheme none --racks 17", "--racks '17'"},
      {"--nodes 16 --scheme none --failures 0x3", "--failures '0x3'"},
      {"--nodes 16 --scheme none --failures ' 3'", "--failures ' 3'"},
      {"--nodes 16 --scheme none --racks 4 --rack-failures +1", "--rack-failures '+1'"},
      {"--nodes 0 --scheme none", "--nodes '0'"},
      {"--nodes 16 --scheme none --rack-failures 2", "--rack-failures requires --racks"},
      // Digits past the range: the range is what is wrong.
      {"--nodes 16 --scheme none --seed 9223372036854775808",
       "--seed '9223372036854775808': expected a non-negative", "decimal digits only"},
      {"--nodes 16 --scheme none --failures 99999999999999999999",
       "--failures '99999999999999999999': accepted forms", "decimal digits only"},
  };
  for (const Case& c : cases) {
    CliRun r = RunCli(std::string("rate ") + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
    if (c.absent) {
      EXPECT_EQ(r.output.find(c.absent), std::string::npos) << r.output;
    }
  }
  // Any seed up to 2^63 - 1 (19 digits).
  CliRun big = RunCli("rate --nodes 16 --scheme replica:2 --failures 2 --seed 9223372036854775807");
  EXPECT_EQ(big.exit_code, 0) << big.output;
  EXPECT_NE(big.output.find("seed 9223372036854775807"), std::string::npos) << big.output;
}

TEST(RateCommandTest, PlacementThatContradictsTheSchemeIsAnError) {
  CliRun bad = RunCli("rate --nodes 16 --scheme replica:2:ring --placement group --trials 0");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--placement group conflicts with --scheme 'replica:2:ring'"),
            std::string::npos)
      << bad.output;
  CliRun compare = RunCli("rate --nodes 16 --compare replica:2,replica:2:group --placement ring");
  EXPECT_EQ(compare.exit_code, 2) << compare.output;
  EXPECT_NE(compare.output.find("conflicts with --compare 'replica:2:group'"), std::string::npos)
      << compare.output;
  // Agreeing, or a scheme that names no placement: fine.
  CliRun same = RunCli(
      "rate --nodes 16 --scheme replica:2:ring --placement ring --failures 2 "
      "--trials 0");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("86.667%"), std::string::npos) << same.output;
  CliRun plain = RunCli("rate --nodes 16 --scheme replica:2 --placement ring --trials 0");
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("scheme replica:2:ring"), std::string::npos) << plain.output;
}

// Errors read as sentences for the user, not as traces of the code that produced them.
TEST(RateCommandTest, ErrorsCarryNoInternalExpressions) {
  for (const char* args : {"--nodes 2 --scheme replica:3", "--nodes 1 --scheme xor:3",
                           "--nodes 16 --scheme rs:6+2 --racks 4 --rack-failures 5",
                           "--nodes 1000000 --scheme replica:2 --failures 400000 --trials 0"}) {
    CliRun r = RunCli(std::string("rate ") + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    for (const char* internal :
         {"ValidateFor", "(n)", "FromMap", "ParseInt", "scheme.", "layout", "RackNodes", "Exact"}) {
      EXPECT_EQ(r.output.find(internal), std::string::npos) << args << "\n" << r.output;
    }
  }
  CliRun range = RunCli("rate --nodes 1000000 --scheme replica:2 --failures 400000 --trials 0");
  EXPECT_NE(range.output.find("--failures"), std::string::npos) << range.output;
  EXPECT_NE(range.output.find("Monte Carlo"), std::string::npos) << range.output;
}

TEST(RateCommandTest, BadArgumentsExitTwoNamingTheFlag) {
  CliRun bad = RunCli("rate --nodes 16 --scheme replica:two");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--scheme: bad scheme 'replica:two'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("accepted forms are"), std::string::npos) << bad.output;
  CliRun impossible = RunCli("rate --nodes 2 --scheme replica:3");
  EXPECT_EQ(impossible.exit_code, 2);
  EXPECT_NE(impossible.output.find("replica:3 on 2 nodes"), std::string::npos) << impossible.output;
  CliRun failures = RunCli("rate --nodes 16 --scheme replica:2 --failures 3-x");
  EXPECT_EQ(failures.exit_code, 2);
  EXPECT_NE(failures.output.find("--failures '3-x'"), std::string::npos) << failures.output;
  // A flag given with an empty value is refused by name, not taken as left out.
  for (const char* given : {"--failures", "--placement", "--racks", "--scheme", "--compare"}) {
    const std::string scheme = std::string(given) == "--scheme" || std::string(given) == "--compare"
                                   ? ""
                                   : "--scheme replica:2 ";
    CliRun empty = RunCli("rate --nodes 16 --trials 0 " + scheme + given + " ''");
    EXPECT_EQ(empty.exit_code, 2) << given << ": " << empty.output;
    EXPECT_NE(empty.output.find(given), std::string::npos) << given << ": " << empty.output;
    EXPECT_NE(empty.output.find("expected a value"), std::string::npos)
        << given << ": " << empty.output;
  }
  CliRun flag = RunCli("rate --nodes 16 --scheme none --frobnicate 1");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.output.find("unknown flag or unexpected argument: '--frobnicate' '1'"),
            std::string::npos)
      << flag.output;
  CliRun missing = RunCli("rate --scheme none");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--nodes is required"), std::string::npos) << missing.output;
  CliRun neither = RunCli("rate --nodes 4");
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_NE(neither.output.find("give --scheme S or --compare"), std::string::npos);
  CliRun both = RunCli("rate --nodes 4 --scheme none --compare none");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.output.find("--scheme excludes --compare"), std::string::npos) << both.output;
  CliRun twice = RunCli("rate --nodes 4 --nodes 5 --scheme none");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.output.find("--nodes"), std::string::npos) << twice.output;
  CliRun xor_ring = RunCli("rate --nodes 4 --scheme xor:3 --placement ring");
  EXPECT_EQ(xor_ring.exit_code, 2);
  EXPECT_NE(xor_ring.output.find("--placement applies to replica:M schemes only"),
            std::string::npos);
  CliRun help = RunCli("rate --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* s :
       {"--compare", "--nodes", "--failures", "--trials", "--racks", "--json", "examples:"}) {
    EXPECT_NE(help.output.find(s), std::string::npos) << s;
  }
  CliRun top = RunCli("");
  EXPECT_EQ(top.exit_code, 2);
  for (const char* s : {"rate", "inspect", "clean"}) {
    EXPECT_NE(top.output.find(s), std::string::npos) << s << "\n" << top.output;
  }
  CliRun unknown = RunCli("frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown subcommand 'frobnicate'"), std::string::npos);
  EXPECT_EQ(RunCli("--help").exit_code, 0);
  EXPECT_EQ(RunCli("help").exit_code, 0);
}
#endif

}  // namespace
