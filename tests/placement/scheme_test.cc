#include "memento/placement/scheme.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace memento::placement {
namespace {

TEST(SchemeTest, ParsesEveryFormAndRoundTrips) {
  struct Case {
    const char* text;
    SchemeKind kind;
    int copies, data, parity, tolerance;
    const char* canonical;
  } cases[] = {
      {"none", SchemeKind::kNone, 1, 1, 0, 0, "none"},
      {"replica:2", SchemeKind::kReplica, 2, 1, 0, 1, "replica:2"},
      {"replica:3:group", SchemeKind::kReplica, 3, 1, 0, 2, "replica:3"},
      {"replica:2:ring", SchemeKind::kReplica, 2, 1, 0, 1, "replica:2:ring"},
      {"xor:3", SchemeKind::kXor, 1, 3, 1, 1, "xor:3"},
      {"rs:6+2", SchemeKind::kReedSolomon, 1, 6, 2, 2, "rs:6+2"},
      {"rs:4+4", SchemeKind::kReedSolomon, 1, 4, 4, 4, "rs:4+4"},
  };
  for (const Case& c : cases) {
    auto s = Scheme::Parse(c.text);
    ASSERT_TRUE(s.ok()) << c.text << ": " << s.status().ToString();
    EXPECT_EQ(s->kind(), c.kind) << c.text;
    EXPECT_EQ(s->copies(), c.copies) << c.text;
    EXPECT_EQ(s->data(), c.data) << c.text;
    EXPECT_EQ(s->parity(), c.parity) << c.text;
    EXPECT_EQ(s->tolerance(), c.tolerance) << c.text;
    EXPECT_EQ(s->ToString(), c.canonical);
    auto again = Scheme::Parse(s->ToString());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *s);
  }
  EXPECT_EQ(Scheme::Parse("replica:2:ring")->placement(), ReplicaPlacement::kRing);
  EXPECT_EQ(Scheme::Parse("replica:2")->placement(), ReplicaPlacement::kGroup);
}

TEST(SchemeTest, BadStringsNameTheStringAndTheAcceptedForms) {
  for (const char* bad : {"",           "None",       "replica",        "replica:",   "replica:1",
                          "replica:0",  "replica:x",  "replica:2:star", "replica:2:", "replica:-2",
                          "replica: 2", "xor:",       "xor:0",          "xor:3+1",    "rs:4",
                          "rs:4+0",     "rs:0+2",     "rs:+2",          "rs:4+",      "rs:200+100",
                          "raid5",      "replica:2 ", "rs:6+2:ring"}) {
    auto s = Scheme::Parse(bad);
    ASSERT_FALSE(s.ok()) << "'" << bad << "' parsed as " << s->ToString();
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find("accepted forms are"), std::string::npos);
    EXPECT_NE(s.status().message().find("rs:K+M"), std::string::npos);
  }
}

// Groups must fit the codecs (at most 128 data rows, 32 parity rows), also
// after GroupLayout folds a partial group of up to M nodes into the last
// full one: K + M <= 128 and M <= 32. The boundary is accepted, one beyond is
// an error naming the limit.
TEST(SchemeTest, SchemesBeyondTheCodecLimitsAreRefused) {
  for (const char* ok : {"xor:127", "rs:96+32", "rs:127+1"}) {
    EXPECT_TRUE(Scheme::Parse(ok).ok()) << ok;
  }
  for (const auto& [bad, limit] :
       std::vector<std::pair<const char*, const char*>>{{"xor:128", "<= 128"},
                                                        {"rs:97+32", "<= 128"},
                                                        {"rs:129+1", "<= 128"},
                                                        {"rs:4+33", "<= 32"},
                                                        {"rs:200+10", "<= 128"},
                                                        {"replica:1000000", "1 to 100000"},
                                                        {"xor:9999999", "1 to 100000"},
                                                        {"rs:1000000+2", "1 to 100000"}}) {
    auto s = Scheme::Parse(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find(limit), std::string::npos) << s.status().message();
  }
}

TEST(SchemeTest, ValidateForNodeCount) {
  EXPECT_FALSE(Scheme::Parse("replica:3")->ValidateFor(2).ok());
  const Status s = Scheme::Parse("replica:3")->ValidateFor(2);
  EXPECT_NE(s.message().find("replica:3 on 2 nodes"), std::string::npos) << s.message();
  EXPECT_TRUE(Scheme::Parse("replica:3")->ValidateFor(3).ok());
  EXPECT_FALSE(Scheme::Parse("replica:3:ring")->ValidateFor(2).ok());
  EXPECT_FALSE(Scheme::Parse("xor:3")->ValidateFor(1).ok());
  EXPECT_TRUE(Scheme::Parse("xor:3")->ValidateFor(2).ok());  // one partial group: 1+1
  EXPECT_FALSE(Scheme::Parse("rs:6+2")->ValidateFor(2).ok());
  EXPECT_TRUE(Scheme::Parse("rs:6+2")->ValidateFor(3).ok());
  EXPECT_TRUE(Scheme::None().ValidateFor(1).ok());
  EXPECT_FALSE(Scheme::None().ValidateFor(0).ok());
}

TEST(SchemeTest, NominalMemoryFactor) {
  EXPECT_DOUBLE_EQ(Scheme::None().NominalMemoryFactor(), 1.0);
  EXPECT_DOUBLE_EQ(Scheme::Parse("replica:3")->NominalMemoryFactor(), 3.0);
  EXPECT_DOUBLE_EQ(Scheme::Parse("xor:3")->NominalMemoryFactor(), 4.0 / 3);
  EXPECT_DOUBLE_EQ(Scheme::Parse("rs:6+2")->NominalMemoryFactor(), 8.0 / 6);
}

}  // namespace
}  // namespace memento::placement
