#include "memento/runtime/node_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <future>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "store/node_store_format.h"
#include "store_test_util.h"

namespace memento::runtime {
namespace {

using erasure::Crc32c;
using testing::ExpectVersion;
using testing::JobCleaner;
using testing::NodeStoreTest;
using testing::Pattern;
using testing::TestLayout;
using testing::UniqueJob;
using testing::WriteVersion;
namespace f = format;

TEST_F(NodeStoreTest, SegmentNameIsSanitizedUniqueAndBounded) {
  auto a = NodeStore::SegmentName({"job", "rack1/node 7", 3});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rfind("/memento.job.rack1_node_7-", 0), 0u) << *a;
  EXPECT_EQ(a->substr(a->size() - 3), ".r3");
  EXPECT_EQ(a->find('/', 1), std::string::npos);
  auto b = NodeStore::SegmentName({"job", "rack1_node 7", 3});
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);  // same readable part, different hash
  auto longest = NodeStore::SegmentName({std::string(48, 'j'), std::string(200, 'n'), 4000000000u});
  ASSERT_TRUE(longest.ok());
  EXPECT_LE(longest->size(), 255u);
  EXPECT_FALSE(NodeStore::SegmentName({"j.b", "n", 0}).ok());
  EXPECT_FALSE(NodeStore::SegmentName({"j", "", 0}).ok());
}

TEST_F(NodeStoreTest, RoundTripAndReattach) {
  const StoreLayout layout = TestLayout();
  {
    auto store = NodeStore::Create(id_, layout, 2);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(store->segment_bytes(), NodeStore::SegmentBytes(layout, 2));
    int slot = WriteVersion(*store, 42);
    ExpectVersion(*store, slot, 42);
    StoreInventory inv = store->Inventory();
    ASSERT_EQ(inv.slots.size(), 2u);
    EXPECT_EQ(inv.NewestCommitted(), slot);
    EXPECT_TRUE(inv.slots[slot].ok);
    EXPECT_TRUE(inv.slots[slot].committed);
    EXPECT_EQ(inv.slots[slot].regions[0].length, 10007u);
    EXPECT_EQ(inv.slots[slot].regions[3].kind, RegionKind::kParity);
    EXPECT_EQ(inv.slots[slot].regions[3].piece, 1u);
    EXPECT_EQ(inv.slots[1 - slot].problem, "empty");
  }  // unmapped, not unlinked: a restarted process re-attaches
  auto again = NodeStore::Attach(id_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->layout(), layout);  // names, kinds, owners, dtype/shape/offsets
  auto slot = again->FindVersion(42);
  ASSERT_TRUE(slot.has_value());
  ExpectVersion(*again, *slot, 42);
  EXPECT_FALSE(again->FindVersion(41).has_value());
}

