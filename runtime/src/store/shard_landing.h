#pragma once

#include <cstdint>
#include <vector>

#include "memento/runtime/node_store.h"

namespace memento::runtime {

// ShardLanding: one shard's bytes (its entries concatenated in registration
// order) in the entry regions of a node store slot, or in memory of its
// own: spans of it, and copies across its entries.
//
// Where a shard rebuilt from peers (replica or decode) lands, and where the
// protect stage reads this rank's shard of the version it protects.
//  - In a slot: the entry regions of a slot of the node store that the
//    caller has begun writing (a lost node's rank: its store is new, so the
//    slot costs no version, its pages are already mapped, and it is the very
//    slot the re-protect seals, so the shard is never copied in between).
//  - In memory of its own (a survivor whose own copy failed: a slot of its
//    store may hold a version another plan still needs).
//  - In the registered buffers themselves (a lost node's rank: training
//    resumes once they hold the shard; its new store's pages are reserved
//    meanwhile, and the shard is copied into a slot after).
class ShardLanding {
 public:
  ShardLanding() = default;
  // Moves keep the memory (entries_ points into it); copies would not.
  ShardLanding(ShardLanding&&) = default;
  ShardLanding& operator=(ShardLanding&&) = default;
  ShardLanding(const ShardLanding&) = delete;
  ShardLanding& operator=(const ShardLanding&) = delete;
  // `slot` of `store` between BeginWriteSlot and SealSlot; entry i is region i.
  static ShardLanding InSlot(NodeStore* store, int slot, const std::vector<uint64_t>& entry_bytes);
  static ShardLanding InMemory(const std::vector<uint64_t>& entry_bytes);
  // Memory the caller owns, one span per entry (a lost node's registered
  // buffers: the shard lands where training reads it).
  static ShardLanding InBuffers(const std::vector<uint8_t*>& data,
                                const std::vector<uint64_t>& entry_bytes);

  uint64_t size() const { return size_; }
  int slot() const { return slot_; }  // -1 in memory or when empty
  bool empty() const { return entries_.empty() && size_ == 0; }
  // The bytes [off, off + len) as one span, when they lie within one entry
  // (always in memory of its own); else null (Write copies across entries).
  uint8_t* Span(uint64_t off, uint64_t len);
  const uint8_t* Span(uint64_t off, uint64_t len) const {
    return const_cast<ShardLanding*>(this)->Span(off, len);
  }
  void Write(uint64_t off, const uint8_t* src, uint64_t len);
  // Bytes [off, off + len) into dst, zero beyond the end of the shard.
  void Read(uint64_t off, uint64_t len, uint8_t* dst) const;
  const std::vector<uint8_t*>& entries() const { return entries_; }

 private:
  // fn(entry, offset in it, offset in [off, off + len), bytes) for every
  // entry that [off, off + len) overlaps, in order.
  template <typename Fn>
  void ForEachPart(uint64_t off, uint64_t len, Fn fn) const;

  std::vector<uint8_t*> entries_;
  std::vector<uint64_t> bytes_;
  std::vector<uint64_t> base_;  // shard offset of each entry
  std::vector<uint8_t> memory_;
  uint64_t size_ = 0;
  int slot_ = -1;
  bool in_buffers_ = false;
};

}  // namespace memento::runtime
