// Point-to-point tags used by the engine (Transport::Send/Recv). One list so
// that stages added later (protect, recovery) pick disjoint ranges.
#pragma once

namespace memento::runtime {

// Persist: rank r -> rank 0, "my rank file of version v is written" (persister.cc).
inline constexpr int kTagPersistDone = 100;

// 1000..kMaxTag: free for part 2 (protect chunk streams, recovery transfers).

}  // namespace memento::runtime
