#include "memento/runtime/node_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/log.h"
#include "store/node_store_format.h"
#include "store/region_record.h"

namespace memento::runtime {
namespace {

using erasure::Crc32c;
namespace f = format;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t JobHash(const std::string& job) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : job) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint32_t LoadAcquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void StoreRelease(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
void StoreSeqCst(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

// ---- the segment's geometry ----

// Where everything lives in a segment for a given layout and slot count; a
// pure function of both so that Attach can recompute and compare it.
struct Geometry {
  uint64_t layout_offset = f::kHeaderBytes;
  uint64_t layout_bytes = 0;
  uint64_t catalog_offset = 0;
  uint64_t catalog_bytes = 0;
  uint64_t slot_table_offset = 0;
  uint64_t slot_control_bytes = 0;
  uint64_t slot_data_offset = 0;
  uint64_t slot_stride = 0;
  uint64_t total_bytes = 0;
  std::vector<uint64_t> region_offsets;
};

Geometry ComputeGeometry(const StoreLayout& layout, int slots, uint64_t catalog_bytes) {
  Geometry g;
  uint64_t off = 0;
  for (const auto& r : layout.regions) {
    g.region_offsets.push_back(off);
    off = AlignUp(off + r.capacity, f::kRegionAlign);
    g.layout_bytes += AlignUp(sizeof(f::RegionRecordFixed) + r.name.size() + r.layout.dtype.size() +
                                  24 * r.layout.global_shape.size() + 4,
                              8);
  }
  g.slot_stride = AlignUp(off, f::kSlotAlign);
  g.catalog_offset = AlignUp(g.layout_offset + g.layout_bytes, 8);
  g.catalog_bytes = catalog_bytes;
  g.slot_table_offset = AlignUp(g.catalog_offset + g.catalog_bytes, 64);
  g.slot_control_bytes =
      AlignUp(sizeof(f::SlotHeader) + sizeof(f::RegionSeal) * layout.regions.size(), 64);
  g.slot_data_offset = AlignUp(g.slot_table_offset + g.slot_control_bytes * slots, f::kSlotAlign);
  g.total_bytes = g.slot_data_offset + g.slot_stride * slots;
  return g;
}

std::string FixedString(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

}  // namespace

std::string StoreId::ToString() const {
  return "job=" + job + " node=" + node + " lane=" + std::to_string(local_rank);
}

int StoreInventory::NewestSealed() const {
  int best = -1;
  for (const auto& s : slots) {
    if (s.ok && (best < 0 || s.version > slots[best].version)) best = s.slot;
  }
  return best;
}

int StoreInventory::NewestCommitted() const {
  int best = -1;
  for (const auto& s : slots) {
    if (s.ok && s.committed && (best < 0 || s.version > slots[best].version)) best = s.slot;
  }
  return best;
}

std::string NodeStore::JobPrefix(const std::string& job) { return "/memento." + job + "."; }

Result<std::string> NodeStore::SegmentName(const StoreId& id) {
  MEMENTO_RETURN_IF_ERROR(ValidateJobId(id.job));
  if (id.node.empty() || id.node.size() > 200 || id.node.find('\0') != std::string::npos) {
    return Status::InvalidArgument("node identity '" + id.node + "' must have 1..200 bytes");
  }
  std::string node;
  for (char c : id.node.substr(0, 64)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    node += ok ? c : '_';
  }
  char hash[16];
  std::snprintf(hash, sizeof(hash), "%08x", Crc32c(id.node.data(), id.node.size()));
  return JobPrefix(id.job) + node + "-" + hash + ".r" + std::to_string(id.local_rank);
}

uint64_t NodeStore::SegmentBytes(const StoreLayout& layout, int slots) {
  return ComputeGeometry(layout, slots, 0).total_bytes;
}

namespace {

// A segment held by another process is another running job of the same id on
// this node: say so in the user's words.
Status NameTheOtherJob(const StoreId& id, const std::string& name, Status s) {
  if (s.code() != StatusCode::kUnavailable ||
      s.message().find("in use by another running process") == std::string::npos) {
    return s;
  }
  return Status::Unavailable(
      "node store " + name + " (" + id.ToString() + "): another job with MEMENTO_JOB=" + id.job +
      " is running on this node: " + s.message() +
      ". Two running jobs cannot share a job id on one node; give this job another MEMENTO_JOB "
      "or stop the other one");
}

// The fields of a slot header that name the slot (everything but the version
// it holds and its state).
void WriteSlotIdentity(f::SlotHeader* h, int slot, int regions, uint64_t job_hash) {
  h->magic = f::kSlotMagic;
  h->format = static_cast<uint16_t>(kNodeStoreFormat);
  h->pad0 = 0;
  h->slot_index = static_cast<uint32_t>(slot);
  h->region_count = static_cast<uint32_t>(regions);
  h->job_hash = job_hash;
}

}  // namespace

Result<NodeStore> NodeStore::Create(const StoreId& id, const StoreLayout& layout, int slots,
                                    const std::vector<uint8_t>& catalog) {
  MEMENTO_ASSIGN_OR_RETURN(std::string name, SegmentName(id));
  MEMENTO_RETURN_IF_ERROR(layout.Validate());
  if (slots < 2 || slots > 64) {
    return Status::InvalidArgument("node store " + name + ": slots " + std::to_string(slots) +
                                   " (accepted: 2..64)");
  }
  const Geometry g = ComputeGeometry(layout, slots, catalog.size());
  // The header, layout, catalog and slot table now; the slots' data (nearly
  // all of it) in the background, waited for by BeginWriteSlot.
  Result<ShmSegment> created = ShmSegment::Create(name, g.total_bytes, g.slot_data_offset);
  if (!created.ok()) return NameTheOtherJob(id, name, created.status());
  ShmSegment seg = std::move(created).value();
  uint8_t* base = seg.data();
  const uint64_t job_hash = JobHash(id.job);

  // Layout records.
  uint64_t pos = g.layout_offset;
  for (size_t i = 0; i < layout.regions.size(); ++i) {
    std::string rec = EncodeRegionRecord(layout.regions[i], static_cast<uint32_t>(i), job_hash,
                                         g.region_offsets[i]);
    std::memcpy(base + pos, rec.data(), rec.size());
    pos += rec.size();
  }
  MEMENTO_CHECK_EQ(pos, g.layout_offset + g.layout_bytes);
  if (!catalog.empty()) std::memcpy(base + g.catalog_offset, catalog.data(), catalog.size());

  // Slot control blocks: empty slots (the mapping is zero-filled).
  for (int s = 0; s < slots; ++s) {
    auto* sh =
        reinterpret_cast<f::SlotHeader*>(base + g.slot_table_offset + g.slot_control_bytes * s);
    WriteSlotIdentity(sh, s, static_cast<int>(layout.regions.size()), job_hash);
  }

  auto* h = reinterpret_cast<f::SegmentHeader*>(base);
  h->magic = f::kSegmentMagic;
  h->format = kNodeStoreFormat;
  h->header_bytes = sizeof(f::SegmentHeader);
  std::memcpy(h->job, id.job.data(), id.job.size());
  std::memcpy(h->node, id.node.data(), id.node.size());
  h->local_rank = id.local_rank;
  h->slot_count = static_cast<uint32_t>(slots);
  h->region_count = static_cast<uint32_t>(layout.regions.size());
  h->layout_crc = Crc32c(base + g.layout_offset, g.layout_bytes);
  h->job_hash = job_hash;
  h->layout_offset = g.layout_offset;
  h->layout_bytes = g.layout_bytes;
  h->catalog_offset = g.catalog_offset;
  h->catalog_bytes = g.catalog_bytes;
  h->catalog_crc = Crc32c(base + g.catalog_offset, g.catalog_bytes);
  h->slot_table_offset = g.slot_table_offset;
  h->slot_control_bytes = g.slot_control_bytes;
  h->slot_data_offset = g.slot_data_offset;
  h->slot_stride = g.slot_stride;
  h->total_bytes = g.total_bytes;
  h->created_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  h->header_crc = Crc32c(h, f::kHeaderCrcBytes);
  // Last: a reader that sees kReady sees every byte above.
  StoreRelease(&h->ready, f::kReady);

  Log(LogLevel::kInfo, "node store: created " + name + " (" + id.ToString() + ", " +
                           std::to_string(slots) + " slots x " + std::to_string(g.slot_stride) +
                           " bytes, " + std::to_string(layout.regions.size()) + " regions)");
  return FromSegment(std::move(seg), &id);
}

Result<NodeStore> NodeStore::Attach(const StoreId& id, ShmSegment::Access access) {
  MEMENTO_ASSIGN_OR_RETURN(std::string name, SegmentName(id));
  Result<ShmSegment> opened = ShmSegment::Open(name, access);
  if (!opened.ok()) return NameTheOtherJob(id, name, opened.status());
  return FromSegment(std::move(opened).value(), &id);
}

Result<NodeStore> NodeStore::AttachByName(const std::string& name, ShmSegment::Access access) {
  MEMENTO_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Open(name, access));
  MEMENTO_ASSIGN_OR_RETURN(NodeStore store, FromSegment(std::move(seg), nullptr));
  // The header's identity must name this very segment (a renamed or copied
  // segment is somebody else's data).
  MEMENTO_ASSIGN_OR_RETURN(std::string expected, SegmentName(store.id_));
  if (expected != name) {
    return Status::FailedPrecondition("shm segment " + name + " holds the store of " +
                                      store.id_.ToString() + ", whose segment is " + expected);
  }
  return store;
}

Result<NodeStore> NodeStore::FromSegment(ShmSegment seg, const StoreId* expect) {
  const std::string seg_name = seg.name();
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption("node store " + seg_name + ": " + what);
  };
  if (seg.size() < f::kHeaderBytes) {
    return corrupt("size " + std::to_string(seg.size()) + " smaller than a header");
  }
  const uint8_t* base = seg.data();
  f::SegmentHeader h;
  // Acquire pairs with the creator's release of `ready`.
  const uint32_t ready = LoadAcquire(&reinterpret_cast<const f::SegmentHeader*>(base)->ready);
  std::memcpy(&h, base, sizeof(h));
  if (h.magic != f::kSegmentMagic) return corrupt("bad magic (not a memento node store)");
  if (h.format != kNodeStoreFormat) {
    return Status::FailedPrecondition("node store " + seg_name + ": format version " +
                                      std::to_string(h.format) + ", this build reads " +
                                      std::to_string(kNodeStoreFormat));
  }
  if (ready != f::kReady) return corrupt("incomplete (its creator died while creating it)");
  if (Crc32c(&h, f::kHeaderCrcBytes) != h.header_crc) return corrupt("header crc mismatch");
  if (h.header_bytes != sizeof(f::SegmentHeader)) return corrupt("header_bytes mismatch");
  if (h.job[f::kJobBytes - 1] != '\0' || h.node[f::kNodeBytes - 1] != '\0') {
    return corrupt("job/node strings not terminated");
  }
  StoreId id{FixedString(h.job, f::kJobBytes), FixedString(h.node, f::kNodeBytes), h.local_rank};
  if (JobHash(id.job) != h.job_hash) return corrupt("job hash disagrees with job id");
  if (expect != nullptr) {
    if (id.job != expect->job) {
      return Status::FailedPrecondition("node store " + seg_name + " belongs to job '" + id.job +
                                        "', not '" + expect->job + "'");
    }
    if (id.node != expect->node || id.local_rank != expect->local_rank) {
      return Status::FailedPrecondition("node store " + seg_name + " belongs to " + id.ToString() +
                                        ", not " + expect->ToString());
    }
  }
  if (h.total_bytes != seg.size()) {
    return corrupt("header says " + std::to_string(h.total_bytes) + " bytes, segment has " +
                   std::to_string(seg.size()));
  }
  if (h.slot_count < 2 || h.slot_count > 64 || h.region_count > 1000000) {
    return corrupt("slot_count/region_count out of range");
  }
  if (h.layout_offset != f::kHeaderBytes || h.layout_bytes > seg.size() - h.layout_offset) {
    return corrupt("layout area out of bounds");
  }
  if (Crc32c(base + h.layout_offset, h.layout_bytes) != h.layout_crc) {
    return corrupt("layout crc mismatch");
  }
  StoreLayout layout;
  layout.regions.reserve(h.region_count);
  std::vector<uint64_t> recorded_offsets;
  uint64_t pos = 0;
  for (uint32_t i = 0; i < h.region_count; ++i) {
    RegionSpec r;
    uint64_t off = 0;
    uint64_t used = 0;
    Status s = DecodeRegionRecord(base + h.layout_offset + pos, h.layout_bytes - pos, i, h.job_hash,
                                  &r, &off, &used);
    if (!s.ok()) return corrupt(s.message());
    layout.regions.push_back(std::move(r));
    recorded_offsets.push_back(off);
    pos += used;
  }
  if (pos != h.layout_bytes) return corrupt("layout area has trailing bytes");
  Status ls = layout.Validate();
  if (!ls.ok()) return corrupt(ls.message());
  // Every offset must be what this build computes for the layout: this checks
  // all geometry fields at once and keeps every later access in bounds.
  if (h.catalog_bytes > seg.size()) return corrupt("catalog area out of bounds");
  const Geometry g = ComputeGeometry(layout, static_cast<int>(h.slot_count), h.catalog_bytes);
  if (g.layout_bytes != h.layout_bytes || g.slot_table_offset != h.slot_table_offset ||
      g.slot_control_bytes != h.slot_control_bytes || g.slot_data_offset != h.slot_data_offset ||
      g.slot_stride != h.slot_stride || g.total_bytes != h.total_bytes ||
      g.catalog_offset != h.catalog_offset ||
      g.region_offsets != recorded_offsets) {
    return corrupt("geometry fields disagree with the layout");
  }
  if (Crc32c(base + h.catalog_offset, h.catalog_bytes) != h.catalog_crc) {
    return corrupt("catalog crc mismatch");
  }
  NodeStore store;
  store.catalog_.assign(base + h.catalog_offset, base + h.catalog_offset + h.catalog_bytes);
  store.segment_ = std::move(seg);
  store.id_ = std::move(id);
  store.layout_ = std::move(layout);
  store.slot_count_ = static_cast<int>(h.slot_count);
  store.job_hash_ = h.job_hash;
  store.region_offsets_ = g.region_offsets;
  store.slot_table_offset_ = g.slot_table_offset;
  store.slot_control_bytes_ = g.slot_control_bytes;
  store.slot_data_offset_ = g.slot_data_offset;
  store.slot_stride_ = g.slot_stride;
  return store;
}

// ---- slot access ----

namespace {

struct SlotPtrs {
  f::SlotHeader* header;
  f::RegionSeal* seals;
};

SlotPtrs SlotAt(uint8_t* control) {
  return SlotPtrs{reinterpret_cast<f::SlotHeader*>(control),
                  reinterpret_cast<f::RegionSeal*>(control + sizeof(f::SlotHeader))};
}

}  // namespace

uint8_t* NodeStore::SlotControl(int slot) const {
  MEMENTO_CHECK(slot >= 0 && slot < slot_count_);
  return segment_.data() + slot_table_offset_ + slot_control_bytes_ * slot;
}

Status NodeStore::CheckWritable(const char* what) const {
  if (!segment_.valid()) return Status::FailedPrecondition(std::string(what) + ": no store");
  if (!segment_.writable()) {
    return Status::FailedPrecondition(std::string(what) + ": node store " + segment_.name() +
                                      " is attached read-only");
  }
  return Status::Ok();
}

Result<int> NodeStore::BeginWrite(uint64_t version, uint64_t lineage) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("BeginWrite"));
  const StoreInventory inv = Inventory();
  for (const auto& s : inv.slots) {
    if (s.ok && s.version == version) {
      return Status::AlreadyExists("node store " + segment_.name() + ": version " +
                                   std::to_string(version) + " is already sealed in slot " +
                                   std::to_string(s.slot));
    }
  }
  int keep = inv.NewestCommitted();
  if (keep < 0) keep = inv.NewestSealed();
  int pick = -1;
  for (const auto& s : inv.slots) {
    if (s.slot == keep) continue;
    if (!s.ok) {  // empty, being written, or invalid: nothing worth keeping
      pick = s.slot;
      break;
    }
    if (pick < 0 || s.version < inv.slots[pick].version) pick = s.slot;
  }
  MEMENTO_CHECK_GE(pick, 0);  // slot_count_ >= 2, so one slot besides `keep` exists
  MEMENTO_RETURN_IF_ERROR(BeginWriteSlot(pick, version, lineage));
  return pick;
}

