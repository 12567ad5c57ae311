#include "cli_runner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>

namespace memento::testing {

CliRun RunCli(const std::string& args) {
#ifdef MEMENTO_CLI_PATH
  const std::string cmd = std::string(MEMENTO_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
#else
  ADD_FAILURE() << "built without the memento CLI: cannot run memento " << args;
  return {-1, ""};
#endif
}

}  // namespace memento::testing
