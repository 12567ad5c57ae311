// PageRuns: the whole pages that cover a set of byte ranges, merged into
// runs that never share a page.
//
// The driver registers host memory (cudaHostRegister) by whole pages and
// refuses a range whose pages overlap one it registered before; the node
// store lays its regions out 64 bytes apart, so neighbouring regions share
// pages. Registering each run once instead of each region: one driver call
// per run of neighbouring device regions, and no refusal left unnoticed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace memento::runtime {

struct PageRun {
  uintptr_t begin = 0;  // page-aligned
  uintptr_t end = 0;    // page-aligned, > begin
  bool operator==(const PageRun& o) const { return begin == o.begin && end == o.end; }
};

// `ranges`: (address, bytes) in any order (empty ones ignored); `page`: a
// power of two. The runs come in address order; a range's pages are all in
// one run, and two runs are at least a page apart.
inline std::vector<PageRun> PageRuns(std::vector<std::pair<uintptr_t, uint64_t>> ranges,
                                     uint64_t page) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<PageRun> runs;
  for (const auto& [addr, bytes] : ranges) {
    if (bytes == 0) continue;
    const uintptr_t begin = addr & ~static_cast<uintptr_t>(page - 1);
    const uintptr_t end = (addr + bytes + page - 1) & ~static_cast<uintptr_t>(page - 1);
    if (!runs.empty() && begin <= runs.back().end) {
      runs.back().end = std::max(runs.back().end, end);
    } else {
      runs.push_back({begin, end});
    }
  }
  return runs;
}

}  // namespace memento::runtime
