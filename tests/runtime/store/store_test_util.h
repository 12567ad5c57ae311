// Helpers shared by the node-store tests: unique job ids and cleanup, a test
// layout, versions written and checked, and the fixture of one store id.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::runtime::testing {

// A job id unique to this process and call, so that parallel test processes
// never share segments.
inline std::string UniqueJob(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "t" + tag + "-" + ProcessTag() + "-" + std::to_string(counter++);
}

// Unlinks every segment of a job when it goes out of scope.
class JobCleaner {
 public:
  explicit JobCleaner(std::string job) : job_(std::move(job)) {}
  ~JobCleaner() { (void)CleanJob(job_); }
  const std::string& job() const { return job_; }

 private:
  std::string job_;
};

inline StoreLayout TestLayout() {
  StoreLayout l;
  RegionSpec w;
  w.name = "model.w";
  w.capacity = 10007;  // odd size
  w.owner_node = 3;
  w.owner_lane = 1;
  w.layout = {"float32", {100, 400}, {25, 100}, {50, 0}};
  RegionSpec empty;
  empty.name = "empty";
  empty.capacity = 0;
  RegionSpec step;
  step.name = "step";
  step.capacity = 8;
  step.layout.dtype = "int64";
  RegionSpec parity;
  parity.kind = RegionKind::kParity;
  parity.name = "parity/0";
  parity.capacity = 4096;
  parity.owner_node = 2;
  parity.piece = 1;
  l.regions = {w, empty, step, parity};
  return l;
}

inline std::vector<uint8_t> Pattern(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Writes version `v` into a slot chosen by BeginWrite, seals it; returns the slot.
inline int WriteVersion(NodeStore& store, uint64_t v, bool commit = true, uint64_t lineage = 0) {
  auto slot = store.BeginWrite(v, lineage);
  MEMENTO_CHECK(slot.ok());
  for (int r = 0; r < store.region_count(); ++r) {
    const uint64_t cap = store.layout().regions[r].capacity;
    auto data = Pattern(cap, static_cast<uint32_t>(v * 100 + r));
    if (cap > 0) std::memcpy(store.MutableRegion(*slot, r), data.data(), cap);
    MEMENTO_CHECK(store.SealRegion(*slot, r, cap, erasure::Crc32c(data.data(), cap)).ok());
  }
  MEMENTO_CHECK(store.SealSlot(*slot, v).ok());
  if (commit) MEMENTO_CHECK(store.MarkCommitted(*slot, v).ok());
  return *slot;
}

inline void ExpectVersion(const NodeStore& store, int slot, uint64_t v) {
  for (int r = 0; r < store.region_count(); ++r) {
    auto view = store.ReadRegion(slot, r);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    const uint64_t cap = store.layout().regions[r].capacity;
    auto expect = Pattern(cap, static_cast<uint32_t>(v * 100 + r));
    ASSERT_EQ(view->length, cap);
    EXPECT_EQ(view->version, v);
    EXPECT_TRUE(cap == 0 || std::memcmp(view->data, expect.data(), cap) == 0) << "region " << r;
    EXPECT_TRUE(store.VerifyRegion(slot, r).ok());
  }
}

// One store id of a job whose segments are unlinked at the end of the test.
class NodeStoreTest : public ::testing::Test {
 protected:
  NodeStoreTest() : cleaner_(UniqueJob("ns")), id_{cleaner_.job(), "host/1", 0} {}
  JobCleaner cleaner_;
  StoreId id_;
};

}  // namespace memento::runtime::testing
