#include "extra_state.h"

#include <cstring>

namespace memento::torch_adapter {
namespace {

constexpr uint32_t kMagic = 0x3153584d;  // "MXS1"
constexpr uint64_t kHeaderBytes = 16;

void Put(uint8_t*& p, const void* data, size_t bytes) {
  if (bytes != 0) std::memcpy(p, data, bytes);
  p += bytes;
}

}  // namespace

uint64_t ExtraStateBytes(const std::map<std::string, std::string>& records) {
  uint64_t bytes = kHeaderBytes;
  for (const auto& [key, value] : records) bytes += 4 + key.size() + 8 + value.size();
  return bytes;
}

Status EncodeExtraState(const std::map<std::string, std::string>& records, uint8_t* out,
                        uint64_t capacity) {
  const uint64_t need = ExtraStateBytes(records);
  if (need > capacity) {
    return Status::ResourceExhausted("extra state needs " + std::to_string(need) +
                                     " bytes but its entry holds " + std::to_string(capacity) +
                                     " (raise extra_capacity)");
  }
  uint8_t* p = out;
  const uint32_t count = static_cast<uint32_t>(records.size());
  const uint64_t payload = need - kHeaderBytes;
  Put(p, &kMagic, 4);
  Put(p, &count, 4);
  Put(p, &payload, 8);
  for (const auto& [key, value] : records) {
    const uint32_t klen = static_cast<uint32_t>(key.size());
    const uint64_t vlen = value.size();
    Put(p, &klen, 4);
    Put(p, key.data(), klen);
    Put(p, &vlen, 8);
    Put(p, value.data(), vlen);
  }
  return Status::Ok();
}

Result<std::map<std::string, std::string>> DecodeExtraState(const uint8_t* in, uint64_t capacity) {
  if (capacity < kHeaderBytes) return Status::Corruption("extra state: entry too small");
  uint32_t magic = 0, count = 0;
  uint64_t payload = 0;
  std::memcpy(&magic, in, 4);
  std::memcpy(&count, in + 4, 4);
  std::memcpy(&payload, in + 8, 8);
  if (magic != kMagic) return Status::Corruption("extra state: bad magic");
  if (payload > capacity - kHeaderBytes) return Status::Corruption("extra state: bad length");
  std::map<std::string, std::string> records;
  const uint8_t* p = in + kHeaderBytes;
  const uint8_t* end = p + payload;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t klen = 0;
    uint64_t vlen = 0;
    if (end - p < 4) return Status::Corruption("extra state: truncated record");
    std::memcpy(&klen, p, 4);
    p += 4;
    if (static_cast<uint64_t>(end - p) < klen + 8ull) {
      return Status::Corruption("extra state: truncated key");
    }
    std::string key(reinterpret_cast<const char*>(p), klen);
    p += klen;
    std::memcpy(&vlen, p, 8);
    p += 8;
    if (static_cast<uint64_t>(end - p) < vlen)
      return Status::Corruption("extra state: truncated value");
    records[key] = std::string(reinterpret_cast<const char*>(p), vlen);
    p += vlen;
  }
  return records;
}

}  // namespace memento::torch_adapter
