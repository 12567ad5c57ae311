// Fuzz target: a node store segment (header, layout records, slot headers,
// seal records, payload) read back by NodeStore. Whatever the bytes, reading
// must return a Status, never crash, and a region it returns must lie inside
// the segment.
#include <unistd.h>

#include <cstring>
#include <string>

#include "fuzz_target.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"

using namespace memento::runtime;

namespace {

const StoreId& Id() {
  static const bool quiet = [] {  // rejected inputs are the normal case here
    SetLogLevel(LogLevel::kError);
    return true;
  }();
  (void)quiet;
  static const StoreId id{"fuzz-" + std::to_string(getpid()), "node/0", 0};
  return id;
}

StoreLayout SmallLayout() {
  StoreLayout l;
  RegionSpec w;
  w.name = "w";
  w.capacity = 40;
  w.layout = {"float32", {20}, {10}, {10}};
  RegionSpec empty;
  empty.name = "e";
  RegionSpec parity;
  parity.kind = RegionKind::kParity;
  parity.name = "parity/0";
  parity.capacity = 16;
  parity.piece = 1;
  l.regions = {w, empty, parity};
  return l;
}

}  // namespace

namespace memento::fuzz {

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  for (int committed = 0; committed < 2; ++committed) {
    (void)NodeStore::Destroy(Id());
    auto store = NodeStore::Create(Id(), SmallLayout(), 2);
    if (!store.ok()) Fail("seed: " + store.status().ToString());
    auto slot = store->BeginWrite(7);
    if (!slot.ok()) Fail("seed: " + slot.status().ToString());
    for (int r = 0; r < store->region_count(); ++r) {
      const uint64_t cap = store->layout().regions[r].capacity;
      uint8_t* p = store->MutableRegion(*slot, r);
      for (uint64_t i = 0; i < cap; ++i) p[i] = static_cast<uint8_t>(i * 7 + r);
      (void)store->SealRegion(*slot, r, cap, memento::erasure::Crc32c(p, cap));
    }
    (void)store->SealSlot(*slot, 7);
    if (committed) (void)store->MarkCommitted(*slot, 7);
    auto seg = ShmSegment::Open(store->segment_name(), ShmSegment::Access::kReadOnly);
    if (!seg.ok()) Fail("seed: " + seg.status().ToString());
    seeds.emplace_back(reinterpret_cast<const char*>(seg->data()), seg->size());
  }
  (void)NodeStore::Destroy(Id());
  return seeds;
}

}  // namespace memento::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1 << 20)) return 0;
  auto name = NodeStore::SegmentName(Id());
  (void)ShmSegment::Unlink(*name);
  {
    auto seg = ShmSegment::Create(*name, size);
    if (!seg.ok()) memento::fuzz::Fail("create: " + seg.status().ToString());
    std::memcpy(seg->data(), data, size);
  }
  for (auto access : {ShmSegment::Access::kReadOnly, ShmSegment::Access::kReadWrite}) {
    auto store = NodeStore::Attach(Id(), access);
    if (!store.ok()) continue;
    StoreInventory inv = store->Inventory();
    (void)inv.NewestCommitted();
    (void)inv.NewestSealed();
    for (int slot = 0; slot < store->slot_count(); ++slot) {
      for (int r = 0; r < store->region_count(); ++r) {
        auto view = store->ReadRegion(slot, r);
        if (view.ok()) {
          if (view->length > store->layout().regions[r].capacity) {
            memento::fuzz::Fail("ReadRegion returned a length beyond the capacity");
          }
          volatile uint8_t sink = 0;
          for (uint64_t i = 0; i < view->length; ++i) sink ^= view->data[i];  // in bounds
        }
        (void)store->VerifyRegion(slot, r);
      }
    }
    if (access == ShmSegment::Access::kReadWrite) {
      auto w = store->BeginWrite(1000);  // writing into a damaged store must not crash
      if (w.ok()) (void)store->Invalidate(*w);
    }
  }
  (void)ShmSegment::Unlink(*name);
  return 0;
}
