// How the time from a failure to the restore that recovers from it divides
// between detection (a loss the launcher had not seen yet) and the wait for
// the restore to begin (a relaunch, or an in-job rejoin).
#pragma once

#include <vector>

namespace memento::launch::detail {

// One failure: its fault (the kill, or the stage hook's time) and the moment
// the launcher saw it, absolute seconds.
struct LossSpan {
  double t_fail = 0;
  double t_seen = 0;
};

struct LostSplit {
  double detection_s = 0;
  double wait_s = 0;  // the relaunch or the rejoin
};

// Splits [first fault, `t_restore_begin`] so that the parts add up to it:
// detection is the time some failure was not yet seen (the union of the
// spans, which overlap when a job repairs its own world and a second loss
// comes before the launcher saw the first), the wait the rest. Without a
// restore begin inside that window (0: never reported), detection is the
// spans' sum and the wait 0.
LostSplit SplitLostTime(const std::vector<LossSpan>& spans, double t_restore_begin);

}  // namespace memento::launch::detail
