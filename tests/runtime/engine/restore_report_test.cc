// RestoreReport::ToJson is valid JSON whatever the entry names hold, and
// keeps the keys the recovery report records have always had; Summary is one
// short line however many entries there are.
#include "memento/runtime/restore_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

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

TEST(RestoreReport, SummaryCountsEntriesPerSourceWithoutNamingThem) {
  RestoreReport r = Sample();
  for (int i = 0; i < 40; ++i) {
    r.entries.push_back({"layer." + std::to_string(i), 8, 1,
                         i < 5 ? RestoreSource::kDecode : RestoreSource::kLocalMemory});
  }
  r.lost_nodes = {3, 5};
  r.stats.plan_s = 0.25;
  r.notes.push_back("v13 in memory on only 3 of 4 ranks");
  const std::string s = r.Summary();
  EXPECT_EQ(s, "restored v12: 5 decode, 36 local-memory, 1 replica; lost nodes [3,5]; 0.750 s");
  r.elastic = true;
  EXPECT_NE(r.Summary().find("; elastic; "), std::string::npos) << r.Summary();
  r.entries.clear();
  r.lost_nodes.clear();
  EXPECT_EQ(r.Summary().rfind("restored v12: no entries; elastic; ", 0), 0u) << r.Summary();
}

TEST(RestoreReport, ToStringIsTheSummaryAndTheNotes) {
  RestoreReport r = Sample();
  r.notes.push_back("v13 in memory on only 3 of 4 ranks");
  const std::string s = r.ToString();
  EXPECT_EQ(s.rfind(r.Summary() + "; v13 in memory on only 3 of 4 ranks", 0), 0u) << s;
  EXPECT_EQ(s.find("plain"), std::string::npos) << s;  // entry names are in ToJson only
}

}  // namespace
}  // namespace memento::runtime
