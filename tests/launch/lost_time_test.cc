// The launcher's split of a failure's cost into detection and the wait for
// the restore to begin (a relaunch, or an in-job rejoin): the parts add up to
// the time from the first fault to the restore's begin, whatever the order
// in which the launcher saw the failures.
#include "lost_time.h"

#include <gtest/gtest.h>

namespace memento::launch::detail {
namespace {

constexpr double kEps = 1e-9;

TEST(SplitLostTime, OneFailureIsDetectionThenTheWait) {
  const LostSplit s = SplitLostTime({{10.0, 10.5}}, 12.0);
  EXPECT_NEAR(s.detection_s, 0.5, kEps);
  EXPECT_NEAR(s.wait_s, 1.5, kEps);
}

// A second loss during the recovery from the first, each seen before the
// next: both detections count, the rest is the wait.
TEST(SplitLostTime, FailuresOneAfterTheOtherAddTheirDetections) {
  const LostSplit s = SplitLostTime({{10.0, 10.5}, {11.0, 11.2}}, 12.0);
  EXPECT_NEAR(s.detection_s, 0.7, kEps);
  EXPECT_NEAR(s.wait_s, 1.3, kEps);
}

// A job that repairs its own world (ULFM) can lose the spare that took the
// first loss's place before the launcher saw that loss: the spans overlap and
// the time is detection once, not twice. Summing them made the rejoin
// 12.0 - 10.2 - 1.0 < 0, recorded as 0.
TEST(SplitLostTime, OverlappingDetectionsCountOnce) {
  const LostSplit s = SplitLostTime({{10.0, 10.2}, {10.1, 11.1}}, 12.0);
  EXPECT_NEAR(s.detection_s, 1.1, kEps);
  EXPECT_NEAR(s.wait_s, 0.9, kEps);
  // Seen in the other order (listed by index, not by fault).
  const LostSplit r = SplitLostTime({{10.1, 11.1}, {10.0, 10.2}}, 12.0);
  EXPECT_NEAR(r.detection_s, 1.1, kEps);
  EXPECT_NEAR(r.wait_s, 0.9, kEps);
  // A span inside another adds nothing.
  const LostSplit inner = SplitLostTime({{10.0, 11.0}, {10.2, 10.4}}, 12.0);
  EXPECT_NEAR(inner.detection_s, 1.0, kEps);
  EXPECT_NEAR(inner.wait_s, 1.0, kEps);
}

// The job's restore began before the launcher saw the loss (its world
// repaired itself): what came after the restore's begin is not time lost
// before it, and there was no wait.
TEST(SplitLostTime, DetectionEndsAtTheRestoresBegin) {
  const LostSplit s = SplitLostTime({{10.0, 10.3}, {10.1, 10.9}}, 10.6);
  EXPECT_NEAR(s.detection_s, 0.6, kEps);
  EXPECT_NEAR(s.wait_s, 0.0, kEps);
}

// No restore begin reported (0) or none after the first fault: the
// detections' sum, no wait.
TEST(SplitLostTime, WithoutARestoreBeginOnlyDetection) {
  const LostSplit s = SplitLostTime({{10.0, 10.5}, {10.2, 10.4}}, 0.0);
  EXPECT_NEAR(s.detection_s, 0.7, kEps);
  EXPECT_EQ(s.wait_s, 0.0);
  EXPECT_EQ(SplitLostTime({}, 12.0).detection_s, 0.0);
  // A launcher that saw a fault "before" it happened (a stage hook's clock
  // ahead) counts no detection for it.
  const LostSplit ahead = SplitLostTime({{10.0, 9.9}}, 11.0);
  EXPECT_NEAR(ahead.detection_s, 0.0, kEps);
  EXPECT_NEAR(ahead.wait_s, 1.0, kEps);
}

}  // namespace
}  // namespace memento::launch::detail