Status NodeStore::Invalidate(int slot) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("Invalidate"));
  MEMENTO_CHECK(slot >= 0 && slot < slot_count_);
  SlotPtrs p = SlotAt(SlotControl(slot));
  // Sealed flag first, with a full fence, before any other byte changes: a
  // reader that then still sees the old state re-checks `generation`.
  StoreSeqCst(&p.header->state, f::kStateEmpty);
  StoreSeqCst(&p.header->committed, 0);
  __atomic_add_fetch(&p.header->generation, 1, __ATOMIC_SEQ_CST);
  for (int r = 0; r < region_count(); ++r) std::memset(&p.seals[r], 0, sizeof(f::RegionSeal));
  p.header->header_crc = 0;
  return Status::Ok();
}

Status NodeStore::BeginWriteSlot(int slot, uint64_t version, uint64_t lineage) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("BeginWriteSlot"));
  if (slot < 0 || slot >= slot_count_) {
    return Status::InvalidArgument("node store " + segment_.name() + ": slot " +
                                   std::to_string(slot) + " out of range");
  }
  MEMENTO_RETURN_IF_ERROR(Invalidate(slot));
  // A new store's data pages may still be being reserved: writing them
  // before would fault page by page (and SIGBUS if the file system filled).
  MEMENTO_RETURN_IF_ERROR(segment_.WaitReserved().WithContext(
      "node store " + segment_.name() + ": slot " + std::to_string(slot)));
  SlotPtrs p = SlotAt(SlotControl(slot));
  // Written once at Create; rewritten with every version so that a damaged
  // byte there costs one version, not every later one sealed over it.
  WriteSlotIdentity(p.header, slot, region_count(), job_hash_);
  p.header->version = version;
  p.header->lineage = lineage;
  StoreRelease(&p.header->state, f::kStateWriting);
  Log(LogLevel::kDebug, "node store " + segment_.name() + ": slot " + std::to_string(slot) +
                            " writing version " + std::to_string(version));
  return Status::Ok();
}

