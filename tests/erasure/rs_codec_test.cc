#include "memento/erasure/rs_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gf_reference.h"
#include "memento/erasure/gf256.h"
#include "test_rows.h"

namespace memento::erasure {
namespace {

using testing::ReferenceCauchy;
using testing::ReferenceEncode;
using testing::RowEquals;
using testing::RowSet;
using testing::Subsets;

// Lengths around ISA-L's vector widths (16, 32, 64) and block sizes.
const std::vector<size_t> kEdgeLengths = {1,  2,  15,  16,  17,  31,  32,   33,   63,
                                          64, 65, 127, 128, 129, 255, 4095, 4096, 4097};

CodecOptions Options(int threads, size_t min_bytes_per_thread = size_t{4} << 20) {
  CodecOptions o;
  o.threads = threads;
  o.min_bytes_per_thread = min_bytes_per_thread;
  return o;
}

RsCodec MakeCodec(int k, int m, CodecOptions options = {}) {
  auto codec = RsCodec::Create(k, m, options);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  return std::move(codec).value();
}

TEST(RsCodecTest, CreateValidatesRanges) {
  EXPECT_EQ(RsCodec::Create(0, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RsCodec::Create(RsCodec::kMaxK + 1, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RsCodec::Create(4, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RsCodec::Create(4, RsCodec::kMaxM + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RsCodec::Create(4, 2, Options(0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RsCodec::Create(4, 2, Options(CodecOptions::kMaxThreads + 1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RsCodec::Create(4, 2, Options(2, 0)).status().code(), StatusCode::kInvalidArgument);
  auto bad = RsCodec::Create(4, 0);
  EXPECT_NE(bad.status().message().find("m=0"), std::string::npos) << bad.status().ToString();
  EXPECT_TRUE(RsCodec::Create(1, 1).ok());
  EXPECT_TRUE(RsCodec::Create(RsCodec::kMaxK, RsCodec::kMaxM).ok());
}

TEST(RsCodecTest, GeneratorIsTheCauchyMatrix) {
  for (auto [k, m] : std::vector<std::pair<int, int>>{{1, 1}, {4, 2}, {10, 4}, {128, 32}}) {
    RsCodec codec = MakeCodec(k, m);
    EXPECT_EQ(codec.k(), k);
    EXPECT_EQ(codec.m(), m);
    EXPECT_EQ(codec.generator(), ReferenceCauchy(k, m)) << k << "+" << m;
  }
}

// Random (k, m), odd and edge lengths, unaligned rows: parity equals the
// reference, and nothing outside the parity rows is written.
TEST(RsCodecTest, EncodeMatchesReference) {
  std::mt19937 rng(20240601);
  std::vector<size_t> lengths = kEdgeLengths;
  for (int i = 0; i < 6; ++i) lengths.push_back(1 + 2 * (rng() % 10000));  // odd
  for (int trial = 0; trial < 60; ++trial) {
    int k = 1 + static_cast<int>(rng() % 16);
    int m = 1 + static_cast<int>(rng() % 4);
    size_t len = lengths[static_cast<size_t>(trial) % lengths.size()];
    RsCodec codec = MakeCodec(k, m);
    RowSet rows(k + m, len, RowSet::RandomMisalign(k + m, rng));
    rows.Randomize(rng);
    ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
    auto expected = ReferenceEncode(codec.generator(), k, m, rows.const_rows(), len);
    for (int r = 0; r < m; ++r) {
      ASSERT_TRUE(RowEquals(rows.row(k + r), expected[r]))
          << "k=" << k << " m=" << m << " len=" << len << " parity row " << r;
    }
    ASSERT_TRUE(rows.GuardsIntact()) << "k=" << k << " m=" << m << " len=" << len;
  }
}

TEST(RsCodecTest, LargestCodecMatchesReferenceAndDecodes) {
  const int k = RsCodec::kMaxK, m = RsCodec::kMaxM;
  const size_t len = 97;
  std::mt19937 rng(5);
  RsCodec codec = MakeCodec(k, m);
  RowSet rows(k + m, len, RowSet::RandomMisalign(k + m, rng));
  rows.Randomize(rng);
  ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
  auto expected = ReferenceEncode(codec.generator(), k, m, rows.const_rows(), len);
  for (int r = 0; r < m; ++r) ASSERT_TRUE(RowEquals(rows.row(k + r), expected[r])) << r;
  std::vector<std::vector<uint8_t>> original;
  for (int i = 0; i < k + m; ++i) original.push_back(rows.Copy(i));
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<int> all(k + m);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int> erased(all.begin(), all.begin() + m);
    for (int e : erased) rows.Fill(e, 0xEE);
    ASSERT_TRUE(codec.Decode(rows.rows(), erased, len).ok());
    for (int i = 0; i < k + m; ++i) ASSERT_TRUE(RowEquals(rows.row(i), original[i])) << i;
  }
}

// Every erasure pattern of size 1..m for small codes rebuilds every row.
TEST(RsCodecTest, EveryErasurePatternUpToMDecodes) {
  std::mt19937 rng(11);
  const std::vector<std::pair<int, int>> codes = {{1, 1}, {1, 3}, {2, 1}, {3, 2}, {4, 2},
                                                  {5, 3}, {6, 2}, {4, 4}, {8, 3}};
  for (auto [k, m] : codes) {
    RsCodec codec = MakeCodec(k, m);
    const size_t len = 1031;
    RowSet rows(k + m, len, RowSet::RandomMisalign(k + m, rng));
    for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
    ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
    std::vector<std::vector<uint8_t>> original;
    for (int i = 0; i < k + m; ++i) original.push_back(rows.Copy(i));
    int patterns = 0;
    for (int size = 1; size <= m; ++size) {
      for (const auto& erased : Subsets(k + m, size)) {
        for (int e : erased) rows.Randomize(e, rng);
        Status s = codec.Decode(rows.rows(), erased, len);
        ASSERT_TRUE(s.ok()) << k << "+" << m << ": " << s.ToString();
        for (int i = 0; i < k + m; ++i) {
          ASSERT_TRUE(RowEquals(rows.row(i), original[i]))
              << k << "+" << m << " row " << i << " after erasing " << erased.size();
        }
        ++patterns;
      }
    }
    ASSERT_TRUE(rows.GuardsIntact());
    EXPECT_GT(patterns, 0);
  }
}

// More than m erasures: Unrecoverable, and no row is touched.
TEST(RsCodecTest, MoreThanMErasuresAreUnrecoverable) {
  std::mt19937 rng(12);
  for (auto [k, m] : std::vector<std::pair<int, int>>{{2, 1}, {3, 2}, {4, 2}, {3, 3}}) {
    RsCodec codec = MakeCodec(k, m);
    const size_t len = 100;
    RowSet rows(k + m, len);
    rows.Randomize(rng);
    std::vector<std::vector<uint8_t>> before;
    for (int i = 0; i < k + m; ++i) before.push_back(rows.Copy(i));
    for (int size = m + 1; size <= k + m; ++size) {
      for (const auto& erased : Subsets(k + m, size)) {
        Status s = codec.Decode(rows.rows(), erased, len);
        EXPECT_EQ(s.code(), StatusCode::kUnrecoverable) << s.ToString();
        EXPECT_NE(s.message().find("at most m=" + std::to_string(m)), std::string::npos)
            << s.ToString();
      }
    }
    for (int i = 0; i < k + m; ++i) EXPECT_TRUE(RowEquals(rows.row(i), before[i]));
  }
}

// A null row that is not erased counts as lost: decode uses other survivors,
// or reports Unrecoverable when too few remain.
TEST(RsCodecTest, NullRowsAreNotUsedAsSurvivors) {
  std::mt19937 rng(13);
  const int k = 4, m = 2;
  const size_t len = 333;
  RsCodec codec = MakeCodec(k, m);
  RowSet rows(k + m, len);
  for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
  ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
  std::vector<uint8_t> row1 = rows.Copy(1);
  std::vector<uint8_t*> ptrs(rows.rows(), rows.rows() + k + m);
  ptrs[0] = nullptr;  // data row 0 lost too, not wanted back
  rows.Fill(1, 0);
  ASSERT_TRUE(codec.Decode(ptrs.data(), {1}, len).ok());
  EXPECT_TRUE(RowEquals(rows.row(1), row1));
  ptrs[4] = nullptr;  // now rows 0, 4 missing and 1 erased: 3 of 6 left
  Status s = codec.Decode(ptrs.data(), {1}, len);
  EXPECT_EQ(s.code(), StatusCode::kUnrecoverable) << s.ToString();
  EXPECT_NE(s.message().find("2 null"), std::string::npos) << s.ToString();
}

TEST(RsCodecTest, BadArgumentsAreInvalidArgumentNamingTheRow) {
  const int k = 3, m = 2;
  RsCodec codec = MakeCodec(k, m);
  RowSet rows(k + m, 64);
  auto expect_invalid = [](const Status& s, const std::string& needle) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  expect_invalid(codec.Decode(rows.rows(), {1, 1}, 64), "row 1 is listed twice");
  expect_invalid(codec.Decode(rows.rows(), {5}, 64), "row 5 is outside 0..4");
  expect_invalid(codec.Decode(rows.rows(), {-1}, 64), "row -1 is outside");
  expect_invalid(codec.Decode(nullptr, {0}, 64), "array of rows is null");
  std::vector<uint8_t*> ptrs(rows.rows(), rows.rows() + k + m);
  ptrs[2] = nullptr;
  expect_invalid(codec.Decode(ptrs.data(), {2}, 64), "erased row 2 is null");
  expect_invalid(codec.Encode(ptrs.data(), rows.rows_from(k), 64), "data row 2 is null");
  expect_invalid(codec.Encode(rows.rows(), nullptr, 64), "parity rows is null");
  expect_invalid(codec.EncodeUpdate(3, rows.row(0), rows.rows_from(k), 64), "data row 3");
  expect_invalid(codec.EncodeUpdate(-1, rows.row(0), rows.rows_from(k), 64), "data row -1");
  expect_invalid(codec.EncodeUpdate(0, nullptr, rows.rows_from(k), 64), "data is null");
  expect_invalid(codec.DeltaUpdate(0, nullptr, rows.row(1), rows.rows_from(k), 64), "old data");
  expect_invalid(codec.DeltaUpdate(0, rows.row(0), nullptr, rows.rows_from(k), 64), "new data");
  expect_invalid(codec.DeltaUpdate(7, rows.row(0), rows.row(1), rows.rows_from(k), 64),
                 "data row 7");
}

// len == 0: a valid no-op; pointers are not looked at, indices still are.
TEST(RsCodecTest, ZeroLengthIsANoOp) {
  RsCodec codec = MakeCodec(3, 2);
  EXPECT_TRUE(codec.Encode(nullptr, nullptr, 0).ok());
  EXPECT_TRUE(codec.EncodeUpdate(1, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(codec.DeltaUpdate(1, nullptr, nullptr, nullptr, 0).ok());
  RowSet rows(5, 0);
  EXPECT_TRUE(codec.Decode(rows.rows(), {0, 4}, 0).ok());
  EXPECT_TRUE(codec.Decode(rows.rows(), {}, 0).ok());
  EXPECT_EQ(codec.Decode(rows.rows(), {0, 1, 2}, 0).code(), StatusCode::kUnrecoverable);
  EXPECT_EQ(codec.EncodeUpdate(3, nullptr, nullptr, 0).code(), StatusCode::kInvalidArgument);
}

// Folding data rows one at a time, in any order and in arbitrary sub-range
// chunks, into zeroed parity gives the full encode.
TEST(RsCodecTest, IncrementalEncodeEqualsFullEncode) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 20; ++trial) {
    int k = 1 + static_cast<int>(rng() % 16);
    int m = 1 + static_cast<int>(rng() % 4);
    size_t len = 1 + rng() % 20000;
    RsCodec codec = MakeCodec(k, m);
    RowSet rows(k + m, len, RowSet::RandomMisalign(k + m, rng));
    RowSet incremental(m, len, RowSet::RandomMisalign(m, rng));
    for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
    ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
    for (int r = 0; r < m; ++r) incremental.Fill(r, 0);

    // Each data row is cut into random chunks; all chunks of all rows are
    // folded in a random interleaved order.
    struct Chunk {
      int row;
      size_t offset, length;
    };
    std::vector<Chunk> chunks;
    for (int i = 0; i < k; ++i) {
      for (size_t off = 0; off < len;) {
        size_t n = std::min(len - off, size_t{1} + rng() % 3000);
        chunks.push_back({i, off, n});
        off += n;
      }
    }
    std::shuffle(chunks.begin(), chunks.end(), rng);
    for (const Chunk& c : chunks) {
      std::vector<uint8_t*> parity;
      for (int r = 0; r < m; ++r) parity.push_back(incremental.row(r) + c.offset);
      ASSERT_TRUE(
          codec.EncodeUpdate(c.row, rows.row(c.row) + c.offset, parity.data(), c.length).ok());
    }
    for (int r = 0; r < m; ++r) {
      ASSERT_TRUE(RowEquals(incremental.row(r), rows.Copy(k + r)))
          << "k=" << k << " m=" << m << " len=" << len << " parity " << r;
    }
    ASSERT_TRUE(incremental.GuardsIntact());
  }
}

// Replacing data rows through DeltaUpdate keeps the parity equal to a full
// encode of the new data (lengths span several internal 64 KiB blocks).
TEST(RsCodecTest, DeltaUpdateEqualsFullEncode) {
  std::mt19937 rng(15);
  for (size_t len : {size_t{1}, size_t{33}, size_t{4097}, size_t{200001}}) {
    for (auto [k, m] : std::vector<std::pair<int, int>>{{1, 1}, {4, 2}, {7, 3}, {16, 4}}) {
      RsCodec codec = MakeCodec(k, m);
      RowSet rows(k + m, len, RowSet::RandomMisalign(k + m, rng));
      RowSet fresh(1, len, RowSet::RandomMisalign(1, rng));
      for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
      ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
      for (int step = 0; step < 3; ++step) {
        int d = static_cast<int>(rng() % k);
        fresh.Randomize(0, rng);
        ASSERT_TRUE(codec.DeltaUpdate(d, rows.row(d), fresh.row(0), rows.rows_from(k), len).ok());
        std::memcpy(rows.row(d), fresh.row(0), len);
        // Same buffer for old and new: no change.
        ASSERT_TRUE(codec.DeltaUpdate(d, rows.row(d), rows.row(d), rows.rows_from(k), len).ok());
        auto expected = ReferenceEncode(codec.generator(), k, m, rows.const_rows(), len);
        for (int r = 0; r < m; ++r) {
          ASSERT_TRUE(RowEquals(rows.row(k + r), expected[r]))
              << "k=" << k << " m=" << m << " len=" << len << " step " << step;
        }
      }
      ASSERT_TRUE(rows.GuardsIntact());
    }
  }
}

// Survivors pre-multiplying their rows by DecodeCoefficients and an XOR
// reduction of the products rebuild exactly what Decode rebuilds.
TEST(RsCodecTest, DecodeCoefficientReductionEqualsDecode) {
  std::mt19937 rng(16);
  for (auto [k, m] : std::vector<std::pair<int, int>>{{1, 1}, {3, 2}, {4, 2}, {6, 3}, {10, 4}}) {
    RsCodec codec = MakeCodec(k, m);
    const size_t len = 777;
    RowSet rows(k + m, len, RowSet::RandomMisalign(k + m, rng));
    for (int i = 0; i < k; ++i) rows.Randomize(i, rng);
    ASSERT_TRUE(codec.Encode(rows.rows(), rows.rows_from(k), len).ok());
    std::vector<std::vector<uint8_t>> original;
    for (int i = 0; i < k + m; ++i) original.push_back(rows.Copy(i));
    for (int trial = 0; trial < 10; ++trial) {
      std::vector<int> all(k + m);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      int lost = 1 + static_cast<int>(rng() % m);
      std::vector<int> erased(all.begin(), all.begin() + lost);
      // Any k of the rest, in any order (not just the ones Decode would pick).
      std::vector<int> survivors(all.begin() + lost, all.end());
      std::shuffle(survivors.begin(), survivors.end(), rng);
      survivors.resize(static_cast<size_t>(k));
      auto coef = codec.DecodeCoefficients(erased, survivors);
      ASSERT_TRUE(coef.ok()) << coef.status().ToString();
      ASSERT_EQ(coef->size(), erased.size() * static_cast<size_t>(k));
      for (size_t e = 0; e < erased.size(); ++e) {
        std::vector<uint8_t> acc(len, 0);
        for (size_t s = 0; s < survivors.size(); ++s) {
          GfMultiplyAdd((*coef)[e * k + s], rows.row(survivors[s]), acc.data(), len);
        }
        ASSERT_EQ(acc, original[erased[e]]) << k << "+" << m << " erased row " << erased[e];
      }
      // Decode gives the same rows.
      for (int e : erased) rows.Fill(e, 0);
      ASSERT_TRUE(codec.Decode(rows.rows(), erased, len).ok());
      for (int e : erased) ASSERT_TRUE(RowEquals(rows.row(e), original[e]));
    }
  }
}

TEST(RsCodecTest, DecodeCoefficientsValidatesItsLists) {
  RsCodec codec = MakeCodec(3, 2);
  EXPECT_EQ(codec.DecodeCoefficients({0}, {1, 2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.DecodeCoefficients({0}, {1, 2, 3, 4}).status().code(),
            StatusCode::kInvalidArgument);
  auto overlap = codec.DecodeCoefficients({0}, {0, 1, 2});
  EXPECT_EQ(overlap.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.status().message().find("both as erased and as a survivor"), std::string::npos);
  EXPECT_EQ(codec.DecodeCoefficients({0}, {1, 1, 2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.DecodeCoefficients({0}, {1, 2, 5}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.DecodeCoefficients({0, 1, 2}, {3, 4, 0}).status().code(),
            StatusCode::kUnrecoverable);
  auto none = codec.DecodeCoefficients({}, {2, 3, 4});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // With the data rows as survivors, data row coefficients are the identity.
  auto identity = codec.DecodeCoefficients({4}, {0, 1, 2});
  ASSERT_TRUE(identity.ok());
  std::vector<uint8_t> parity_row(codec.generator().begin() + 4 * 3,
                                  codec.generator().begin() + 5 * 3);
  EXPECT_EQ(*identity, parity_row);
}

// Threaded calls (small min_bytes_per_thread so they really split) give the
// bytes that single-threaded calls give.
TEST(RsCodecTest, ThreadedEqualsSingleThreaded) {
  std::mt19937 rng(17);
  const int k = 5, m = 3;
  const size_t len = 3 * 4096 * 5 + 17;
  RsCodec single = MakeCodec(k, m);
  RsCodec threaded = MakeCodec(k, m, Options(4, 4096));
  RowSet a(k + m, len, RowSet::RandomMisalign(k + m, rng));
  RowSet b(k + m, len, RowSet::RandomMisalign(k + m, rng));
  for (int i = 0; i < k; ++i) {
    a.Randomize(i, rng);
    std::memcpy(b.row(i), a.row(i), len);
  }
  ASSERT_TRUE(single.Encode(a.rows(), a.rows_from(k), len).ok());
  ASSERT_TRUE(threaded.Encode(b.rows(), b.rows_from(k), len).ok());
  for (int r = 0; r < m; ++r) ASSERT_TRUE(RowEquals(b.row(k + r), a.Copy(k + r))) << r;

  RowSet fresh(1, len);
  fresh.Randomize(0, rng);
  ASSERT_TRUE(single.DeltaUpdate(2, a.row(2), fresh.row(0), a.rows_from(k), len).ok());
  ASSERT_TRUE(threaded.DeltaUpdate(2, b.row(2), fresh.row(0), b.rows_from(k), len).ok());
  std::memcpy(a.row(2), fresh.row(0), len);
  std::memcpy(b.row(2), fresh.row(0), len);
  for (int r = 0; r < m; ++r) ASSERT_TRUE(RowEquals(b.row(k + r), a.Copy(k + r))) << r;

  RowSet inc(m, len);
  for (int r = 0; r < m; ++r) inc.Fill(r, 0);
  for (int i = k - 1; i >= 0; --i)
    ASSERT_TRUE(threaded.EncodeUpdate(i, b.row(i), inc.rows(), len).ok());
  for (int r = 0; r < m; ++r) ASSERT_TRUE(RowEquals(inc.row(r), a.Copy(k + r))) << r;

  std::vector<int> erased = {0, 3, 6};
  for (int e : erased) b.Fill(e, 0x5A);
  ASSERT_TRUE(threaded.Decode(b.rows(), erased, len).ok());
  for (int i = 0; i < k + m; ++i) ASSERT_TRUE(RowEquals(b.row(i), a.Copy(i))) << i;
  ASSERT_TRUE(a.GuardsIntact());
  ASSERT_TRUE(b.GuardsIntact());
}

}  // namespace
}  // namespace memento::erasure
