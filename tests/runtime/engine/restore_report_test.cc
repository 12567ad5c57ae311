// RestoreReport::ToJson is valid JSON whatever the entry names hold, and
// keeps the keys the recovery report records have always had.
#include "memento/runtime/restore_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace memento::runtime {
namespace {

RestoreReport Sample() {
  RestoreReport r;
  r.version = 12;
  r.entries.push_back({"layer\"0\".weight\\bias\n", 64, 0xDEADBEEF, RestoreSource::kReplica});
  r.entries.push_back({"plain", 8, 1, RestoreSource::kLocalMemory});
  r.lost_nodes = {2};
  r.source_detail = "replica from node \"3\"";
  r.stats.bytes_sent = 100;
  r.stats.bytes_received = 200;
  r.stats.plan_read_bytes_per_node = {1, 2, 3, 4};
  r.stats.bytes_received_per_node = {0, 0, 64, 0};
  r.stats.reprotect_mode = "minimal";
  r.stats.reprotect_bytes_sent = 5;
  r.stats.reprotect_bytes_received = 6;
  r.stats.reprotect_bytes_received_per_node = {0, 0, 6, 0};
  r.stats.inventory_s = 0.5;
  r.plan_json = R"({"version":12,"shards":[]})";
  return r;
}

TEST(RestoreReport, JsonEscapesEntryNames) {
  const RestoreReport r = Sample();
  const std::string text = r.ToJson();
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;
  EXPECT_EQ(j["entries"][0]["name"], r.entries[0].name);
  EXPECT_EQ(j["source_detail"], r.source_detail);
}

TEST(RestoreReport, JsonKeepsEveryKey) {
  auto j = nlohmann::json::parse(Sample().ToJson());
  EXPECT_EQ(j["version"], 12);
  EXPECT_EQ(j["entries"][0]["bytes"], 64);
  EXPECT_EQ(j["entries"][0]["crc"], 0xDEADBEEFu);
  EXPECT_EQ(j["entries"][0]["source"], "replica");
  EXPECT_EQ(j["entries"][1]["source"], "local-memory");
  EXPECT_EQ(j["lost_nodes"], nlohmann::json::array({2}));
  EXPECT_EQ(j["bytes_sent"], 100);
  EXPECT_EQ(j["bytes_received"], 200);
  EXPECT_EQ(j["plan_read_bytes_per_node"].size(), 4u);
  EXPECT_EQ(j["bytes_received_per_node"][2], 64);
  EXPECT_EQ(j["reprotect"]["mode"], "minimal");
  EXPECT_EQ(j["reprotect"]["bytes_sent"], 5);
  EXPECT_EQ(j["reprotect"]["bytes_received"], 6);
  EXPECT_EQ(j["reprotect"]["bytes_received_per_node"][2], 6);
  EXPECT_DOUBLE_EQ(j["seconds"]["inventory"].get<double>(), 0.5);
  EXPECT_TRUE(j["seconds"].contains("plan"));
  EXPECT_TRUE(j["seconds"].contains("transfer"));
  EXPECT_TRUE(j["seconds"].contains("reprotect"));
  EXPECT_EQ(j["plan"]["version"], 12);  // embedded as an object, not a string
}

TEST(RestoreReport, NoPlanNoPlanKey) {
  RestoreReport r = Sample();
  r.plan_json.clear();
  EXPECT_FALSE(nlohmann::json::parse(r.ToJson()).contains("plan"));
}

TEST(RestoreReport, ToStringNamesEveryEntryAndNote) {
  RestoreReport r = Sample();
  r.notes.push_back("v13 in memory on only 3 of 4 ranks");
  const std::string s = r.ToString();
  EXPECT_NE(s.find("restored v12: 2 entries"), std::string::npos) << s;
  EXPECT_NE(s.find("plain local-memory"), std::string::npos) << s;
  EXPECT_NE(s.find("v13 in memory on only"), std::string::npos) << s;
}

}  // namespace
}  // namespace memento::runtime
