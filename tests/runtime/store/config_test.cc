#include "memento/runtime/config.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "memento/runtime/node_identity.h"
#include "test_job.h"

namespace memento::runtime {
namespace {

TEST(Config, DefaultsAreValid) {
  auto c = Config::FromMap({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job, "memento");
  EXPECT_EQ(c->scheme, "none");
  EXPECT_EQ(c->slots, 2);
  EXPECT_EQ(c->persist_every, 10);
  EXPECT_EQ(c->persist_keep, 2);
  EXPECT_EQ(c->chunk_bytes, 4u << 20);
  EXPECT_EQ(c->threads, 0);  // auto
  EXPECT_EQ(c->log_level, LogLevel::kWarn);
  EXPECT_EQ(c->stale_policy, StalePolicy::kError);
  EXPECT_TRUE(c->remote_dir.empty());
  EXPECT_TRUE(Config().Validate().ok());
}

TEST(Config, ParsesEveryVariable) {
  auto c = Config::FromMap({{"MEMENTO_JOB", "run-7_a"},
                            {"MEMENTO_NODE", "nodeA"},
                            {"MEMENTO_RANKS_PER_NODE", "4"},
                            {"MEMENTO_SCHEME", "rs:4+2"},
                            {"MEMENTO_SLOTS", "3"},
                            {"MEMENTO_REMOTE", "/tmp/remote"},
                            {"MEMENTO_PERSIST_EVERY", "0"},
                            {"MEMENTO_PERSIST_KEEP", "5"},
                            {"MEMENTO_LOG", "debug"},
                            {"MEMENTO_CHUNK_BYTES", "8M"},
                            {"MEMENTO_THREADS", "4"},
                            {"MEMENTO_TIMEOUT_S", "2.5"},
                            {"MEMENTO_STALE", "replace"},
                            {"MEMENTO_INTERVAL", "7"},
                            {"MEMENTO_NODE_MTBF_H", "0.5"},
                            {"MEMENTO_ELASTIC", "1"},
                            {"MEMENTO_BACKGROUND_REPROTECT", "0"},
                            {"MEMENTO_SHM_DIR", "/mnt/huge-shm"},
                            {"MEMENTO_RESUME_FINISHED", "1"},
                            {"MEMENTO_KEEP_FINISHED", "1"},
                            {"MEMENTO_REMOTE_FORMAT", "dcp"},
                            {"MEMENTO_RESTORE_FROM", "/ckpt/step-100"},
                            {"MEMENTO_TRANSPORT_DEVICE", "nccl"},
                            {"MEMENTO_DEVICE_COPY", "staged"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->device_transport, "nccl");
  EXPECT_EQ(Config().device_transport, "off") << "the default";
  EXPECT_EQ(c->device_copy, "staged");
  EXPECT_EQ(Config().device_copy, "direct") << "the default";
  EXPECT_NE(c->ToString().find("MEMENTO_DEVICE_COPY=staged"), std::string::npos);
  EXPECT_EQ(c->remote_format, "dcp");
  EXPECT_EQ(Config().remote_format, "memento") << "the default";
  EXPECT_EQ(c->restore_from, "/ckpt/step-100");
  EXPECT_TRUE(c->resume_finished);
  EXPECT_TRUE(c->keep_finished);
  EXPECT_TRUE(c->elastic);
  EXPECT_FALSE(c->background_reprotect);
  EXPECT_TRUE(Config().background_reprotect) << "the default";
  EXPECT_EQ(c->interval, 7);
  EXPECT_DOUBLE_EQ(c->node_mtbf_h, 0.5);
  EXPECT_EQ(c->job, "run-7_a");
  EXPECT_EQ(c->node, "nodeA");
  EXPECT_EQ(c->ranks_per_node, 4);
  EXPECT_EQ(c->scheme, "rs:4+2");
  EXPECT_EQ(c->slots, 3);
  EXPECT_EQ(c->remote_dir, "/tmp/remote");
  EXPECT_EQ(c->persist_every, 0);
  EXPECT_EQ(c->persist_keep, 5);
  EXPECT_EQ(c->log_level, LogLevel::kDebug);
  EXPECT_EQ(c->chunk_bytes, 8u << 20);
  EXPECT_EQ(c->threads, 4);
  EXPECT_DOUBLE_EQ(c->timeout_s, 2.5);
  EXPECT_EQ(c->stale_policy, StalePolicy::kReplace);
  EXPECT_EQ(c->shm_dir, "/mnt/huge-shm");  // FromMap checks the form only, FromEnv the directory
  EXPECT_EQ(Config::VariableNames().size(), 24u);
}

// A bad value names the variable, the value and the accepted forms.
TEST(Config, BadValuesNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"MEMENTO_JOB", "a/b"},
      {"MEMENTO_ELASTIC", "yes"},
      {"MEMENTO_BACKGROUND_REPROTECT", "on"},
      {"MEMENTO_JOB", "a.b"},
      {"MEMENTO_JOB", ""},
      {"MEMENTO_JOB", std::string(49, 'x')},
      {"MEMENTO_RANKS_PER_NODE", "-1"},
      {"MEMENTO_RANKS_PER_NODE", "2x"},
      {"MEMENTO_SCHEME", "raid5"},
      {"MEMENTO_SCHEME", "replica:1"},
      {"MEMENTO_SCHEME", "replica:2:star"},
      {"MEMENTO_SCHEME", "xor:0"},
      {"MEMENTO_SCHEME", "rs:4"},
      {"MEMENTO_SCHEME", "rs:4+"},
      {"MEMENTO_TRANSPORT_DEVICE", "gpu"},
      {"MEMENTO_DEVICE_COPY", "bounce"},
      {"MEMENTO_DEVICE_COPY", "Staged"},
      {"MEMENTO_SLOTS", "1"},
      {"MEMENTO_SLOTS", "two"},
      {"MEMENTO_PERSIST_EVERY", "-3"},
      {"MEMENTO_PERSIST_KEEP", "0"},
      {"MEMENTO_LOG", "verbose"},
      {"MEMENTO_CHUNK_BYTES", "4T"},
      {"MEMENTO_CHUNK_BYTES", "100"},
      {"MEMENTO_CHUNK_BYTES", "2G"},
      {"MEMENTO_THREADS", "0"},
      {"MEMENTO_TIMEOUT_S", "0"},
      {"MEMENTO_TIMEOUT_S", "abc"},
      {"MEMENTO_TIMEOUT_S", "inf"},
      {"MEMENTO_STALE", "keep"},
      {"MEMENTO_NODE", std::string(201, 'n')},
      {"MEMENTO_INTERVAL", "0"},
      {"MEMENTO_INTERVAL", "-2"},
      {"MEMENTO_INTERVAL", "Auto"},
      {"MEMENTO_INTERVAL", "3.5"},
      {"MEMENTO_INTERVAL", ""},
      {"MEMENTO_NODE_MTBF_H", "0"},
      {"MEMENTO_NODE_MTBF_H", "-5"},
      {"MEMENTO_NODE_MTBF_H", "1e3"},
      {"MEMENTO_NODE_MTBF_H", "nan"},
      {"MEMENTO_SHM_DIR", "relative/dir"},
      {"MEMENTO_SHM_DIR", ""},
  };
  for (const auto& [var, value] : bad) {
    auto c = Config::FromMap({{var, value}});
    ASSERT_FALSE(c.ok()) << var << "=" << value;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(var), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find("accepted"), std::string::npos) << c.status().ToString();
  }
}

// MEMENTO_THREADS: auto by default; auto sizes the snapshot workers by where
// the buffers lie and the CPUs this rank may use; a number is taken as given.
TEST(Config, SnapshotThreadsAuto) {
  const Config def;
  EXPECT_EQ(def.threads, 0) << "auto is the default";
  EXPECT_NE(def.ToString().find("MEMENTO_THREADS=auto"), std::string::npos) << def.ToString();
  auto parsed = Config::FromMap({{"MEMENTO_THREADS", "auto"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->threads, 0);
  auto bad = Config::FromMap({{"MEMENTO_THREADS", "Auto"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto or an integer 1..64"), std::string::npos)
      << bad.status().ToString();

  // (device_state, cpus of this process, cpus online, ranks on the node)
  EXPECT_EQ(def.SnapshotThreads(false, 64, 64, 1), 2) << "host buffers: two";
  EXPECT_EQ(def.SnapshotThreads(true, 16, 16, 1), 8) << "one rank on 16 CPUs: half";
  EXPECT_EQ(def.SnapshotThreads(true, 224, 224, 8), 8) << "at most eight";
  EXPECT_EQ(def.SnapshotThreads(true, 64, 64, 8), 4) << "8 unbound ranks share 64 CPUs";
  EXPECT_EQ(def.SnapshotThreads(true, 12, 96, 8), 6) << "a rank bound to 12 CPUs has them";
  EXPECT_EQ(def.SnapshotThreads(true, 2, 2, 1), 2) << "at least two";
  EXPECT_EQ(def.SnapshotThreads(true, 1, 96, 8), 2) << "bound to one CPU: still two";
  EXPECT_EQ(def.SnapshotThreads(true, 0, 0, 0), 2) << "nothing known: two";

  Config set;
  set.threads = 3;
  EXPECT_EQ(set.SnapshotThreads(true, 64, 64, 1), 3) << "a number is taken as given";
  EXPECT_EQ(set.SnapshotThreads(false, 64, 64, 1), 3);
  EXPECT_NE(set.ToString().find("MEMENTO_THREADS=3"), std::string::npos);
  set.threads = -1;
  EXPECT_FALSE(set.Validate().ok());
  set.threads = 0;
  EXPECT_TRUE(set.Validate().ok());
}

// The default saves at every Save call; auto needs the failure rate, and says so.
TEST(Config, AutoIntervalNeedsTheNodeMtbf) {
  auto d = Config::FromMap({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->interval, 1);
  auto missing = Config::FromMap({{"MEMENTO_INTERVAL", "auto"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("MEMENTO_INTERVAL=auto"), std::string::npos);
  EXPECT_NE(missing.status().message().find("MEMENTO_NODE_MTBF_H"), std::string::npos);
  auto good = Config::FromMap({{"MEMENTO_INTERVAL", "auto"}, {"MEMENTO_NODE_MTBF_H", "8760"}});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->interval, Config::kAutoInterval);
  EXPECT_NE(good->ToString().find("MEMENTO_INTERVAL=auto"), std::string::npos);
  Config in_code;
  in_code.interval = -1;
  EXPECT_NE(in_code.Validate().message().find("MEMENTO_INTERVAL"), std::string::npos);
}

TEST(Config, UnknownKeyInMapIsAnError) {
  auto c = Config::FromMap({{"MEMENTO_SLOT", "3"}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("MEMENTO_SLOT"), std::string::npos);
}

TEST(Config, SchemeSyntax) {
  for (const char* ok : {"none", "replica:2", "replica:3:group", "replica:2:ring", "xor:1", "xor:7",
                         "rs:4+2", "rs:1+1", "rs:12+4"}) {
    EXPECT_TRUE(ValidateSchemeSyntax(ok).ok()) << ok;
  }
  for (const char* bad : {"", "None", "replica", "replica:", "replica:2:", "xor", "xor:-1", "rs:+2",
                          "rs:4+2+1", "rs:a+b", "replica:2:ring:x", "replica:1", "xor:0", "rs:0+2", "rs:4+0"}) {
    EXPECT_FALSE(ValidateSchemeSyntax(bad).ok()) << bad;
  }
}

TEST(Config, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("4MiB"), 4u << 20);
  EXPECT_EQ(*ParseByteSize("1G"), 1u << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("M").ok());
  EXPECT_FALSE(ParseByteSize("1.5M").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseByteSize("17179869184G").ok());  // overflows 64 bits
  // Lower-case suffixes, as "k" always was.
  EXPECT_EQ(*ParseByteSize("64k"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("4m"), 4u << 20);
  EXPECT_EQ(*ParseByteSize("1g"), 1u << 30);
  EXPECT_EQ(ByteSizeText(2ull << 30), "2G");
  EXPECT_EQ(ByteSizeText(48u << 10), "48K");
  EXPECT_EQ(ByteSizeText(5000), "5000");
  EXPECT_EQ(ByteSizeText(0), "0");
  // A size out of range is named as given, not as the bytes it stands for.
  auto big = Config::FromMap({{"MEMENTO_CHUNK_BYTES", "2G"}});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("MEMENTO_CHUNK_BYTES='2G'"), std::string::npos)
      << big.status().ToString();
}

TEST(Config, FromEnvReadsTheEnvironment) {
  ASSERT_EQ(setenv("MEMENTO_SLOTS", "5", 1), 0);
  ASSERT_EQ(setenv("MEMENTO_JOB", "envjob", 1), 0);
  auto c = Config::FromEnv();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->slots, 5);
  EXPECT_EQ(c->job, "envjob");
  ASSERT_EQ(setenv("MEMENTO_SLOTS", "0", 1), 0);
  auto bad = Config::FromEnv();
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MEMENTO_SLOTS='0'"), std::string::npos);
  unsetenv("MEMENTO_SLOTS");
  unsetenv("MEMENTO_JOB");
  SetLogLevel(LogLevel::kWarn);
}

// MEMENTO_SHM_DIR must be a directory on a tmpfs: a job fails at start, naming
// the variable, rather than keeping its stores on a disk.
TEST(Config, ShmDirMustBeATmpfsDirectory) {
  const std::string dir = "/dev/shm/memento-tconfig-" + testing::ProcessTag();
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(setenv("MEMENTO_SHM_DIR", dir.c_str(), 1), 0);
  auto c = Config::FromEnv();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->shm_dir, dir);
  EXPECT_NE(c->ToString().find("MEMENTO_SHM_DIR=" + dir), std::string::npos);
  for (const std::string& bad : std::vector<std::string>{"/proc", dir + "/missing"}) {
    ASSERT_EQ(setenv("MEMENTO_SHM_DIR", bad.c_str(), 1), 0);
    auto b = Config::FromEnv();
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("MEMENTO_SHM_DIR='" + bad + "'"), std::string::npos)
        << b.status().ToString();
    EXPECT_NE(b.status().message().find("tmpfs"), std::string::npos) << b.status().ToString();
  }
  unsetenv("MEMENTO_SHM_DIR");
  ASSERT_EQ(rmdir(dir.c_str()), 0);
  auto d = Config::FromEnv();
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->shm_dir.empty());
  SetLogLevel(LogLevel::kWarn);
}

// A misspelt variable is an error naming it and the closest known name, unless
// MEMENTO_ALLOW_UNKNOWN=1; the harness's own names are not Config's.
TEST(Config, UnknownVariableInEnvironmentIsAnError) {
  ASSERT_EQ(setenv("MEMENTO_SLOT", "3", 1), 0);
  auto c = Config::FromEnv();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("unknown variable MEMENTO_SLOT "), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().message().find("did you mean MEMENTO_SLOTS?"), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().message().find("MEMENTO_ALLOW_UNKNOWN=1"), std::string::npos);
  ASSERT_EQ(setenv("MEMENTO_ALLOW_UNKNOWN", "1", 1), 0);
  EXPECT_TRUE(Config::FromEnv().ok());
  ASSERT_EQ(setenv("MEMENTO_ALLOW_UNKNOWN", "yes", 1), 0);
  auto bad = Config::FromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MEMENTO_ALLOW_UNKNOWN='yes'"), std::string::npos);
  unsetenv("MEMENTO_ALLOW_UNKNOWN");
  unsetenv("MEMENTO_SLOT");
  ASSERT_EQ(setenv("MEMENTO_TEST_ANYTHING", "1", 1), 0);
  ASSERT_EQ(setenv("MEMENTO_BUILD_DIR", "build", 1), 0);
  // What `memento launch` hands the job it runs is not a runtime variable.
  ASSERT_EQ(setenv("MEMENTO_LAUNCH_ATTEMPT", "2", 1), 0);
  ASSERT_EQ(setenv("MEMENTO_BENCH_CLI", "memento", 1), 0);
  EXPECT_TRUE(Config::FromEnv().ok());
  unsetenv("MEMENTO_TEST_ANYTHING");
  unsetenv("MEMENTO_BUILD_DIR");
  unsetenv("MEMENTO_LAUNCH_ATTEMPT");
  unsetenv("MEMENTO_BENCH_CLI");
  SetLogLevel(LogLevel::kWarn);
}

// A variable the scripts read (scripts/setup's MEMENTO_VENV, ...) may be exported in
// the shell that runs jobs: every one the scripts name is accepted.
TEST(Config, EveryVariableTheScriptsReadIsAccepted) {
  std::set<std::string> names;
  const std::regex read(R"(\$\{?(MEMENTO_[A-Z0-9_]+))");
  for (const auto& file :
       std::filesystem::recursive_directory_iterator(MEMENTO_SOURCE_DIR "/scripts")) {
    if (!file.is_regular_file()) continue;
    std::ifstream in(file.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator m(text.begin(), text.end(), read), end; m != end; ++m) {
      names.insert((*m)[1]);
    }
  }
  ASSERT_GE(names.size(), 6u) << "the scripts under " MEMENTO_SOURCE_DIR "/scripts were not read";
  const auto& runtime = Config::VariableNames();
  for (const std::string& name : names) {
    if (std::find(runtime.begin(), runtime.end(), name) != runtime.end()) continue;
    ASSERT_EQ(setenv(name.c_str(), "1", 1), 0);
    auto c = Config::FromEnv();
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    unsetenv(name.c_str());
  }
}

// A remote directory that persists could not use is refused when read, and a
// relative one is resolved once against the working directory.
TEST(Config, UnusableRemoteIsRefusedWhenRead) {
  char tmpl[] = "/tmp/memento-cfg-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string file = dir + "/a-file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  for (const std::string& bad :
       {file, std::string("/dev/null"), std::string("/proc/self"), dir + "/missing/parent"}) {
    ASSERT_EQ(setenv("MEMENTO_REMOTE", bad.c_str(), 1), 0);
    auto c = Config::FromEnv();
    ASSERT_FALSE(c.ok()) << bad << " accepted";
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("MEMENTO_REMOTE='" + bad + "'"), std::string::npos)
        << c.status().ToString();
  }
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  ASSERT_EQ(setenv("MEMENTO_REMOTE", "relative", 1), 0);
  auto c = Config::FromEnv();
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->remote_dir, dir + "/relative");
  struct stat st;
  EXPECT_EQ(stat(c->remote_dir.c_str(), &st), 0);
  unsetenv("MEMENTO_REMOTE");
  SetLogLevel(LogLevel::kWarn);
  std::string rm = "rm -rf " + dir;
  ASSERT_EQ(std::system(rm.c_str()), 0);
}

// Numbers are plain decimals: blanks, signs and hexadecimal are refused.
TEST(Config, NumbersAreStrictDecimals) {
  for (const char* value : {" 5", "5 ", "+5", "0x10", "5\n", "1e1", "-0"}) {
    auto c = Config::FromMap({{"MEMENTO_SLOTS", value}});
    EXPECT_FALSE(c.ok()) << "MEMENTO_SLOTS='" << value << "' accepted";
    auto p = Config::FromMap({{"MEMENTO_PERSIST_EVERY", value}});
    EXPECT_FALSE(p.ok()) << "MEMENTO_PERSIST_EVERY='" << value << "' accepted";
  }
  for (const char* value : {" 5", "+5", "0x10", "1e3", "nan", "5.", ".", "1.2.3", "-1", "0.0001",
                            "0.0009", "86401"}) {
    auto c = Config::FromMap({{"MEMENTO_TIMEOUT_S", value}});
    EXPECT_FALSE(c.ok()) << "MEMENTO_TIMEOUT_S='" << value << "' accepted";
  }
  EXPECT_EQ(Config::FromMap({{"MEMENTO_SLOTS", "010"}})->slots, 10);
  EXPECT_DOUBLE_EQ(Config::FromMap({{"MEMENTO_TIMEOUT_S", ".5"}})->timeout_s, 0.5);
}

// Error texts name the variable and the accepted forms, not the code that
// produced them.
TEST(Config, ErrorsDoNotExposeInternalExpressions) {
  for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"MEMENTO_SLOTS", "x"}, {"MEMENTO_JOB", "a/b"}, {"MEMENTO_TIMEOUT_S", "0"},
           {"MEMENTO_THREADS", "99"}, {"MEMENTO_SCHEME", "raid"}}) {
    auto c = Config::FromMap({{var, value}});
    ASSERT_FALSE(c.ok());
    const std::string m = c.status().message();
    for (const char* internal : {"FromMap", "ParseInt", "ValidateJobId", "Validate(", "value,"}) {
      EXPECT_EQ(m.find(internal), std::string::npos) << m;
    }
  }
}

