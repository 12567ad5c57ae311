#include "store/region_record.h"

#include <cstring>
#include <utility>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "store/node_store_format.h"

namespace memento::runtime {
namespace {

using erasure::Crc32c;
namespace f = format;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void AppendBytes(std::string* out, const void* p, size_t n) {
  if (n > 0) out->append(static_cast<const char*>(p), n);
}

// Reads fixed-size values out of a bounded byte range.
class ByteReader {
 public:
  ByteReader(const uint8_t* p, uint64_t n) : p_(p), n_(n) {}
  bool Read(void* out, uint64_t bytes) {
    if (bytes > n_ - pos_) return false;
    if (bytes > 0) std::memcpy(out, p_ + pos_, bytes);  // out may be null when empty
    pos_ += bytes;
    return true;
  }
  uint64_t pos() const { return pos_; }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

}  // namespace

// Serializes region `index` of a layout whose data sits at `offset_in_slot`.
std::string EncodeRegionRecord(const RegionSpec& r, uint32_t index, uint64_t job_hash,
                               uint64_t offset_in_slot) {
  f::RegionRecordFixed fx{};
  fx.magic = f::kRegionMagic;
  fx.format = static_cast<uint16_t>(kNodeStoreFormat);
  fx.kind = static_cast<uint16_t>(r.kind);
  fx.index = index;
  fx.job_hash = job_hash;
  fx.capacity = r.capacity;
  fx.offset_in_slot = offset_in_slot;
  fx.owner_node = r.owner_node;
  fx.owner_lane = r.owner_lane;
  fx.piece = r.piece;
  fx.name_len = static_cast<uint32_t>(r.name.size());
  fx.dtype_len = static_cast<uint32_t>(r.layout.dtype.size());
  fx.ndim = static_cast<uint32_t>(r.layout.global_shape.size());
  const size_t body = sizeof(fx) + r.name.size() + r.layout.dtype.size() + 3 * 8 * fx.ndim;
  fx.record_bytes = static_cast<uint32_t>(AlignUp(body + 4, 8));
  std::string out;
  out.reserve(fx.record_bytes);
  AppendBytes(&out, &fx, sizeof(fx));
  out += r.name;
  out += r.layout.dtype;
  for (const auto* v : {&r.layout.global_shape, &r.layout.shape, &r.layout.offsets}) {
    AppendBytes(&out, v->data(), v->size() * 8);
  }
  uint32_t crc = Crc32c(out.data(), out.size());
  AppendBytes(&out, &crc, 4);
  out.resize(fx.record_bytes, '\0');
  return out;
}

// Parses one region record at `p` (at most `avail` bytes). Sets *consumed.
Status DecodeRegionRecord(const uint8_t* p, uint64_t avail, uint32_t index, uint64_t job_hash,
                          RegionSpec* out, uint64_t* offset_in_slot, uint64_t* consumed) {
  const std::string where = "region record " + std::to_string(index);
  f::RegionRecordFixed fx;
  if (avail < sizeof(fx)) return Status::Corruption(where + ": truncated layout area");
  std::memcpy(&fx, p, sizeof(fx));
  if (fx.magic != f::kRegionMagic) return Status::Corruption(where + ": bad magic");
  if (fx.format != kNodeStoreFormat) {
    return Status::Corruption(where + ": format " + std::to_string(fx.format));
  }
  if (fx.record_bytes > avail || fx.record_bytes < sizeof(fx) + 4 || fx.record_bytes % 8 != 0) {
    return Status::Corruption(where + ": record_bytes " + std::to_string(fx.record_bytes) +
                              " out of range");
  }
  if (fx.name_len > 1024 || fx.dtype_len > 64 || fx.ndim > 64) {
    return Status::Corruption(where + ": name/dtype/ndim length out of range");
  }
  const uint64_t body = sizeof(fx) + fx.name_len + fx.dtype_len + 24ull * fx.ndim;
  if (AlignUp(body + 4, 8) != fx.record_bytes) {
    return Status::Corruption(where + ": record_bytes " + std::to_string(fx.record_bytes) +
                              " disagrees with its lengths");
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, p + body, 4);
  uint32_t crc = Crc32c(p, body);
  if (crc != stored_crc) return Status::Corruption(where + ": crc mismatch");
  if (fx.index != index) return Status::Corruption(where + ": index " + std::to_string(fx.index));
  if (fx.job_hash != job_hash) return Status::Corruption(where + ": job hash mismatch");
  RegionSpec r;
  r.kind = static_cast<RegionKind>(fx.kind);
  r.capacity = fx.capacity;
  r.owner_node = fx.owner_node;
  r.owner_lane = fx.owner_lane;
  r.piece = fx.piece;
  ByteReader rd(p + sizeof(fx), body - sizeof(fx));
  r.name.resize(fx.name_len);
  r.layout.dtype.resize(fx.dtype_len);
  r.layout.global_shape.resize(fx.ndim);
  r.layout.shape.resize(fx.ndim);
  r.layout.offsets.resize(fx.ndim);
  bool ok = rd.Read(r.name.data(), fx.name_len) && rd.Read(r.layout.dtype.data(), fx.dtype_len) &&
            rd.Read(r.layout.global_shape.data(), 8ull * fx.ndim) &&
            rd.Read(r.layout.shape.data(), 8ull * fx.ndim) &&
            rd.Read(r.layout.offsets.data(), 8ull * fx.ndim);
  MEMENTO_CHECK(ok);  // lengths were checked against record_bytes above
  *out = std::move(r);
  *offset_in_slot = fx.offset_in_slot;
  *consumed = fx.record_bytes;
  return Status::Ok();
}

}  // namespace memento::runtime
