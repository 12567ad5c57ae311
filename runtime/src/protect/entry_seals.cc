#include "protect/entry_seals.h"

#include <cstring>

#include "memento/erasure/crc32c.h"

namespace memento::runtime {
namespace {
constexpr uint32_t kSealsMagic = 0x314c5345;  // "ESL1"
}  // namespace

uint64_t EntrySealsBytes(size_t count) { return 8 + 16 * static_cast<uint64_t>(count); }

std::vector<uint8_t> EncodeEntrySeals(const std::vector<EntrySeal>& seals) {
  std::vector<uint8_t> out(EntrySealsBytes(seals.size()), 0);
  const uint32_t count = static_cast<uint32_t>(seals.size());
  std::memcpy(out.data(), &kSealsMagic, 4);
  std::memcpy(out.data() + 4, &count, 4);
  for (size_t i = 0; i < seals.size(); ++i) {
    std::memcpy(out.data() + 8 + 16 * i, &seals[i].bytes, 8);
    std::memcpy(out.data() + 16 + 16 * i, &seals[i].crc, 4);
  }
  return out;
}

Result<std::vector<EntrySeal>> DecodeEntrySeals(const uint8_t* data, size_t bytes) {
  uint32_t magic = 0, count = 0;
  if (bytes >= 8) {
    std::memcpy(&magic, data, 4);
    std::memcpy(&count, data + 4, 4);
  }
  if (bytes < 8 || magic != kSealsMagic || EntrySealsBytes(count) != bytes) {
    return Status::Corruption("entry seals record of " + std::to_string(bytes) +
                              " bytes is malformed");
  }
  std::vector<EntrySeal> seals(count);
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&seals[i].bytes, data + 8 + 16 * i, 8);
    std::memcpy(&seals[i].crc, data + 16 + 16 * i, 4);
  }
  return seals;
}

Status CheckEntryCrcs(const std::vector<uint32_t>& crcs, const std::vector<uint64_t>& entry_bytes,
                      const std::vector<std::string>& names, const std::vector<EntrySeal>& seals) {
  if (seals.size() != entry_bytes.size()) {
    return Status::Corruption("owner sealed " + std::to_string(seals.size()) +
                              " entries, this rank registered " +
                              std::to_string(entry_bytes.size()));
  }
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    if (i >= crcs.size()) {
      return Status::Corruption("rebuilt entry '" + names[i] + "' of " +
                                std::to_string(entry_bytes[i]) +
                                " bytes lies beyond the end of the rebuilt shard");
    }
    if (seals[i].bytes != entry_bytes[i]) {
      return Status::Corruption("rebuilt entry '" + names[i] + "': owner sealed " +
                                std::to_string(seals[i].bytes) + " bytes, expected " +
                                std::to_string(entry_bytes[i]));
    }
    if (crcs[i] != seals[i].crc) {
      return Status::Corruption("rebuilt entry '" + names[i] +
                                "' fails the end-to-end check: "
                                "crc32c " +
                                std::to_string(crcs[i]) + " != owner's " +
                                std::to_string(seals[i].crc));
    }
  }
  return Status::Ok();
}

Status VerifyShardAgainstSeals(const std::vector<uint8_t>& shard,
                               const std::vector<uint64_t>& entry_bytes,
                               const std::vector<std::string>& names,
                               const std::vector<EntrySeal>& seals) {
  std::vector<uint32_t> crcs;
  uint64_t at = 0;
  for (uint64_t n : entry_bytes) {
    if (at + n > shard.size()) break;  // CheckEntryCrcs names the entry
    crcs.push_back(erasure::Crc32c(shard.data() + at, n));
    at += n;
  }
  return CheckEntryCrcs(crcs, entry_bytes, names, seals);
}

}  // namespace memento::runtime
