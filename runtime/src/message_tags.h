// Point-to-point tags used by the engine (Transport::Send/Recv). One list so
// that stages pick disjoint ranges.
#pragma once

namespace memento::runtime {

// Persist: rank r -> rank 0, "my rank file of version v is written" (persister.cc).
inline constexpr int kTagPersistDone = 100;

// Protect (protect_stage.cc): owner -> holder, a ProtectHeader then its payload,
// both with this tag; a sender holds a per-destination lock across the pair.
inline constexpr int kTagProtect = 1000;

// Recovery (recovery_executor.cc): transfer i of the plan's deterministic
// transfer list uses tags kTagRecoverBase + 2 * (i % kRecoverTagSpan) (header)
// and + 1 (payload).
inline constexpr int kTagRecoverBase = 2000;
inline constexpr int kRecoverTagSpan = 14000;

}  // namespace memento::runtime
