#include "recovery/shard_io.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "snapshot/device_copy.h"

namespace memento::runtime {
namespace {

// Bytes hashed per step while copying out of a slot (stays in cache).
constexpr uint64_t kPiece = 256 << 10;

}  // namespace

ShardIo::ShardIo(const std::vector<RegisteredEntry>* entries, const NodeStore* store,
                 const ProtectionLayout* layout, RemoteStore* remote, const Transport* transport)
    : entries_(entries), store_(store), layout_(layout), remote_(remote), transport_(transport) {
  for (const RegisteredEntry& e : *entries_) entry_bytes_.push_back(e.bytes);
}

Status ShardIo::CopySlotToBuffers(int slot, uint64_t version, std::vector<uint32_t>* crcs) const {
  crcs->assign(entries_->size(), 0);
  for (size_t i = 0; i < entries_->size(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, store_->ReadRegion(slot, static_cast<int>(i)));
    if (view.version != version || view.length != e.bytes) {
      return Status::Corruption("entry '" + e.name + "' in slot " + std::to_string(slot) +
                                ": holds v" + std::to_string(view.version) + " with " +
                                std::to_string(view.length) + " bytes, expected v" +
                                std::to_string(version) + " with " + std::to_string(e.bytes));
    }
    // Hash the bytes as they land (host) or as they leave the slot (device).
    erasure::Crc32cStream crc;
    for (uint64_t done = 0; done < e.bytes; done += kPiece) {
      const uint64_t n = std::min(kPiece, e.bytes - done);
      if (e.device) {
        crc.Update(view.data + done, n);
        MEMENTO_RETURN_IF_ERROR(CopyBytes(e.data + done, view.data + done, n, true));
      } else {
        std::memcpy(e.data + done, view.data + done, n);
        crc.Update(e.data + done, n);
      }
    }
    if (crc.value() != view.crc) {
      return Status::Corruption("entry '" + e.name + "' of v" + std::to_string(version) + " in " +
                                store_->segment_name() + " slot " + std::to_string(slot) +
                                ": crc32c " + std::to_string(crc.value()) + " != sealed " +
                                std::to_string(view.crc));
    }
    (*crcs)[i] = view.crc;
  }
  if (!store_->StillSealed(slot, version)) {
    return Status::Corruption("slot " + std::to_string(slot) + " changed while restoring v" +
                              std::to_string(version));
  }
  return Status::Ok();
}

Status ShardIo::ReadRemoteToBuffers(uint64_t version, std::vector<uint32_t>* crcs) const {
  if (remote_ == nullptr) return Status::NotFound("no remote tier");
  MEMENTO_ASSIGN_OR_RETURN(RemoteManifest manifest, remote_->ReadManifest(version));
  if (manifest.world_size != transport_->size()) {
    return Status::ElasticRestoreNeeded("remote v" + std::to_string(version) + " was written by " +
                                        std::to_string(manifest.world_size) +
                                        " ranks, the job now has " +
                                        std::to_string(transport_->size()));
  }
  const int rank = transport_->rank();
  MEMENTO_ASSIGN_OR_RETURN(auto infos, remote_->ListEntries(version, rank));
  std::map<std::string, uint32_t> crc_by_name;
  for (const auto& info : infos) crc_by_name[info.name] = info.crc;
  std::vector<RemoteEntryTarget> targets;
  std::vector<std::vector<uint8_t>> staging;  // device entries go through host memory
  staging.reserve(entries_->size());
  for (const RegisteredEntry& e : *entries_) {
    void* dst = e.data;
    if (e.device) {
      staging.emplace_back(e.bytes);
      dst = staging.back().data();
    }
    targets.push_back({e.name, dst, e.bytes});
  }
  MEMENTO_RETURN_IF_ERROR(remote_->ReadRankFile(version, rank, targets));
  size_t staged = 0;
  crcs->assign(entries_->size(), 0);
  for (size_t i = 0; i < entries_->size(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    if (e.device) {
      MEMENTO_RETURN_IF_ERROR(CopyBytes(e.data, staging[staged++].data(), e.bytes, true));
    }
    (*crcs)[i] = crc_by_name[e.name];
  }
  return Status::Ok();
}

ShardLanding ShardLanding::InSlot(NodeStore* store, int slot,
                                  const std::vector<uint64_t>& entry_bytes) {
  ShardLanding l;
  l.slot_ = slot;
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    l.entries_.push_back(store->MutableRegion(slot, static_cast<int>(i)));
    l.bytes_.push_back(entry_bytes[i]);
    l.base_.push_back(l.size_);
    l.size_ += entry_bytes[i];
  }
  return l;
}

ShardLanding ShardLanding::InMemory(const std::vector<uint64_t>& entry_bytes) {
  ShardLanding l;
  for (uint64_t n : entry_bytes) {
    l.bytes_.push_back(n);
    l.base_.push_back(l.size_);
    l.size_ += n;
  }
  l.memory_.resize(l.size_);
  for (size_t i = 0; i < entry_bytes.size(); ++i) l.entries_.push_back(l.memory_.data() + l.base_[i]);
  return l;
}

uint8_t* ShardLanding::Span(uint64_t off, uint64_t len) {
  if (off + len > size_) return nullptr;
  if (slot_ < 0) return memory_.data() + off;
  // The entry holding `off`: the last whose base is <= off.
  auto it = std::upper_bound(base_.begin(), base_.end(), off);
  if (it == base_.begin()) return nullptr;
  const size_t i = static_cast<size_t>(it - base_.begin()) - 1;
  if (off + len > base_[i] + bytes_[i]) return nullptr;
  return entries_[i] + (off - base_[i]);
}

void ShardLanding::Write(uint64_t off, const uint8_t* src, uint64_t len) {
  MEMENTO_CHECK_LE(off + len, size_);
  const uint64_t end = off + len;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const uint64_t lo = std::max(base_[i], off), hi = std::min(base_[i] + bytes_[i], end);
    if (lo < hi) std::memcpy(entries_[i] + (lo - base_[i]), src + (lo - off), hi - lo);
  }
}