TEST_F(NodeStoreTest, SurvivesProcessExit) {
  const StoreLayout layout = TestLayout();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = NodeStore::Create(id_, layout, 2);
    if (!store.ok()) _exit(1);
    WriteVersion(*store, 9);
    _exit(0);  // no destructors, like a crash after sealing
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto store = NodeStore::Attach(id_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto slot = store->FindVersion(9);
  ASSERT_TRUE(slot.has_value());
  ExpectVersion(*store, *slot, 9);
}

TEST_F(NodeStoreTest, ModeIs0600) {
  mode_t old = umask(0);  // the mode must not depend on the umask
  auto store = NodeStore::Create(id_, TestLayout(), 2);
  umask(old);
  ASSERT_TRUE(store.ok());
  struct stat st;
  ASSERT_EQ(stat((std::string("/dev/shm") + store->segment_name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(NodeStoreTest, CreateClashesWithExisting) {
  auto a = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_TRUE(a.ok());
  auto b = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(b.status().message().find(a->segment_name()), std::string::npos);
}

TEST_F(NodeStoreTest, TwoJobsOnOneMachineStayApart) {
  JobCleaner other(UniqueJob("ns"));
  StoreId id_b{other.job(), id_.node, id_.local_rank};
  auto a = NodeStore::Create(id_, TestLayout(), 2);
  auto b = NodeStore::Create(id_b, TestLayout(), 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->segment_name(), b->segment_name());
  int sa = WriteVersion(*a, 1);
  int sb = WriteVersion(*b, 2);
  ExpectVersion(*a, sa, 1);
  ExpectVersion(*b, sb, 2);
  EXPECT_FALSE(a->FindVersion(2).has_value());
  auto list_a = ListJobSegments(id_.job);
  ASSERT_TRUE(list_a.ok());
  EXPECT_EQ(*list_a, std::vector<std::string>{a->segment_name()});
  // Even renamed under the other job's name, a segment is refused.
  ASSERT_TRUE(NodeStore::Destroy(id_b).ok());
  auto raw = ShmSegment::Create(*NodeStore::SegmentName(id_b), a->segment_bytes());
  ASSERT_TRUE(raw.ok());
  std::memcpy(raw->data(),
              ShmSegment::Open(a->segment_name(), ShmSegment::Access::kReadOnly)->data(),
              a->segment_bytes());
  auto wrong = NodeStore::Attach(id_b);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("belongs to job"), std::string::npos);
}

TEST_F(NodeStoreTest, SlotLifecycleKeepsNewestCommitted) {
  auto store = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_TRUE(store.ok());
  int s1 = WriteVersion(*store, 1);
  // v2 is being written: v1 stays readable, v2 is never handed out.
  auto s2 = store->BeginWrite(2);
  ASSERT_TRUE(s2.ok());
  EXPECT_NE(*s2, s1);
  auto unsealed = store->ReadRegion(*s2, 0);
  EXPECT_EQ(unsealed.status().code(), StatusCode::kFailedPrecondition);
  StoreInventory inv = store->Inventory();
  EXPECT_TRUE(inv.slots[*s2].writing);
  EXPECT_EQ(inv.NewestCommitted(), s1);
  ExpectVersion(*store, s1, 1);
  // Sealing needs every region.
  EXPECT_EQ(store->SealSlot(*s2, 2).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->SealRegion(*s2, 2, 9, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->SealSlot(*s2, 3).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->MarkCommitted(*s2, 2).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->Invalidate(*s2).ok());
  EXPECT_THROW(store->MutableRegion(*s2, 0), CheckError);  // not being written

  int s2b = WriteVersion(*store, 2);
  EXPECT_NE(s2b, s1);
  int s3 = WriteVersion(*store, 3);
  EXPECT_EQ(s3, s1);  // the older slot, never the newest committed one
  ExpectVersion(*store, s2b, 2);
  EXPECT_EQ(store->BeginWrite(3).status().code(), StatusCode::kAlreadyExists);

  // v4 sealed but its commit failed elsewhere: v5 overwrites v4, never v3.
  int s4 = WriteVersion(*store, 4, /*commit=*/false);
  EXPECT_EQ(s4, s2b);
  int s5 = WriteVersion(*store, 5);
  EXPECT_EQ(s5, s4);
  ExpectVersion(*store, s3, 3);
}

TEST_F(NodeStoreTest, MoreSlotsPreferEmptyThenOldest) {
  auto store = NodeStore::Create(id_, TestLayout(), 3);
  ASSERT_TRUE(store.ok());
  std::vector<int> used;
  for (uint64_t v = 1; v <= 3; ++v) used.push_back(WriteVersion(*store, v));
  EXPECT_EQ(used, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(WriteVersion(*store, 4), 0);  // oldest
  EXPECT_EQ(WriteVersion(*store, 5), 1);
  ExpectVersion(*store, 2, 3);
}

TEST_F(NodeStoreTest, ReadOnlyAttachCannotWrite) {
  auto store = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_TRUE(store.ok());
  WriteVersion(*store, 1);
  auto ro = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(ro->BeginWrite(2).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ro->FindVersion(1).has_value());
}

TEST_F(NodeStoreTest, RefusesWhenDevShmIsTooSmall) {
  auto free_bytes = ShmSegment::FreeBytes();
  ASSERT_TRUE(free_bytes.ok());
  StoreLayout huge;
  huge.regions.push_back({RegionKind::kShard, "huge", *free_bytes / 2 + (1ull << 30), 0, 0, 0, {}});
  auto store = NodeStore::Create(id_, huge, 2);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(store.status().message().find("/dev/shm"), std::string::npos);
  EXPECT_NE(store.status().message().find(std::to_string(NodeStore::SegmentBytes(huge, 2))),
            std::string::npos)
      << store.status().ToString();
  EXPECT_EQ(NodeStore::Attach(id_).status().code(), StatusCode::kNotFound);
}

TEST_F(NodeStoreTest, OpenOrCreateAttachesIdenticalLayout) {
  bool attached = true;
  auto a = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError, &attached);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(attached);
  int slot = WriteVersion(*a, 5);
  auto b = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError, &attached);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(attached);
  ExpectVersion(*b, slot, 5);
}

TEST_F(NodeStoreTest, OpenOrCreateRejectsOrReplacesIncompatible) {
  auto a = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_TRUE(a.ok());
  int slot = WriteVersion(*a, 5);
  StoreLayout other = TestLayout();
  other.regions[0].layout.offsets[0] = 75;  // only the metadata differs
  auto refused = NodeStore::OpenOrCreate(id_, other, 2, StalePolicy::kError);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("memento clean --job " + id_.job), std::string::npos);
  ExpectVersion(*a, slot, 5);  // untouched
  auto more_slots = NodeStore::OpenOrCreate(id_, TestLayout(), 3, StalePolicy::kError);
  EXPECT_NE(more_slots.status().message().find("slots"), std::string::npos);

  bool attached = true;
  auto replaced = NodeStore::OpenOrCreate(id_, other, 2, StalePolicy::kReplace, &attached);
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_FALSE(attached);
  EXPECT_EQ(replaced->layout(), other);
  EXPECT_EQ(replaced->Inventory().NewestSealed(), -1);
}

// A store that holds no version (its run ended or died before the first
// seal) is replaced by a run with another layout under either policy: there
// is nothing to keep, and refusing would make the user clean up nothing.
// One slot sealed, and it is refused again.
TEST_F(NodeStoreTest, OpenOrCreateReplacesAStoreThatHoldsNoVersion) {
  {
    auto a = NodeStore::Create(id_, TestLayout(), 2);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(a->BeginWriteSlot(0, 1).ok());  // begun, never sealed
  }
  StoreLayout other = TestLayout();
  other.regions[0].layout.offsets[0] = 75;
  bool attached = true;
  auto replaced = NodeStore::OpenOrCreate(id_, other, 3, StalePolicy::kError, &attached);
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_FALSE(attached);
  EXPECT_EQ(replaced->layout(), other);
  EXPECT_EQ(replaced->slot_count(), 3);
  const int slot = WriteVersion(*replaced, 5);
  replaced = NodeStore();
  auto refused = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition)
      << refused.status().ToString();
  auto kept = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ExpectVersion(*kept, slot, 5);
}

// The catalog travels with the store: kept on attach, part of what must match
// to reuse the store, guarded by a crc; a store set aside for an elastic
// restore keeps its data and catalog and is read under its new name.
TEST_F(NodeStoreTest, CatalogIsKeptMatchedCheckedAndSurvivesSetAside) {
  const std::vector<uint8_t> catalog = {7, 1, 2, 3, 4, 5};
  auto a = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError, nullptr, nullptr,
                                   catalog);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int slot = WriteVersion(*a, 5);
  auto again = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->catalog(), catalog);
  std::vector<uint8_t> other = catalog;
  other[3] ^= 1;
  auto refused =
      NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError, nullptr, nullptr, other);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("catalog"), std::string::npos)
      << refused.status().ToString();
  {
    // A flipped catalog byte: the store is damaged, not silently read.
    f::SegmentHeader h;
    auto raw = ShmSegment::Open(a->segment_name(), ShmSegment::Access::kReadWrite);
    ASSERT_TRUE(raw.ok());
    std::memcpy(&h, raw->data(), sizeof(h));
    ASSERT_EQ(h.catalog_bytes, catalog.size());
    raw->data()[h.catalog_offset + 2] ^= 0x10;
    auto bad = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("catalog crc"), std::string::npos);
    raw->data()[h.catalog_offset + 2] ^= 0x10;
  }
  auto aside = NodeStore::SetAsideForElastic(id_);
  ASSERT_TRUE(aside.ok()) << aside.status().ToString();
  EXPECT_TRUE(NodeStore::IsElasticAside(*aside)) << *aside;
  // A job or node named "elastic" is not a set-aside store.
  auto plain = NodeStore::SegmentName(StoreId{"elastic", "host/elastic.3", 0});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(NodeStore::IsElasticAside(*plain)) << *plain;
  EXPECT_FALSE(NodeStore::IsElasticAside("/memento.elastic.host_0-0"));
  EXPECT_EQ(NodeStore::Attach(id_).status().code(), StatusCode::kNotFound);
  auto read = NodeStore::AttachAside(*aside);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->catalog(), catalog);
  ExpectVersion(*read, slot, 5);
  EXPECT_TRUE(ShmSegment::Unlink(*aside).ok());
  EXPECT_EQ(NodeStore::SetAsideForElastic(id_).status().code(), StatusCode::kNotFound);
}

