#include "memento/erasure/stripe_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "memento/erasure/rs_codec.h"
#include "memento/erasure/xor_codec.h"
#include "test_rows.h"

namespace memento::erasure {
namespace {

StripeLayout MakeLayout(int k, int m, std::vector<size_t> sizes) {
  auto layout = StripeLayout::Create(k, m, std::move(sizes));
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return std::move(layout).value();
}

TEST(StripeLayoutTest, CreateValidates) {
  EXPECT_EQ(StripeLayout::Create(0, 1, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StripeLayout::Create(2, 0, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StripeLayout::Create(250, 6, 10).status().code(), StatusCode::kInvalidArgument);
  auto wrong = StripeLayout::Create(2, 1, std::vector<size_t>{1, 2});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("2 shard sizes"), std::string::npos);
  EXPECT_TRUE(StripeLayout::Create(1, 1, 0).ok());
}

// The documented convention, written out for xor:2 (G = 3, RAID-5) and
// rs:2+2 (G = 4), independently of the formulas in the implementation.
TEST(StripeLayoutTest, SmallGroupsMatchTheDocumentedTable) {
  auto raid5 = StripeLayout::Create(2, 1, 10);
  ASSERT_TRUE(raid5.ok());
  // stripe: parity node, data row 0 node, data row 1 node
  const int expected5[3][3] = {{0, 1, 2}, {1, 2, 0}, {2, 0, 1}};
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(raid5->ParityNodes(j).value(), std::vector<int>{expected5[j][0]});
    for (int d = 0; d < 2; ++d) {
      auto loc = raid5->Locate(j, d);
      ASSERT_TRUE(loc.ok());
      EXPECT_EQ(loc->node, expected5[j][1 + d]);
      EXPECT_EQ(loc->index, d);
    }
  }
  auto rs22 = StripeLayout::Create(2, 2, 9);
  ASSERT_TRUE(rs22.ok());
  EXPECT_EQ(rs22->ParityNodes(0).value(), (std::vector<int>{0, 1}));
  EXPECT_EQ(rs22->ParityNodes(3).value(), (std::vector<int>{3, 0}));
  EXPECT_EQ(rs22->Locate(3, 0)->node, 1);
  EXPECT_EQ(rs22->Locate(3, 1)->node, 2);
  EXPECT_EQ(rs22->piece_bytes(), 5u);
  EXPECT_EQ(rs22->PieceRange(2, 1)->offset, 5u);
  EXPECT_EQ(rs22->PieceRange(2, 1)->length, 4u);  // the partial piece
}

// Both directions of the map, for every small group and several odd sizes.
TEST(StripeLayoutTest, MapIsABijectionBothWays) {
  for (int g = 2; g <= 8; ++g) {
    for (int m = 1; m < g; ++m) {
      const int k = g - m;
      for (size_t s :
           {size_t{0}, size_t{1}, size_t{7}, size_t{13}, size_t{100}, size_t{101}, size_t{1001}}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " m=" + std::to_string(m) +
                     " S=" + std::to_string(s));
        auto made = StripeLayout::Create(k, m, s);
        ASSERT_TRUE(made.ok());
        const StripeLayout& layout = made.value();
        const size_t p = (s + k - 1) / k;
        ASSERT_EQ(layout.piece_bytes(), p);
        ASSERT_EQ(layout.num_stripes(), g);
        ASSERT_EQ(layout.parity_bytes_per_node(), p * m);

        std::set<std::pair<int, int>> seen_rows;
        for (int n = 0; n < g; ++n) {
          std::set<int> stripes_of_node;
          size_t next_offset = 0, total = 0;
          for (int piece = 0; piece < k; ++piece) {
            auto r = layout.DataRowOf(n, piece);
            ASSERT_TRUE(r.ok());
            ASSERT_GE(r->stripe, 0);
            ASSERT_LT(r->stripe, g);
            ASSERT_EQ(r->row, piece);
            seen_rows.insert({r->stripe, r->row});
            stripes_of_node.insert(r->stripe);
            auto loc = layout.Locate(r->stripe, r->row);
            ASSERT_TRUE(loc.ok());
            EXPECT_EQ(loc->node, n);
            EXPECT_FALSE(loc->parity);
            EXPECT_EQ(loc->index, piece);
            auto range = layout.PieceRange(n, piece);
            ASSERT_TRUE(range.ok());
            EXPECT_EQ(loc->offset, range->offset);
            EXPECT_EQ(loc->length, range->length);
            // Pieces tile the shard in order; each at most P bytes.
            EXPECT_EQ(range->offset, next_offset);
            EXPECT_LE(range->length, p);
            if (piece < k - 1 && (piece + 1) * p <= s) {
              EXPECT_EQ(range->length, p);
            }
            next_offset = range->offset + range->length;
            total += range->length;
          }
          EXPECT_EQ(total, s);
          if (s > 0) {
            auto last = layout.PieceRange(n, k - 1);
            EXPECT_EQ(last->length, s > (k - 1) * p ? s - (k - 1) * p : 0);
          }
          // Parity slots: the stripes this node contributes no data to.
          for (int slot = 0; slot < m; ++slot) {
            auto r = layout.ParityRowOf(n, slot);
            ASSERT_TRUE(r.ok());
            ASSERT_EQ(r->row, k + slot);
            EXPECT_EQ(stripes_of_node.count(r->stripe), 0u) << "node " << n << " slot " << slot;
            stripes_of_node.insert(r->stripe);
            auto loc = layout.Locate(r->stripe, r->row);
            ASSERT_TRUE(loc.ok());
            EXPECT_EQ(loc->node, n);
            EXPECT_TRUE(loc->parity);
            EXPECT_EQ(loc->index, slot);
            EXPECT_EQ(loc->offset, slot * p);
            EXPECT_EQ(loc->length, p);
            EXPECT_EQ(layout.ParityNodes(r->stripe).value()[slot], n);
          }
          EXPECT_EQ(static_cast<int>(stripes_of_node.size()), g) << "node " << n;
        }
        EXPECT_EQ(static_cast<int>(seen_rows.size()), g * k);

        // Reverse: every (stripe, row) lands on a node whose map points back,
        // and each stripe uses every node of the group exactly once.
        for (int j = 0; j < g; ++j) {
          std::set<int> nodes;
          for (int row = 0; row < k + m; ++row) {
            auto loc = layout.Locate(j, row);
            ASSERT_TRUE(loc.ok());
            nodes.insert(loc->node);
            auto back = loc->parity ? layout.ParityRowOf(loc->node, loc->index)
                                    : layout.DataRowOf(loc->node, loc->index);
            ASSERT_TRUE(back.ok());
            EXPECT_EQ(back.value(), (StripeRow{j, row}));
          }
          EXPECT_EQ(static_cast<int>(nodes.size()), g) << "stripe " << j;
        }
      }
    }
  }
}

TEST(StripeLayoutTest, DifferentShardSizesUseTheLargestForThePieceSize) {
  StripeLayout layout = MakeLayout(3, 2, {10, 25, 7, 0, 25});
  EXPECT_EQ(layout.piece_bytes(), 9u);
  EXPECT_EQ(layout.shard_bytes(2), 7u);
  EXPECT_EQ(layout.shard_bytes(9), 0u);
  auto r = layout.PieceRange(2, 0);
  EXPECT_EQ(r->offset, 0u);
  EXPECT_EQ(r->length, 7u);
  r = layout.PieceRange(2, 1);
  EXPECT_EQ(r->offset, 7u);
  EXPECT_EQ(r->length, 0u);
  for (int piece = 0; piece < 3; ++piece) {
    EXPECT_EQ(layout.PieceRange(3, piece)->length, 0u);
  }
  r = layout.PieceRange(1, 2);
  EXPECT_EQ(r->offset, 18u);
  EXPECT_EQ(r->length, 7u);
  r = layout.PieceRange(0, 1);
  EXPECT_EQ(r->offset, 9u);
  EXPECT_EQ(r->length, 1u);
}

TEST(StripeLayoutTest, OutOfRangeLookupsAreInvalidArgument) {
  auto layout = StripeLayout::Create(3, 2, 100);
  ASSERT_TRUE(layout.ok());
  auto expect_invalid = [](const Status& s, const std::string& needle) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  expect_invalid(layout->DataRowOf(5, 0).status(), "node 5 is outside 0..4");
  expect_invalid(layout->DataRowOf(0, 3).status(), "piece 3 is outside 0..2");
  expect_invalid(layout->ParityRowOf(0, 2).status(), "parity slot 2");
  expect_invalid(layout->ParityRowOf(-1, 0).status(), "node -1");
  expect_invalid(layout->Locate(5, 0).status(), "stripe 5");
  expect_invalid(layout->Locate(0, 5).status(), "row 5");
  expect_invalid(layout->ParityNodes(-1).status(), "stripe -1");
  expect_invalid(layout->PieceRange(0, -1).status(), "piece -1");
}

// End to end: a group of nodes with odd, unequal shard sizes protects its
// shards with the layout and a codec; losing any set of at most M nodes, the
// survivors' pieces and parity rebuild every lost shard and parity area.
template <typename Codec>
void RunGroupRecovery(const Codec& codec, const std::vector<size_t>& sizes, unsigned seed) {
  const int k = codec.k(), m = codec.m(), g = k + m;
  StripeLayout layout = MakeLayout(k, m, sizes);
  const size_t p = layout.piece_bytes();
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> shards(g), parity(g);
  for (int n = 0; n < g; ++n) {
    shards[n].resize(sizes[n]);
    for (auto& b : shards[n]) b = static_cast<uint8_t>(rng());
    parity[n].assign(layout.parity_bytes_per_node(), 0);
  }
  // Encode: stripe rows gathered into P-byte zero-padded buffers.
  auto gather = [&](const std::vector<std::vector<uint8_t>>& sh,
                    const std::vector<std::vector<uint8_t>>& par, int j) {
    std::vector<std::vector<uint8_t>> rows(g, std::vector<uint8_t>(p, 0));
    for (int row = 0; row < g; ++row) {
      RowLocation loc = layout.Locate(j, row).value();
      const auto& src = loc.parity ? par[loc.node] : sh[loc.node];
      if (loc.length > 0) std::memcpy(rows[row].data(), src.data() + loc.offset, loc.length);
    }
    return rows;
  };
  for (int j = 0; j < g; ++j) {
    auto rows = gather(shards, parity, j);
    std::vector<uint8_t*> ptrs;
    for (auto& r : rows) ptrs.push_back(r.data());
    ASSERT_TRUE(codec.Encode(ptrs.data(), ptrs.data() + k, p).ok());
    for (int r = 0; r < m; ++r) {
      RowLocation loc = layout.Locate(j, k + r).value();
      std::memcpy(parity[loc.node].data() + loc.offset, rows[k + r].data(), p);
    }
  }
  for (int lost_count = 1; lost_count <= m; ++lost_count) {
    for (const auto& lost : testing::Subsets(g, lost_count)) {
      auto sh = shards;
      auto par = parity;
      for (int n : lost) {
        std::fill(sh[n].begin(), sh[n].end(), 0xCC);
        std::fill(par[n].begin(), par[n].end(), 0xCC);
      }
      for (int j = 0; j < g; ++j) {
        auto rows = gather(sh, par, j);
        std::vector<int> erased;
        for (int row = 0; row < g; ++row) {
          int node = layout.Locate(j, row)->node;
          if (std::find(lost.begin(), lost.end(), node) != lost.end()) erased.push_back(row);
        }
        std::vector<uint8_t*> ptrs;
        for (auto& r : rows) ptrs.push_back(r.data());
        ASSERT_TRUE(codec.Decode(ptrs.data(), erased, p).ok());
        for (int row : erased) {
          RowLocation loc = layout.Locate(j, row).value();
          auto& dst = loc.parity ? par[loc.node] : sh[loc.node];
          if (loc.length > 0) std::memcpy(dst.data() + loc.offset, rows[row].data(), loc.length);
          // The padding of a short piece decodes back to zeros.
          for (size_t b = loc.length; b < p; ++b) ASSERT_EQ(rows[row][b], 0) << "padding";
        }
      }
      for (int n = 0; n < g; ++n) {
        ASSERT_EQ(sh[n], shards[n]) << "shard of node " << n;
        ASSERT_EQ(par[n], parity[n]) << "parity of node " << n;
      }
    }
  }
}

TEST(StripeLayoutTest, GroupRecoveryWithRsAndXor) {
  RunGroupRecovery(RsCodec::Create(3, 2).value(), {1001, 999, 1000, 17, 1001}, 41);
  RunGroupRecovery(RsCodec::Create(2, 3).value(), {5, 4, 3, 0, 1}, 42);
  RunGroupRecovery(RsCodec::Create(4, 1).value(), {333, 333, 333, 333, 333}, 43);
  RunGroupRecovery(XorCodec::Create(4).value(), {64, 65, 63, 1, 200}, 44);
  RunGroupRecovery(XorCodec::Create(1).value(), {10, 9}, 45);
}

}  // namespace
}  // namespace memento::erasure
