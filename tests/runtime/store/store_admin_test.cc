#include "memento/runtime/store_admin.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/shm_segment.h"
#include "store/node_store_format.h"
#include "store_test_util.h"

namespace memento::runtime {
namespace {

using testing::JobCleaner;
using testing::UniqueJob;
namespace f = format;

StoreLayout OneRegion() {
  StoreLayout l;
  l.regions.push_back(
      {RegionKind::kShard, "weights", 1000, 0, 0, 0, {"float32", {250}, {250}, {0}}});
  return l;
}

// Creates a store for (job, node, lane) with version `v` sealed in one slot.
NodeStore MakeStore(const std::string& job, const std::string& node, uint32_t lane, uint64_t v) {
  auto store = NodeStore::Create({job, node, lane}, OneRegion(), 2);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  int slot = *store->BeginWrite(v);
  uint8_t* p = store->MutableRegion(slot, 0);
  std::memset(p, 7, 1000);
  EXPECT_TRUE(store->SealRegion(slot, 0, 1000, erasure::Crc32c(p, 1000)).ok());
  EXPECT_TRUE(store->SealSlot(slot, v).ok());
  EXPECT_TRUE(store->MarkCommitted(slot, v).ok());
  return std::move(*store);
}

TEST(StoreAdmin, InspectReportsAndVerifiesEverySegment) {
  JobCleaner job(UniqueJob("adm"));
  JobCleaner other(UniqueJob("adm"));
  NodeStore a = MakeStore(job.job(), "h/0", 0, 3);
  NodeStore b = MakeStore(job.job(), "h/1", 1, 3);
  NodeStore c = MakeStore(other.job(), "h/0", 0, 9);
  auto reports = InspectJob(job.job(), /*verify=*/true);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 2u);  // the other job's segment is not listed
  for (const auto& r : *reports) {
    EXPECT_TRUE(r.status.ok());
    EXPECT_EQ(r.inventory.NewestCommitted() >= 0, true);
    EXPECT_EQ(r.payload_bytes, 1000u);
  }
  EXPECT_EQ((*reports)[0].node == "h/0" ? (*reports)[1].node : (*reports)[0].node, "h/1");

  // Flip a payload byte of `a`: only --verify sees it.
  auto slot = a.FindVersion(3);
  ASSERT_TRUE(slot.has_value());
  auto view = a.ReadRegion(*slot, 0);
  const_cast<uint8_t*>(view->data)[10] ^= 1;
  auto quick = InspectJob(job.job(), false);
  auto deep = InspectJob(job.job(), true);
  ASSERT_TRUE(quick.ok() && deep.ok());
  int bad = 0;
  for (const auto& r : *deep) {
    for (const auto& slot_status : r.verified) {
      for (const auto& s : slot_status) bad += s.ok() ? 0 : 1;
    }
  }
  EXPECT_EQ(bad, 1);
  EXPECT_NE(FormatReports(*deep).find("BAD: Corruption"), std::string::npos);
  EXPECT_EQ(FormatReports(*quick).find("BAD"), std::string::npos);

