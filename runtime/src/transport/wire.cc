#include "transport/wire.h"

#include <cstring>

namespace memento::runtime::wire {
namespace {

// Appends the bytes of `value`.
template <typename T>
void Put(std::vector<uint8_t>* out, const T& value) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &value, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// An item's key, the first fields of both item records: i64 version, kind,
// owner, stripe, row.
constexpr size_t kKeyFields = 5;
constexpr size_t kInventoryFields = kKeyFields + 3;  // + bytes, crc_ok, lineage

void PutItemKey(std::vector<uint8_t>* out, const placement::InventoryItem& it) {
  for (int64_t f : {static_cast<int64_t>(it.version), static_cast<int64_t>(it.kind),
                    static_cast<int64_t>(it.owner), static_cast<int64_t>(it.stripe),
                    static_cast<int64_t>(it.row)}) {
    Put(out, f);
  }
}

// The key at p, as an item held by (node, lane).
placement::InventoryItem GetItemKey(const uint8_t* p, int node, int lane) {
  placement::InventoryItem it;
  it.node = node;
  it.lane = lane;
  it.version = static_cast<uint64_t>(Get<int64_t>(p));
  it.kind = static_cast<placement::ItemKind>(Get<int64_t>(p + 8));
  it.owner = static_cast<int>(Get<int64_t>(p + 16));
  it.stripe = static_cast<int>(Get<int64_t>(p + 24));
  it.row = static_cast<int>(Get<int64_t>(p + 32));
  return it;
}

}  // namespace

int RecoverTag(size_t index) {
  return kTagRecoverBase + static_cast<int>(index % static_cast<size_t>(kRecoverTagSpan));
}

std::vector<uint8_t> EncodePersistRecord(const PersistRecord& r) {
  std::vector<uint8_t> out;
  out.reserve(25 + r.file.file.size());
  Put(&out, r.version);
  Put(&out, static_cast<uint8_t>(r.writing ? 2 : r.ok ? 1 : 0));
  Put(&out, r.file.bytes);
  Put(&out, r.file.crc);
  Put(&out, static_cast<uint32_t>(r.file.file.size()));
  out.insert(out.end(), r.file.file.begin(), r.file.file.end());
  return out;
}

Result<PersistRecord> DecodePersistRecord(const uint8_t* p, size_t n) {
  if (n < 25) return Status::Corruption("persist record of " + std::to_string(n) + " bytes");
  PersistRecord r;
  r.version = Get<uint64_t>(p);
  if (p[8] > 2) return Status::Corruption("persist record: state " + std::to_string(p[8]));
  r.ok = p[8] == 1;
  r.writing = p[8] == 2;
  r.file.bytes = Get<uint64_t>(p + 9);
  r.file.crc = Get<uint32_t>(p + 17);
  const uint32_t name_len = Get<uint32_t>(p + 21);
  if (25 + static_cast<size_t>(name_len) != n) {
    return Status::Corruption("persist record: name length " + std::to_string(name_len) +
                              " does not match " + std::to_string(n) + " bytes");
  }
  r.file.file.assign(reinterpret_cast<const char*>(p + 25), name_len);
  return r;
}

std::vector<uint8_t> EncodeRankRecord(const RankRecord& r) {
  std::vector<uint8_t> out;
  out.reserve(32 + r.identity.size());
  Put(&out, r.lane);
  Put(&out, r.old_index);
  Put(&out, r.old_nodes);
  Put(&out, r.entries);
  Put(&out, r.shard_bytes);
  Put(&out, r.old_lanes);
  Put(&out, uint32_t{0});
  out.insert(out.end(), r.identity.begin(), r.identity.end());
  return out;
}

Result<RankRecord> DecodeRankRecord(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 33) {
    return Status::Corruption("rank record of " + std::to_string(bytes.size()) + " bytes");
  }
  const uint8_t* p = bytes.data();
  RankRecord r;
  r.lane = Get<int32_t>(p);
  r.old_index = Get<int32_t>(p + 4);
  r.old_nodes = Get<uint32_t>(p + 8);
  r.entries = Get<uint32_t>(p + 12);
  r.shard_bytes = Get<uint64_t>(p + 16);
  r.old_lanes = Get<uint32_t>(p + 24);
  r.identity.assign(bytes.begin() + 32, bytes.end());
  return r;
}