uint32_t ShardLanding::Crc32c() const {
  erasure::Crc32cStream crc;
  for (size_t i = 0; i < entries_.size(); ++i) crc.Update(entries_[i], bytes_[i]);
  return crc.value();
}

void ShardLanding::Read(uint64_t off, uint64_t len, uint8_t* dst) const {
  std::memset(dst, 0, len);
  const uint64_t end = off + len;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const uint64_t lo = std::max(base_[i], off), hi = std::min(base_[i] + bytes_[i], end);
    if (lo < hi) std::memcpy(dst + (lo - off), entries_[i] + (lo - base_[i]), hi - lo);
  }
}

Status ShardIo::VerifyLanded(const ShardLanding& landed, const std::vector<EntrySeal>& seals,
                             std::vector<uint32_t>* crcs) const {
  std::vector<std::string> names;
  for (const RegisteredEntry& e : *entries_) names.push_back(e.name);
  std::vector<const uint8_t*> data(landed.entries().begin(), landed.entries().end());
  return VerifyEntriesAgainstSeals(data, entry_bytes_, names, seals, crcs);
}

Status ShardIo::CopyLandedToBuffers(const ShardLanding& landed,
                                    const std::vector<uint32_t>& crcs) const {
  for (size_t i = 0; i < entries_->size(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    const uint8_t* src = landed.entries().at(i);
    erasure::Crc32cStream crc;
    for (uint64_t done = 0; done < e.bytes; done += kPiece) {
      const uint64_t n = std::min(kPiece, e.bytes - done);
      if (e.device) {
        crc.Update(src + done, n);
        MEMENTO_RETURN_IF_ERROR(CopyBytes(e.data + done, src + done, n, true));
      } else {
        std::memcpy(e.data + done, src + done, n);
        crc.Update(e.data + done, n);
      }
    }
    if (crc.value() != crcs.at(i)) {
      return Status::Corruption("entry '" + e.name + "': crc32c " + std::to_string(crc.value()) +
                                " after the copy into the buffer, " + std::to_string(crcs.at(i)) +
                                " verified");
    }
  }
  return Status::Ok();
}

Status ShardIo::ReadRange(int slot, const ShardLanding* landed, uint64_t begin, uint64_t len,
                          uint8_t* dst) const {
  if (landed != nullptr) {
    landed->Read(begin, len, dst);
    return Status::Ok();
  }
  return ReadShardRange(*store_, slot, entry_bytes_, begin, len, dst);
}

Status ReadShardRange(const NodeStore& store, int slot, const std::vector<uint64_t>& entry_bytes,
                      uint64_t begin, uint64_t len, uint8_t* dst) {
  std::memset(dst, 0, len);
  const uint64_t end = begin + len;
  uint64_t eb = 0;
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    const uint64_t ee = eb + entry_bytes[i];
    const uint64_t lo = std::max(eb, begin), hi = std::min(ee, end);
    if (lo < hi) {
      MEMENTO_ASSIGN_OR_RETURN(RegionView view, store.ReadRegion(slot, static_cast<int>(i)));
      if (view.length != entry_bytes[i]) {
        return Status::Corruption("entry '" + store.layout().regions[i].name + "' holds " +
                                  std::to_string(view.length) + " bytes, expected " +
                                  std::to_string(entry_bytes[i]));
      }
      std::memcpy(dst + (lo - begin), view.data + (lo - eb), hi - lo);
    }
    eb = ee;
  }
  return Status::Ok();
}

std::vector<std::pair<uint64_t, uint64_t>> ShardIo::CompleteRemoteVersions(
    std::vector<std::string>* notes) const {
  if (remote_ == nullptr) return {};
  auto complete = remote_->ListComplete();
  if (!complete.ok()) {
    notes->push_back("remote: " + complete.status().ToString());
    return {};
  }
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t v : *complete) {
    auto manifest = remote_->ReadManifest(v);
    if (manifest.ok()) out.emplace_back(v, manifest->lineage);  // else gone meanwhile
  }
  return out;
}

}  // namespace memento::runtime