// Sub-millisecond fractions round up; 0 ("wait forever") is never produced.
TEST(Config, TimeoutRoundsUpToWholeMilliseconds) {
  Config c;
  EXPECT_EQ(c.timeout(), std::chrono::milliseconds(300000));
  c.timeout_s = 0.001;
  EXPECT_EQ(c.timeout(), std::chrono::milliseconds(1));
  c.timeout_s = 0.0015;
  EXPECT_EQ(c.timeout(), std::chrono::milliseconds(2));
  c.timeout_s = 2.5;
  EXPECT_EQ(c.timeout(), std::chrono::milliseconds(2500));
  c.timeout_s = 0.0004;
  EXPECT_FALSE(c.Validate().ok());
  unsetenv("MEMENTO_TIMEOUT_S");
  EXPECT_EQ(*TimeoutFromEnv(), std::chrono::milliseconds(300000));
  ASSERT_EQ(setenv("MEMENTO_TIMEOUT_S", "0.0015", 1), 0);
  EXPECT_EQ(*TimeoutFromEnv(), std::chrono::milliseconds(2));
  ASSERT_EQ(setenv("MEMENTO_TIMEOUT_S", "0.0001", 1), 0);
  auto bad = TimeoutFromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MEMENTO_TIMEOUT_S='0.0001'"), std::string::npos);
  unsetenv("MEMENTO_TIMEOUT_S");
}

