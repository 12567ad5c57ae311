// Administration of a job's node stores on this machine: what `memento
// inspect` and `memento clean` do, as library calls so that they are testable.
//
// Thread-safety: functions are independent; inspecting while a job writes is
// safe (read-only mappings; a slot being rewritten shows as unsealed/corrupt).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/node_store.h"

namespace memento::runtime {

struct SegmentReport {
  std::string name;    // "/memento.<job>...."
  uint64_t bytes = 0;  // size of the object
  Status status;       // attaching/validating the header; not OK = unusable
  std::string node;    // node identity from the header (when status ok)
  uint32_t local_rank = 0;
  int region_count = 0;
  std::vector<std::string> region_names;  // layout order
  uint64_t payload_bytes = 0;             // one slot's region capacities
  StoreInventory inventory;               // when status ok
  // The finished mark (NodeStore::Finished): the run ended normally and the
  // store was kept (MEMENTO_KEEP_FINISHED=1).
  std::optional<FinishedRun> finished;
  // Per slot, per region: Corruption for a region of a sealed slot whose seal
  // record or slot header does not validate; with verify, the result of
  // VerifyRegion for the sealed regions that do; OK otherwise. Same shape as
  // inventory.
  std::vector<std::vector<Status>> verified;
};

// Names of `job`'s segments in the segment directory (/dev/shm, or MEMENTO_SHM_DIR), sorted.
// InvalidArgument for a bad job id.
Result<std::vector<std::string>> ListJobSegments(const std::string& job);

// Attaches read-only to each of `job`'s segments and reports it; with
// `verify` also recomputes every sealed region's crc32c (one pass over the
// data). A bad segment is reported in its SegmentReport, not as an error.
Result<std::vector<SegmentReport>> InspectJob(const std::string& job, bool verify);

// Unlinks every segment of `job` that this user owns; returns the names
// removed. One that another user owns is left alone (a job id is not per
// user, and root could unlink anyone's) and named in `others` (what the
// owner's uid is) when given. One that cannot be removed does not stop the
// others: the error then names every one removed and every one not.
// With keep_in_use, a segment a running process holds (a live job's store)
// is left alone too, and named with that process's pid in `in_use` when
// given, else in `others`.
Result<std::vector<std::string>> CleanJob(const std::string& job,
                                          std::vector<std::string>* others = nullptr,
                                          bool keep_in_use = false,
                                          std::vector<std::string>* in_use = nullptr);

// Human-readable multi-line rendering of reports (what `memento inspect` prints).
std::string FormatReports(const std::vector<SegmentReport>& reports);

}  // namespace memento::runtime
