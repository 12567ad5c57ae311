// RemoteStore: the tier below memory — persisted versions that survive the loss
// of every node (docs/architecture.md §3 stage 5).
//
// A persisted version is one file per rank plus a manifest. Each rank writes
// its own file (WriteRankFile) from memory buffers — the engine points at the
// sealed slot, never at live training buffers. When every rank's file is in
// place, one rank writes the manifest (WriteManifest); a version is complete,
// and only then visible, when its manifest validates and every rank file it
// names exists with the recorded size. A writer killed at any moment leaves
// no visible partial version. Implementations: DirectoryRemoteStore (a
// directory, e.g. on a shared file system); object stores later.
//
// Thread-safety: implementations must allow concurrent calls for different
// (version, rank) pairs; calls for the same file must not race.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/finished_run.h"
#include "memento/runtime/store_layout.h"

namespace memento::runtime {

// One entry to persist: `bytes` bytes at `data` (not owned; must stay
// unchanged for the duration of the call).
struct RemoteEntrySource {
  std::string name;
  const void* data = nullptr;
  uint64_t bytes = 0;
  EntryLayout layout;
  // When set, the crc32c the bytes must have (the seal of the slot region
  // they are read from): bytes that changed since they were sealed fail the
  // write with Corruption naming the entry, instead of being persisted under
  // a crc of their own that every later check would pass.
  std::optional<uint32_t> crc = std::nullopt;
};

// Where ReadRankFile puts the entry called `name`: `data` holds `capacity`
// bytes (not owned). With `data` null, the entry's bytes are handed to
// `sink` instead, in order, a few MiB at a time as they are read (offset
// within the entry, bytes, length), so that a reader that needs only parts
// of an entry never holds it whole; they have passed no check yet, and the
// call's result says whether the entry's crc32c matched.
struct RemoteEntryTarget {
  std::string name;
  void* data = nullptr;
  uint64_t capacity = 0;
  std::function<void(uint64_t offset, const uint8_t* bytes, uint64_t len)> sink = nullptr;
};

// An entry as recorded in a rank file (no payload).
struct RemoteEntryInfo {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  EntryLayout layout;
};

// A written rank file, as the manifest records it.
struct RankFileInfo {
  int rank = 0;
  std::string file;    // name relative to the version's folder
  uint64_t bytes = 0;  // file size
  uint32_t crc = 0;    // crc32c of the whole file

  bool operator==(const RankFileInfo& o) const {
    return rank == o.rank && file == o.file && bytes == o.bytes && crc == o.crc;
  }
};

struct RemoteManifest {
  std::string job;
  uint64_t version = 0;
  uint64_t lineage = 0;  // the run that wrote it (Checkpointer lineage; 0: none recorded)
  int world_size = 0;
  std::vector<RankFileInfo> ranks;  // indexed by rank
};

class RemoteStore {
 public:
  virtual ~RemoteStore() = default;

  // "dir:/path/job" etc. for logs.
  virtual std::string Describe() const = 0;

  // Writes rank `rank`'s file of `version` from `entries` (in order) for
  // the run `lineage` (0: none recorded) and makes it visible atomically
  // (temp name, fsync, rename, directory fsync). Returns what the manifest
  // needs. An existing file of the same (version, rank, lineage) is replaced
  // atomically; a complete version another lineage wrote under the same
  // number is never touched: it stays complete and intact until this run's
  // manifest replaces its manifest. IoError naming the path on failure; no
  // partial file is ever visible under the final name.
  virtual Result<RankFileInfo> WriteRankFile(uint64_t version, int rank,
                                             const std::vector<RemoteEntrySource>& entries,
                                             uint64_t lineage) = 0;
  Result<RankFileInfo> WriteRankFile(uint64_t version, int rank,
                                     const std::vector<RemoteEntrySource>& entries) {
    return WriteRankFile(version, rank, entries, 0);
  }

  // OK when every rank file of `ranks` exists under its final name with the
  // recorded size; else NotFound / Corruption naming the first bad one.
  virtual Status CheckRankFiles(uint64_t version, const std::vector<RankFileInfo>& ranks) = 0;

  // Writes the manifest of `version` last, atomically, after
  // CheckRankFiles(version, ranks) succeeds. `ranks` must hold world_size
  // entries with rank == index (InvalidArgument otherwise). `lineage` (0:
  // none) is recorded for ReadManifest. Call on one rank.
  virtual Status WriteManifest(uint64_t version, int world_size,
                               const std::vector<RankFileInfo>& ranks, uint64_t lineage) = 0;
  Status WriteManifest(uint64_t version, int world_size, const std::vector<RankFileInfo>& ranks) {
    return WriteManifest(version, world_size, ranks, 0);
  }

  // Complete versions, ascending (see the file comment; cost: one manifest
  // read and one stat per rank file per version).
  virtual Result<std::vector<uint64_t>> ListComplete() = 0;

  // The newest complete version, or nullopt when there is none.
  virtual Result<std::optional<uint64_t>> NewestComplete() = 0;

  // The validated manifest of `version` (NotFound / Corruption).
  virtual Result<RemoteManifest> ReadManifest(uint64_t version) = 0;

  // The entries recorded in rank `rank`'s file of `version`, the file the
  // version's manifest names (headers only, validated; no payload read).
  virtual Result<std::vector<RemoteEntryInfo>> ListEntries(uint64_t version, int rank) = 0;

  // Reads rank `rank`'s file of `version` into `targets` by entry name,
  // verifying every header and payload crc32c. The version must have a valid
  // manifest (NotFound / Corruption otherwise), and the file's size and
  // whole-file crc32c must match what the manifest records. Every target must be found
  // (NotFound naming it) and have capacity == the entry's bytes
  // (InvalidArgument); entries without a target are skipped (but their crc is
  // still checked). Corruption naming file and entry on a mismatch; target
  // bytes (and what a sink was given) are then unspecified.
  virtual Status ReadRankFile(uint64_t version, int rank,
                              const std::vector<RemoteEntryTarget>& targets) = 0;

  // Keeps the newest `keep` (>= 1) complete versions and deletes older
  // versions (complete or not) and stale temporary files of dead writers.
  // Never touches a version newer than the newest complete one unless its
  // temporary files are clearly stale (see the implementation).
  virtual Status Prune(int keep) = 0;

  // Removes the files of `version` that run `lineage` wrote for `ranks` when
  // the version's manifest does not name them: what a persist left that
  // failed before its manifest (one rank's full disk, a timeout), whose
  // writers are done. Left alone, they took their space until the stale
  // rule removed them (an hour idle), and on a full disk made every later
  // persist fail as well. A file a manifest names is never touched; OK when
  // there is nothing to remove.
  virtual Status DiscardUnpublished(uint64_t version, uint64_t lineage,
                                    const std::vector<int>& ranks) = 0;

  // The finished mark of the job (Checkpointer::Finish): the newest run that
  // ended normally. Written atomically beside the versions, replacing any
  // earlier mark; never pruned (the versions it refers to are pruned as
  // usual). Call on one rank. IoError naming the path on failure (the old
  // mark, if any, stays).
  virtual Status WriteFinished(const FinishedRun& run) = 0;
  // The mark, or nullopt when there is none; Corruption naming the file when
  // it does not validate, IoError when it cannot be read.
  virtual Result<std::optional<FinishedRun>> ReadFinished() = 0;
  // Removes the mark when it names run `lineage` (a later run resumed it);
  // OK when there is none or it names another run.
  virtual Status ClearFinished(uint64_t lineage) = 0;
};

}  // namespace memento::runtime