TEST(NodeIdentity, HostOrNodeAndVirtualNodes) {
  Config c;
  EXPECT_EQ(NodeIdentity(c, 5), HostName());
  EXPECT_EQ(LocalRank(c, 5), -1);
  c.node = "nodeA";
  EXPECT_EQ(NodeIdentity(c, 5), "nodeA");
  c.ranks_per_node = 2;
  EXPECT_EQ(NodeIdentity(c, 0), "nodeA/0");
  EXPECT_EQ(NodeIdentity(c, 1), "nodeA/0");
  EXPECT_EQ(NodeIdentity(c, 5), "nodeA/2");
  EXPECT_EQ(LocalRank(c, 5), 1);
  c.node.clear();
  EXPECT_EQ(NodeIdentity(c, 3), HostName() + "/1");
}

// A host name of the longest length Linux allows (64 bytes) is the node's
// identity, not a fallback shared by every such host. Set in a child's own
// UTS namespace (needs CAP_SYS_ADMIN, as root in CI).
TEST(NodeIdentity, TheLongestHostNameIsKeptWhole) {
  const std::string name(64, 'h');
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWUTS) != 0) _exit(errno == EPERM ? 3 : 2);
    if (sethostname(name.data(), name.size()) != 0) _exit(2);
    _exit(HostName() == name ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "no permission for a UTS namespace (not root)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "HostName() is not the 64-byte host name";
}

