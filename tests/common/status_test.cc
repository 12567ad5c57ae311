#include "memento/common/status.h"

#include <gtest/gtest.h>

#include "memento/common/check.h"

namespace memento {
namespace {

Status FailsWith(StatusCode code) { return Status(code, "inner"); }

Status Outer() {
  MEMENTO_RETURN_IF_ERROR(FailsWith(StatusCode::kCorruption));
  return Status::Ok();
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  MEMENTO_ASSIGN_OR_RETURN(int h, Half(x));
  MEMENTO_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::NotFound("version 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: version 7");
}

// Messages reach users: the macros pass an error on unchanged and never add
// the source text of the failed expression.
TEST(StatusTest, ReturnIfErrorPassesTheErrorOnWithoutSourceText) {
  Status s = Outer();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "inner");
  Result<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "odd value 3");
}

TEST(StatusTest, ResultValueOrError) {
  Result<int> ok = Quarter(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 2);
  Result<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("odd value 3"), std::string::npos);
}

TEST(StatusTest, ResultFromOkStatusIsAnInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(CheckTest, ThrowsWithValuesFileAndLine) {
  EXPECT_NO_THROW(MEMENTO_CHECK_EQ(1, 1));
  try {
    MEMENTO_CHECK_EQ(2 + 2, 5);
    FAIL() << "no throw";
  } catch (const CheckError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("status_test.cc"), std::string::npos) << what;
    EXPECT_NE(what.find("(4 vs 5)"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace memento
