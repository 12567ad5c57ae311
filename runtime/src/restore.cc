// Checkpointer::Restore on an unchanged node set (DESIGN §6, steps 1 and 3
// without peers): one allgather of inventories, one agreed version, a
// bit-exact copy verified by crc32c, one AllTrue to agree it worked.
//
// Sources are tried newest first: a version that every rank holds sealed in
// its node store ("local memory"), or the newest complete remote version when
// it is newer or memory cannot serve. Part 2 replaces the candidate list with
// the planner's plan (peer replicas, decodes) and adds their copy routines
// next to CopySlotToBuffers / ReadRemoteToBuffers.
#include <algorithm>
#include <cstring>
#include <map>

#include "checkpointer_impl.h"
#include "device_copy.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/log.h"

namespace memento::runtime {
namespace {

constexpr uint64_t kPiece = 256 << 10;

// Inventory record of one rank: newest complete remote version (-1: none),
// then its sealed versions.
std::vector<uint8_t> EncodeInventory(int64_t remote_newest, const std::vector<uint64_t>& versions) {
  std::vector<uint8_t> out(8 + 8 * versions.size());
  std::memcpy(out.data(), &remote_newest, 8);
  if (!versions.empty()) std::memcpy(out.data() + 8, versions.data(), 8 * versions.size());
  return out;
}

Status DecodeInventory(const std::vector<uint8_t>& in, int64_t* remote_newest,
                       std::vector<uint64_t>* versions) {
  if (in.size() < 8 || in.size() % 8 != 0) {
    return Status::Corruption("inventory record of " + std::to_string(in.size()) + " bytes");
  }
  std::memcpy(remote_newest, in.data(), 8);
  versions->resize((in.size() - 8) / 8);
  if (!versions->empty()) std::memcpy(versions->data(), in.data() + 8, in.size() - 8);
  return Status::Ok();
}

struct Candidate {
  uint64_t version;
  RestoreSource source;
};

}  // namespace

Status Checkpointer::Impl::CopySlotToBuffers(int slot, uint64_t version,
                                             std::vector<uint32_t>* crcs) {
  crcs->assign(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const RegisteredEntry& e = entries_[i];
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, store_.ReadRegion(slot, static_cast<int>(i)));
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
                                store_.segment_name() + " slot " + std::to_string(slot) +
                                ": crc32c " + std::to_string(crc.value()) + " != sealed " +
                                std::to_string(view.crc));
    }
    (*crcs)[i] = view.crc;
  }
  if (!store_.StillSealed(slot, version)) {
    return Status::Corruption("slot " + std::to_string(slot) + " changed while restoring v" +
                              std::to_string(version));
  }
  return Status::Ok();
}

Status Checkpointer::Impl::ReadRemoteToBuffers(uint64_t version, std::vector<uint32_t>* crcs) {
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
  staging.reserve(entries_.size());
  for (const RegisteredEntry& e : entries_) {
    void* dst = e.data;
    if (e.device) {
      staging.emplace_back(e.bytes);
      dst = staging.back().data();
    }
    targets.push_back({e.name, dst, e.bytes});
  }
  MEMENTO_RETURN_IF_ERROR(remote_->ReadRankFile(version, rank, targets));
  size_t staged = 0;
  crcs->assign(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const RegisteredEntry& e = entries_[i];
    if (e.device) {
      MEMENTO_RETURN_IF_ERROR(CopyBytes(e.data, staging[staged++].data(), e.bytes, true));
    }
    (*crcs)[i] = crc_by_name[e.name];
  }
  return Status::Ok();
}

int64_t Checkpointer::Impl::NewestRemoteVersion(std::vector<std::string>* notes) const {
  if (!remote_) return -1;
  auto newest = remote_->NewestComplete();
  if (!newest.ok()) {
    notes->push_back("remote: " + newest.status().ToString());
    return -1;
  }
  return newest->has_value() ? static_cast<int64_t>(**newest) : -1;
}