uint8_t* NodeStore::MutableRegion(int slot, int region) {
  MEMENTO_CHECK(segment_.writable());
  MEMENTO_CHECK(slot >= 0 && slot < slot_count_);
  MEMENTO_CHECK(region >= 0 && region < region_count());
  SlotPtrs p = SlotAt(SlotControl(slot));
  MEMENTO_CHECK_EQ(LoadAcquire(&p.header->state), f::kStateWriting);
  return segment_.data() + slot_data_offset_ + slot_stride_ * slot + region_offsets_[region];
}

Status NodeStore::SealRegion(int slot, int region, uint64_t length, uint32_t crc) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("SealRegion"));
  MEMENTO_CHECK(slot >= 0 && slot < slot_count_);
  MEMENTO_CHECK(region >= 0 && region < region_count());
  const std::string where = "node store " + segment_.name() + " slot " + std::to_string(slot) +
                            " region '" + layout_.regions[region].name + "'";
  SlotPtrs p = SlotAt(SlotControl(slot));
  if (LoadAcquire(&p.header->state) != f::kStateWriting) {
    return Status::FailedPrecondition(where + ": slot is not being written (call BeginWrite)");
  }
  if (length > layout_.regions[region].capacity) {
    return Status::InvalidArgument(where + ": length " + std::to_string(length) +
                                   " exceeds capacity " +
                                   std::to_string(layout_.regions[region].capacity));
  }
  f::RegionSeal seal{};
  seal.magic = f::kSealMagic;
  seal.format = static_cast<uint16_t>(kNodeStoreFormat);
  seal.kind = static_cast<uint16_t>(layout_.regions[region].kind);
  seal.region = static_cast<uint32_t>(region);
  seal.job_hash = job_hash_;
  seal.version = p.header->version;
  seal.length = length;
  seal.payload_crc = crc;
  seal.record_crc = Crc32c(&seal, f::kSealCrcBytes);
  std::memcpy(&p.seals[region], &seal, sizeof(seal));
  return Status::Ok();
}

