// The staged piece pipelines, driven by a host stand-in for the copy engine
// (the GPU paths themselves run in tests/cuda and the Python CUDA tests, on
// a GPU): CopyThroughTwoBuffers (MEMENTO_DEVICE_COPY=staged) and
// CopyToDeviceThroughTwoBuffers (a restore from a node store this process
// did not register). Every byte arrives in order and hashed, two copies are
// in flight, a buffer is never reused before its piece landed, and no copy
// outlives a failed call.
#include "snapshot/staged_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "memento/erasure/crc32c.h"

namespace memento::runtime {
namespace {

// What the two stand-ins of one call saw.
struct Counters {
  int in_flight = 0;     // queued, not yet landed
  int most = 0;          // the most in flight at once
  int queues = 0;        // Queue calls
  int landings = 0;      // Landed calls
  int fail_queue = -1;   // the Queue call (0-based) that fails
  int fail_landed = -1;  // the Landed call (0-based) that fails
};

// One copy at a time, like a DeviceCopyBatch of one copy. The copy "runs"
// until it is waited for: its bytes land in Landed or WaitAll, so a buffer
// read before its copy was waited for holds the previous piece.
class HostBatch {
 public:
  explicit HostBatch(Counters* c) : c_(c) {}

  Status Queue(const std::vector<DeviceCopyBatch::Copy>& copies, const DeviceFence*,
               size_t* queued) {
    *queued = 0;
    EXPECT_EQ(copies.size(), 1u);
    EXPECT_FALSE(pending_) << "a buffer queued again before its last piece landed";
    if (c_->queues++ == c_->fail_queue) return Status::Internal("queue refused (test)");
    copy_ = copies[0];
    pending_ = true;
    c_->most = std::max(c_->most, ++c_->in_flight);
    *queued = 1;
    return Status::Ok();
  }

  Status Landed(size_t i) {
    EXPECT_EQ(i, 0u);
    EXPECT_TRUE(pending_) << "waited for a copy that was not queued";
    Land();
    if (c_->landings++ == c_->fail_landed) return Status::Internal("copy failed (test)");
    return Status::Ok();
  }

  Status WaitAll() {
    Land();
    return Status::Ok();
  }

  bool pending() const { return pending_; }

 private:
  void Land() {
    if (!pending_) return;
    std::memcpy(copy_.dst, copy_.src, copy_.bytes);
    pending_ = false;
    --c_->in_flight;
  }

