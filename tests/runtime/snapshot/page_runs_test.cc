// PageRuns: whole pages over byte ranges, merged so that no two runs share a
// page (the driver refuses to register a page twice).
#include "snapshot/page_runs.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

namespace memento::runtime {
namespace {

constexpr uint64_t kPage = 4096;

TEST(PageRuns, NeighboursSharingAPageBecomeOneRun) {
  // Two regions 64 bytes apart in one page, a third in the next page.
  const std::vector<PageRun> runs =
      PageRuns({{0x10000 + 100, 200}, {0x10000 + 320, 5000}, {0x10000 + 5320 + 64, 10}}, kPage);
  EXPECT_EQ(runs, (std::vector<PageRun>{{0x10000, 0x12000}}));
}

TEST(PageRuns, RangesAPageApartStayApartAndEmptyOnesAreIgnored) {
  const std::vector<PageRun> runs =
      PageRuns({{0x30000, 4096}, {0x10000, 1}, {0x20000 + 4095, 2}, {0x50000, 0}}, kPage);
  EXPECT_EQ(runs,
            (std::vector<PageRun>{{0x10000, 0x11000}, {0x20000, 0x22000}, {0x30000, 0x31000}}));
}

TEST(PageRuns, AdjacentPagesMergeSoThatNoPageIsRegisteredTwice) {
  // The second range starts on the page the first ends on: one run.
  EXPECT_EQ(PageRuns({{0x10000, 4096}, {0x11000, 4096}}, kPage),
            (std::vector<PageRun>{{0x10000, 0x12000}}));
  // A host region between two device regions on the same page: still one
  // run (the page cannot be registered by two runs).
  EXPECT_EQ(PageRuns({{0x10000, 3000}, {0x10000 + 3500, 5000}}, kPage),
            (std::vector<PageRun>{{0x10000, 0x13000}}));
}

TEST(PageRuns, RandomLayoutsCoverEveryByteAndNoPageTwice) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::pair<uintptr_t, uint64_t>> ranges;
    uintptr_t at = 0x100000;
    for (int i = 0; i < 20; ++i) {
      const uint64_t bytes = rng() % 3 == 0 ? rng() % 64 : rng() % 20000;
      ranges.push_back({at, bytes});
      at += (bytes + 63) / 64 * 64 + 64 * (rng() % 200);  // 64-byte aligned, gaps
    }
    const std::vector<PageRun> runs = PageRuns(ranges, kPage);
    std::set<uintptr_t> pages;
    for (size_t r = 0; r < runs.size(); ++r) {
      ASSERT_EQ(runs[r].begin % kPage, 0u);
      ASSERT_EQ(runs[r].end % kPage, 0u);
      ASSERT_LT(runs[r].begin, runs[r].end);
      if (r > 0) ASSERT_LT(runs[r - 1].end, runs[r].begin) << "runs a page apart";
      for (uintptr_t p = runs[r].begin; p < runs[r].end; p += kPage) {
        ASSERT_TRUE(pages.insert(p).second) << "page in two runs";
      }
    }
    for (const auto& [addr, bytes] : ranges) {
      for (uint64_t b = 0; b < bytes; b += 97) {
        const uintptr_t page = (addr + b) & ~(kPage - 1);
        ASSERT_TRUE(pages.count(page)) << "byte not covered";
      }
      if (bytes > 0) ASSERT_TRUE(pages.count((addr + bytes - 1) & ~(kPage - 1)));
    }
  }
}

}  // namespace
}  // namespace memento::runtime