namespace {

// Validates the seal record of `region` against the slot's version; "" when ok.
std::string CheckSeal(const f::RegionSeal& seal, int region, const RegionSpec& spec,
                      uint64_t job_hash, uint64_t version) {
  if (seal.magic == 0 && seal.record_crc == 0) return "not sealed";
  if (seal.magic != f::kSealMagic) return "seal record: bad magic";
  if (seal.format != kNodeStoreFormat) return "seal record: format mismatch";
  if (Crc32c(&seal, f::kSealCrcBytes) != seal.record_crc) return "seal record: crc mismatch";
  if (seal.region != static_cast<uint32_t>(region)) return "seal record: region index mismatch";
  if (seal.kind != static_cast<uint16_t>(spec.kind)) return "seal record: kind mismatch";
  if (seal.job_hash != job_hash) return "seal record: job mismatch";
  if (seal.version != version) {
    return "seal record: version " + std::to_string(seal.version) + ", slot has " +
           std::to_string(version);
  }
  if (seal.length > spec.capacity) return "seal record: length exceeds capacity";
  return "";
}

// The crc32c a sealed slot header carries (see format::SlotHeader::lineage).
uint32_t SlotHeaderCrc(const f::SlotHeader& h) {
  if (h.lineage == 0) return Crc32c(&h, f::kSlotHeaderCrcBytes);
  erasure::Crc32cStream crc;
  crc.Update(&h, f::kSlotHeaderCrcBytes);
  crc.Update(&h.lineage, sizeof(h.lineage));
  return crc.value();
}

// Validates a sealed slot header; "" when ok.
// `committed` is the flag word loaded (acquire) by the caller.
std::string CheckSlotHeader(const f::SlotHeader& h, uint32_t committed, int slot, int regions,
                            uint64_t job_hash) {
  if (h.magic != f::kSlotMagic) return "slot header: bad magic";
  if (h.format != kNodeStoreFormat) return "slot header: format mismatch";
  if (h.slot_index != static_cast<uint32_t>(slot)) return "slot header: slot index mismatch";
  if (h.region_count != static_cast<uint32_t>(regions)) return "slot header: region count mismatch";
  if (h.job_hash != job_hash) return "slot header: job mismatch";
  if (SlotHeaderCrc(h) != h.header_crc) return "slot header: crc mismatch";
  if (committed != 0 && committed != f::kCommitted) return "slot header: bad committed flag";
  return "";
}

}  // namespace