  // A damaged seal record of `b` is reported with or without --verify.
  auto raw = ShmSegment::Open(b.segment_name(), ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  f::SegmentHeader h;
  std::memcpy(&h, raw->data(), sizeof(h));
  const int b_slot = *b.FindVersion(3);
  const uint64_t seal0 =
      h.slot_table_offset + h.slot_control_bytes * b_slot + sizeof(f::SlotHeader);
  raw->data()[seal0 + offsetof(f::RegionSeal, payload_crc)] ^= 0x40;
  for (bool verify : {false, true}) {
    auto again = InspectJob(job.job(), verify);
    ASSERT_TRUE(again.ok());
    int damaged = 0;
    for (const auto& r : *again) {
      for (const auto& slot_status : r.verified) {
        for (const auto& s : slot_status) damaged += s.ok() ? 0 : 1;
      }
    }
    EXPECT_EQ(damaged, verify ? 2 : 1) << "verify " << verify << "\n" << FormatReports(*again);
  }
}

// The finished mark of a kept store: set and cleared by its owner, read by
// inspect, and a damaged one counts as none (the store restores as before).
TEST(StoreAdmin, InspectShowsTheFinishedMark) {
  JobCleaner job(UniqueJob("fin"));
  NodeStore a = MakeStore(job.job(), "h/0", 0, 3);
  EXPECT_FALSE(a.Finished().has_value());
  ASSERT_TRUE(a.MarkFinished({0x1234, 3, 99}).ok());
  auto reports = InspectJob(job.job(), false);
  ASSERT_TRUE(reports.ok() && reports->size() == 1u);
  ASSERT_TRUE((*reports)[0].finished.has_value());
  EXPECT_EQ((*reports)[0].finished->lineage, 0x1234u);
  EXPECT_EQ((*reports)[0].finished->version, 3u);
  EXPECT_NE(FormatReports(*reports).find("finished at version 3"), std::string::npos);
  auto ro = NodeStore::AttachByName(a.segment_name(), ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(ro->MarkFinished({1, 1, 1}).code(), StatusCode::kFailedPrecondition);

  auto raw = ShmSegment::Open(a.segment_name(), ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  raw->data()[f::kFinishedOffset + offsetof(f::FinishedMark, version)] ^= 1;
  EXPECT_FALSE(a.Finished().has_value()) << "a damaged mark is no mark";
  ASSERT_TRUE(a.MarkFinished({0x1234, 3, 99}).ok());
  ASSERT_TRUE(a.Finished().has_value());
  ASSERT_TRUE(a.ClearFinished().ok());
  EXPECT_FALSE(a.Finished().has_value());
  EXPECT_TRUE(a.FindVersion(3).has_value()) << "marking never touches the slots";
}

TEST(StoreAdmin, CleanUnlinksOnlyThatJob) {
  JobCleaner job(UniqueJob("adm"));
  JobCleaner other(UniqueJob("adm"));
  NodeStore a = MakeStore(job.job(), "h/0", 0, 1);
  NodeStore b = MakeStore(job.job(), "h/1", 0, 1);
  NodeStore c = MakeStore(other.job(), "h/0", 0, 1);
  auto removed = CleanJob(job.job());
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->size(), 2u);
  EXPECT_TRUE(ListJobSegments(job.job())->empty());
  EXPECT_EQ(ListJobSegments(other.job())->size(), 1u);
  // Mappings that exist stay valid after unlinking.
  EXPECT_TRUE(a.FindVersion(1).has_value());
  EXPECT_FALSE(CleanJob("bad/job").ok());
}

// Asked to keep what is in use (memento launch's end-of-run cleanup), a
// segment a running process holds (here this one: a store open read-write
// holds its lock) stays and is named with the pid; one nobody holds goes.
TEST(StoreAdmin, CleanCanLeaveTheSegmentsOfARunningProcess) {
  JobCleaner job(UniqueJob("adm"));
  std::string released;
  {
    NodeStore gone = MakeStore(job.job(), "h/1", 0, 1);
    released = gone.segment_name();
  }
  NodeStore held = MakeStore(job.job(), "h/0", 0, 1);
  EXPECT_EQ(ShmSegment::HolderPid(held.segment_name()), static_cast<long>(getpid()));
  EXPECT_EQ(ShmSegment::HolderPid(released), 0);
  std::vector<std::string> others;
  auto removed = CleanJob(job.job(), &others, /*keep_in_use=*/true);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, std::vector<std::string>{released});
  ASSERT_EQ(others.size(), 1u);
  EXPECT_EQ(others[0], held.segment_name() + " (in use by the running process " +
                           std::to_string(getpid()) + ")");
  EXPECT_EQ(ListJobSegments(job.job())->size(), 1u);
  removed = CleanJob(job.job());  // `memento clean` removes it
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, std::vector<std::string>{held.segment_name()});
}

// A segment of the job that another user owns is left alone and named,
// also for root (who could unlink it): a job id is not per user.
TEST(StoreAdmin, CleanLeavesAnotherUsersSegment) {
  JobCleaner job(UniqueJob("adm"));
  NodeStore mine = MakeStore(job.job(), "h/0", 0, 1);
  NodeStore theirs = MakeStore(job.job(), "h/1", 0, 1);
  const std::string path = ShmSegment::Directory() + theirs.segment_name();
  const bool root = geteuid() == 0;  // only root can give a file away
  if (root) {
    ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0) << path;
  }
  std::vector<std::string> others;
  auto removed = CleanJob(job.job(), &others);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(removed->size(), root ? 1u : 2u);
  if (root) {
    ASSERT_EQ(others.size(), 1u);
    EXPECT_EQ(others[0], theirs.segment_name() + " (owned by uid 65534)");
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0) << "another user's segment was removed";
    ASSERT_EQ(chown(path.c_str(), geteuid(), getegid()), 0);
  } else {
    EXPECT_TRUE(others.empty());
  }
  ASSERT_TRUE(CleanJob(job.job()).ok());
  EXPECT_TRUE(ListJobSegments(job.job())->empty());
}

// A name of the job that cannot be unlinked (here a folder, which unlink
// refuses; another user's file in a sticky /dev/shm is the same) does not
// stop the others: every segment goes, and the error names what did not.
TEST(StoreAdmin, CleanGoesOnPastANameItCannotRemove) {
  JobCleaner job(UniqueJob("adm"));
  const std::string dir = ShmSegment::Directory() + "/memento." + job.job() + ".0-first";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0) << dir;
  NodeStore a = MakeStore(job.job(), "h/0", 0, 1);
  NodeStore b = MakeStore(job.job(), "h/1", 0, 1);
  auto removed = CleanJob(job.job());
  rmdir(dir.c_str());
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.status().code(), StatusCode::kIoError) << removed.status().ToString();
  EXPECT_NE(removed.status().message().find("removed 2 of 3"), std::string::npos)
      << removed.status().ToString();
  EXPECT_NE(removed.status().message().find("0-first"), std::string::npos)
      << removed.status().ToString();
  EXPECT_TRUE(ListJobSegments(job.job())->empty());
}