// Two running jobs with the same id on one node never share a store: the
// second one (another process) is refused with an error naming the job and
// the holder's pid, even with StalePolicy::kReplace, and the store is left
// intact; once the holder lets go, a relaunch attaches.
TEST_F(NodeStoreTest, SecondRunningJobWithTheSameIdIsRefused) {
  int go[2], verdict[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(verdict), 0);
  const pid_t pid = fork();  // before the parent holds anything
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    auto attach = NodeStore::Attach(id_);
    auto replace = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kReplace);
    auto read_only = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);  // inspection
    std::string m = attach.ok() ? "attached" : attach.status().ToString();
    m += "\n" + (replace.ok() ? std::string("replaced") : replace.status().ToString());
    m += read_only.ok() ? "\nread-only ok" : "\nread-only failed";
    if (write(verdict[1], m.data(), m.size()) != static_cast<ssize_t>(m.size())) _exit(4);
    _exit(0);
  }
  auto holder = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  const int slot = WriteVersion(*holder, 7);
  ASSERT_EQ(write(go[1], "x", 1), 1);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  close(verdict[1]);
  char buf[4096];
  const ssize_t n = read(verdict[0], buf, sizeof(buf));
  ASSERT_GT(n, 0);
  const std::string m(buf, static_cast<size_t>(n));
  EXPECT_EQ(m.find("attached"), std::string::npos) << m;
  EXPECT_EQ(m.find("replaced"), std::string::npos) << m;
  EXPECT_NE(m.find("Unavailable"), std::string::npos) << m;
  EXPECT_NE(m.find("MEMENTO_JOB=" + id_.job), std::string::npos) << m;
  EXPECT_NE(m.find("pid " + std::to_string(getpid())), std::string::npos) << m;
  EXPECT_NE(m.find("read-only ok"), std::string::npos) << m;
  ExpectVersion(*holder, slot, 7);
  // In this process a second mapping shares the ownership.
  EXPECT_TRUE(NodeStore::Attach(id_).ok());
  // The holder lets go (as a crashed one does): another process attaches.
  *holder = NodeStore();
  const pid_t relaunch = fork();
  ASSERT_GE(relaunch, 0);
  if (relaunch == 0) {
    auto again = NodeStore::Attach(id_);
    _exit(again.ok() && again->FindVersion(7).has_value() ? 0 : 1);
  }
  ASSERT_EQ(waitpid(relaunch, &wstatus, 0), relaunch);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "relaunch could not attach";
}