std::vector<uint8_t> EncodeInventory(const Inventory& inv) {
  std::vector<uint8_t> out;
  auto lineage = [](const std::vector<uint64_t>& of, size_t i) {
    return static_cast<int64_t>(i < of.size() ? of[i] : 0);
  };
  out.reserve(8 * (1 + 2 * inv.remote_complete.size() + kInventoryFields * inv.items.size()));
  Put(&out, static_cast<int64_t>(inv.remote_complete.size()));
  for (size_t i = 0; i < inv.remote_complete.size(); ++i) {
    Put(&out, static_cast<int64_t>(inv.remote_complete[i]));
    Put(&out, lineage(inv.remote_lineage, i));
  }
  for (size_t i = 0; i < inv.items.size(); ++i) {
    const placement::InventoryItem& it = inv.items[i];
    PutItemKey(&out, it);
    Put(&out, static_cast<int64_t>(it.bytes));
    const bool committed = i < inv.item_committed.size() && inv.item_committed[i];
    Put(&out, static_cast<int64_t>((it.crc_ok ? 1 : 0) | (committed ? 2 : 0)));
    Put(&out, lineage(inv.item_lineage, i));
  }
  return out;
}

Result<Inventory> DecodeInventory(const std::vector<uint8_t>& bytes, int node, int lane) {
  const size_t n = bytes.size() / 8;
  const uint8_t* p = bytes.data();
  const int64_t remotes = n >= 1 ? Get<int64_t>(p) : -1;
  if (bytes.size() % 8 != 0 || n < 1 || remotes < 0 ||
      static_cast<uint64_t>(remotes) > (n - 1) / 2 ||
      (n - 1 - 2 * static_cast<size_t>(remotes)) % kInventoryFields != 0) {
    return Status::Corruption("restore inventory of " + std::to_string(bytes.size()) + " bytes");
  }
  Inventory inv;
  const size_t first_item = 1 + 2 * static_cast<size_t>(remotes);
  for (size_t i = 1; i < first_item; i += 2) {
    inv.remote_complete.push_back(static_cast<uint64_t>(Get<int64_t>(p + 8 * i)));
    inv.remote_lineage.push_back(static_cast<uint64_t>(Get<int64_t>(p + 8 * (i + 1))));
  }
  for (size_t i = first_item; i < n; i += kInventoryFields) {
    const uint8_t* at = p + 8 * i;
    placement::InventoryItem it = GetItemKey(at, node, lane);
    it.bytes = static_cast<uint64_t>(Get<int64_t>(at + 8 * kKeyFields));
    it.sealed = true;
    const int64_t flags = Get<int64_t>(at + 8 * (kKeyFields + 1));
    it.crc_ok = (flags & 1) != 0;
    inv.items.push_back(it);
    inv.item_lineage.push_back(static_cast<uint64_t>(Get<int64_t>(at + 8 * (kKeyFields + 2))));
    inv.item_committed.push_back((flags & 2) != 0);
  }
  return inv;
}

bool HoldsCommitted(const Inventory& inv, uint64_t lineage) {
  for (size_t i = 0; i < inv.remote_complete.size(); ++i) {
    if (i < inv.remote_lineage.size() && inv.remote_lineage[i] == lineage) return true;
  }
  for (size_t i = 0; i < inv.items.size(); ++i) {
    if (i < inv.item_lineage.size() && inv.item_lineage[i] == lineage &&
        i < inv.item_committed.size() && inv.item_committed[i]) {
      return true;
    }
  }
  return false;
}

void AppendSealsRecord(const SealsRecord& r, std::vector<uint8_t>* out) {
  Put(out, static_cast<int32_t>(r.node));
  Put(out, static_cast<int32_t>(r.lane));
  Put(out, static_cast<uint32_t>(r.seals.size()));
  out->insert(out->end(), r.seals.begin(), r.seals.end());
}