// A slot whose state word is none of empty, writing or sealed is damaged:
// inspect reports it, not "valid".
TEST(StoreAdmin, InspectReportsASlotWithAnUnknownState) {
  JobCleaner job(UniqueJob("adm"));
  NodeStore a = MakeStore(job.job(), "h/0", 0, 1);
  auto raw = ShmSegment::Open(a.segment_name(), ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  f::SegmentHeader h;
  std::memcpy(&h, raw->data(), sizeof(h));
  const int other = 1 - *a.FindVersion(1);
  const uint32_t garbage = 0xDEAD;
  std::memcpy(raw->data() + h.slot_table_offset + h.slot_control_bytes * other +
                  offsetof(f::SlotHeader, state),
              &garbage, sizeof(garbage));
  auto reports = InspectJob(job.job(), false);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 1u);
  const auto& verified = (*reports)[0].verified[other];
  ASSERT_FALSE(verified.empty());
  EXPECT_EQ(verified[0].code(), StatusCode::kCorruption) << verified[0].ToString();
  EXPECT_NE(verified[0].message().find("unknown state"), std::string::npos);
}

// A store set aside for an elastic restore keeps its data intact under
// another name: inspect reads it as the store it is, not as unusable.
TEST(StoreAdmin, InspectReadsAStoreSetAsideForAnElasticRestore) {
  JobCleaner job(UniqueJob("adm"));
  { NodeStore a = MakeStore(job.job(), "h/0", 0, 4); }
  auto aside = NodeStore::SetAsideForElastic({job.job(), "h/0", 0});
  ASSERT_TRUE(aside.ok()) << aside.status().ToString();
  auto reports = InspectJob(job.job(), /*verify=*/true);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 1u);
  const SegmentReport& rep = (*reports)[0];
  EXPECT_EQ(rep.name, *aside);
  EXPECT_TRUE(rep.status.ok()) << rep.status.ToString();
  EXPECT_EQ(rep.node, "h/0");
  for (const auto& slot : rep.verified) {
    for (const Status& s : slot) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

TEST(StoreAdmin, InspectReportsAnUnusableSegment) {
  JobCleaner job(UniqueJob("adm"));
  auto name = NodeStore::SegmentName({job.job(), "h", 0});
  auto raw = ShmSegment::Create(*name, 4096);  // garbage: no header
  ASSERT_TRUE(raw.ok());
  auto reports = InspectJob(job.job(), true);
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 1u);
  EXPECT_FALSE((*reports)[0].status.ok());
  EXPECT_EQ((*reports)[0].bytes, 4096u);
  EXPECT_NE(FormatReports(*reports).find("UNUSABLE"), std::string::npos);
}

#ifdef MEMENTO_CLI_PATH
// Runs `cmd`, returns its exit code and stdout.
int RunCommand(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(StoreAdminCli, InspectAndCleanOnRealSegments) {
  JobCleaner job(UniqueJob("cli"));
  NodeStore a = MakeStore(job.job(), "vnode/0", 0, 12);
  NodeStore b = MakeStore(job.job(), "vnode/1", 0, 12);
  const std::string cli = MEMENTO_CLI_PATH;
  std::string out;
  ASSERT_EQ(RunCommand(cli + " inspect --job " + job.job() + " --verify", &out), 0) << out;
  EXPECT_NE(out.find(a.segment_name()), std::string::npos) << out;
  EXPECT_NE(out.find("node=vnode/1"), std::string::npos) << out;
  EXPECT_NE(out.find("version 12 committed"), std::string::npos) << out;
  EXPECT_NE(out.find("'weights'"), std::string::npos) << out;
  EXPECT_NE(out.find("store directory " + ShmSegment::Directory() +
                     " (tmpfs huge=" + ShmSegment::HugePages()),
            std::string::npos)
      << out;

  auto view = a.ReadRegion(*a.FindVersion(12), 0);
  const_cast<uint8_t*>(view->data)[999] ^= 0x80;
  EXPECT_EQ(RunCommand(cli + " inspect --job " + job.job() + " --verify", &out), 1) << out;
  EXPECT_NE(out.find("crc32c"), std::string::npos) << out;

  EXPECT_EQ(RunCommand(cli + " inspect 2>/dev/null", &out), 2);  // --job missing

  // A file of the job's prefix whose name is not UTF-8 (anyone can make one
  // in /dev/shm): reported as unusable, in valid JSON, not a crash.
  const std::string odd = ShmSegment::Directory() + "/memento." + job.job() + ".\xff";
  { std::ofstream(odd) << "x"; }
  const int rc = RunCommand(cli + " inspect --json --job " + job.job(), &out);
  unlink(odd.c_str());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(nlohmann::json::accept(out)) << out;

  ASSERT_EQ(RunCommand(cli + " clean --job " + job.job() + " --force", &out), 0) << out;
  EXPECT_NE(out.find("2 segment(s)"), std::string::npos) << out;
  EXPECT_TRUE(ListJobSegments(job.job())->empty());
  ASSERT_EQ(RunCommand(cli + " inspect --job " + job.job(), &out), 0);
  EXPECT_NE(out.find("no segments"), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace memento::runtime