Status NodeStore::SealSlot(int slot, uint64_t version) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("SealSlot"));
  MEMENTO_CHECK(slot >= 0 && slot < slot_count_);
  const std::string where = "node store " + segment_.name() + " slot " + std::to_string(slot);
  SlotPtrs p = SlotAt(SlotControl(slot));
  if (LoadAcquire(&p.header->state) != f::kStateWriting || p.header->version != version) {
    return Status::FailedPrecondition(where + ": not being written with version " +
                                      std::to_string(version));
  }
  for (int r = 0; r < region_count(); ++r) {
    f::RegionSeal seal;
    std::memcpy(&seal, &p.seals[r], sizeof(seal));
    std::string problem = CheckSeal(seal, r, layout_.regions[r], job_hash_, version);
    if (!problem.empty()) {
      return Status::FailedPrecondition(where + " region '" + layout_.regions[r].name +
                                        "': " + problem);
    }
  }
  p.header->header_crc = SlotHeaderCrc(*p.header);
  // Last, with release: a reader that acquires kStateSealed sees all data,
  // seal records and the header crc written before.
  StoreRelease(&p.header->state, f::kStateSealed);
  Log(LogLevel::kDebug, where + ": sealed version " + std::to_string(version));
  return Status::Ok();
}

Status NodeStore::MarkCommitted(int slot, uint64_t version) {
  MEMENTO_RETURN_IF_ERROR(CheckWritable("MarkCommitted"));
  MEMENTO_CHECK(slot >= 0 && slot < slot_count_);
  SlotPtrs p = SlotAt(SlotControl(slot));
  if (LoadAcquire(&p.header->state) != f::kStateSealed || p.header->version != version) {
    return Status::FailedPrecondition("node store " + segment_.name() + " slot " +
                                      std::to_string(slot) + ": not sealed with version " +
                                      std::to_string(version));
  }
  StoreRelease(&p.header->committed, f::kCommitted);
  return Status::Ok();
}