Result<std::vector<SealsRecord>> DecodeSealsRecords(const std::vector<uint8_t>& bytes) {
  std::vector<SealsRecord> out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (at + 12 > bytes.size()) return Status::Corruption("entry seals record header cut short");
    SealsRecord r;
    r.node = Get<int32_t>(bytes.data() + at);
    r.lane = Get<int32_t>(bytes.data() + at + 4);
    const uint32_t len = Get<uint32_t>(bytes.data() + at + 8);
    if (at + 12 + len > bytes.size()) {
      return Status::Corruption("entry seals record of " + std::to_string(len) +
                                " bytes overruns the " + std::to_string(bytes.size()) +
                                "-byte allgather entry");
    }
    r.seals.assign(bytes.begin() + at + 12, bytes.begin() + at + 12 + len);
    out.push_back(std::move(r));
    at += 12 + len;
  }
  return out;
}

std::vector<uint8_t> EncodeCounters(const std::vector<uint64_t>& counters) {
  std::vector<uint8_t> out;
  for (uint64_t c : counters) Put(&out, c);
  return out;
}

Result<std::vector<uint64_t>> DecodeCounters(const std::vector<uint8_t>& bytes, size_t count) {
  if (bytes.size() != 8 * count) {
    return Status::Corruption("counters record of " + std::to_string(bytes.size()) +
                              " bytes, expected " + std::to_string(8 * count));
  }
  std::vector<uint64_t> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = Get<uint64_t>(bytes.data() + 8 * i);
  return out;
}

// ---- catalogs -------------------------------------------------------------------------------

