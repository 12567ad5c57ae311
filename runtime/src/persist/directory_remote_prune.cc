// DirectoryRemoteStore::Prune: which persisted versions go, and the files
// of other runs that a kept version's folder may hold.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <set>
#include <tuple>

#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/log.h"
#include "persist/remote_files.h"

namespace memento::runtime {

using remote_files::AgeSeconds;
using remote_files::FsyncDir;
using remote_files::IoErr;
using remote_files::IsStaleTemp;
using remote_files::kManifestName;
using remote_files::ListDir;
using remote_files::ParseVersionDir;

void DirectoryRemoteStore::RemoveForeignRankFiles(uint64_t version,
                                                  const std::vector<std::string>& files,
                                                  Status* first_error) {
  Result<RemoteManifest> manifest = ReadManifest(version);
  if (!manifest.ok()) return;  // changed since ListComplete; the next Prune looks again
  std::set<std::string> named;
  for (const RankFileInfo& r : manifest->ranks) named.insert(r.file);
  const std::string dir = VersionDir(version);
  for (const auto& f : files) {
    const std::string suffix = options_.format ? options_.format->RankFileSuffix() : ".mck";
    const bool rank_file = f.rfind("rank-", 0) == 0 && f.size() > 5 + suffix.size() &&
                           f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!rank_file || named.count(f)) continue;
    // Another run's file of this version number: it may still be writing
    // it (its manifest would then replace this one); it goes once idle.
    struct stat st;
    const std::string path = dir + "/" + f;
    if (stat(path.c_str(), &st) != 0 || AgeSeconds(st) <= options_.stale_temp_seconds) continue;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      if (first_error->ok()) *first_error = IoErr("unlink", path, errno);
      continue;
    }
    Log(LogLevel::kDebug, "remote: removed " + path + " (not in the manifest of version " +
                              std::to_string(version) + ")");
  }
}

std::vector<uint64_t> DirectoryRemoteStore::RecentlyCompleted(const std::vector<uint64_t>& complete,
                                                               int keep) {
  // As a restore picks them: by run (lineage ids grow with the time a run
  // started), then number, so that a run that reuses the job id with lower
  // step numbers keeps its own versions instead of losing them to an older
  // run's higher numbers, and a version just published is never the one
  // pruned (a manifest's time is the writing client's clock, which may lag
  // the clock that wrote the older ones). Versions that record no run
  // (written before lineages were) go by manifest time, oldest run first.
  struct Age {
    uint64_t lineage;
    int64_t order;  // the version, or the manifest's time for lineage 0
    uint64_t version;
    bool operator<(const Age& o) const {
      return std::tie(lineage, order, version) < std::tie(o.lineage, o.order, o.version);
    }
  };
  std::vector<Age> by_age;
  for (uint64_t v : complete) {
    Result<RemoteManifest> manifest = ReadManifest(v);
    // A manifest that cannot be read now counts as the newest (kept).
    if (!manifest.ok()) {
      by_age.push_back({std::numeric_limits<uint64_t>::max(), 0, v});
      continue;
    }
    int64_t order = static_cast<int64_t>(v);
    struct stat st;
    if (manifest->lineage == 0) {
      order = std::numeric_limits<int64_t>::max();
      if (stat(ManifestPath(v).c_str(), &st) == 0) {
        order = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      }
    }
    by_age.push_back({manifest->lineage, order, v});
  }
  std::sort(by_age.begin(), by_age.end());
  std::vector<uint64_t> kept;
  for (size_t i = by_age.size() - std::min(by_age.size(), static_cast<size_t>(keep));
       i < by_age.size(); ++i) {
    kept.push_back(by_age[i].version);
  }
  return kept;
}