// A holder killed with SIGKILL (no destructor, no cleanup) never blocks a
// relaunch: the kernel drops its lock with the process, and the relaunch
// attaches the store with its committed version.
TEST_F(NodeStoreTest, HolderKilledWithSigkillNeverBlocksARelaunch) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    auto store = NodeStore::Create(id_, TestLayout(), 2);
    if (!store.ok()) _exit(3);
    WriteVersion(*store, 9);
    if (write(ready[1], "x", 1) != 1) _exit(4);
    for (;;) pause();  // holds the store until killed
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the holder did not create its store";
  close(ready[0]);
  // While it runs, this process (another job) is refused, naming its pid.
  auto refused = NodeStore::Attach(id_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("pid " + std::to_string(holder)), std::string::npos)
      << refused.status().ToString();
  ASSERT_EQ(kill(holder, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(holder, &wstatus, 0), holder);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);
  auto relaunch = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError);
  ASSERT_TRUE(relaunch.ok()) << relaunch.status().ToString();
  auto slot = relaunch->FindVersion(9);
  ASSERT_TRUE(slot.has_value());
  ExpectVersion(*relaunch, *slot, 9);
}

// A holder process that creates the store and starts a child (exec'ing
// `sleep`, or a plain fork that stays, like a data loader's worker), then is
// killed with SIGKILL while the child still runs: the relaunch must attach
// the store with its version, the child alive.
void RelaunchWhileTheKilledHoldersChildRuns(const StoreId& id, bool exec) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    close(ready[0]);
    auto store = NodeStore::Create(id, TestLayout(), 2);
    if (!store.ok()) _exit(3);
    WriteVersion(*store, 9);
    const pid_t child = fork();
    if (child == 0) {
      close(ready[1]);
      if (exec) execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
      for (;;) pause();
    }
    if (write(ready[1], &child, sizeof(child)) != sizeof(child)) _exit(4);
    for (;;) pause();  // holds the store until killed
  }
  close(ready[1]);
  pid_t child = -1;
  ASSERT_EQ(read(ready[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  close(ready[0]);
  usleep(100000);  // the child has exec'd
  ASSERT_EQ(kill(holder, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(holder, &wstatus, 0), holder);
  auto relaunch = NodeStore::OpenOrCreate(id, TestLayout(), 2, StalePolicy::kError);
  const bool child_alive = kill(child, 0) == 0;
  kill(child, SIGKILL);
  EXPECT_TRUE(child_alive);
  ASSERT_TRUE(relaunch.ok()) << relaunch.status().ToString();
  ExpectVersion(*relaunch, *relaunch->FindVersion(9), 9);
}

// A program the holder started (an exec'd helper that outlives it) does not
// inherit the store's lock.
TEST_F(NodeStoreTest, AProgramTheHolderStartedDoesNotKeepTheStoreLocked) {
  RelaunchWhileTheKilledHoldersChildRuns(id_, /*exec=*/true);
}

// Nor does a process the holder forked without exec (PyTorch's data loader
// workers under the fork start method outlive a killed trainer by seconds).
TEST_F(NodeStoreTest, AProcessTheHolderForkedDoesNotKeepTheStoreLocked) {
  RelaunchWhileTheKilledHoldersChildRuns(id_, /*exec=*/false);
}

// A segment of this job's name that another user owns, or whose mode is not
// 0600, is refused and left in place, whatever the stale policy.
TEST_F(NodeStoreTest, ForeignOrLooseSegmentIsRefusedAndKept) {
  {
    auto store = NodeStore::Create(id_, TestLayout(), 2);
    ASSERT_TRUE(store.ok());
    WriteVersion(*store, 3);
  }
  const std::string path = "/dev/shm" + *NodeStore::SegmentName(id_);
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  for (StalePolicy policy : {StalePolicy::kError, StalePolicy::kReplace}) {
    auto r = NodeStore::OpenOrCreate(id_, TestLayout(), 2, policy);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("mode 0644, not 0600"), std::string::npos)
        << r.status().ToString();
  }
  EXPECT_FALSE(NodeStore::Attach(id_, ShmSegment::Access::kReadOnly).ok());
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  if (geteuid() == 0) {  // only root can give a file away
    ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
    auto r = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kReplace);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("owned by uid 65534"), std::string::npos)
        << r.status().ToString();
    ASSERT_EQ(chown(path.c_str(), 0, 0), 0);
  }
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << "the refused segment was removed";
  auto back = NodeStore::Attach(id_);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->FindVersion(3).has_value());
}

