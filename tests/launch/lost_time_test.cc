// The launcher's split of a failure's cost into detection and the wait for
// the restore to begin (a relaunch, or an in-job rejoin): the parts add up to
// the time from the first fault to the restore's begin, whatever the order
// in which the launcher saw the failures.
#include "lost_time.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace memento::launch::detail {
namespace {

// The split of `spans` with the restore begun at `begin`, against the
// expected detection and wait.
void ExpectSplit(const std::vector<LossSpan>& spans, double begin, double detection,
                 double wait) {
  std::string what = "restore begun at " + std::to_string(begin) + ", spans";
  for (const LossSpan& s : spans) {
    what += " [" + std::to_string(s.t_fail) + ", " + std::to_string(s.t_seen) + "]";
  }
  const LostSplit s = SplitLostTime(spans, begin);
  EXPECT_NEAR(s.detection_s, detection, 1e-9) << what;
  EXPECT_NEAR(s.wait_s, wait, 1e-9) << what;
}

TEST(SplitLostTime, OneFailureIsDetectionThenTheWait) {
  ExpectSplit({{10.0, 10.5}}, 12.0, 0.5, 1.5);
}

// A second loss during the recovery from the first, each seen before the
// next: both detections count, the rest is the wait.
TEST(SplitLostTime, FailuresOneAfterTheOtherAddTheirDetections) {
  ExpectSplit({{10.0, 10.5}, {11.0, 11.2}}, 12.0, 0.7, 1.3);
}

// A job that repairs its own world (ULFM) can lose the spare that took the
// first loss's place before the launcher saw that loss: the spans overlap and
// the time is detection once, not twice. Summing them made the rejoin
// 12.0 - 10.2 - 1.0 < 0, recorded as 0.
TEST(SplitLostTime, OverlappingDetectionsCountOnce) {
  ExpectSplit({{10.0, 10.2}, {10.1, 11.1}}, 12.0, 1.1, 0.9);
  // Listed by index, not by fault.
  ExpectSplit({{10.1, 11.1}, {10.0, 10.2}}, 12.0, 1.1, 0.9);
  // A span inside another adds nothing.
  ExpectSplit({{10.0, 11.0}, {10.2, 10.4}}, 12.0, 1.0, 1.0);
}

// The job's restore began before the launcher saw the loss (its world
// repaired itself): what came after the restore's begin is not time lost
// before it, and there was no wait.
TEST(SplitLostTime, DetectionEndsAtTheRestoresBegin) {
  ExpectSplit({{10.0, 10.3}, {10.1, 10.9}}, 10.6, 0.6, 0.0);
}

// No restore begin reported (0) or none after the first fault: the
// detections' sum, no wait.
TEST(SplitLostTime, WithoutARestoreBeginOnlyDetection) {
  ExpectSplit({{10.0, 10.5}, {10.2, 10.4}}, 0.0, 0.7, 0.0);
  ExpectSplit({}, 12.0, 0.0, 0.0);
  // A launcher that saw a fault "before" it happened (a stage hook's clock
  // ahead) counts no detection for it.
  ExpectSplit({{10.0, 9.9}}, 11.0, 0.0, 1.0);
}

}  // namespace
}  // namespace memento::launch::detail
