// Damage that multi-rank tests do to a node store between launches, as a
// failing memory or a stray write would.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"

namespace memento::runtime::testing {

// Flips one byte of a shm segment (driver only): at 100 it is in the header's
// node string, at 1024 + 40 in the layout area (format::kHeaderBytes = 1024).
inline void FlipSegmentByte(const std::string& segment, long offset) {
  std::fstream f(std::string(ShmSegment::Directory()) + segment,
                 std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << segment;
  char c = 0;
  f.seekg(offset);
  f.read(&c, 1);
  c ^= 0x01;
  f.seekp(offset);
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << segment;
}

// The set-aside copies of `segment` (see NodeStore::OpenOrCreate).
inline std::vector<std::string> SetAsideOf(const std::string& segment) {
  auto names = ShmSegment::List(segment + NodeStore::kSetAsideSuffix);
  EXPECT_TRUE(names.ok()) << names.status().ToString();
  return names.ok() ? *names : std::vector<std::string>();
}

// Flips one byte in the middle of every non-empty parity region of the
// newest committed slot of `store` (through its shared-memory mapping), so
// that each of them fails its sealed crc32c. Returns how many were flipped;
// a store without a committed slot, or a region that cannot be read, is a
// test failure.
inline int FlipNewestParityRegions(NodeStore& store) {
  const int slot = store.Inventory().NewestCommitted();
  EXPECT_GE(slot, 0) << "no committed slot";
  if (slot < 0) return 0;
  int flipped = 0;
  for (int g = 0; g < store.region_count(); ++g) {
    if (store.layout().regions[g].kind != RegionKind::kParity) continue;
    auto view = store.ReadRegion(slot, g);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    if (!view.ok() || view->length == 0) continue;
    const_cast<uint8_t*>(view->data)[view->length / 2] ^= 0x10;
    EXPECT_FALSE(store.VerifyRegion(slot, g).ok()) << store.layout().regions[g].name;
    ++flipped;
  }
  return flipped;
}

}  // namespace memento::runtime::testing
