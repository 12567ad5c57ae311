// DirectoryRemoteStore: RemoteStore over a directory (a local disk or a shared
// file system such as NFS/Lustre in production).
//
// Layout under <root>/<job>/:
//   v<version, 20 digits>/rank-<rank, 6 digits>.<lineage, 16 hex>.mck
//                                                      one file per rank
//                                                      (rank-<rank>.mck when
//                                                      no lineage is given;
//                                                      the Checkpointer's
//                                                      "rank" is a place in its
//                                                      layout, node * lanes +
//                                                      lane)
//   v<version, 20 digits>/MANIFEST                     written last
// The lineage in the name keeps a run that reuses the job id and a version
// number from overwriting the other run's files of that version: the old
// version stays complete until the new manifest replaces the old one.
//   FINISHED                                           the finished mark (text:
//                                                      "memento-finished 1", job,
//                                                      lineage, version, time, crc;
//                                                      WriteFinished)
//   *.tmp.<host>.<pid>.<n>                             files being written
// Every file is written to a temporary name in the same folder, fsynced,
// renamed over its final name, and the folder fsynced, so a crash leaves
// either the old state or the new one, plus at worst a temporary file that
// Prune() removes once its writer is dead (same host, pid gone) or it is
// older than `stale_temp_seconds`.
//
// Rank file format (little-endian): a file header {magic "MCKRANK1", format,
// job id, version, rank, entry count, header crc32c}, then per entry a record
// {magic, name, EntryLayout, bytes, payload crc32c, record crc32c} followed by
// the payload; a trailer {magic, crc32c of everything before it}. The
// manifest is text ("memento-manifest 1", job, version, world size, an
// optional "lineage <16 hex digits>" line, one "rank file bytes crc" line per
// rank, "crc <crc32c of the lines above>").
//
// With Options::format set, the rank files are that format's
// (rank-<rank>.<lineage><suffix>; e.g. torch.distributed.checkpoint's, from
// the torch adapter) and the format's own files of a version are written
// just before its manifest; everything else stays as described here.
//
// Thread-safety: as RemoteStore; the object holds no mutable state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memento/runtime/remote_format.h"
#include "memento/runtime/remote_store.h"

namespace memento::runtime {

class DirectoryRemoteStore : public RemoteStore {
 public:
  struct Options {
    // Temporary files older than this are stale even if their writer cannot
    // be checked (another host). Default one hour.
    double stale_temp_seconds = 3600.0;
    // fsync files and folders (off only in benchmarks measuring its cost).
    bool fsync = true;
    // Benchmarks: > 0 paces the writes of each rank file to this many bytes
    // per second, a rank's share of an emulated shared file system.
    double emulated_write_bytes_per_s = 0;
    // The rank files' format; null: memento's own (above).
    std::shared_ptr<RemoteFormat> format;
  };

  // The checked way to make one: `root` resolved against the working
  // directory once, here, if relative; then CheckRoot(). InvalidArgument
  // naming the path and the reason (a file, /dev/null, /proc/self, a missing
  // parent, a read-only file system) or a bad job id.
  static Result<std::shared_ptr<DirectoryRemoteStore>> Open(std::string root, std::string job);
  static Result<std::shared_ptr<DirectoryRemoteStore>> Open(std::string root, std::string job,
                                                            Options options);

  // Writes `bytes` to `path` under a temporary name, fsyncs (when `fsync`),
  // renames and fsyncs the folder: the old file or the new one, never a part.
  static Status WriteFileAtomically(const std::string& path, const std::string& bytes,
                                    bool fsync);

  // `root` itself if absolute, else <working directory>/<root>.
  static Result<std::string> ResolveRoot(const std::string& root);

  // OK when `root` (absolute) is a directory in which this process can create
  // and write a file (probed with a temporary file, removed again). A missing
  // `root` is created when its parent is an existing directory; the parent is
  // never created. Else InvalidArgument naming the path and the reason.
  static Status CheckRoot(const std::string& root);

  // Stores job `job`'s versions under `root`/`job` (created on first write).
  // Unchecked: prefer Open().
  DirectoryRemoteStore(std::string root, std::string job);
  DirectoryRemoteStore(std::string root, std::string job, Options options);

