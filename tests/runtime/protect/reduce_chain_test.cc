// RunReduceChains over the in-process transport, ranks as threads: the
// destination gets XOR_k coef_k * row_k, whatever the piece size; a term that
// cannot read its row fails the chain at the destination (no hang), and the
// byte counts add up.
#include "protect/reduce_chain.h"

#include <gtest/gtest.h>

#include <thread>

#include "memento/erasure/gf256.h"
#include "memento/runtime/inprocess_transport.h"

namespace memento::runtime {
namespace {

std::vector<uint8_t> Row(int rank, int row_id, uint64_t len) {
  std::vector<uint8_t> r(len);
  for (uint64_t i = 0; i < len; ++i) r[i] = static_cast<uint8_t>(rank * 37 + row_id * 11 + i * 7);
  return r;
}

struct Outcome {
  Status status;
  std::vector<std::vector<uint8_t>> results;
  ReduceBytes bytes;
};

// Runs `chains` on `n` ranks; `unreadable` is a rank whose reader fails.
// With `landed` (one row per chain, sized by the caller), the destinations
// pass their pieces to a writer that copies them there, checking that each
// chain's pieces come in order and without gaps.
std::vector<Outcome> RunOnThreads(int n, const std::vector<ReduceChain>& chains,
                                  uint64_t piece_bytes, int unreadable = -1,
                                  std::vector<std::vector<uint8_t>>* landed = nullptr) {
  auto group = InProcessGroup::Create(n, std::chrono::seconds(20));
  std::vector<Outcome> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto reader = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len,
                        uint8_t* dst) -> Status {
        if (r == unreadable) return Status::NotFound("row gone");
        auto row = Row(r, term.row_id, off + len);
        std::copy(row.begin() + off, row.end(), dst);
        return Status::Ok();
      };
      std::vector<uint64_t> next(chains.size(), 0);
      RowWriter writer = [&](int c, uint64_t off, const uint8_t* data, uint64_t len) -> Status {
        if (off != next[c]) return Status::Internal("piece out of order");
        next[c] = off + len;
        std::copy(data, data + len, (*landed)[c].begin() + off);
        return Status::Ok();
      };
      out[r].status =
          RunReduceChains(group->transport(r).get(), chains, /*tag_base=*/0, piece_bytes, reader,
                          &out[r].results, &out[r].bytes, landed != nullptr ? &writer : nullptr);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<uint8_t> Expected(const ReduceChain& chain) {
  std::vector<uint8_t> want(chain.length, 0);
  for (const ReduceTerm& t : chain.terms) {
    auto row = Row(t.rank, t.row_id, chain.length);
    erasure::GfMultiplyAdd(t.coef, row.data(), want.data(), want.size());
  }
  return want;
}

TEST(ReduceChain, DestinationGetsTheLinearCombination) {
  for (uint64_t piece : {uint64_t{7}, uint64_t{1000}, uint64_t{1} << 20}) {
    std::vector<ReduceChain> chains(2);
    chains[0].terms = {{0, 0, 3}, {1, 2, 1}, {2, 1, 0x8e}};
    chains[0].dst_rank = 3;
    chains[0].length = 12345;
    chains[1].terms = {{3, 5, 1}};  // a one-term chain is a copy
    chains[1].dst_rank = 0;
    chains[1].length = 999;
    auto out = RunOnThreads(4, chains, piece);
    for (int r = 0; r < 4; ++r) ASSERT_TRUE(out[r].status.ok()) << out[r].status.ToString();
    ASSERT_EQ(out[3].results.size(), 2u);
    EXPECT_EQ(out[3].results[0], Expected(chains[0])) << "piece " << piece;
    EXPECT_EQ(out[0].results[1], Expected(chains[1])) << "piece " << piece;
    // Into the destination: the row once; into the middle terms: one row each.
    EXPECT_EQ(out[3].bytes.received, chains[0].length);
    EXPECT_EQ(out[1].bytes.received, chains[0].length);
    EXPECT_EQ(out[2].bytes.received, chains[0].length);
    EXPECT_EQ(out[0].bytes.received, chains[1].length);
  }
}

// Several chains into one destination at once (received concurrently), long
// chains of many pieces, landed through the writer: no row-sized result.
TEST(ReduceChain, WriterLandsEveryChainIntoOneDestination) {
  for (uint64_t piece : {uint64_t{64}, uint64_t{4096}}) {
    std::vector<ReduceChain> chains(3);
    chains[0].terms = {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}};
    chains[1].terms = {{1, 3, 0x1d}, {2, 4, 7}, {0, 5, 0xff}};
    chains[2].terms = {{2, 6, 1}};
    for (auto& ch : chains) ch.dst_rank = 3;
    chains[0].length = 100000;
    chains[1].length = 33333;
    chains[2].length = 10;
    std::vector<std::vector<uint8_t>> landed;
    for (const auto& ch : chains) landed.emplace_back(ch.length, 0);
    auto out = RunOnThreads(4, chains, piece, -1, &landed);
    for (int r = 0; r < 4; ++r) ASSERT_TRUE(out[r].status.ok()) << out[r].status.ToString();
    for (size_t c = 0; c < chains.size(); ++c) {
      EXPECT_EQ(landed[c], Expected(chains[c])) << "chain " << c << " piece " << piece;
      EXPECT_TRUE(out[3].results[c].empty());
    }
    EXPECT_EQ(out[3].bytes.received, 100000u + 33333u + 10u);
  }
}

TEST(ReduceChain, AnUnreadableRowFailsTheChainAtItsDestination) {
  std::vector<ReduceChain> chains(1);
  chains[0].terms = {{0, 0, 1}, {1, 0, 1}};
  chains[0].dst_rank = 2;
  chains[0].length = 5000;
  auto out = RunOnThreads(3, chains, 1024, /*unreadable=*/0);
  EXPECT_FALSE(out[2].status.ok());
  EXPECT_FALSE(out[0].status.ok());
}

}  // namespace
}  // namespace memento::runtime
