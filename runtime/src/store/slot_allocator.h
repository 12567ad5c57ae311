// SlotAllocator: the one owner of the slot policy of a rank's node store:
// which slot a Save, a full or minimal re-protect may write, and which slots
// a persist keeps from being rewritten.
//
// Policy. A version is written into a slot that is
//   - not the committed slot (the newest committed version, or during a
//     re-protect the surviving copy of the version being rebuilt), and
//   - not pinned (a persist is still reading it);
// among those, an empty or invalid slot first, else the one with the oldest
// version. With Config::slots == 2 there may be no such slot while a persist
// runs: Acquire then blocks until the persist unpins its slot.
//
// Thread-safety: every method may be called from any thread. The allocator's
// lock is a leaf: it is never held while calling out (the store is read
// before it is taken), so it adds no lock-order edge.
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

#include "memento/runtime/node_store.h"

namespace memento::runtime {

class SlotAllocator {
 public:
  // `store` is borrowed and must outlive the allocator.
  explicit SlotAllocator(const NodeStore* store);

  // A slot to write a new version into (see Policy); blocks while every
  // candidate is pinned or committed. *waited (when given): whether it did.
  int Acquire(bool* waited = nullptr);

  // The slot that must not be rewritten: the newest committed version's, or
  // -1 when no version is held in memory.
  void SetCommitted(int slot);
  int committed() const;

  // Keeps `slot` from being rewritten until a matching Unpin (counted).
  void Pin(int slot);
  void Unpin(int slot);
  int pins(int slot) const;

  // The policy alone, for tests and for Acquire: the slot to write given the
  // store's slots, the committed slot and the pins; -1 when none may be used.
  static int Choose(const StoreInventory& inventory, int committed,
                    const std::vector<int>& pins);

 private:
  const NodeStore* store_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int committed_ = -1;
  std::vector<int> pins_;  // per slot
};

}  // namespace memento::runtime