  // <root>/<job>
  const std::string& job_dir() const { return job_dir_; }
  // <root>/<job>/v<version> and the final path of a rank file / the manifest.
  std::string VersionDir(uint64_t version) const;
  std::string RankFilePath(uint64_t version, int rank, uint64_t lineage = 0) const;
  // The path of rank `rank`'s file as the manifest of `version` names it
  // (NotFound / Corruption as ReadManifest; InvalidArgument for a rank the
  // version does not have).
  Result<std::string> RankFileOf(uint64_t version, int rank);
  std::string ManifestPath(uint64_t version) const;

  std::string Describe() const override;
  using RemoteStore::WriteRankFile;
  Result<RankFileInfo> WriteRankFile(uint64_t version, int rank,
                                     const std::vector<RemoteEntrySource>& entries,
                                     uint64_t lineage) override;
  Status CheckRankFiles(uint64_t version, const std::vector<RankFileInfo>& ranks) override;
  using RemoteStore::WriteManifest;
  Status WriteManifest(uint64_t version, int world_size, const std::vector<RankFileInfo>& ranks,
                       uint64_t lineage) override;
  Result<std::vector<uint64_t>> ListComplete() override;
  Result<std::optional<uint64_t>> NewestComplete() override;
  Result<RemoteManifest> ReadManifest(uint64_t version) override;
  Result<std::vector<RemoteEntryInfo>> ListEntries(uint64_t version, int rank) override;
  Status ReadRankFile(uint64_t version, int rank,
                      const std::vector<RemoteEntryTarget>& targets) override;
  // Keeps the `keep` most recently completed versions (by manifest time,
  // then number, so a run that reuses the job id with lower step numbers
  // keeps its own), removes the other complete ones, and removes a version
  // without a manifest only when nothing in its folder changed for
  // stale_temp_seconds (it may still be being written). A version whose
  // manifest is there but does not validate (a read error, another format,
  // damage) is never removed, only warned about. Rank files a kept version's
  // manifest does not name (another run's, of the same number) go once idle
  // for stale_temp_seconds. Every version is visited; the first error is
  // returned.
  Status Prune(int keep) override;
  Status DiscardUnpublished(uint64_t version, uint64_t lineage,
                            const std::vector<int>& ranks) override;
  // <root>/<job>/FINISHED (directory_remote_finished.cc).
  std::string FinishedPath() const;
  Status WriteFinished(const FinishedRun& run) override;
  Result<std::optional<FinishedRun>> ReadFinished() override;
  Status ClearFinished(uint64_t lineage) override;

 private:
  // Removes the rank files in `files` (version `version`'s folder) that its
  // manifest does not name, once idle for stale_temp_seconds.
  void RemoveForeignRankFiles(uint64_t version, const std::vector<std::string>& files,
                              Status* first_error);
  // The path of `manifest`'s file of rank `rank` (see RankFileOf).
  Result<std::string> RankFileIn(const RemoteManifest& manifest, int rank) const;
  Result<RankFileInfo> WriteRankFileIn(uint64_t version, int rank,
                                       const std::vector<RemoteEntrySource>& entries,
                                       uint64_t lineage, bool created_job);
  // Removes version `version`'s manifest when it names the rank file at
  // `path`, which is about to be replaced (the version is persisted again).
  Status WithdrawManifestNaming(uint64_t version, const std::string& path);
  // The `keep` newest of `complete`, as a restore orders them: by run, then
  // number (by manifest time for versions that record no run).
  std::vector<uint64_t> RecentlyCompleted(const std::vector<uint64_t>& complete, int keep);
  // Removes version `version`'s folder (a Prune decided): the format's files
  // and the manifest first, then `files` (those of other runs only once idle).
  Status RemoveVersion(uint64_t version, const std::vector<std::string>& files, bool is_complete);
  // The format's files of a version folder (none for memento's own).
  std::vector<std::string> FormatFiles() const;
  // Removes `version`'s format files (before its manifest goes or is replaced).
  Status RemoveFormatFiles(uint64_t version);

  std::string root_;
  std::string job_;
  std::string job_dir_;
  Options options_;
};

}  // namespace memento::runtime
