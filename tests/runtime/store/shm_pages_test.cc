// The pages of a node store's segment: mapped at creation or in the
// background, reserved in the background past what Create reserves at once,
// and a read-write mapping parked for the next Open in the same process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "memento/runtime/shm_segment.h"
#include "store_test_util.h"

namespace memento::runtime {
namespace {

// Bytes of the mapping that starts at `p` which have a page table entry in
// this process (the Rss line of /proc/self/smaps); -1 if there is no such
// mapping.
int64_t MappedBytes(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  char start[32];
  std::snprintf(start, sizeof(start), "%lx-", reinterpret_cast<unsigned long>(p));
  bool in = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.rfind(start, 0) == 0) in = true;
    if (in && line.rfind("Rss:", 0) == 0) {
      int64_t kib = 0;
      std::istringstream(line.substr(4)) >> kib;
      return kib * 1024;
    }
  }
  return -1;
}

// MappedBytes once it reaches `want` (a background thread maps the pages),
// or after 20 s.
int64_t MappedBytesOnce(const void* p, int64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int64_t got = MappedBytes(p);
  while (got != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    got = MappedBytes(p);
  }
  return got;
}

// Whether this kernel has MADV_POPULATE_WRITE (Linux 5.14).
bool KernelPopulates() {
  const size_t n = 4096;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const bool ok = p != MAP_FAILED && madvise(p, n, 23 /* MADV_POPULATE_WRITE */) == 0;
  if (p != MAP_FAILED) munmap(p, n);
  return ok;
}

std::string SegmentName(const std::string& tag) {
  return "/memento.tshm-" + testing::ProcessTag() + "." + tag;
}

// Bytes the file system holds for the object (its allocated blocks).
int64_t AllocatedBytes(const std::string& name) {
  struct stat st;
  if (stat((ShmSegment::Directory() + name).c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

// Created and read-write mappings come with every page mapped (no fault per
// page at the first snapshot or recovery landing): at once for Create, in the
// background for Open; read-only ones (inspection) map only what they touch.
TEST(ShmSegment, ReadWriteMappingsHaveEveryPageMapped) {
  ASSERT_TRUE(KernelPopulates()) << "this kernel lacks MADV_POPULATE_WRITE (Linux >= 5.14)";
  const std::string name = SegmentName("pop");
  const uint64_t bytes = 8 << 20;
  auto seg = ShmSegment::Create(name, bytes);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_EQ(MappedBytes(seg->data()), static_cast<int64_t>(bytes));
  auto rw = ShmSegment::Open(name, ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(rw.ok()) << rw.status().ToString();
  EXPECT_NE(rw->data(), seg->data());  // a mapping of its own: the first one is in use
  EXPECT_EQ(MappedBytesOnce(rw->data(), bytes), static_cast<int64_t>(bytes));
  auto ro = ShmSegment::Open(name, ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_EQ(MappedBytes(ro->data()), 0);
  EXPECT_EQ(ro->data()[bytes - 1], 0);  // a read maps that page (and a few around it)
  EXPECT_GT(MappedBytes(ro->data()), 0);
  EXPECT_LT(MappedBytes(ro->data()), static_cast<int64_t>(bytes) / 8);
  EXPECT_TRUE(ShmSegment::Unlink(name).ok());
}

// Create reserves the first bytes at once and the rest on a background
// thread; WaitReserved returns once all of it is allocated and mapped.
TEST(ShmSegment, CreateReservesTheRestInTheBackground) {
  ASSERT_TRUE(KernelPopulates()) << "this kernel lacks MADV_POPULATE_WRITE (Linux >= 5.14)";
  const std::string name = SegmentName("bg");
  const uint64_t bytes = 64 << 20;
  auto seg = ShmSegment::Create(name, bytes, 4096);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_GE(MappedBytes(seg->data()), 4096);
  ASSERT_TRUE(seg->WaitReserved().ok());
  EXPECT_EQ(MappedBytes(seg->data()), static_cast<int64_t>(bytes));
  EXPECT_GE(AllocatedBytes(name), static_cast<int64_t>(bytes));
  seg->data()[bytes - 1] = 5;
  EXPECT_TRUE(seg->WaitReserved().ok());  // again: at once, same outcome
  // Destroyed while its pages are still being reserved: the thread stops
  // before the mapping goes.
  auto quick = ShmSegment::Create(SegmentName("bg2"), 256 << 20, 4096);
  ASSERT_TRUE(quick.ok()) << quick.status().ToString();
  quick = ShmSegment();
  EXPECT_TRUE(ShmSegment::Unlink(SegmentName("bg2")).ok());
  EXPECT_TRUE(ShmSegment::Unlink(name).ok());
}

// A read-write mapping outlives its ShmSegment, parked: the next read-write
// Open of the object in this process takes it as it is (every page still
// mapped), while its lock is released like any other's; unlinking the
// object unmaps it.
TEST(ShmSegment, AReadWriteMappingIsParkedForTheNextOpen) {
  const std::string name = SegmentName("park");
  const uint64_t bytes = 8 << 20;
  uint8_t* first = nullptr;
  {
    auto seg = ShmSegment::Create(name, bytes);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    first = seg->data();
    first[123] = 42;
  }
  EXPECT_EQ(MappedBytes(first), static_cast<int64_t>(bytes));  // parked, still mapped
  // Another process may take the object: parking holds no lock.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto other = ShmSegment::Open(name, ShmSegment::Access::kReadWrite);
    _exit(other.ok() && other->data()[123] == 42 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  {
    auto again = ShmSegment::Open(name, ShmSegment::Access::kReadWrite);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->data(), first);
    EXPECT_EQ(again->data()[123], 42);
    EXPECT_EQ(MappedBytes(first), static_cast<int64_t>(bytes));
  }
  ASSERT_TRUE(ShmSegment::Unlink(name).ok());
  EXPECT_EQ(MappedBytes(first), -1);  // unmapped with the object
  // An object made anew under the name is not the parked one's.
  auto fresh = ShmSegment::Create(name, bytes);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->data()[123], 0);
  EXPECT_TRUE(ShmSegment::Unlink(name).ok());
}

// A file system that fills up while the pages are reserved in the
// background: WaitReserved's ResourceExhausted names the segment (Create's
// free-space check passed: both objects were still sparse).
// The store directory on a tmpfs of 16 MiB of its own (MEMENTO_SHM_DIR), to
// fill up; the test unlinks its objects (a mapping keeps the mount busy).
class ShmSegmentOnASmallTmpfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/memento-tsmall-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=16m") != 0) {
      rmdir(dir_.c_str());
      dir_.clear();
      GTEST_SKIP() << "mounting a 16 MiB tmpfs needs CAP_SYS_ADMIN: " << std::strerror(errno);
    }
    setenv("MEMENTO_SHM_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    unsetenv("MEMENTO_SHM_DIR");
    EXPECT_EQ(umount(dir_.c_str()), 0) << std::strerror(errno);
    EXPECT_EQ(rmdir(dir_.c_str()), 0) << std::strerror(errno);
  }
  std::string dir_;
};

TEST_F(ShmSegmentOnASmallTmpfs, AFileSystemFullDuringTheReservationIsWaitReservedsError) {
  {
    const uint64_t bytes = 12 << 20;
    auto a = ShmSegment::Create("/a", bytes, 4096);
    auto b = ShmSegment::Create("/b", bytes, 4096);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    // On a loaded machine /a's background reservation can fill its pages
    // before /b's free-space check: then Create itself refuses, naming both.
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted) << b.status().ToString();
      EXPECT_NE(b.status().ToString().find("segment /b needs"), std::string::npos)
          << b.status().ToString();
    }
    const Status wa = a->WaitReserved();
    const Status wb = b.ok() ? b->WaitReserved() : b.status();
    EXPECT_FALSE(wa.ok() && wb.ok());
    for (const auto& [w, seg] : {std::pair{wa, "/a"}, std::pair{wb, "/b"}}) {
      if (w.ok()) continue;
      EXPECT_EQ(w.code(), StatusCode::kResourceExhausted) << w.ToString();
      EXPECT_NE(w.ToString().find(std::string("segment ") + seg), std::string::npos)
          << w.ToString();
      if (b.ok()) {
        EXPECT_NE(w.ToString().find("full"), std::string::npos) << w.ToString();
      }
    }
  }
  // Unlinked, their parked mappings go too (a mapping keeps the mount busy).
  EXPECT_TRUE(ShmSegment::Unlink("/a").ok());
  (void)ShmSegment::Unlink("/b");  // absent when Create refused it
}

