// What DirectoryRemoteStore's files share (directory_remote_store.cc, its
// prune and its finished mark): error texts, folder operations, the atomic
// writer of a file (temporary name, fsync, rename, folder fsync) and a
// checked sequential reader. Private to runtime/src/persist.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/remote_format.h"

namespace memento::runtime::remote_files {

constexpr char kManifestName[] = "MANIFEST";
constexpr uint64_t kIoChunk = 4ull << 20;

std::string Errno(int err);
Status IoErr(const std::string& what, const std::string& path, int err);
std::string Hex(uint32_t v);    // 8 hex digits
std::string Hex64(uint64_t v);  // 16 hex digits
// mkdir; OK when it exists. *created (may be null) tells whether it was made.
Status MakeDir(const std::string& path, bool* created);
Status FsyncDir(const std::string& path);
std::string Parent(const std::string& path);

// "v<20 digits>" -> the version.
bool ParseVersionDir(const std::string& name, uint64_t* version);
// The names in `path`, sorted (none when it does not exist).
Result<std::vector<std::string>> ListDir(const std::string& path);
// Who writes this process's temporary files, as far as a pid can be checked:
// "<host>@<pid namespace inode>-<boot id, 8 digits>". Processes that share a
// host name but not a PID namespace (containers on the host's network) differ
// here; "<host>@?" where the namespace cannot be read.
const std::string& WriterId();
// "<final>.tmp.<writer id>.<pid>.<n>": is the writer gone (or the file old)?
// Its pid is checked only when the writer id is this process's (a known one).
bool IsStaleTemp(const std::string& dir, const std::string& name, double stale_seconds);
double AgeSeconds(const struct stat& st);

// Writes a file under a temporary name, fsyncs it, renames it over `path` and
// fsyncs the folder; the temporary file is removed on any failure. Tracks the
// crc32c and size of everything written. bytes_per_s > 0: writes are paced
// to that rate (an emulated file system).
class AtomicFileWriter : public RemoteFileSink {
 public:
  AtomicFileWriter(std::string path, bool sync, double bytes_per_s = 0)
      : path_(std::move(path)), sync_(sync), bytes_per_s_(bytes_per_s) {}
  ~AtomicFileWriter() override;

  Status Open();
  Status Write(const void* data, uint64_t n) override;
  // fsync + rename + folder fsync; after success the file is visible.
  Status Commit();

  uint64_t size() const override { return size_; }
  uint32_t crc() const { return crc_.value(); }

 private:
  std::string path_;
  bool sync_;
  double bytes_per_s_;
  std::chrono::steady_clock::time_point opened_;
  std::string tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
  erasure::Crc32cStream crc_;
};

// Sequential reader of a file with a running crc32c of what was read.
class FileReader {
 public:
  explicit FileReader(std::string path) : path_(std::move(path)) {}
  ~FileReader();
  Status Open();
  // Reads exactly n bytes; Corruption if the file ends first.
  Status Read(void* out, uint64_t n);
  // Moves past n bytes without reading them (crc() then no longer covers
  // the file); Corruption if the file ends first.
  Status Skip(uint64_t n);
  const std::string& path() const { return path_; }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint32_t crc() const { return crc_.value(); }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
  erasure::Crc32cStream crc_;
};

}  // namespace memento::runtime::remote_files
