// NodeStore's opening of a job's segment (node_store.h): reused when it
// matches, replaced when stale, renamed aside when damaged or written for
// another topology, so that no committed bytes are lost before a restore
// has succeeded elsewhere.
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "memento/runtime/log.h"
#include "memento/runtime/node_store.h"

namespace memento::runtime {
namespace {

// Renames segment `name` to "<name><suffix><pid>[.n]"; its new name.
Result<std::string> RenameAside(const std::string& name, const char* suffix) {
  for (int n = 0; n < 100; ++n) {
    const std::string aside =
        name + suffix + std::to_string(getpid()) + (n == 0 ? "" : "." + std::to_string(n));
    Status moved = ShmSegment::Rename(name, aside);
    if (moved.code() == StatusCode::kAlreadyExists) continue;
    if (!moved.ok()) return moved;
    return aside;
  }
  return Status::AlreadyExists("node store " + name +
                               ": too many set-aside copies; run `memento clean`");
}

// Renames the damaged segment `name` aside (see OpenOrCreate); its new name.
Result<std::string> SetAside(const std::string& name, const Status& why) {
  MEMENTO_ASSIGN_OR_RETURN(std::string aside, RenameAside(name, NodeStore::kSetAsideSuffix));
  Log(LogLevel::kWarn, "node store: " + name + " cannot be read (" + why.ToString() +
                           "); its node counts as lost and it is kept as " + aside +
                           " until a restore succeeds");
  return aside;
}

}  // namespace

Result<std::string> NodeStore::SetAsideForElastic(const StoreId& id) {
  MEMENTO_ASSIGN_OR_RETURN(std::string name, SegmentName(id));
  MEMENTO_ASSIGN_OR_RETURN(std::string aside, RenameAside(name, kElasticSuffix));
  Log(LogLevel::kInfo, "node store: " + name + " was written for another topology; kept as " +
                           aside + " for the elastic restore");
  return aside;
}

bool NodeStore::IsElasticAside(const std::string& name) {
  const size_t at = name.rfind(kElasticSuffix);
  if (at == std::string::npos) return false;
  const std::string tail = name.substr(at + std::strlen(kElasticSuffix));
  return !tail.empty() && std::isdigit(static_cast<unsigned char>(tail[0])) &&
         tail.find_first_not_of("0123456789.") == std::string::npos;
}

Result<NodeStore> NodeStore::AttachAside(const std::string& name) {
  MEMENTO_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Open(name, ShmSegment::Access::kReadOnly));
  return FromSegment(std::move(seg), nullptr);
}

Result<NodeStore> NodeStore::OpenOrCreate(const StoreId& id, const StoreLayout& layout, int slots,
                                          StalePolicy policy, bool* attached,
                                          std::string* set_aside,
                                          const std::vector<uint8_t>& catalog) {
  if (attached != nullptr) *attached = false;
  if (set_aside != nullptr) set_aside->clear();
  MEMENTO_ASSIGN_OR_RETURN(std::string name, SegmentName(id));
  for (int attempt = 0; attempt < 2; ++attempt) {
    Result<NodeStore> existing = Attach(id, ShmSegment::Access::kReadWrite);
    std::string reason;
    if (existing.ok()) {
      if (existing->layout_ == layout && existing->slot_count_ == slots &&
          existing->catalog_ == catalog) {
        if (attached != nullptr) *attached = true;
        Log(LogLevel::kInfo, "node store: attached " + name + " (" + id.ToString() + ")");
        return existing;
      }
      reason = existing->slot_count_ != slots ? "it has " + std::to_string(existing->slot_count_) +
                                                    " slots, not " + std::to_string(slots)
               : existing->layout_ != layout
                   ? "its shard layout differs from the one registered now"
                   : "the job's catalog (its ranks' entries) differs from the one now";
      // Holding no version (a run that ended or died before its first seal),
      // it has nothing to keep: replaced under either policy.
      bool holds = existing->Finished().has_value();
      for (const SlotState& st : existing->Inventory().slots) holds = holds || st.sealed;
      if (!holds) {
        Log(LogLevel::kInfo,
            "node store: replacing " + name + ", which holds no version: " + reason);
        existing = NodeStore();  // unmapped before the unlink
        Status u = ShmSegment::Unlink(name);
        if (!u.ok() && u.code() != StatusCode::kNotFound) return u;
        Result<NodeStore> created = Create(id, layout, slots, catalog);
        if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) continue;
        return created;
      }
    } else if (existing.status().code() == StatusCode::kNotFound) {
      Result<NodeStore> created = Create(id, layout, slots, catalog);
      // Lost a creation race with another process of the same lane: attach.
      if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) continue;
      return created;
    } else if (existing.status().code() == StatusCode::kIoError ||
               existing.status().code() == StatusCode::kUnavailable) {
      // Could not open or map it (descriptors, memory): says nothing about
      // its content, which may be committed data; never replace it for that.
      // Unavailable: another running job holds it, or another user owns it;
      // it is not ours to replace.
      return existing.status();
    } else if (existing.status().code() == StatusCode::kCorruption && set_aside != nullptr) {
      // A damaged header or layout: this node's memory is lost for the
      // planner, but the bytes stay (under another name) until the caller
      // has restored from elsewhere.
      MEMENTO_ASSIGN_OR_RETURN(*set_aside, SetAside(name, existing.status()));
      return Create(id, layout, slots, catalog);
    } else {
      reason = existing.status().ToString();
    }
    if (policy == StalePolicy::kError) {
      return Status::FailedPrecondition(
          "node store " + name + " exists but cannot be reused: " + reason +
          "; remove it with `memento clean --job " + id.job + "` or set MEMENTO_STALE=replace");
    }
    Log(LogLevel::kWarn, "node store: replacing stale " + name + ": " + reason);
    Status u = ShmSegment::Unlink(name);
    if (!u.ok() && u.code() != StatusCode::kNotFound) return u;
    return Create(id, layout, slots, catalog);
  }
  return Status::Unavailable("node store " + name +
                             ": created and removed concurrently by another process");
}

Status NodeStore::Destroy(const StoreId& id) {
  MEMENTO_ASSIGN_OR_RETURN(std::string name, SegmentName(id));
  return ShmSegment::Unlink(name);
}

}  // namespace memento::runtime