StoreInventory NodeStore::Inventory() const {
  StoreInventory inv;
  if (!segment_.valid()) return inv;
  for (int s = 0; s < slot_count_; ++s) {
    SlotPtrs p = SlotAt(SlotControl(s));
    SlotState st;
    st.slot = s;
    const uint32_t state = LoadAcquire(&p.header->state);
    const uint32_t committed = LoadAcquire(&p.header->committed);
    f::SlotHeader h;
    std::memcpy(&h, p.header, sizeof(h));
    st.version = h.version;
    st.lineage = h.lineage;
    if (state == f::kStateEmpty) {
      st.problem = "empty";
    } else if (state == f::kStateWriting) {
      st.writing = true;
      st.problem = "being written";
    } else if (state != f::kStateSealed) {
      st.damaged = true;
      st.problem = "slot header: unknown state";
    } else {
      st.sealed = true;
      st.problem = CheckSlotHeader(h, committed, s, region_count(), job_hash_);
      st.committed = committed == f::kCommitted;
    }
    bool all_ok = st.sealed && st.problem.empty();
    for (int r = 0; r < region_count(); ++r) {
      const RegionSpec& spec = layout_.regions[r];
      RegionState rs;
      rs.region = r;
      rs.kind = spec.kind;
      rs.owner_node = spec.owner_node;
      rs.owner_lane = spec.owner_lane;
      rs.piece = spec.piece;
      if (st.sealed) {
        f::RegionSeal seal;
        std::memcpy(&seal, &p.seals[r], sizeof(seal));
        rs.problem = CheckSeal(seal, r, spec, job_hash_, h.version);
        if (!st.problem.empty() && rs.problem.empty()) rs.problem = st.problem;
        rs.sealed = rs.problem != "not sealed";
        if (rs.problem.empty()) {
          rs.ok = true;
          rs.length = seal.length;
          rs.crc = seal.payload_crc;
        }
      } else {
        rs.problem = st.problem;
      }
      all_ok = all_ok && rs.ok;
      st.regions.push_back(std::move(rs));
    }
    if (all_ok) {
      st.ok = true;
    } else if (st.sealed && st.problem.empty()) {
      for (const auto& rs : st.regions) {
        if (!rs.ok) {
          st.problem = "region '" + layout_.regions[rs.region].name + "': " + rs.problem;
          break;
        }
      }
    }
    inv.slots.push_back(std::move(st));
  }
  return inv;
}

