// Runs the built `memento inspect` / `memento clean` on real shared-memory segments and
// the bench drivers on tiny inputs, and parses their JSON output back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento {
namespace {

struct ToolRun {
  int exit_code;
  std::string out;  // stdout only
  std::string all;  // stdout and stderr
};

ToolRun RunCommand(const std::string& cmd) {
  ToolRun r{-1, "", ""};
  const std::string err_file = "/tmp/memento_tool_test_" + std::to_string(getpid()) + ".stderr";
  FILE* p = popen((cmd + " 2>" + err_file).c_str(), "r");
  EXPECT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.all = r.out;
  if (FILE* e = std::fopen(err_file.c_str(), "r")) {
    while ((n = fread(buf, 1, sizeof(buf), e)) > 0) r.all.append(buf, n);
    std::fclose(e);
  }
  std::remove(err_file.c_str());
  return r;
}

#ifdef MEMENTO_CLI_PATH
std::string UniqueJob() {
  static int counter = 0;
  return "ttool-" + runtime::testing::ProcessTag() + "-" + std::to_string(counter++);
}

// Unlinks the job's segments however the test ends.
struct JobCleaner {
  std::string job;
  ~JobCleaner() { (void)runtime::CleanJob(job); }
};

runtime::NodeStore MakeStore(const std::string& job, const std::string& node, uint64_t v) {
  runtime::StoreLayout layout;
  layout.regions.push_back(
      {runtime::RegionKind::kShard, "weights", 1000, 0, 0, 0, {"float32", {250}, {250}, {0}}});
  auto store = runtime::NodeStore::Create({job, node, 0}, layout, 2);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  const int slot = *store->BeginWrite(v);
  uint8_t* p = store->MutableRegion(slot, 0);
  std::memset(p, 7, 1000);
  EXPECT_TRUE(store->SealRegion(slot, 0, 1000, erasure::Crc32c(p, 1000)).ok());
  EXPECT_TRUE(store->SealSlot(slot, v).ok());
  EXPECT_TRUE(store->MarkCommitted(slot, v).ok());
  return std::move(*store);
}

TEST(ToolOutputTest, InspectJsonParsesBackAndCleanNamesItsFlag) {
  const std::string cli = MEMENTO_CLI_PATH;
  JobCleaner job{UniqueJob()};
  runtime::NodeStore a = MakeStore(job.job, "vnode/0", 12);
  runtime::NodeStore b = MakeStore(job.job, "vnode/1", 12);
  ToolRun r = RunCommand(cli + " inspect --job " + job.job + " --verify --json");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("job"), job.job);
  EXPECT_EQ(j.at("verified"), true);
  EXPECT_EQ(j.at("valid"), true);
  EXPECT_EQ(j.at("store_directory"), runtime::ShmSegment::Directory());
  EXPECT_EQ(j.at("store_huge_pages"), runtime::ShmSegment::HugePages());
  ASSERT_EQ(j.at("segments").size(), 2u);
  const nlohmann::json& seg = j["segments"][0];
  EXPECT_EQ(seg.at("name"), a.segment_name());
  EXPECT_EQ(seg.at("usable"), true);
  EXPECT_EQ(seg.at("node"), "vnode/0");
  EXPECT_EQ(seg.at("regions"), nlohmann::json({"weights"}));
  EXPECT_EQ(j["segments"][1].at("node"), "vnode/1");
  bool committed = false;
  for (const nlohmann::json& slot : seg.at("slots")) {
    if (slot.at("state") != "committed") continue;
    committed = true;
    EXPECT_EQ(slot.at("version"), 12);
    const nlohmann::json& region = slot.at("regions").at(0);
    EXPECT_EQ(region.at("name"), "weights");
    EXPECT_EQ(region.at("length"), 1000);
    EXPECT_EQ(region.at("valid"), true);
    std::vector<uint8_t> bytes(1000, 7);
    char crc[16];
    std::snprintf(crc, sizeof(crc), "%08x", erasure::Crc32c(bytes.data(), bytes.size()));
    EXPECT_EQ(region.at("crc32c"), crc);
  }
  EXPECT_TRUE(committed) << r.out;

