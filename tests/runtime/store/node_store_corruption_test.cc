// A node store's damage is detected (label unit): every byte of the segment
// header, the layout records, a slot header field, a seal record and a payload
// byte; a slot's next version repairs its header; another format version is
// refused.
#include <gtest/gtest.h>

#include <cstring>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"
#include "store/node_store_format.h"
#include "store_test_util.h"

namespace memento::runtime {
namespace {

using erasure::Crc32c;
using testing::ExpectVersion;
using testing::NodeStoreTest;
using testing::Pattern;
using testing::TestLayout;
using testing::WriteVersion;
namespace f = format;

class NodeStoreCorruptionTest : public NodeStoreTest {
 protected:
  void SetUp() override {
    auto store = NodeStore::Create(id_, TestLayout(), 2);
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    slot_ = WriteVersion(store_, 7);
    auto raw = ShmSegment::Open(store_.segment_name(), ShmSegment::Access::kReadWrite);
    ASSERT_TRUE(raw.ok());
    raw_ = std::move(*raw);
  }
  // Flips byte `offset` of the segment, runs `check`, restores the byte.
  template <typename F>
  void WithFlipped(uint64_t offset, F check) {
    raw_.data()[offset] ^= 0x5A;
    check();
    raw_.data()[offset] ^= 0x5A;
  }
  NodeStore store_;
  ShmSegment raw_;
  int slot_ = 0;
};

TEST_F(NodeStoreCorruptionTest, EverySegmentHeaderByteIsDetected) {
  for (uint64_t off = 0; off < sizeof(f::SegmentHeader); ++off) {
    WithFlipped(off, [&] {
      auto a = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
      EXPECT_FALSE(a.ok()) << "header byte " << off << " flipped went unnoticed";
    });
  }
  EXPECT_TRUE(NodeStore::Attach(id_).ok());
}

TEST_F(NodeStoreCorruptionTest, EveryLayoutRecordByteIsDetected) {
  f::SegmentHeader h;
  std::memcpy(&h, raw_.data(), sizeof(h));
  for (uint64_t off = h.layout_offset; off < h.layout_offset + h.layout_bytes; ++off) {
    WithFlipped(off, [&] {
      auto a = NodeStore::Attach(id_, ShmSegment::Access::kReadOnly);
      ASSERT_FALSE(a.ok()) << "layout byte " << off << " flipped went unnoticed";
      EXPECT_EQ(a.status().code(), StatusCode::kCorruption);
    });
  }
}

TEST_F(NodeStoreCorruptionTest, EverySlotHeaderFieldIsDetected) {
  f::SegmentHeader h;
  std::memcpy(&h, raw_.data(), sizeof(h));
  const uint64_t slot_off = h.slot_table_offset + h.slot_control_bytes * slot_;
  // Every field except `generation` (a reader-side change counter, not data)
  // and the trailing padding.
  for (uint64_t off = 0; off < offsetof(f::SlotHeader, generation); ++off) {
    WithFlipped(slot_off + off, [&] {
      StoreInventory inv = store_.Inventory();
      EXPECT_FALSE(inv.slots[slot_].ok) << "slot header byte " << off;
      EXPECT_FALSE(inv.slots[slot_].problem.empty());
      EXPECT_FALSE(store_.ReadRegion(slot_, 0).ok()) << "slot header byte " << off;
      EXPECT_FALSE(store_.FindVersion(7).has_value());
    });
  }
  EXPECT_TRUE(store_.FindVersion(7).has_value());
}

// A damaged byte among the fields that name a slot (magic, format, index,
// region count, job) costs the version in it, not every later one: the next
// version written into that slot is sealed under a repaired header.
TEST_F(NodeStoreCorruptionTest, TheNextVersionInASlotRepairsItsHeader) {
  f::SegmentHeader h;
  std::memcpy(&h, raw_.data(), sizeof(h));
  const int other = 1 - slot_;
  const uint64_t slot_off = h.slot_table_offset + h.slot_control_bytes * other;
  for (uint64_t off = 0; off < offsetof(f::SlotHeader, version); ++off) {
    raw_.data()[slot_off + off] ^= 0x5A;
    ASSERT_TRUE(store_.BeginWriteSlot(other, 20 + off).ok());
    for (int r = 0; r < store_.region_count(); ++r) {
      const uint64_t cap = store_.layout().regions[r].capacity;
      auto data = Pattern(cap, static_cast<uint32_t>((20 + off) * 100 + r));
      if (cap > 0) std::memcpy(store_.MutableRegion(other, r), data.data(), cap);
      ASSERT_TRUE(store_.SealRegion(other, r, cap, Crc32c(data.data(), cap)).ok());
    }
    ASSERT_TRUE(store_.SealSlot(other, 20 + off).ok());
    StoreInventory inv = store_.Inventory();
    EXPECT_TRUE(inv.slots[other].ok)
        << "slot header byte " << off << ": " << inv.slots[other].problem;
    ExpectVersion(store_, other, 20 + off);
  }
  ExpectVersion(store_, slot_, 7);
}

TEST_F(NodeStoreCorruptionTest, EverySealRecordByteIsDetected) {
  f::SegmentHeader h;
  std::memcpy(&h, raw_.data(), sizeof(h));
  const uint64_t seals = h.slot_table_offset + h.slot_control_bytes * slot_ + sizeof(f::SlotHeader);
  for (int r = 0; r < store_.region_count(); ++r) {
    for (uint64_t off = 0; off < sizeof(f::RegionSeal); ++off) {
      WithFlipped(seals + r * sizeof(f::RegionSeal) + off, [&] {
        StoreInventory inv = store_.Inventory();
        EXPECT_FALSE(inv.slots[slot_].regions[r].ok) << "region " << r << " byte " << off;
        EXPECT_FALSE(inv.slots[slot_].ok);
        auto view = store_.ReadRegion(slot_, r);
        ASSERT_FALSE(view.ok());
        EXPECT_EQ(view.status().code(), StatusCode::kCorruption);
        // The other regions' records are still fine.
        for (int o = 0; o < store_.region_count(); ++o) {
          if (o != r) {
            EXPECT_TRUE(inv.slots[slot_].regions[o].ok);
          }
        }
      });
    }
  }
}

TEST_F(NodeStoreCorruptionTest, PayloadByteIsDetected) {
  f::SegmentHeader h;
  std::memcpy(&h, raw_.data(), sizeof(h));
  const uint64_t data = h.slot_data_offset + h.slot_stride * slot_;
  // First, last and a middle byte of region 0 (offset 0 in the slot).
  for (uint64_t off : {uint64_t{0}, uint64_t{5000}, uint64_t{10006}}) {
    WithFlipped(data + off, [&] {
      EXPECT_TRUE(store_.Inventory().slots[slot_].ok);  // headers alone cannot see it
      Status s = store_.VerifyRegion(slot_, 0);
      ASSERT_EQ(s.code(), StatusCode::kCorruption) << off;
      EXPECT_NE(s.message().find("model.w"), std::string::npos) << s.ToString();
      EXPECT_TRUE(store_.VerifyRegion(slot_, 2).ok());
    });
  }
  EXPECT_TRUE(store_.VerifyRegion(slot_, 0).ok());
}

TEST_F(NodeStoreCorruptionTest, OtherFormatVersionIsRejected) {
  auto* hdr = reinterpret_cast<f::SegmentHeader*>(raw_.data());
  hdr->format = kNodeStoreFormat + 1;
  hdr->header_crc = Crc32c(hdr, f::kHeaderCrcBytes);  // a valid header of another format
  auto a = NodeStore::Attach(id_);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(a.status().message().find("format version"), std::string::npos);
  EXPECT_EQ(NodeStore::OpenOrCreate(id_, TestLayout(), 2, StalePolicy::kError).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace memento::runtime
