#include "store/slot_allocator.h"

#include "memento/common/check.h"

namespace memento::runtime {

SlotAllocator::SlotAllocator(const NodeStore* store)
    : store_(store), pins_(store->slot_count(), 0) {}

int SlotAllocator::Choose(const StoreInventory& inventory, int committed,
                          const std::vector<int>& pins) {
  int best = -1;
  for (const SlotState& st : inventory.slots) {
    const int s = st.slot;
    if (s == committed || (static_cast<size_t>(s) < pins.size() && pins[s] > 0)) continue;
    if (best < 0) {
      best = s;
      continue;
    }
    const SlotState& b = inventory.slots[best];
    // An empty / invalid slot first, else the oldest version.
    if (b.ok && (!st.ok || st.version < b.version)) best = s;
  }
  return best;
}

int SlotAllocator::Acquire(bool* waited) {
  if (waited != nullptr) *waited = false;
  for (;;) {
    // The store is read without the lock (it may hash headers); the choice is
    // re-made under the lock with the current pins and committed slot.
    const StoreInventory inventory = store_->Inventory();
    std::unique_lock<std::mutex> lock(mu_);
    const int chosen = Choose(inventory, committed_, pins_);
    if (chosen >= 0) return chosen;
    // Only pins can free a slot here (one slot is committed, slots >= 2).
    MEMENTO_CHECK_GT(pins_.size(), 1u);
    if (waited != nullptr) *waited = true;
    cv_.wait(lock);
  }
}

void SlotAllocator::SetCommitted(int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    committed_ = slot;
  }
  cv_.notify_all();
}

int SlotAllocator::committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

void SlotAllocator::Pin(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  MEMENTO_CHECK_GE(slot, 0);
  MEMENTO_CHECK_LT(static_cast<size_t>(slot), pins_.size());
  ++pins_[slot];
}

void SlotAllocator::Unpin(int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    MEMENTO_CHECK_GT(pins_.at(slot), 0);
    --pins_[slot];
  }
  cv_.notify_all();
}

int SlotAllocator::pins(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pins_.at(slot);
}

}  // namespace memento::runtime
