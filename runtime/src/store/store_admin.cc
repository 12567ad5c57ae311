#include "memento/runtime/store_admin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

namespace memento::runtime {

Result<std::vector<std::string>> ListJobSegments(const std::string& job) {
  MEMENTO_RETURN_IF_ERROR(ValidateJobId(job));
  return ShmSegment::List(NodeStore::JobPrefix(job));
}

Result<std::vector<SegmentReport>> InspectJob(const std::string& job, bool verify) {
  MEMENTO_ASSIGN_OR_RETURN(std::vector<std::string> names, ListJobSegments(job));
  std::vector<SegmentReport> reports;
  for (const auto& name : names) {
    SegmentReport rep;
    rep.name = name;
    // A store kept for an elastic restore has another name than its identity's.
    Result<NodeStore> store = NodeStore::IsElasticAside(name)
                                  ? NodeStore::AttachAside(name)
                                  : NodeStore::AttachByName(name, ShmSegment::Access::kReadOnly);
    if (!store.ok()) {
      rep.status = store.status();
      // Still report the object's size when it can be opened at all.
      Result<ShmSegment> raw = ShmSegment::Open(name, ShmSegment::Access::kReadOnly);
      if (raw.ok()) rep.bytes = raw->size();
      reports.push_back(std::move(rep));
      continue;
    }
    rep.bytes = store->segment_bytes();
    rep.node = store->id().node;
    rep.local_rank = store->id().local_rank;
    rep.region_count = store->region_count();
    rep.payload_bytes = store->layout().PayloadBytes();
    for (const auto& r : store->layout().regions) rep.region_names.push_back(r.name);
    rep.inventory = store->Inventory();
    rep.finished = store->Finished();
    rep.verified.resize(rep.inventory.slots.size());
    for (const auto& slot : rep.inventory.slots) {
      auto& out = rep.verified[slot.slot];
      out.resize(slot.regions.size());
      for (const auto& r : slot.regions) {
        if (slot.damaged) {
          out[r.region] = Status::Corruption(slot.problem);
        } else if (slot.sealed && !r.ok) {
          // A sealed slot whose seal record (or header) does not validate is
          // damaged whether or not the payloads are hashed.
          out[r.region] = Status::Corruption(r.problem.empty() ? slot.problem : r.problem);
        } else if (verify && r.ok) {
          out[r.region] = store->VerifyRegion(slot.slot, r.region);
        }
      }
    }
    reports.push_back(std::move(rep));
  }
  return reports;
}

Result<std::vector<std::string>> CleanJob(const std::string& job,
                                          std::vector<std::string>* others, bool keep_in_use,
                                          std::vector<std::string>* in_use) {
  if (in_use == nullptr) in_use = others;
  MEMENTO_ASSIGN_OR_RETURN(std::vector<std::string> names, ListJobSegments(job));
  std::vector<std::string> removed;
  Status first;  // one that cannot go does not keep the others
  std::string not_removed;
  for (const auto& name : names) {
    struct stat st;
    if (lstat((ShmSegment::Directory() + name).c_str(), &st) == 0 && st.st_uid != geteuid()) {
      if (others != nullptr) {
        others->push_back(name + " (owned by uid " + std::to_string(st.st_uid) + ")");
      }
      continue;
    }
    if (keep_in_use) {
      if (const long pid = ShmSegment::HolderPid(name); pid > 0) {
        if (in_use != nullptr) {
          in_use->push_back(name + " (in use by the running process " + std::to_string(pid) +
                            ")");
        }
        continue;
      }
    }
    Status s = ShmSegment::Unlink(name);
    if (s.ok()) {
      removed.push_back(name);
    } else if (s.code() != StatusCode::kNotFound) {  // gone meanwhile: fine
      if (first.ok()) first = s;
      not_removed += (not_removed.empty() ? "" : "; ") + s.message();
    }
  }
  if (!first.ok()) {
    std::string done;
    for (const auto& name : removed) done += (done.empty() ? "" : ", ") + name;
    return Status(first.code(), "removed " + std::to_string(removed.size()) + " of " +
                                    std::to_string(names.size()) + " segments" +
                                    (done.empty() ? "" : " (" + done + ")") +
                                    "; not removed: " + not_removed);
  }
  return removed;
}

std::string FormatReports(const std::vector<SegmentReport>& reports) {
  std::ostringstream os;
  if (reports.empty()) os << "no segments\n";
  for (const auto& rep : reports) {
    os << rep.name << "  " << rep.bytes << " bytes";
    if (!rep.status.ok()) {
      os << "  UNUSABLE: " << rep.status.ToString() << "\n";
      continue;
    }
    os << "  node=" << rep.node << " lane=" << rep.local_rank << " regions=" << rep.region_count
       << " payload/slot=" << rep.payload_bytes << "\n";
    if (rep.finished) os << "  finished at version " << rep.finished->version << "\n";
    for (const auto& slot : rep.inventory.slots) {
      os << "  slot " << slot.slot << ": ";
      if (slot.ok) {
        os << "version " << slot.version << (slot.committed ? " committed" : " sealed");
      } else if (slot.writing) {
        os << "version " << slot.version << " being written";
      } else {
        os << slot.problem;
      }
      os << "\n";
      if (!slot.sealed) continue;
      for (const auto& r : slot.regions) {
        char crc[16];
        std::snprintf(crc, sizeof(crc), "%08x", r.crc);
        os << "    [" << r.region << "] '" << rep.region_names[r.region] << "' "
           << RegionKindName(r.kind) << " owner=" << r.owner_node << "/" << r.owner_lane;
        if (r.kind == RegionKind::kParity) os << " piece=" << r.piece;
        if (r.ok) {
          os << " length=" << r.length << " crc=" << crc;
          const Status& v = rep.verified[slot.slot][r.region];
          os << (v.ok() ? "" : "  BAD: " + v.ToString());
        } else {
          os << "  BAD: " << r.problem;
        }
        os << "\n";
      }
    }
  }
  return os.str();
}

}  // namespace memento::runtime