// A FIFO of this job's store name (anyone may make one in /dev/shm) is
// refused at once and left in place: a read-only open would otherwise wait
// for a writer forever (inspect, an elastic Prepare).
TEST_F(NodeStoreTest, AFifoOfTheStoresNameIsRefusedWithoutBlocking) {
  const std::string path = ShmSegment::Directory() + *NodeStore::SegmentName(id_);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  auto attach = std::async(std::launch::async,
                           [&] { return NodeStore::Attach(id_, ShmSegment::Access::kReadOnly); });
  if (attach.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "Attach blocked on the FIFO";
    const int writer = open(path.c_str(), O_WRONLY | O_NONBLOCK);  // lets the open return
    attach.wait();
    if (writer >= 0) close(writer);
  }
  Result<NodeStore> a = attach.get();
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("is not a regular file"), std::string::npos)
      << a.status().ToString();
  for (StalePolicy policy : {StalePolicy::kError, StalePolicy::kReplace}) {
    auto r = NodeStore::OpenOrCreate(id_, TestLayout(), 2, policy);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("is not a regular file"), std::string::npos)
        << r.status().ToString();
  }
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0) << "the FIFO was removed";
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(unlink(path.c_str()), 0);
}

// A segment this process cannot open (no file descriptor left) says nothing
// about its content: even with StalePolicy::kReplace it is an IoError and the
// segment, with its committed version, stays (a child process runs out of
// descriptors; the parent checks the segment afterwards).
TEST_F(NodeStoreTest, OpenFailureIsNotStale) {
  auto a = NodeStore::Create(id_, TestLayout(), 2);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int slot = WriteVersion(*a, 5);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit none = {3, 3};  // stdin/out/err only: the next open fails with EMFILE
    if (setrlimit(RLIMIT_NOFILE, &none) != 0) _exit(3);
    auto r = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kReplace);
    _exit(!r.ok() && r.status().code() == StatusCode::kIoError ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "OpenOrCreate without descriptors was not an IoError";
  auto again = NodeStore::Attach(id_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectVersion(*again, slot, 5);
}

// A creation that fails after the file exists (here: no descriptor left for
// the lock) leaves nothing behind, so the next attempt creates it afresh
// instead of finding a "creator died" segment.
TEST_F(NodeStoreTest, ACreationThatCannotLockLeavesNoSegment) {
  const std::string path = ShmSegment::Directory() + *NodeStore::SegmentName(id_);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    struct rlimit one = {4, 4};  // one descriptor: the segment's; its lock's dup fails
    if (setrlimit(RLIMIT_NOFILE, &one) != 0) _exit(3);
    auto r = NodeStore::Create(id_, TestLayout(), 2);
    _exit(!r.ok() && r.status().code() == StatusCode::kIoError ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "Create with one descriptor was not an IoError";
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0) << path << " was left behind";
  auto created = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
}

TEST_F(NodeStoreTest, IncompleteSegmentIsStale) {
  // A creator that died between shm_open and finishing the header.
  auto raw = ShmSegment::Create(*NodeStore::SegmentName(id_), 8192);
  ASSERT_TRUE(raw.ok());
  auto attach = NodeStore::Attach(id_);
  EXPECT_EQ(attach.status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError).ok());
  auto replaced = NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kReplace);
  EXPECT_TRUE(replaced.ok()) << replaced.status().ToString();
}

