// Error messages that users see name the problem in words: no C++ expression
// (a call with its arguments, a member access, an internal function name)
// leaks into them as errors travel up through the engine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "memento/runtime/checkpointer.h"
#include "memento/runtime/config.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::runtime {
namespace {

// Source text that the status macros used to append: "f(x, y)", "a.b(", "p->q",
// "&x", "::", and the names of internal steps.
void ExpectNoSourceText(const std::string& message) {
  static const std::regex call(R"([A-Za-z_][A-Za-z0-9_]*\([A-Za-z_&*][^)]*\))");
  EXPECT_FALSE(std::regex_search(message, call)) << message;
  for (const char* token : {"->", "::", "&", "scheme_", "ValidateFor", "LearnTopology",
                            "OpenStore", "FromMap", "ParseInt", "ASSIGN", "RETURN"}) {
    EXPECT_EQ(message.find(token), std::string::npos) << "'" << token << "' in: " << message;
  }
}

TEST(UserErrorTextTest, BadSlotsValueNamesTheVariableOnly) {
  for (const char* value : {"1", "abc", "65", " 5"}) {
    auto parsed = Config::FromMap({{"MEMENTO_SLOTS", value}});
    ASSERT_FALSE(parsed.ok()) << value;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("MEMENTO_SLOTS"), std::string::npos);
    ExpectNoSourceText(parsed.status().message());
  }
}

// replica:3 on 2 nodes: the scheme cannot protect this job; the error comes
// from deep inside Prepare (the protection layout) and reaches Save.
TEST(UserErrorTextTest, SchemeTooBigForTheJobSaysSoInWords) {
  const int n = 2;
  Config config;
  config.job = "uet-scheme-" + testing::ProcessTag();
  config.ranks_per_node = 1;
  config.scheme = "replica:3";
  config.timeout_s = 20;
  auto group = InProcessGroup::Create(n, std::chrono::seconds(20));
  std::vector<Status> saved(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<uint8_t> buf(1000, static_cast<uint8_t>(r));
      auto ck = Checkpointer::Create(config, group->transport(r));
      if (!ck.ok()) {
        saved[r] = ck.status();
        return;
      }
      EntryLayout layout{"uint8", {1000}, {1000}, {0}};
      saved[r] = (*ck)->RegisterBuffer("w", buf.data(), buf.size(), layout);
      if (saved[r].ok()) saved[r] = (*ck)->Save(1);
    });
  }
  for (auto& t : threads) t.join();
  (void)CleanJob(config.job);
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(saved[r].ok()) << "rank " << r;
    EXPECT_EQ(saved[r].code(), StatusCode::kInvalidArgument) << saved[r].ToString();
    EXPECT_NE(saved[r].message().find("replica:3"), std::string::npos) << saved[r].message();
    EXPECT_NE(saved[r].message().find("2 nodes"), std::string::npos) << saved[r].message();
    ExpectNoSourceText(saved[r].message());
  }
}

}  // namespace
}  // namespace memento::runtime