Status DirectoryRemoteStore::RemoveVersion(uint64_t v, const std::vector<std::string>& files,
                                           bool is_complete) {
  const std::string dir = VersionDir(v);
  // A complete version takes its manifest's files with it; any other file
  // (another run's rank file or temporary of this version number, maybe
  // being written now) only once idle, as in Prune.
  std::set<std::string> named;
  if (is_complete) {
    Result<RemoteManifest> manifest = ReadManifest(v);
    if (!manifest.ok()) return Status::Ok();  // changed since ListComplete; the next Prune looks
    for (const RankFileInfo& r : manifest->ranks) named.insert(r.file);
    for (const std::string& f : FormatFiles()) named.insert(f);
  }
  // The format's files and the manifest first: the version stops being
  // complete (for memento and for the format's readers) atomically.
  MEMENTO_RETURN_IF_ERROR(RemoveFormatFiles(v));
  if (unlink((dir + "/" + kManifestName).c_str()) == 0 && options_.fsync) {
    MEMENTO_RETURN_IF_ERROR(FsyncDir(dir));
  }
  Status first_error;
  bool emptied = true;
  for (const auto& f : files) {
    if (f == kManifestName) continue;
    struct stat st;
    const std::string path = dir + "/" + f;
    if (is_complete && !named.count(f) && stat(path.c_str(), &st) == 0 &&
        AgeSeconds(st) <= options_.stale_temp_seconds) {
      emptied = false;
      continue;
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      if (first_error.ok()) first_error = IoErr("unlink", path, errno);
      emptied = false;
    }
  }
  if (emptied && rmdir(dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY) {
    if (first_error.ok()) first_error = IoErr("rmdir", dir, errno);
  }
  Log(LogLevel::kDebug, "remote: pruned version " + std::to_string(v));
  return first_error;
}

Status DirectoryRemoteStore::DiscardUnpublished(uint64_t version, uint64_t lineage,
                                                const std::vector<int>& ranks) {
  std::set<std::string> named;
  if (Result<RemoteManifest> manifest = ReadManifest(version); manifest.ok()) {
    for (const RankFileInfo& r : manifest->ranks) named.insert(r.file);
  }
  Status first_error;
  bool removed = false;
  for (int rank : ranks) {
    const std::string path = RankFilePath(version, rank, lineage);
    if (named.count(path.substr(path.rfind('/') + 1))) continue;
    if (unlink(path.c_str()) == 0) {
      removed = true;
    } else if (errno != ENOENT && first_error.ok()) {
      first_error = IoErr("unlink", path, errno);
    }
  }
  if (!removed) return first_error;
  // The folder goes with its last file (rmdir keeps one that holds others').
  if (rmdir(VersionDir(version).c_str()) != 0 && options_.fsync) {
    Status synced = FsyncDir(VersionDir(version));
    if (first_error.ok()) first_error = synced;
  } else if (options_.fsync) {
    Status synced = FsyncDir(job_dir_);
    if (first_error.ok()) first_error = synced;
  }
  Log(LogLevel::kInfo, "remote: removed the files of unpublished version " +
                           std::to_string(version));
  return first_error;
}

Status DirectoryRemoteStore::Prune(int keep) {
  if (keep < 1) return Status::InvalidArgument("Prune: keep " + std::to_string(keep) + " < 1");
  MEMENTO_ASSIGN_OR_RETURN(std::vector<uint64_t> complete, ListComplete());
  const std::vector<uint64_t> kept = RecentlyCompleted(complete, keep);
  MEMENTO_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(job_dir_));
  // One version that cannot be removed does not stop the others: the first
  // error is returned at the end.
  Status first_error;
  auto failed = [&](Status s) {
    if (first_error.ok()) first_error = std::move(s);
  };
  for (const auto& n : names) {
    uint64_t v = 0;
    if (!ParseVersionDir(n, &v)) continue;
    const std::string dir = job_dir_ + "/" + n;
    const bool is_complete = std::find(complete.begin(), complete.end(), v) != complete.end();
    const bool is_kept = std::find(kept.begin(), kept.end(), v) != kept.end();
    Result<std::vector<std::string>> listed = ListDir(dir);
    if (!listed.ok()) {
      failed(listed.status());
      continue;
    }
    const std::vector<std::string>& files = *listed;
    bool remove = is_complete && !is_kept;
    if (!is_complete) {
      // A version with a manifest that did not validate here (a read error,
      // a format this build does not read, damage) may be a committed one:
      // it is never pruned, only reported. One without a manifest may still
      // be written by other ranks (of this run or of another run under the
      // same job id): it goes only once nothing in it has changed for
      // stale_temp_seconds.
      struct stat st;
      if (lstat(ManifestPath(v).c_str(), &st) == 0 || errno != ENOENT) {
        Log(LogLevel::kWarn, "remote: not pruning version " + std::to_string(v) +
                                 ": it has a manifest but is not complete (see the warning "
                                 "above); remove " +
                                 dir + " by hand once it is not needed");
        continue;
      }
      double newest_age = stat(dir.c_str(), &st) == 0 ? AgeSeconds(st) : 0;
      for (const auto& f : files) {
        if (stat((dir + "/" + f).c_str(), &st) == 0) newest_age = std::min(newest_age, AgeSeconds(st));
      }
      remove = newest_age > options_.stale_temp_seconds;
    }
    if (remove) {
      failed(RemoveVersion(v, files, is_complete));
      continue;
    }
    if (is_complete) RemoveForeignRankFiles(v, files, &first_error);
    for (const auto& f : files) {
      if (IsStaleTemp(dir, f, options_.stale_temp_seconds)) {
        if (unlink((dir + "/" + f).c_str()) != 0 && errno != ENOENT) {
          failed(IoErr("unlink", dir + "/" + f, errno));
          continue;
        }
        Log(LogLevel::kDebug, "remote: removed stale temporary " + dir + "/" + f);
      }
    }
  }
  if (options_.fsync) {
    struct stat st;
    if (stat(job_dir_.c_str(), &st) == 0) {
      if (Status s = FsyncDir(job_dir_); !s.ok()) failed(s);
    }
  }
  return first_error;
}

}  // namespace memento::runtime
