// SlotAllocator: the slot policy (never the committed slot, never a pinned
// one; empty or invalid first, else the oldest version) and the wait for a
// pin to go.
#include "store/slot_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "store_test_util.h"

namespace memento::runtime {
namespace {

SlotState Slot(int slot, bool ok, uint64_t version) {
  SlotState st;
  st.slot = slot;
  st.ok = ok;
  st.sealed = ok;
  st.version = version;
  return st;
}

StoreInventory Inventory(std::vector<SlotState> slots) {
  StoreInventory inv;
  inv.slots = std::move(slots);
  return inv;
}

TEST(SlotAllocator, PrefersAnEmptySlotThenTheOldestVersion) {
  // Slot 1 is empty: it wins over both versions.
  EXPECT_EQ(SlotAllocator::Choose(Inventory({Slot(0, true, 5), Slot(1, false, 0),
                                             Slot(2, true, 3)}),
                                  -1, {0, 0, 0}),
            1);
  // Every slot holds a version: the oldest.
  EXPECT_EQ(SlotAllocator::Choose(Inventory({Slot(0, true, 5), Slot(1, true, 7),
                                             Slot(2, true, 3)}),
                                  -1, {0, 0, 0}),
            2);
}

TEST(SlotAllocator, NeverTheCommittedNorAPinnedSlot) {
  auto inv = Inventory({Slot(0, true, 5), Slot(1, true, 7), Slot(2, true, 3)});
  EXPECT_EQ(SlotAllocator::Choose(inv, /*committed=*/2, {0, 0, 0}), 0);
  EXPECT_EQ(SlotAllocator::Choose(inv, /*committed=*/2, {1, 0, 0}), 1);
  EXPECT_EQ(SlotAllocator::Choose(inv, /*committed=*/2, {1, 2, 0}), -1);
  EXPECT_EQ(SlotAllocator::Choose(Inventory({Slot(0, true, 1), Slot(1, true, 2)}), 1, {1, 0}), -1);
}

class SlotAllocatorStore : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreLayout layout;
    RegionSpec spec;
    spec.name = "w";
    spec.capacity = 64;
    layout.regions.push_back(spec);
    auto store = NodeStore::Create({cleaner_.job(), "node-a", 0}, layout, 2);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }
  testing::JobCleaner cleaner_{testing::UniqueJob("slots")};
  NodeStore store_;
};

TEST_F(SlotAllocatorStore, AcquireWaitsForThePinToGo) {
  SlotAllocator slots(&store_);
  EXPECT_EQ(slots.committed(), -1);
  slots.SetCommitted(0);
  EXPECT_EQ(slots.Acquire(), 1);
  slots.Pin(1);
  slots.Pin(1);  // pins are counted
  std::atomic<int> got{-2};
  std::thread writer([&] { got = slots.Acquire(); });
  slots.Unpin(1);
  // One pin is left: the writer cannot have a slot yet, whenever it ran.
  EXPECT_EQ(got.load(), -2);
  slots.Unpin(1);
  writer.join();
  EXPECT_EQ(got.load(), 1);
}

TEST_F(SlotAllocatorStore, UnpinWithoutPinIsABug) {
  SlotAllocator slots(&store_);
  EXPECT_ANY_THROW(slots.Unpin(0));
  EXPECT_ANY_THROW(slots.Pin(2));
}

}  // namespace
}  // namespace memento::runtime
