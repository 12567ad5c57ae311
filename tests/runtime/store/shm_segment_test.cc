// A store's layout checks and its shared-memory segments (label unit): bad
// regions named, the size bound, create / open / list / unlink, the directory
// from MEMENTO_SHM_DIR and the huge-page setting of its mount.
#include "memento/runtime/shm_segment.h"

#include <gtest/gtest.h>

#include "memento/runtime/node_store.h"
#include "store_test_util.h"

namespace memento::runtime {
namespace {

using testing::JobCleaner;
using testing::TestLayout;
using testing::UniqueJob;

TEST(StoreLayout, ValidateNamesTheBadRegion) {
  StoreLayout l = TestLayout();
  EXPECT_TRUE(l.Validate().ok());
  EXPECT_EQ(l.Find("step"), 2);
  EXPECT_EQ(l.Find("nope"), -1);
  EXPECT_EQ(l.PayloadBytes(), 10007u + 0 + 8 + 4096);
  StoreLayout dup = l;
  dup.regions[2].name = "model.w";
  Status s = dup.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate"), std::string::npos);
  StoreLayout slice = l;
  slice.regions[0].layout.offsets[0] = 80;  // 80 + 25 > 100
  s = slice.Validate();
  EXPECT_NE(s.message().find("model.w"), std::string::npos) << s.ToString();
  StoreLayout ranks = l;
  ranks.regions[0].layout.shape.pop_back();
  EXPECT_FALSE(ranks.Validate().ok());
  StoreLayout unnamed = l;
  unnamed.regions[1].name.clear();
  EXPECT_FALSE(unnamed.Validate().ok());
  EXPECT_EQ(NodeStore::Create({"j", "n", 0}, unnamed, 2).status().code(),
            StatusCode::kInvalidArgument);
}

// Each region may hold 256 TiB, and so may all of them together.
TEST(StoreLayout, TheRegionsTogetherHoldAtMost256TiB) {
  StoreLayout l;
  l.regions.push_back({RegionKind::kShard, "a", 1ull << 47, 0, 0, 0, {}});
  l.regions.push_back({RegionKind::kShard, "b", 1ull << 47, 0, 0, 0, {}});
  EXPECT_TRUE(l.Validate().ok());
  l.regions.push_back({RegionKind::kShard, "c", 1, 0, 0, 0, {}});
  Status s = l.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("region 2 'c': the regions' capacities exceed 256 TiB in all"),
            std::string::npos)
      << s.ToString();
}

TEST(ShmSegment, CreateOpenListUnlink) {
  const std::string name = "/memento.tshm-" + testing::ProcessTag() + ".x";
  auto seg = ShmSegment::Create(name, 5000);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_EQ(seg->size(), 5000u);
  seg->data()[4999] = 9;
  auto ro = ShmSegment::Open(name, ShmSegment::Access::kReadOnly);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(ro->data()[4999], 9);
  EXPECT_FALSE(ro->writable());
  auto list = ShmSegment::List("memento.tshm-" + testing::ProcessTag());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, std::vector<std::string>{name});
  EXPECT_EQ(ShmSegment::Create("no-slash", 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create(name + "2", 0).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(ShmSegment::Unlink(name).ok());
  EXPECT_EQ(ShmSegment::Unlink(name).code(), StatusCode::kNotFound);
  EXPECT_EQ(ShmSegment::Open(name, ShmSegment::Access::kReadOnly).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ro->data()[4999], 9);  // mappings outlive the name
}

// MEMENTO_SHM_DIR moves every segment operation to another tmpfs directory;
// anything but an existing tmpfs directory is refused, naming the variable.
TEST(ShmSegment, DirectoryFromMementoShmDir) {
  const std::string dir = "/dev/shm/memento-tdir-" + testing::ProcessTag();
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  struct EnvGuard {
    ~EnvGuard() { unsetenv("MEMENTO_SHM_DIR"); }
  } guard;
  ASSERT_EQ(setenv("MEMENTO_SHM_DIR", (dir + "/").c_str(), 1), 0);  // trailing '/' dropped
  EXPECT_EQ(ShmSegment::Directory(), dir);
  EXPECT_TRUE(ShmSegment::CheckDirectory().ok());
  const std::string name = "/memento.tdir-" + testing::ProcessTag() + ".x";
  {
    auto seg = ShmSegment::Create(name, 4096);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    seg->data()[7] = 42;
  }
  struct stat st;
  EXPECT_EQ(stat((dir + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0);  // not in /dev/shm
  auto rw = ShmSegment::Open(name, ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(rw.ok()) << rw.status().ToString();
  EXPECT_EQ(rw->data()[7], 42);
  auto list = ShmSegment::List("memento.tdir-");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, std::vector<std::string>{name});
  ASSERT_TRUE(ShmSegment::Rename(name, name + "2").ok());
  ASSERT_TRUE(ShmSegment::Unlink(name + "2").ok());
  EXPECT_EQ(ShmSegment::Unlink(name + "2").code(), StatusCode::kNotFound);

  // A whole node store goes there too.
  JobCleaner cleaner(UniqueJob("dir"));
  const StoreId id{cleaner.job(), "host/0", 0};
  auto store = NodeStore::Create(id, TestLayout(), 2);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(stat((dir + store->segment_name()).c_str(), &st), 0);
  ASSERT_TRUE(NodeStore::Destroy(id).ok());

  // Refused: not on a tmpfs (a store there would be written back to a disk),
  // missing, not a directory, relative, set but empty (as Config refuses it).
  for (const std::string& bad :
       std::vector<std::string>{"/proc", dir + "/missing", "/dev/null", "rel", ""}) {
    ASSERT_EQ(setenv("MEMENTO_SHM_DIR", bad.c_str(), 1), 0);
    Status s = ShmSegment::Create(name, 4096).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad << ": " << s.ToString();
    EXPECT_NE(s.message().find("MEMENTO_SHM_DIR='" + bad + "'"), std::string::npos) << s.ToString();
    EXPECT_EQ(ShmSegment::Open(name, ShmSegment::Access::kReadOnly).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(ShmSegment::List("memento.").status().code(), StatusCode::kInvalidArgument);
  }
  unsetenv("MEMENTO_SHM_DIR");
  EXPECT_EQ(ShmSegment::Directory(), "/dev/shm");
  EXPECT_EQ(rmdir(dir.c_str()), 0);
}

// The page setting of the store directory's tmpfs comes from the mount that
// contains it: the longest mount point, the last of equal ones, escapes
// decoded; a tmpfs without huge= is "never".
TEST(ShmSegment, HugePagesFromTheMountThatHoldsTheDirectory) {
  std::istringstream mounts(
      "/dev/sda1 / ext4 rw,relatime 0 0\n"
      "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n"
      "tmpfs /mnt/huge tmpfs rw,size=8g,huge=within_size 0 0\n"
      "tmpfs /mnt/huge/inner tmpfs rw,huge=advise 0 0\n"
      "tmpfs /mnt/two\\040words tmpfs rw,huge=always 0 0\n"
      "tmpfs /mnt/again tmpfs rw 0 0\n"
      "tmpfs /mnt/again tmpfs rw,huge=within_size 0 0\n");
  auto at = [&](const std::string& dir) {
    mounts.clear();
    mounts.seekg(0);
    return ShmSegment::HugePagesIn(mounts, dir);
  };
  EXPECT_EQ(at("/dev/shm"), "never");
  EXPECT_EQ(at("/dev/shm/sub"), "never");
  EXPECT_EQ(at("/mnt/huge"), "within_size");
  EXPECT_EQ(at("/mnt/huge/x"), "within_size");
  EXPECT_EQ(at("/mnt/huge/inner/x"), "advise");
  EXPECT_EQ(at("/mnt/hugepages"), "never");  // on /, not on /mnt/huge (an ext4: no huge=)
  EXPECT_EQ(at("/mnt/two words/x"), "always");
  EXPECT_EQ(at("/mnt/again"), "within_size");  // mounted over: the last one is in effect
  std::istringstream none("tmpfs /dev/shm tmpfs rw 0 0\n");
  EXPECT_EQ(ShmSegment::HugePagesIn(none, "/scratch"), "unknown");

  // This machine's store directory is on some mount with a known setting.
  const std::string here = ShmSegment::HugePages();
  EXPECT_TRUE(here == "never" || here == "always" || here == "within_size" || here == "advise")
      << here;
}

}  // namespace
}  // namespace memento::runtime
