#include "memento/erasure/gf256.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gf_reference.h"
#include "memento/common/check.h"
#include "test_rows.h"

namespace memento::erasure {
namespace {

using testing::GfReference;
using testing::RowSet;

TEST(Gf256Test, MultiplyAndInverseMatchReferenceForAllElements) {
  const GfReference& gf = GfReference::Get();
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      ASSERT_EQ(GfMultiply(static_cast<uint8_t>(a), static_cast<uint8_t>(b)),
                gf.Mul(static_cast<uint8_t>(a), static_cast<uint8_t>(b)))
          << a << "*" << b;
    }
    ASSERT_EQ(GfInverse(static_cast<uint8_t>(a)), gf.Inv(static_cast<uint8_t>(a))) << a;
    if (a != 0) {
      ASSERT_EQ(GfMultiply(static_cast<uint8_t>(a), GfInverse(static_cast<uint8_t>(a))), 1);
    }
  }
  // The field is the one over 0x11d: 0x80 * 2 wraps to 0x1d.
  EXPECT_EQ(GfMultiply(0x80, 2), 0x1d);
}

TEST(Gf256Test, MultiplyAddMatchesReference) {
  const GfReference& gf = GfReference::Get();
  std::mt19937 rng(31);
  for (int coef : {0, 1, 2, 0x1d, 0x8e, 255}) {
    for (size_t len : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{63}, size_t{64},
                       size_t{65}, size_t{4095}, size_t{100001}}) {
      RowSet rows(2, len, RowSet::RandomMisalign(2, rng));
      rows.Randomize(rng);
      std::vector<uint8_t> expected = rows.Copy(1);
      for (size_t i = 0; i < len; ++i) {
        expected[i] ^= gf.Mul(static_cast<uint8_t>(coef), rows.row(0)[i]);
      }
      GfMultiplyAdd(static_cast<uint8_t>(coef), rows.row(0), rows.row(1), len);
      ASSERT_TRUE(testing::RowEquals(rows.row(1), expected)) << coef << " " << len;
      ASSERT_TRUE(rows.GuardsIntact());
    }
  }
}

TEST(Gf256Test, ScaleMatchesReferenceAndOverwrites) {
  const GfReference& gf = GfReference::Get();
  std::mt19937 rng(37);
  for (int coef : {0, 1, 2, 0x1d, 0x8e, 255}) {
    for (size_t len : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{65},
                       size_t{4095}, size_t{100001}}) {
      RowSet rows(2, len, RowSet::RandomMisalign(2, rng));
      rows.Randomize(rng);  // dst holds garbage: scale must not fold it in
      std::vector<uint8_t> expected(len);
      for (size_t i = 0; i < len; ++i) {
        expected[i] = gf.Mul(static_cast<uint8_t>(coef), rows.row(0)[i]);
      }
      GfScale(static_cast<uint8_t>(coef), rows.row(0), rows.row(1), len);
      ASSERT_TRUE(testing::RowEquals(rows.row(1), expected)) << coef << " " << len;
      ASSERT_TRUE(rows.GuardsIntact());
    }
  }
  uint8_t b[4] = {};
  GfScale(3, nullptr, nullptr, 0);
  EXPECT_THROW(GfScale(3, nullptr, b, 4), CheckError);
  EXPECT_THROW(GfScale(3, b, nullptr, 4), CheckError);
}

TEST(Gf256Test, MultiplyAddRejectsNullWithData) {
  uint8_t b[4] = {};
  GfMultiplyAdd(3, nullptr, nullptr, 0);  // nothing to do
  EXPECT_THROW(GfMultiplyAdd(3, nullptr, b, 4), CheckError);
  EXPECT_THROW(GfMultiplyAdd(1, b, nullptr, 4), CheckError);
}

}  // namespace
}  // namespace memento::erasure
