#include "lost_time.h"

#include <algorithm>

namespace memento::launch::detail {

LostSplit SplitLostTime(const std::vector<LossSpan>& spans, double t_restore_begin) {
  LostSplit split;
  if (spans.empty()) return split;
  double start = spans.front().t_fail;
  for (const LossSpan& s : spans) start = std::min(start, s.t_fail);
  if (t_restore_begin <= start) {
    for (const LossSpan& s : spans) split.detection_s += std::max(0.0, s.t_seen - s.t_fail);
    return split;
  }
  // The union of the spans clipped to the window, walked in order of fault.
  std::vector<LossSpan> sorted = spans;
  std::sort(sorted.begin(), sorted.end(),
            [](const LossSpan& a, const LossSpan& b) { return a.t_fail < b.t_fail; });
  double covered_to = start;
  for (const LossSpan& s : sorted) {
    const double from = std::max(s.t_fail, covered_to);
    const double to = std::min(s.t_seen, t_restore_begin);
    if (to > from) {
      split.detection_s += to - from;
      covered_to = to;
    }
  }
  split.wait_s = std::max(0.0, t_restore_begin - start - split.detection_s);
  return split;
}

}  // namespace memento::launch::detail