// An object whose pages were never all allocated (its creator died, or its
// file system filled, before the reservation finished), attached again:
// writers wait for its missing pages as for a new store's, so a full file
// system is WaitReserved's ResourceExhausted instead of a SIGBUS in the
// middle of a snapshot; once space is free again the next wait succeeds
// (a failed reservation is not final, and not parked as complete).
TEST_F(ShmSegmentOnASmallTmpfs, ASparseObjectAttachedAgainIsReservedBeforeItIsWritten) {
  const std::string& dir = dir_;
  const uint64_t bytes = 12 << 20;
  {
    // What a creator that died right after sizing it leaves: no page.
    const int fd = open((dir + "/s").c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(fchmod(fd, 0600), 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    close(fd);
  }
  // Another process takes the whole file system.
  const std::string filler = dir + "/filler";
  {
    const int fd = open(filler.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::string block(1 << 16, 'x');
    while (write(fd, block.data(), block.size()) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
    close(fd);
  }
  for (int attach = 0; attach < 2; ++attach) {
    auto seg = ShmSegment::Open("/s", ShmSegment::Access::kReadWrite);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    const Status w = seg->WaitReserved();
    EXPECT_EQ(w.code(), StatusCode::kResourceExhausted) << attach << ": " << w.ToString();
    EXPECT_NE(w.ToString().find("segment /s"), std::string::npos) << w.ToString();
  }
  {
    auto seg = ShmSegment::Open("/s", ShmSegment::Access::kReadWrite);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    EXPECT_FALSE(seg->WaitReserved().ok());  // still full
    ASSERT_EQ(unlink(filler.c_str()), 0);
    const Status w = seg->WaitReserved();  // the same segment: its wait tries again
    ASSERT_TRUE(w.ok()) << w.ToString();
    std::memset(seg->data(), 7, bytes);  // every page exists: no SIGBUS
    struct stat st;
    ASSERT_EQ(stat((dir + "/s").c_str(), &st), 0);
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, bytes);
  }
  EXPECT_TRUE(ShmSegment::Unlink("/s").ok());
}

}  // namespace
}  // namespace memento::runtime