namespace {

void PutString(std::vector<uint8_t>* out, const std::string& v) {
  Put(out, static_cast<uint32_t>(v.size()));
  out->insert(out->end(), v.begin(), v.end());
}

void PutDims(std::vector<uint8_t>* out, const std::vector<int64_t>& v) {
  Put(out, static_cast<uint32_t>(v.size()));
  for (int64_t x : v) Put(out, x);
}

void PutRankCatalog(std::vector<uint8_t>* out, const placement::RankCatalog& r) {
  Put(out, static_cast<int32_t>(r.node));
  Put(out, static_cast<int32_t>(r.lane));
  Put(out, static_cast<uint32_t>(r.entries.size()));
  for (const placement::CatalogEntry& e : r.entries) {
    PutString(out, e.name);
    Put(out, e.bytes);
    PutString(out, e.slice.dtype);
    PutDims(out, e.slice.global_shape);
    PutDims(out, e.slice.shape);
    PutDims(out, e.slice.offsets);
  }
}

// The fewest bytes a catalog entry takes (empty name and dtype, no
// dimensions), a rank's catalog (no entries), an elastic store record
// (empty name and blobs).
constexpr size_t kLeastEntryBytes = 4 + 8 + 4 + 3 * 4;
constexpr size_t kLeastRankBytes = 4 + 4 + 4;
constexpr size_t kLeastStoreBytes = 4 + 4 + 4 + 8 + 8;

// Bounds-checked reading of a catalog record; every failure is Corruption.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const char* what) : p_(p), n_(n), what_(what) {}
  template <typename T>
  Status Read(T* v) {
    if (sizeof(T) > n_ - pos_) return Cut();
    std::memcpy(v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status ReadString(std::string* v) {
    uint32_t len = 0;
    MEMENTO_RETURN_IF_ERROR(Read(&len));
    if (len > n_ - pos_) return Cut();
    v->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }
  Status ReadDims(std::vector<int64_t>* v) {
    uint32_t len = 0;
    MEMENTO_RETURN_IF_ERROR(Read(&len));
    if (len > (n_ - pos_) / 8) return Cut();
    v->resize(len);
    for (auto& x : *v) MEMENTO_RETURN_IF_ERROR(Read(&x));
    return Status::Ok();
  }
  Status ReadRankCatalog(placement::RankCatalog* r) {
    int32_t node = 0, lane = 0;
    uint32_t count = 0;
    MEMENTO_RETURN_IF_ERROR(Read(&node));
    MEMENTO_RETURN_IF_ERROR(Read(&lane));
    MEMENTO_RETURN_IF_ERROR(Read(&count));
    MEMENTO_RETURN_IF_ERROR(Fits(count, kLeastEntryBytes, "entries"));
    r->node = node;
    r->lane = lane;
    r->entries.resize(count);
    for (placement::CatalogEntry& e : r->entries) {
      MEMENTO_RETURN_IF_ERROR(ReadString(&e.name));
      MEMENTO_RETURN_IF_ERROR(Read(&e.bytes));
      MEMENTO_RETURN_IF_ERROR(ReadString(&e.slice.dtype));
      MEMENTO_RETURN_IF_ERROR(ReadDims(&e.slice.global_shape));
      MEMENTO_RETURN_IF_ERROR(ReadDims(&e.slice.shape));
      MEMENTO_RETURN_IF_ERROR(ReadDims(&e.slice.offsets));
    }
    return Status::Ok();
  }
  Status ReadBlob(std::vector<uint8_t>* v) {
    uint64_t len = 0;
    MEMENTO_RETURN_IF_ERROR(Read(&len));
    if (len > n_ - pos_) return Cut();
    v->assign(p_ + pos_, p_ + pos_ + len);
    pos_ += len;
    return Status::Ok();
  }
  bool done() const { return pos_ == n_; }
  Status Cut() const { return Status::Corruption(std::string(what_) + " cut short"); }
  // A count read from the record is checked against what the bytes left can
  // hold, at `least` bytes a record, before anything is sized by it: a
  // damaged count would otherwise allocate many times the record's size.
  Status Fits(uint64_t count, size_t least, const char* items) const {
    if (count <= (n_ - pos_) / least) return Status::Ok();
    return Status::Corruption(std::string(what_) + ": " + std::to_string(count) + " " + items +
                              " cannot fit in the " + std::to_string(n_ - pos_) + " bytes left (" +
                              std::to_string(least) + " at least each)");
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const char* what_;
};

}  // namespace

std::vector<uint8_t> EncodeRankCatalog(const placement::RankCatalog& rank) {
  std::vector<uint8_t> out;
  PutRankCatalog(&out, rank);
  return out;
}

Result<placement::RankCatalog> DecodeRankCatalog(const std::vector<uint8_t>& bytes) {
  Reader in(bytes.data(), bytes.size(), "rank catalog");
  placement::RankCatalog r;
  MEMENTO_RETURN_IF_ERROR(in.ReadRankCatalog(&r));
  if (!in.done()) return Status::Corruption("rank catalog has trailing bytes");
  return r;
}

constexpr uint32_t kJobCatalogMagic = 0x3154434Du;  // "MCT1"

std::vector<uint8_t> EncodeJobCatalog(const JobCatalog& c) {
  std::vector<uint8_t> out;
  Put(&out, kJobCatalogMagic);
  PutString(&out, c.scheme);
  Put(&out, static_cast<int32_t>(c.nodes));
  Put(&out, static_cast<int32_t>(c.lanes));
  for (uint64_t b : c.shard_bytes) Put(&out, b);
  for (uint32_t e : c.entry_count) Put(&out, e);
  Put(&out, static_cast<uint32_t>(c.ranks.size()));
  for (const placement::RankCatalog& r : c.ranks) PutRankCatalog(&out, r);
  return out;
}

Result<JobCatalog> DecodeJobCatalog(const std::vector<uint8_t>& bytes) {
  Reader in(bytes.data(), bytes.size(), "job catalog");
  JobCatalog c;
  uint32_t magic = 0;
  MEMENTO_RETURN_IF_ERROR(in.Read(&magic));
  if (magic != kJobCatalogMagic) return Status::Corruption("job catalog: bad magic");
  MEMENTO_RETURN_IF_ERROR(in.ReadString(&c.scheme));
  int32_t nodes = 0, lanes = 0;
  MEMENTO_RETURN_IF_ERROR(in.Read(&nodes));
  MEMENTO_RETURN_IF_ERROR(in.Read(&lanes));
  if (nodes <= 0 || lanes <= 0 || nodes > (1 << 20) || lanes > 4096) {
    return Status::Corruption("job catalog: " + std::to_string(nodes) + " nodes x " +
                              std::to_string(lanes) + " lanes");
  }
  // Each place has its shard size and entry count (12 bytes).
  MEMENTO_RETURN_IF_ERROR(in.Fits(static_cast<uint64_t>(nodes) * lanes, 12, "places"));
  c.nodes = nodes;
  c.lanes = lanes;
  c.shard_bytes.resize(static_cast<size_t>(nodes) * lanes);
  c.entry_count.resize(c.shard_bytes.size());
  for (auto& b : c.shard_bytes) MEMENTO_RETURN_IF_ERROR(in.Read(&b));
  for (auto& e : c.entry_count) MEMENTO_RETURN_IF_ERROR(in.Read(&e));
  uint32_t count = 0;
  MEMENTO_RETURN_IF_ERROR(in.Read(&count));
  if (count > c.shard_bytes.size()) return Status::Corruption("job catalog: too many ranks");
  MEMENTO_RETURN_IF_ERROR(in.Fits(count, kLeastRankBytes, "ranks"));
  c.ranks.resize(count);
  for (auto& r : c.ranks) MEMENTO_RETURN_IF_ERROR(in.ReadRankCatalog(&r));
  if (!in.done()) return Status::Corruption("job catalog has trailing bytes");
  return c;
}

namespace {

void PutBlob(std::vector<uint8_t>* out, const std::vector<uint8_t>& blob) {
  Put(out, static_cast<uint64_t>(blob.size()));
  out->insert(out->end(), blob.begin(), blob.end());
}

}  // namespace

std::vector<uint8_t> EncodeElasticInventory(const ElasticInventory& inv) {
  std::vector<uint8_t> out;
  PutBlob(&out, EncodeInventory(inv.remote));
  Put(&out, static_cast<uint32_t>(inv.stores.size()));
  for (const ElasticStoreRecord& s : inv.stores) {
    Put(&out, static_cast<int32_t>(s.node));
    Put(&out, static_cast<int32_t>(s.lane));
    PutString(&out, s.name);
    PutBlob(&out, s.catalog);
    PutBlob(&out, EncodeInventory(s.items));
  }
  return out;
}

Result<ElasticInventory> DecodeElasticInventory(const std::vector<uint8_t>& bytes) {
  Reader in(bytes.data(), bytes.size(), "elastic inventory");
  ElasticInventory inv;
  std::vector<uint8_t> blob;
  MEMENTO_RETURN_IF_ERROR(in.ReadBlob(&blob));
  MEMENTO_ASSIGN_OR_RETURN(inv.remote, DecodeInventory(blob, -1, 0));
  uint32_t stores = 0;
  MEMENTO_RETURN_IF_ERROR(in.Read(&stores));
  MEMENTO_RETURN_IF_ERROR(in.Fits(stores, kLeastStoreBytes, "stores"));
  inv.stores.resize(stores);
  for (ElasticStoreRecord& s : inv.stores) {
    int32_t node = 0, lane = 0;
    MEMENTO_RETURN_IF_ERROR(in.Read(&node));
    MEMENTO_RETURN_IF_ERROR(in.Read(&lane));
    MEMENTO_RETURN_IF_ERROR(in.ReadString(&s.name));
    MEMENTO_RETURN_IF_ERROR(in.ReadBlob(&s.catalog));
    MEMENTO_RETURN_IF_ERROR(in.ReadBlob(&blob));
    s.node = node;
    s.lane = lane;
    MEMENTO_ASSIGN_OR_RETURN(s.items, DecodeInventory(blob, node, lane));
  }
  if (!in.done()) return Status::Corruption("elastic inventory has trailing bytes");
  return inv;
}

std::vector<uint8_t> EncodeLocatedBadItems(const std::vector<placement::InventoryItem>& items) {
  std::vector<uint8_t> out;
  for (const placement::InventoryItem& it : items) {
    Put(&out, static_cast<int64_t>(it.node));
    Put(&out, static_cast<int64_t>(it.lane));
    PutItemKey(&out, it);
  }
  return out;
}

Result<std::vector<placement::InventoryItem>> DecodeLocatedBadItems(
    const std::vector<uint8_t>& bytes) {
  constexpr size_t kRecord = 8 * (2 + kKeyFields);
  if (bytes.size() % kRecord != 0) {
    return Status::Corruption("elastic verification record of " + std::to_string(bytes.size()) +
                              " bytes");
  }
  std::vector<placement::InventoryItem> items;
  for (size_t at = 0; at < bytes.size(); at += kRecord) {
    const uint8_t* p = bytes.data() + at;
    items.push_back(GetItemKey(p + 16, static_cast<int>(Get<int64_t>(p)),
                               static_cast<int>(Get<int64_t>(p + 8))));
  }
  return items;
}

}  // namespace memento::runtime::wire