Result<RegionView> NodeStore::ReadRegion(int slot, int region) const {
  if (!segment_.valid()) return Status::FailedPrecondition("ReadRegion: no store");
  // Built only on an error: readers call this for every piece they serve.
  auto where = [&] { return "node store " + segment_.name() + " slot " + std::to_string(slot); };
  if (slot < 0 || slot >= slot_count_ || region < 0 || region >= region_count()) {
    return Status::InvalidArgument(where() + " region " + std::to_string(region) +
                                   ": out of range");
  }
  SlotPtrs p = SlotAt(SlotControl(slot));
  if (LoadAcquire(&p.header->state) != f::kStateSealed) {
    return Status::FailedPrecondition(where() + ": not sealed");
  }
  const uint32_t committed = LoadAcquire(&p.header->committed);
  f::SlotHeader h;
  std::memcpy(&h, p.header, sizeof(h));
  std::string problem = CheckSlotHeader(h, committed, slot, region_count(), job_hash_);
  if (!problem.empty()) return Status::Corruption(where() + ": " + problem);
  f::RegionSeal seal;
  std::memcpy(&seal, &p.seals[region], sizeof(seal));
  problem = CheckSeal(seal, region, layout_.regions[region], job_hash_, h.version);
  if (!problem.empty()) {
    return Status::Corruption(where() + " region '" + layout_.regions[region].name +
                              "': " + problem);
  }
  RegionView v;
  v.data = segment_.data() + slot_data_offset_ + slot_stride_ * slot + region_offsets_[region];
  v.length = seal.length;
  v.crc = seal.payload_crc;
  v.version = h.version;
  return v;
}