Result<RestoreReport> Checkpointer::Impl::Restore() {
  MEMENTO_RETURN_IF_ERROR(Prepare());
  (void)Wait();
  if (persister_) (void)persister_->WaitIdle();
  if (protection_->protects()) return RestoreProtected();

  RestoreReport report;
  // 1. Inventory: what this rank holds, what the remote tier holds.
  std::map<uint64_t, int> local_slots;  // version -> slot
  for (const SlotState& st : store_.Inventory().slots) {
    if (st.ok) {
      local_slots[st.version] = st.slot;
    } else if (st.sealed) {
      report.notes.push_back("slot " + std::to_string(st.slot) + " unusable: " + st.problem);
    }
  }
  const int64_t remote_newest = NewestRemoteVersion(&report.notes);
  std::vector<uint64_t> versions;
  for (const auto& [v, slot] : local_slots) versions.push_back(v);
  auto blob = EncodeInventory(remote_newest, versions);
  MEMENTO_ASSIGN_OR_RETURN(auto all, transport_->Allgather(blob.data(), blob.size()));

  // 2. Choose: versions every rank holds, newest first; the remote version
  // (as every rank sees it) at its place, after memory on a tie.
  std::map<uint64_t, int> holders;
  int64_t remote_agreed = remote_ ? INT64_MAX : -1;
  for (size_t r = 0; r < all.size(); ++r) {
    int64_t their_remote;
    std::vector<uint64_t> theirs;
    MEMENTO_RETURN_IF_ERROR(DecodeInventory(all[r], &their_remote, &theirs));
    for (uint64_t v : theirs) ++holders[v];
    remote_agreed = std::min(remote_agreed, their_remote);
  }
  std::vector<Candidate> candidates;
  for (auto it = holders.rbegin(); it != holders.rend(); ++it) {
    if (it->second == transport_->size()) {
      candidates.push_back({it->first, RestoreSource::kLocalMemory});
    } else {
      report.notes.push_back("v" + std::to_string(it->first) + " in memory on only " +
                             std::to_string(it->second) + " of " +
                             std::to_string(transport_->size()) + " ranks");
    }
  }
  if (remote_agreed >= 0) {
    Candidate remote{static_cast<uint64_t>(remote_agreed), RestoreSource::kRemote};
    auto pos = std::find_if(candidates.begin(), candidates.end(),
                            [&](const Candidate& c) { return c.version < remote.version; });
    candidates.insert(pos, remote);
  }

  // 3. Copy and agree, newest candidate first.
  for (const Candidate& c : candidates) {
    std::vector<uint32_t> crcs;
    Status mine = c.source == RestoreSource::kLocalMemory
                      ? CopySlotToBuffers(local_slots.at(c.version), c.version, &crcs)
                      : ReadRemoteToBuffers(c.version, &crcs);
    MEMENTO_ASSIGN_OR_RETURN(bool everyone, transport_->AllTrue(mine.ok()));
    if (!everyone) {
      report.notes.push_back(
          "v" + std::to_string(c.version) + " from " + RestoreSourceName(c.source) +
          " failed: " + (mine.ok() ? std::string("on another rank") : mine.ToString()));
      continue;
    }
    report.version = c.version;
    for (size_t i = 0; i < entries_.size(); ++i) {
      report.entries.push_back({entries_[i].name, entries_[i].bytes, crcs[i], c.source});
    }
    if (c.source == RestoreSource::kLocalMemory) {
      const int slot = local_slots.at(c.version);
      (void)store_.MarkCommitted(slot, c.version);
      std::lock_guard<std::mutex> lock(mu_);
      latest_committed_ = c.version;
      committed_slot_ = slot;
    } else {
      // Back into memory, committed like any version, so that a crash right
      // after this restore is served from memory again.
      Status reseeded = Reseed(c.version);
      if (!reseeded.ok()) {
        report.notes.push_back("restored v" + std::to_string(c.version) +
                               " not re-seeded in memory: " + reseeded.ToString());
      }
    }
    Log(LogLevel::kInfo, report.ToString());
    return report;
  }
  std::string why = "nothing to restore";
  for (const auto& n : report.notes) why += "; " + n;
  return Status::NotFound(why);
}

}  // namespace memento::runtime