  Counters* c_;
  DeviceCopyBatch::Copy copy_;
  bool pending_ = false;
};

constexpr size_t kPiece = 4096;

struct Outcome {
  std::vector<uint8_t> src, dst;
  Counters counters;
  Status status;
  uint32_t crc = 0;
  bool left_in_flight = false;
};

enum class Way { kToHost, kToDevice };
const char* WayName(Way w) { return w == Way::kToHost ? "ToHost" : "ToDevice"; }
void PrintTo(Way w, std::ostream* os) { *os << WayName(w); }

Outcome CopyWith(size_t n, int fail_queue = -1, int fail_landed = -1, Way way = Way::kToHost) {
  Outcome run;
  std::mt19937 rng(static_cast<unsigned>(n));
  run.src.resize(n);
  for (auto& b : run.src) b = static_cast<uint8_t>(rng());
  run.dst.assign(n, 0);
  run.counters.fail_queue = fail_queue;
  run.counters.fail_landed = fail_landed;
  std::vector<uint8_t> a(kPiece, 0xEE), b(kPiece, 0xEE);
  uint8_t* const bufs[2] = {a.data(), b.data()};
  HostBatch first(&run.counters), second(&run.counters);
  HostBatch* const batches[2] = {&first, &second};
  erasure::Crc32cStream crc;
  std::vector<DeviceCopyBatch::Copy> one;
  if (way == Way::kToHost) {
    run.status = CopyThroughTwoBuffers(run.dst.data(), run.src.data(), n, /*gpu=*/0, kPiece, bufs,
                                       batches, nullptr, &crc, &one);
  } else {
    run.status = CopyToDeviceThroughTwoBuffers(run.dst.data(), run.src.data(), n, /*gpu=*/0, kPiece,
                                               bufs, batches, &crc, &one);
  }
  run.crc = crc.value();
  run.left_in_flight = first.pending() || second.pending();
  return run;
}

// Each way, with the stand-in copying a buffer only when its copy is waited
// for: to the host, a buffer copied out before its piece landed holds the
// previous piece; to the device, a buffer refilled before its last piece
// landed sends the new piece in its place. Either way the bytes differ.
class StagedCopyWays : public ::testing::TestWithParam<Way> {};

TEST_P(StagedCopyWays, EveryByteArrivesInOrderAndHashedWithTwoPiecesInFlight) {
  for (size_t n :
       {size_t{1}, size_t{7}, kPiece - 1, kPiece, kPiece + 1, 2 * kPiece, 5 * kPiece + 3}) {
    SCOPED_TRACE(n);
    const Outcome run = CopyWith(n, -1, -1, GetParam());
    ASSERT_TRUE(run.status.ok()) << run.status.ToString();
    EXPECT_EQ(run.dst, run.src);
    EXPECT_EQ(run.crc, erasure::Crc32c(run.src.data(), n));
    const int pieces = static_cast<int>((n + kPiece - 1) / kPiece);
    EXPECT_EQ(run.counters.queues, pieces);
    EXPECT_EQ(run.counters.landings, pieces) << "every piece waited for once";
    EXPECT_EQ(run.counters.most, std::min(pieces, 2)) << "double-buffered";
    EXPECT_FALSE(run.left_in_flight);
  }
}

TEST_P(StagedCopyWays, NothingQueuedOutlivesAFailedQueue) {
  for (int fail = 0; fail < 5; ++fail) {
    SCOPED_TRACE(fail);
    const Outcome run = CopyWith(5 * kPiece + 3, fail, -1, GetParam());
    EXPECT_EQ(run.status.code(), StatusCode::kInternal);
    EXPECT_NE(run.status.message().find("queue refused"), std::string::npos);
    EXPECT_FALSE(run.left_in_flight);
    EXPECT_EQ(run.counters.in_flight, 0);
    EXPECT_EQ(run.counters.queues, fail + 1) << "no piece is queued after the failure";
    // What arrived before the failure, in order: to the host, the pieces
    // copied out of the buffers (the one still in flight is dropped); to
    // the device, every piece queued.
    const int arrived = GetParam() == Way::kToDevice ? fail : std::max(0, fail - 1);
    EXPECT_EQ(std::memcmp(run.dst.data(), run.src.data(), static_cast<size_t>(arrived) * kPiece),
              0);
  }
}

TEST_P(StagedCopyWays, NothingQueuedOutlivesAFailedCopy) {
  for (int fail = 0; fail < 5; ++fail) {
    SCOPED_TRACE(fail);
    const Outcome run = CopyWith(5 * kPiece + 3, -1, fail, GetParam());
    EXPECT_EQ(run.status.code(), StatusCode::kInternal);
    EXPECT_NE(run.status.message().find("copy failed"), std::string::npos);
    EXPECT_FALSE(run.left_in_flight);
    EXPECT_EQ(run.counters.in_flight, 0);
    // A failed copy stops the pieces after it: at most one more was queued.
    EXPECT_LE(run.counters.queues, fail + 2);
    // The pieces before the failed one arrived, in order.
    EXPECT_EQ(std::memcmp(run.dst.data(), run.src.data(), static_cast<size_t>(fail) * kPiece), 0);
  }
}

// Without a hash (a source the caller verifies, as the remote read does):
// the same bytes, pieces and overlap.
TEST(StagedCopyToDevice, WithoutAHashEveryByteStillArrives) {
  const size_t n = 3 * kPiece + 5;
  std::vector<uint8_t> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> a(kPiece), b(kPiece);
  uint8_t* const bufs[2] = {a.data(), b.data()};
  Counters counters;
  HostBatch first(&counters), second(&counters);
  HostBatch* const batches[2] = {&first, &second};
  std::vector<DeviceCopyBatch::Copy> one;
  ASSERT_TRUE(CopyToDeviceThroughTwoBuffers(dst.data(), src.data(), n, /*gpu=*/0, kPiece, bufs,
                                            batches, /*crc=*/nullptr, &one)
                  .ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(counters.queues, 4);
  EXPECT_EQ(counters.most, 2);
  EXPECT_FALSE(first.pending() || second.pending());
}

INSTANTIATE_TEST_SUITE_P(Ways, StagedCopyWays, ::testing::Values(Way::kToHost, Way::kToDevice),
                         [](const auto& info) { return std::string(WayName(info.param)); });

// A copier given back is the next one taken (its pinned buffers are kept);
// copiers taken together are distinct.
TEST(StagedCopierPool, HandsBackWhatWasGivenAndNeverOneCopierTwice) {
  StagedCopierPool pool;
  std::unique_ptr<StagedCopier> a = pool.Take();
  std::unique_ptr<StagedCopier> b = pool.Take();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a.get(), b.get());
  StagedCopier* const first = a.get();
  pool.Give(std::move(a));
  pool.Give(nullptr);  // nothing to keep
  std::unique_ptr<StagedCopier> again = pool.Take();
  EXPECT_EQ(again.get(), first);
  std::unique_ptr<StagedCopier> fresh = pool.Take();
  EXPECT_NE(fresh.get(), first);
  EXPECT_NE(fresh.get(), b.get());
  EXPECT_EQ(again->pinned_bytes(), 0u) << "buffers are allocated by the first copy";
}

}  // namespace
}  // namespace memento::runtime
