// RemoteFormat: how a DirectoryRemoteStore lays out the bytes of its rank
// files, when they are not memento's own.
//
// The store keeps everything else: version folders, rank file names (with the
// lineage), atomic writes (temporary name, fsync, rename), the MANIFEST that
// makes a version complete, pruning and the finished mark. A format decides
// what a rank file holds (WriteRankFile), reads it back (ListEntries,
// ReadRankFile) and may write files of its own into the version folder before
// the manifest (WriteVersionFiles): torch.distributed.checkpoint's
// `.metadata`, say, which makes the version a checkpoint `dcp.load` reads.
// Those files are withdrawn with the manifest and pruned with the version.
//
// A format must keep memento's guarantees: every entry's crc32c recorded and
// checked on read (Corruption naming the file and the entry), and nothing a
// reader can see before the store makes it visible.
//
// Thread-safety: as RemoteStore (concurrent calls for different rank files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/remote_store.h"

namespace memento::runtime {

// Where a format writes a rank file: a file under its temporary name that the
// store renames once WriteRankFile returned OK.
class RemoteFileSink {
 public:
  virtual ~RemoteFileSink() = default;
  virtual Status Write(const void* data, uint64_t n) = 0;
  // Bytes written so far.
  virtual uint64_t size() const = 0;
};

// Which rank file a call is about.
struct RankFileContext {
  std::string job;
  uint64_t version = 0;
  int rank = 0;        // the file's number (a place in the layout)
  std::string path;    // its final path (reads) or where it will be (writes)
};

class RemoteFormat {
 public:
  virtual ~RemoteFormat() = default;

  // "dcp": for logs and errors.
  virtual std::string Name() const = 0;
  // The rank files' suffix (".distcp"); the store names them
  // rank-<rank>.<lineage><suffix>.
  virtual std::string RankFileSuffix() const = 0;
  // Files of a version folder the format writes itself (".metadata").
  virtual std::vector<std::string> VersionFiles() const = 0;

  // Writes the whole rank file of `entries` to `out`. Checks each entry's
  // bytes against its sealed crc (RemoteEntrySource::crc) as the store does.
  virtual Status WriteRankFile(const RankFileContext& file,
                               const std::vector<RemoteEntrySource>& entries,
                               RemoteFileSink* out) = 0;

  // The entries the rank file at file.path records (no payload read).
  virtual Result<std::vector<RemoteEntryInfo>> ListEntries(const RankFileContext& file) = 0;

  // As RemoteStore::ReadRankFile for the file at file.path, whose size the
  // store checked against the manifest.
  virtual Status ReadRankFile(const RankFileContext& file,
                              const std::vector<RemoteEntryTarget>& targets) = 0;

  // Called on one rank once every rank file of `manifest` is in place, before
  // the store writes the manifest: writes VersionFiles() into `version_dir`,
  // each atomically (DirectoryRemoteStore::WriteFileAtomically).
  virtual Status WriteVersionFiles(const std::string& version_dir,
                                   const RemoteManifest& manifest, bool fsync) = 0;
};

}  // namespace memento::runtime
