// Runs the built `memento rate` and checks its output and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace {

#ifdef MEMENTO_CLI_PATH
struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

CliRun RunCli(const std::string& args) {
  const std::string cmd = std::string(MEMENTO_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

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
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"scheme\":\"xor:3\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"rack_failures\":[{\"failures\":1,\"exact\":1"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\"ci95_low\""), std::string::npos) << r.output;
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
  CliRun flag = RunCli("rate --nodes 16 --scheme none --frobnicate 1");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.output.find("unknown flag '--frobnicate'"), std::string::npos);
  EXPECT_EQ(RunCli("rate --scheme none").exit_code, 2);
  EXPECT_EQ(RunCli("rate --nodes 4 --scheme xor:3 --placement ring").exit_code, 2);
  CliRun help = RunCli("rate --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--compare"), std::string::npos);
}
#endif

}  // namespace