TEST(NodeIdentity, LocalRankAmongIdentities) {
  std::vector<std::string> ids = {"a", "b", "a", "a", "b"};
  EXPECT_EQ(LocalRankAmong(ids, 0), 0);
  EXPECT_EQ(LocalRankAmong(ids, 1), 0);
  EXPECT_EQ(LocalRankAmong(ids, 2), 1);
  EXPECT_EQ(LocalRankAmong(ids, 3), 2);
  EXPECT_EQ(LocalRankAmong(ids, 4), 1);
}

// Without MEMENTO_JOB the job id comes from a launcher whose id is stable
// across relaunches: torchrun's run id (not its default "none"), else Slurm's
// job id, mapped to the job id's characters and length.
TEST(Config, JobIdFromTheLauncher) {
  unsetenv("MEMENTO_JOB");
  unsetenv("TORCHELASTIC_RUN_ID");
  unsetenv("SLURM_JOB_ID");
  std::string source = "?";
  EXPECT_EQ(JobIdFromLauncher(&source), "");
  EXPECT_EQ(source, "");
  ASSERT_EQ(setenv("TORCHELASTIC_RUN_ID", "none", 1), 0);
  EXPECT_EQ(JobIdFromLauncher(), "") << "torchrun's default run id names no job";
  ASSERT_EQ(setenv("TORCHELASTIC_RUN_ID", "3f2b8c1e-9d4a-4b7e-a1c2-5e6f7a8b9c0d", 1), 0);
  EXPECT_EQ(JobIdFromLauncher(), "") << "--standalone's run id is drawn anew per torchrun";
  ASSERT_EQ(setenv("SLURM_JOB_ID", "4242", 1), 0);
  EXPECT_EQ(JobIdFromLauncher(&source), "4242");
  EXPECT_EQ(source, "SLURM_JOB_ID");
  ASSERT_EQ(setenv("TORCHELASTIC_RUN_ID", "exp.7/run a", 1), 0);
  EXPECT_EQ(JobIdFromLauncher(&source), "exp_7_run_a");
  EXPECT_EQ(source, "TORCHELASTIC_RUN_ID");
  auto c = Config::FromEnv();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job, "exp_7_run_a");
  auto keyword = Config::FromEnv({{"MEMENTO_JOB", "given"}});
  ASSERT_TRUE(keyword.ok()) << keyword.status().ToString();
  EXPECT_EQ(keyword->job, "given") << "MEMENTO_JOB (or the keyword) wins";
  const std::string long_id(70, 'x');
  ASSERT_EQ(setenv("TORCHELASTIC_RUN_ID", (long_id + "1").c_str(), 1), 0);
  const std::string a = JobIdFromLauncher();
  ASSERT_EQ(setenv("TORCHELASTIC_RUN_ID", (long_id + "2").c_str(), 1), 0);
  const std::string b = JobIdFromLauncher();
  EXPECT_EQ(a.size(), 48u);
  EXPECT_TRUE(ValidateJobId(a).ok()) << a;
  EXPECT_NE(a, b) << "long ids that differ only at the end stay apart";
  unsetenv("TORCHELASTIC_RUN_ID");
  unsetenv("SLURM_JOB_ID");
  SetLogLevel(LogLevel::kWarn);
}

TEST(Config, FinishedRunSettings) {
  auto c = Config::FromMap({{"MEMENTO_RESUME_FINISHED", "1"}, {"MEMENTO_KEEP_FINISHED", "1"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->resume_finished);
  EXPECT_TRUE(c->keep_finished);
  EXPECT_FALSE(Config().resume_finished);
  EXPECT_FALSE(Config().keep_finished);
  auto bad = Config::FromMap({{"MEMENTO_KEEP_FINISHED", "yes"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MEMENTO_KEEP_FINISHED='yes'"), std::string::npos);
}

}  // namespace
}  // namespace memento::runtime
