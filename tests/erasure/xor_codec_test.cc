#include "memento/erasure/xor_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "memento/erasure/gf256.h"
#include "test_rows.h"

namespace memento::erasure {
namespace {

using testing::RowEquals;
using testing::RowSet;
using testing::Subsets;

const std::vector<size_t> kEdgeLengths = {1,  2,   7,   8,   9,    31,   32,   33,   63,   64,
                                          65, 127, 128, 129, 4095, 4096, 4097, 8191, 12345};

XorCodec MakeCodec(int k, int threads = 1, size_t min_bytes_per_thread = size_t{4} << 20) {
  CodecOptions o;
  o.threads = threads;
  o.min_bytes_per_thread = min_bytes_per_thread;
  auto codec = XorCodec::Create(k, o);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  return std::move(codec).value();
}

std::vector<uint8_t> ReferenceXor(const uint8_t* const* rows, int k, size_t len) {
  std::vector<uint8_t> p(len, 0);
  for (int i = 0; i < k; ++i) {
    for (size_t b = 0; b < len; ++b) p[b] ^= rows[i][b];
  }
  return p;
}

TEST(XorCodecTest, CreateValidatesRanges) {
  EXPECT_EQ(XorCodec::Create(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(XorCodec::Create(XorCodec::kMaxK + 1).status().code(), StatusCode::kInvalidArgument);
  CodecOptions bad;
  bad.threads = 0;
  EXPECT_EQ(XorCodec::Create(4, bad).status().code(), StatusCode::kInvalidArgument);
  auto ok = XorCodec::Create(XorCodec::kMaxK);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->m(), 1);
  EXPECT_EQ(ok->k(), XorCodec::kMaxK);
}

// Aligned rows take ISA-L xor_gen, unaligned ones the GF(2^8) path: both must
// equal the reference for every edge length and leave the guards intact.
TEST(XorCodecTest, EncodeMatchesReferenceAlignedAndUnaligned) {
  std::mt19937 rng(21);
  for (bool aligned : {true, false}) {
    for (size_t len : kEdgeLengths) {
      for (int k : {1, 2, 3, 4, 8, 13, 16, XorCodec::kMaxK}) {
        XorCodec codec = MakeCodec(k);
        RowSet rows =
            aligned ? RowSet(k + 1, len) : RowSet(k + 1, len, RowSet::RandomMisalign(k + 1, rng));
        for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
        rows.Fill(k, 0x77);
        ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
        ASSERT_TRUE(RowEquals(rows.row(k), ReferenceXor(rows.rows(), k, len)))
            << "aligned=" << aligned << " k=" << k << " len=" << len;
        ASSERT_TRUE(rows.GuardsIntact()) << "k=" << k << " len=" << len;
      }
    }
  }
}

TEST(XorCodecTest, EverySingleErasureDecodesAndTwoAreUnrecoverable) {
  std::mt19937 rng(22);
  for (int k = 1; k <= 7; ++k) {
    for (bool aligned : {true, false}) {
      XorCodec codec = MakeCodec(k);
      const size_t len = 4099;
      RowSet rows =
          aligned ? RowSet(k + 1, len) : RowSet(k + 1, len, RowSet::RandomMisalign(k + 1, rng));
      for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
      ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
      std::vector<std::vector<uint8_t>> original;
      for (int i = 0; i <= k; ++i) original.push_back(rows.Copy(i));
      for (int e = 0; e <= k; ++e) {
        rows.Randomize(e, rng);
        ASSERT_TRUE(codec.Decode(rows.rows(), {e}, len).ok());
        for (int i = 0; i <= k; ++i) ASSERT_TRUE(RowEquals(rows.row(i), original[i])) << k << e;
      }
      for (const auto& erased : Subsets(k + 1, 2)) {
        Status s = codec.Decode(rows.rows(), erased, len);
        EXPECT_EQ(s.code(), StatusCode::kUnrecoverable) << s.ToString();
      }
      for (int i = 0; i <= k; ++i) ASSERT_TRUE(RowEquals(rows.row(i), original[i]));
      ASSERT_TRUE(rows.GuardsIntact());
    }
  }
}

TEST(XorCodecTest, BadArgumentsAreInvalidArgument) {
  XorCodec codec = MakeCodec(3);
  RowSet rows(4, 64);
  EXPECT_EQ(codec.Decode(rows.rows(), {4}, 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.Decode(rows.rows(), {0, 0}, 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.Encode(nullptr, rows.rows_from(3), 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.EncodeUpdate(3, rows.row(0), rows.rows_from(3), 64).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.DeltaUpdate(0, rows.row(0), nullptr, rows.rows_from(3), 64).code(),
            StatusCode::kInvalidArgument);
  std::vector<uint8_t*> ptrs(rows.rows(), rows.rows() + 4);
  ptrs[1] = nullptr;
  Status s = codec.Decode(ptrs.data(), {2}, 64);
  EXPECT_EQ(s.code(), StatusCode::kUnrecoverable) << s.ToString();
  EXPECT_TRUE(codec.Encode(nullptr, nullptr, 0).ok());
}

TEST(XorCodecTest, IncrementalAndDeltaUpdatesEqualFullEncode) {
  std::mt19937 rng(23);
  for (bool aligned : {true, false}) {
    for (size_t len : {size_t{1}, size_t{100}, size_t{4096}, size_t{65537}}) {
      const int k = 6;
      XorCodec codec = MakeCodec(k);
      RowSet rows =
          aligned ? RowSet(k + 1, len) : RowSet(k + 1, len, RowSet::RandomMisalign(k + 1, rng));
      RowSet inc(1, len, RowSet::RandomMisalign(1, rng));
      for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
      ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
      inc.Fill(0, 0);
      std::vector<int> order = {3, 0, 5, 1, 4, 2};
      for (int i : order) {
        // Fold each row in two sub-ranges, the second one first.
        size_t half = len / 2;
        uint8_t* p1[1] = {inc.row(0) + half};
        ASSERT_TRUE(codec.EncodeUpdate(i, rows.row(i) + half, p1, len - half).ok());
        uint8_t* p0[1] = {inc.row(0)};
        ASSERT_TRUE(codec.EncodeUpdate(i, rows.row(i), p0, half).ok());
      }
      ASSERT_TRUE(RowEquals(inc.row(0), rows.Copy(k))) << "aligned=" << aligned << " " << len;

      RowSet fresh(1, len, RowSet::RandomMisalign(1, rng));
      for (int step = 0; step < 3; ++step) {
        int d = static_cast<int>(rng() % k);
        fresh.Randomize(0, rng);
        ASSERT_TRUE(codec.DeltaUpdate(d, rows.row(d), fresh.row(0), rows.rows_from(k), len).ok());
        std::memcpy(rows.row(d), fresh.row(0), len);
        ASSERT_TRUE(RowEquals(rows.row(k), ReferenceXor(rows.rows(), k, len)))
            << "aligned=" << aligned << " len=" << len << " step " << step;
      }
      ASSERT_TRUE(rows.GuardsIntact());
      ASSERT_TRUE(inc.GuardsIntact());
    }
  }
}

TEST(XorCodecTest, DecodeCoefficientsAreOnesAndReduceToTheLostRow) {
  std::mt19937 rng(24);
  const int k = 4;
  const size_t len = 1000;
  XorCodec codec = MakeCodec(k);
  RowSet rows(k + 1, len, RowSet::RandomMisalign(k + 1, rng));
  for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
  ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
  for (int e = 0; e <= k; ++e) {
    std::vector<int> survivors;
    for (int i = k; i >= 0; --i) {
      if (i != e) survivors.push_back(i);
    }
    auto coef = codec.DecodeCoefficients({e}, survivors);
    ASSERT_TRUE(coef.ok()) << coef.status().ToString();
    EXPECT_EQ(*coef, std::vector<uint8_t>(k, 1));
    std::vector<uint8_t> acc(len, 0);
    for (size_t s = 0; s < survivors.size(); ++s) {
      GfMultiplyAdd((*coef)[s], rows.row(survivors[s]), acc.data(), len);
    }
    EXPECT_TRUE(RowEquals(rows.row(e), acc)) << e;
  }
  EXPECT_EQ(codec.DecodeCoefficients({0, 1}, {2, 3, 4, 0}).status().code(),
            StatusCode::kUnrecoverable);
  EXPECT_EQ(codec.DecodeCoefficients({0}, {1, 2, 3}).status().code(), StatusCode::kInvalidArgument);
}

TEST(XorCodecTest, ThreadedEqualsSingleThreaded) {
  std::mt19937 rng(25);
  const int k = 5;
  const size_t len = 4 * 4096 * 3 + 5;
  XorCodec single = MakeCodec(k);
  XorCodec threaded = MakeCodec(k, 3, 4096);
  for (bool aligned : {true, false}) {
    RowSet a(k + 1, len);
    RowSet b =
        aligned ? RowSet(k + 1, len) : RowSet(k + 1, len, RowSet::RandomMisalign(k + 1, rng));
    for (int i = 0; i < k; ++i) {
      a.Randomize(i, rng);
      std::memcpy(b.row(i), a.row(i), len);
    }
    ASSERT_TRUE(single.Encode(a.rows(), a.rows_from(k), len).ok());
    ASSERT_TRUE(threaded.Encode(b.rows(), b.rows_from(k), len).ok());
    ASSERT_TRUE(RowEquals(b.row(k), a.Copy(k)));
    b.Fill(2, 0);
    ASSERT_TRUE(threaded.Decode(b.rows(), {2}, len).ok());
    ASSERT_TRUE(RowEquals(b.row(2), a.Copy(2)));
    RowSet fresh(1, len);
    fresh.Randomize(0, rng);
    ASSERT_TRUE(single.DeltaUpdate(1, a.row(1), fresh.row(0), a.rows_from(k), len).ok());
    ASSERT_TRUE(threaded.DeltaUpdate(1, b.row(1), fresh.row(0), b.rows_from(k), len).ok());
    ASSERT_TRUE(RowEquals(b.row(k), a.Copy(k)));
    ASSERT_TRUE(b.GuardsIntact());
  }
}

}  // namespace
}  // namespace memento::erasure