Status NodeStore::VerifyRegion(int slot, int region) const {
  if (!segment_.valid()) return Status::FailedPrecondition("VerifyRegion: no store");
  if (slot < 0 || slot >= slot_count_) {
    return Status::InvalidArgument("VerifyRegion: slot " + std::to_string(slot) + " out of range");
  }
  SlotPtrs p = SlotAt(SlotControl(slot));
  const uint32_t gen = LoadAcquire(&p.header->generation);
  MEMENTO_ASSIGN_OR_RETURN(RegionView v, ReadRegion(slot, region));
  const uint32_t crc = Crc32c(v.data, v.length);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  const std::string where = "node store " + segment_.name() + " slot " + std::to_string(slot) +
                            " region '" + layout_.regions[region].name + "'";
  if (LoadAcquire(&p.header->generation) != gen || !StillSealed(slot, v.version)) {
    return Status::Corruption(where + ": rewritten while it was being verified");
  }
  if (crc != v.crc) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "payload crc32c %08x, sealed %08x", crc, v.crc);
    return Status::Corruption(where + " version " + std::to_string(v.version) + ": " + buf);
  }
  return Status::Ok();
}

bool NodeStore::StillSealed(int slot, uint64_t version) const {
  if (!segment_.valid() || slot < 0 || slot >= slot_count_) return false;
  SlotPtrs p = SlotAt(SlotControl(slot));
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return LoadAcquire(&p.header->state) == f::kStateSealed &&
         __atomic_load_n(&p.header->version, __ATOMIC_ACQUIRE) == version;
}

std::optional<int> NodeStore::FindVersion(uint64_t version) const {
  for (const auto& s : Inventory().slots) {
    if (s.ok && s.version == version) return s.slot;
  }
  return std::nullopt;
}

std::optional<int> NodeStore::FindVersion(uint64_t version, uint64_t lineage) const {
  for (const auto& s : Inventory().slots) {
    if (s.ok && s.version == version && s.lineage == lineage) return s.slot;
  }
  return std::nullopt;
}

}  // namespace memento::runtime
