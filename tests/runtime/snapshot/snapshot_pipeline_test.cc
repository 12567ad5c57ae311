// SnapshotPipeline on its own: every chunk is copied to its destination and
// handed to every stage once with its crc32c; the kSnapshot hook runs once per
// version; a failing stage or hook is reported by WaitCopied.
#include "snapshot/snapshot_pipeline.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "memento/erasure/crc32c.h"

namespace memento::runtime {
namespace {

class RecordingStage : public ChunkStage {
 public:
  Status Begin(uint64_t version, int slot, int chunks) override {
    std::lock_guard<std::mutex> lock(mu_);
    begun.push_back({version, slot, chunks});
    return begin_status;
  }
  Status OnChunk(const Chunk& chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    seen.insert(chunk.index);
    if (chunk.crc != erasure::Crc32c(chunk.data, chunk.length)) ++bad_crcs;
    return chunk.index == fail_at ? Status::IoError("stage refuses chunk") : Status::Ok();
  }
  Status End(uint64_t, const Status&) override { return Status::Ok(); }

  struct Begun {
    uint64_t version;
    int slot;
    int chunks;
  };
  std::vector<Begun> begun;
  std::set<int> seen;
  int bad_crcs = 0;
  int fail_at = -1;
  Status begin_status;

 private:
  std::mutex mu_;
};

std::vector<CopyTask> Tasks(const std::vector<uint8_t>& src, std::vector<uint8_t>* dst,
                            uint64_t chunk) {
  std::vector<CopyTask> tasks;
  for (uint64_t off = 0; off < src.size(); off += chunk) {
    CopyTask t;
    t.src = src.data() + off;
    t.dst = dst->data() + off;
    t.length = std::min<uint64_t>(chunk, src.size() - off);
    t.offset = off;
    tasks.push_back(t);
  }
  return tasks;
}

TEST(SnapshotPipeline, CopiesEveryChunkAndHandsItToEveryStage) {
  std::vector<uint8_t> src(1000003);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> dst(src.size(), 0);
  auto tasks = Tasks(src, &dst, 65536);
  RecordingStage a, b;
  std::vector<uint64_t> hooked;  // versions the kSnapshot hook saw
  std::mutex mu;
  SnapshotPipeline pipeline(3, {&a, &b}, [&](Stage s, uint64_t v) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(s, Stage::kSnapshot);
    hooked.push_back(v);
    return Status::Ok();
  });
  ASSERT_TRUE(pipeline.Start(42, 1, &tasks).ok());
  ASSERT_TRUE(pipeline.WaitCopied().ok());
  EXPECT_EQ(dst, src);
  for (RecordingStage* st : {&a, &b}) {
    ASSERT_EQ(st->begun.size(), 1u);
    EXPECT_EQ(st->begun[0].version, 42u);
    EXPECT_EQ(st->begun[0].slot, 1);
    EXPECT_EQ(st->begun[0].chunks, static_cast<int>(tasks.size()));
    EXPECT_EQ(st->seen.size(), tasks.size());
    EXPECT_EQ(st->bad_crcs, 0);
  }
  EXPECT_EQ(hooked, std::vector<uint64_t>{42});

  // The next version reuses the task list with the same pipeline.
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_TRUE(pipeline.Start(43, 0, &tasks).ok());
  ASSERT_TRUE(pipeline.WaitCopied().ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(hooked, (std::vector<uint64_t>{42, 43}));
}

TEST(SnapshotPipeline, AFailingStageFailsTheVersionButEveryChunkLands) {
  std::vector<uint8_t> src(300000, 0x5A);
  std::vector<uint8_t> dst(src.size(), 0);
  auto tasks = Tasks(src, &dst, 4096);
  RecordingStage stage;
  stage.fail_at = 3;
  SnapshotPipeline pipeline(2, {&stage}, nullptr);
  ASSERT_TRUE(pipeline.Start(1, 0, &tasks).ok());
  Status s = pipeline.WaitCopied();
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_EQ(stage.seen.size(), tasks.size());
  EXPECT_EQ(dst, src);
}

TEST(SnapshotPipeline, AFailingHookIsTheSnapshotsError) {
  std::vector<uint8_t> src(10000, 1);
  std::vector<uint8_t> dst(src.size(), 0);
  auto tasks = Tasks(src, &dst, 1000);
  RecordingStage stage;
  SnapshotPipeline pipeline(2, {&stage}, [](Stage, uint64_t) {
    return Status::Unavailable("injected");
  });
  ASSERT_TRUE(pipeline.Start(5, 0, &tasks).ok());
  EXPECT_EQ(pipeline.WaitCopied().code(), StatusCode::kUnavailable);
}

TEST(SnapshotPipeline, AStageRefusingToBeginIsReportedByStart) {
  std::vector<uint8_t> src(100, 1);
  std::vector<uint8_t> dst(src.size(), 0);
  auto tasks = Tasks(src, &dst, 64);
  RecordingStage stage;
  stage.begin_status = Status::ResourceExhausted("no room");
  SnapshotPipeline pipeline(1, {&stage}, nullptr);
  EXPECT_EQ(pipeline.Start(1, 0, &tasks).code(), StatusCode::kResourceExhausted);
  // This version's failure, so that the rank votes "false" at the commit.
  EXPECT_EQ(pipeline.WaitCopied().code(), StatusCode::kResourceExhausted);
}

TEST(SnapshotPipeline, WaitCopiedWithNothingStartedIsOk) {
  SnapshotPipeline pipeline(2, {}, nullptr);
  EXPECT_TRUE(pipeline.WaitCopied().ok());
}

}  // namespace
}  // namespace memento::runtime