  // A flipped payload byte: --verify reports the region invalid, exit code 1.
  auto view = a.ReadRegion(*a.FindVersion(12), 0);
  const_cast<uint8_t*>(view->data)[999] ^= 0x80;
  r = RunCommand(cli + " inspect --job " + job.job + " --verify --json");
  EXPECT_EQ(r.exit_code, 1) << r.all;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("valid"), false);
  bool flagged = false;
  for (const nlohmann::json& slot : j["segments"][0].at("slots")) {
    if (!slot.contains("regions")) continue;
    for (const nlohmann::json& region : slot["regions"]) {
      if (region.at("valid") == false) {
        flagged = true;
        EXPECT_NE(region.at("problem").get<std::string>().find("crc32c"), std::string::npos);
      }
    }
  }
  EXPECT_TRUE(flagged) << r.out;

  // A bad job id names --job (the flag the user typed), not MEMENTO_JOB.
  for (const char* sub : {"clean", "inspect"}) {
    r = RunCommand(cli + " " + sub + " --job ../x");
    EXPECT_EQ(r.exit_code, 2) << r.all;
    EXPECT_NE(r.all.find("--job '../x'"), std::string::npos) << r.all;
    EXPECT_EQ(r.all.find("MEMENTO_JOB"), std::string::npos) << r.all;
  }
  r = RunCommand(cli + " clean");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.all.find("--job is required"), std::string::npos) << r.all;

  // This process holds both stores, as a running rank does: they stay, each named with
  // its pid, until --force.
  r = RunCommand(cli + " clean --job " + job.job + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("removed").empty()) << r.out;
  ASSERT_EQ(j.at("left_in_use").size(), 2u) << r.out;
  for (const nlohmann::json& name : j["left_in_use"]) {
    EXPECT_NE(name.get<std::string>().find("in use by the running process " +
                                           std::to_string(getpid())),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(runtime::ListJobSegments(job.job)->size(), 2u);
  r = RunCommand(cli + " clean --job " + job.job);
  ASSERT_EQ(r.exit_code, 0) << r.all;
  EXPECT_NE(r.out.find(": --force removes it"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 segment(s)"), std::string::npos) << r.out;
  r = RunCommand(cli + " clean --job " + job.job + " --force --json");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("job"), job.job);
  EXPECT_EQ(j.at("ok"), true);
  EXPECT_EQ(j.at("removed").size(), 2u) << r.out;
  EXPECT_TRUE(j.at("left_in_use").empty()) << r.out;
  for (const nlohmann::json& name : j["removed"]) {
    EXPECT_NE(name.get<std::string>().find(job.job), std::string::npos) << r.out;
  }
  EXPECT_TRUE(j.at("left_to_other_users").empty());
  EXPECT_FALSE(j.contains("error"));
  r = RunCommand(cli + " clean --job " + job.job);  // nothing left
  ASSERT_EQ(r.exit_code, 0) << r.all;
  EXPECT_NE(r.out.find("0 segment(s)"), std::string::npos) << r.out;
  r = RunCommand(cli + " inspect --job " + job.job + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  EXPECT_TRUE(nlohmann::json::parse(r.out).at("segments").empty());
}
#endif

#ifdef MEMENTO_BENCH_ERASURE_PATH
TEST(ToolOutputTest, BenchErasureJsonLinesParseBack) {
  ToolRun r = RunCommand(std::string(MEMENTO_BENCH_ERASURE_PATH) +
                         " --json --bytes 4096 --reps 1 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  int lines = 0;
  size_t start = 0;
  while (start < r.out.size()) {
    const size_t end = r.out.find('\n', start);
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(start, end - start));
    EXPECT_EQ(j.at("threads"), 1);
    EXPECT_EQ(j.at("reps"), 1);
    EXPECT_GT(j.at("encode_gbps").get<double>(), 0);
    EXPECT_GT(j.at("memcpy_gbps").get<double>(), 0);
    EXPECT_NEAR(j.at("encode_vs_memcpy").get<double>(),
                j["encode_gbps"].get<double>() / j["memcpy_gbps"].get<double>(), 1e-9);
    EXPECT_TRUE(j.at("codec") == "xor" || j.at("codec") == "rs");
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 5);  // xor 4+1, 8+1, rs 4+2, 6+2, 8+3
  r = RunCommand(std::string(MEMENTO_BENCH_ERASURE_PATH) +
                 " --copy-crc --json --bytes 4096 --reps 1 --threads 1,2");
  ASSERT_EQ(r.exit_code, 0) << r.all;
  lines = 0;
  start = 0;
  while (start < r.out.size()) {
    const size_t end = r.out.find('\n', start);
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(start, end - start));
    EXPECT_EQ(j.at("measure"), "copy_crc32c");
    EXPECT_EQ(j.at("threads"), lines + 1);
    EXPECT_GT(j.at("update_copy_gbps").get<double>(), 0);
    EXPECT_NEAR(j.at("update_copy_vs_memcpy").get<double>(),
                j["update_copy_gbps"].get<double>() / j["memcpy_gbps"].get<double>(), 1e-9);
    EXPECT_NEAR(j.at("update_copy_vs_then_crc").get<double>(),
                j["update_copy_gbps"].get<double>() / j["then_crc_gbps"].get<double>(), 1e-9);
    ++lines;
    start = end + 1;
  }
  EXPECT_EQ(lines, 2);  // one per thread count
  for (const char* bad : {"--bytes 0x1000", "--bytes ' 4096'", "--reps +1", "--threads 1,x"}) {
    r = RunCommand(std::string(MEMENTO_BENCH_ERASURE_PATH) + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.all;
    const std::string flag = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.all.find(flag), std::string::npos) << bad << "\n" << r.all;
  }
}
#endif

#ifdef MEMENTO_BENCH_REMOTE_COMPRESS_PATH
TEST(ToolOutputTest, BenchRemoteCompressJsonParsesBack) {
  const std::string dir = "/tmp/memento_tool_test_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  ToolRun r = RunCommand(std::string(MEMENTO_BENCH_REMOTE_COMPRESS_PATH) +
                         " --mib 1 --reps 1 --dir " + dir);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.all;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("bytes"), 1 << 20);
  EXPECT_EQ(j.at("dir"), dir);
  EXPECT_GT(j.at("write_raw_fsync_MBps").get<double>(), 0);
  ASSERT_EQ(j.at("sets").size(), 3u);
  for (const nlohmann::json& set : j["sets"]) {
    ASSERT_EQ(set.at("levels").size(), 3u);
    for (const nlohmann::json& level : set["levels"]) {
      EXPECT_GT(level.at("ratio").get<double>(), 0);
      EXPECT_GT(level.at("decompress_MBps").get<double>(), 0);
    }
  }
  r = RunCommand(std::string(MEMENTO_BENCH_REMOTE_COMPRESS_PATH) + " --mib 0x10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.all.find("--mib"), std::string::npos) << r.all;
}
#endif

}  // namespace
}  // namespace memento