// A slot records the lineage (run) of its version, covered by the slot
// header's crc; FindVersion with a lineage finds only that run's copy.
TEST_F(NodeStoreTest, SlotRecordsItsLineageUnderTheHeaderCrc) {
  auto store = NodeStore::Create(id_, TestLayout(), 3);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const uint64_t run_a = 0x1111222233334444ull, run_b = 0x5555666677778888ull;
  const int a = WriteVersion(*store, 3, true, run_a);
  const int b = WriteVersion(*store, 3 + 1, true, run_b);
  StoreInventory inv = store->Inventory();
  EXPECT_EQ(inv.slots[a].lineage, run_a);
  EXPECT_EQ(inv.slots[b].lineage, run_b);
  EXPECT_EQ(store->FindVersion(3, run_a), std::optional<int>(a));
  EXPECT_FALSE(store->FindVersion(3, run_b).has_value());
  EXPECT_FALSE(store->FindVersion(4, run_a).has_value());
  auto raw = ShmSegment::Open(store->segment_name(), ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(raw.ok());
  f::SegmentHeader h;
  std::memcpy(&h, raw->data(), sizeof(h));
  const uint64_t at =
      h.slot_table_offset + h.slot_control_bytes * a + offsetof(f::SlotHeader, lineage);
  for (uint64_t off = 0; off < sizeof(uint64_t); ++off) {
    raw->data()[at + off] ^= 0x5A;
    EXPECT_FALSE(store->Inventory().slots[a].ok) << "lineage byte " << off;
    EXPECT_FALSE(store->FindVersion(3, run_a).has_value());
    raw->data()[at + off] ^= 0x5A;
  }
  EXPECT_TRUE(store->Inventory().slots[a].ok);
}

// A segment whose records, geometry and crcs are all consistent, but whose
// region capacities make the computed store size wrap around 2^64 to the
// file's size (1024 regions of 256 TiB in 64 slots: a slot of 2^58 bytes,
// 64 of them 2^64): refused as corrupt, never attached with regions that lie
// outside the mapping.
TEST_F(NodeStoreTest, ACraftedLayoutWhoseSizeWrapsIsRefused) {
  StoreLayout layout;
  for (int i = 0; i < 1024; ++i) {
    layout.regions.push_back({RegionKind::kShard, "r" + std::to_string(i), 0, 0, 0, 0, {}});
  }
  auto store = NodeStore::Create(id_, layout, 64);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto raw = ShmSegment::Open(store->segment_name(), ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(raw.ok());
  uint8_t* base = raw->data();
  auto* hdr = reinterpret_cast<f::SegmentHeader*>(base);
  const uint64_t capacity = 1ull << 48;
  uint64_t pos = hdr->layout_offset;
  for (uint32_t i = 0; i < hdr->region_count; ++i) {
    f::RegionRecordFixed fx;
    std::memcpy(&fx, base + pos, sizeof(fx));
    fx.capacity = capacity;
    fx.offset_in_slot = i * capacity;
    std::memcpy(base + pos, &fx, sizeof(fx));
    const uint64_t body = sizeof(fx) + fx.name_len + fx.dtype_len + 24ull * fx.ndim;
    const uint32_t crc = Crc32c(base + pos, body);
    std::memcpy(base + pos + body, &crc, 4);
    pos += fx.record_bytes;
  }
  hdr->layout_crc = Crc32c(base + hdr->layout_offset, hdr->layout_bytes);
  hdr->slot_stride = capacity * hdr->region_count;  // 2^58; times 64 slots wraps to 0
  ASSERT_EQ(hdr->slot_data_offset + hdr->slot_stride * hdr->slot_count, hdr->total_bytes);
  hdr->header_crc = Crc32c(hdr, f::kHeaderCrcBytes);
  auto a = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
  ASSERT_FALSE(a.ok()) << "attached a store whose regions lie past its mapping";
  EXPECT_EQ(a.status().code(), StatusCode::kCorruption) << a.status().ToString();
  EXPECT_NE(a.status().message().find("exceed 256 TiB in all"), std::string::npos)
      << a.status().ToString();
}

// A reader verifying while a writer rewrites the same slot gets OK (a whole,
// matching version) or an error — never a crash, never torn data as OK.
TEST_F(NodeStoreTest, VerifyRacingARewriteNeverPassesTornData) {
  StoreLayout layout;
  layout.regions.push_back({RegionKind::kShard, "big", 1 << 20, 0, 0, 0, {}});
  auto store = NodeStore::Create(id_, layout, 2);
  ASSERT_TRUE(store.ok());
  auto reader = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(reader.ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t v = 1; !stop.load(); ++v) {
      int slot = *store->BeginWrite(v);
      std::memset(buf.data(), static_cast<int>(v), buf.size());
      std::memcpy(store->MutableRegion(slot, 0), buf.data(), buf.size());
      (void)store->SealRegion(slot, 0, buf.size(), Crc32c(buf.data(), buf.size()));
      (void)store->SealSlot(slot, v);
      (void)store->MarkCommitted(slot, v);
    }
  });
  int passed = 0;
  for (int i = 0; i < 2000; ++i) {
    for (int slot = 0; slot < 2; ++slot) {
      Status s = reader->VerifyRegion(slot, 0);
      if (s.ok()) ++passed;
    }
  }
  stop = true;
  writer.join();
  SUCCEED() << passed << " verifications passed";
}

}  // namespace
}  // namespace memento::runtime
