// Fuzz target: the decoders of every collective record of transport/wire.h.
// The first byte picks the decoder, the rest is its input. A record a decoder
// accepts must survive a round trip: encoding what it decoded and decoding
// that again gives the same bytes.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "transport/wire.h"

using namespace memento::runtime;

namespace {

enum Decoder : uint8_t { kPersist, kRank, kInventory, kLocatedBadItems, kSeals, kCounters, kCount };

// Decodes `in` with decoder `which`, re-encodes what it accepted; false if refused.
bool RoundTrip(uint8_t which, const std::vector<uint8_t>& in, std::vector<uint8_t>* out) {
  constexpr int kNode = 3, kLane = 1;
  switch (which % kCount) {
    case kPersist: {
      auto r = wire::DecodePersistRecord(in.data(), in.size());
      if (r.ok()) *out = wire::EncodePersistRecord(*r);
      return r.ok();
    }
    case kRank: {
      auto r = wire::DecodeRankRecord(in);
      if (r.ok()) *out = wire::EncodeRankRecord(*r);
      return r.ok();
    }
    case kInventory: {
      auto r = wire::DecodeInventory(in, kNode, kLane);
      if (r.ok()) *out = wire::EncodeInventory(*r);
      return r.ok();
    }
    case kLocatedBadItems: {
      auto r = wire::DecodeLocatedBadItems(in);
      if (r.ok()) *out = wire::EncodeLocatedBadItems(*r);
      return r.ok();
    }
    case kSeals: {
      auto r = wire::DecodeSealsRecords(in);
      if (!r.ok()) return false;
      out->clear();
      for (const auto& s : *r) wire::AppendSealsRecord(s, out);
      return true;
    }
    default: {
      const size_t count = in.empty() ? 0 : in[0] % 5;
      auto r = wire::DecodeCounters(std::vector<uint8_t>(in.begin() + (in.empty() ? 0 : 1), in.end()),
                                    count);
      if (!r.ok()) return false;
      *out = wire::EncodeCounters(*r);
      out->insert(out->begin(), static_cast<uint8_t>(count));
      return true;
    }
  }
}

std::string Tagged(uint8_t which, const std::vector<uint8_t>& bytes) {
  std::string s(1, static_cast<char>(which));
  s.append(bytes.begin(), bytes.end());
  return s;
}

}  // namespace

namespace memento::fuzz {

std::vector<std::string> Seeds() {
  wire::PersistRecord persist;
  persist.version = 7;
  persist.ok = true;
  persist.file = {2, "rank-2.bin", 4096, 0xdeadbeef};
  wire::RankRecord rank{"host-a/0", 1, 2, 4, 1 << 20, 3};
  wire::Inventory inventory;
  inventory.remote_complete = {5};
  inventory.remote_lineage = {1};
  placement::InventoryItem item;
  item.version = 6;
  item.owner = 2;
  item.bytes = 100;
  item.crc_ok = true;
  inventory.items = {item, item};
  std::vector<uint8_t> seals;
  wire::AppendSealsRecord({1, 0, {1, 2, 3, 4}}, &seals);
  wire::AppendSealsRecord({2, 1, {}}, &seals);
  std::vector<uint8_t> counters = wire::EncodeCounters({1, 2});
  counters.insert(counters.begin(), 2);
  return {Tagged(kPersist, wire::EncodePersistRecord(persist)),
          Tagged(kRank, wire::EncodeRankRecord(rank)),
          Tagged(kInventory, wire::EncodeInventory(inventory)),
          Tagged(kLocatedBadItems, wire::EncodeLocatedBadItems(inventory.items)),
          Tagged(kSeals, seals),
          Tagged(kCounters, counters)};
}

}  // namespace memento::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0];
  const std::vector<uint8_t> in(data + 1, data + size);
  std::vector<uint8_t> once, twice;
  if (!RoundTrip(which, in, &once)) return 0;
  if (!RoundTrip(which, once, &twice) || twice != once) {
    memento::fuzz::Fail("decoder " + std::to_string(which % kCount) +
                        " accepted a record whose re-encoding does not decode to the same bytes");
  }
  return 0;
}
