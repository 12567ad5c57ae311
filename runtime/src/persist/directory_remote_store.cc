#include "memento/runtime/directory_remote_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/config.h"
#include "memento/runtime/log.h"
#include "memento/runtime/node_identity.h"

namespace memento::runtime {
namespace {

using erasure::Crc32c;
using erasure::Crc32cStream;

constexpr char kRankMagic[8] = {'M', 'C', 'K', 'R', 'A', 'N', 'K', '1'};
constexpr uint32_t kRankFormat = 1;
constexpr uint32_t kEntryMagic = 0x31544E45u;    // "ENT1"
constexpr uint32_t kTrailerMagic = 0x444E454Du;  // "MEND"
constexpr char kManifestName[] = "MANIFEST";
constexpr char kManifestFirstLine[] = "memento-manifest 1";
constexpr uint64_t kIoChunk = 4ull << 20;

std::string Errno(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

Status IoErr(const std::string& what, const std::string& path, int err) {
  return Status::IoError(what + " " + path + ": " + Errno(err));
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

std::string Hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status MakeDir(const std::string& path, bool* created) {
  if (mkdir(path.c_str(), 0755) == 0) {
    if (created != nullptr) *created = true;
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::Ok();
  return IoErr("mkdir", path, errno);
}

Status FsyncDir(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoErr("open directory", path, errno);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return IoErr("fsync directory", path, err);
  return Status::Ok();
}

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Writes a file under a temporary name, fsyncs it, renames it over `path` and
// fsyncs the folder; the temporary file is removed on any failure. Tracks the
// crc32c and size of everything written.
class AtomicFileWriter : public RemoteFileSink {
 public:
  // bytes_per_s > 0: writes are paced to that rate (an emulated file system).
  AtomicFileWriter(std::string path, bool sync, double bytes_per_s = 0)
      : path_(std::move(path)), sync_(sync), bytes_per_s_(bytes_per_s) {}
  ~AtomicFileWriter() {
    if (fd_ >= 0) close(fd_);
    if (!tmp_.empty()) unlink(tmp_.c_str());
  }

  Status Open() {
    opened_ = std::chrono::steady_clock::now();
    static std::atomic<uint64_t> counter{0};
    tmp_ = path_ + ".tmp." + HostName() + "." + std::to_string(getpid()) + "." +
           std::to_string(counter++);
    fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      int err = errno;
      tmp_.clear();
      return IoErr("create", path_ + ".tmp.*", err);
    }
    return Status::Ok();
  }

  Status Write(const void* data, uint64_t n) override {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      const uint64_t piece = std::min(n, kIoChunk);
      crc_.Update(p, piece);
      uint64_t done = 0;
      while (done < piece) {
        ssize_t w = ::write(fd_, p + done, piece - done);
        if (w < 0) {
          if (errno == EINTR) continue;
          return IoErr("write", tmp_, errno);
        }
        done += static_cast<uint64_t>(w);
      }
      size_ += piece;
      p += piece;
      n -= piece;
      if (bytes_per_s_ > 0) {
        // Sleeps only once ahead by a millisecond: a sleep per small write
        // would add the timer's slack to every call, not model a link.
        const auto due = opened_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(size_ / bytes_per_s_));
        if (due - std::chrono::steady_clock::now() > std::chrono::milliseconds(1)) {
          std::this_thread::sleep_until(due);
        }
      }
    }
    return Status::Ok();
  }

  // fsync + rename + folder fsync; after success the file is visible.
  Status Commit() {
    if (sync_ && fsync(fd_) != 0) return IoErr("fsync", tmp_, errno);
    if (close(fd_) != 0) {
      fd_ = -1;
      return IoErr("close", tmp_, errno);
    }
    fd_ = -1;
    if (rename(tmp_.c_str(), path_.c_str()) != 0) return IoErr("rename to", path_, errno);
    tmp_.clear();
    if (sync_) MEMENTO_RETURN_IF_ERROR(FsyncDir(Parent(path_)));
    return Status::Ok();
  }

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
  Crc32cStream crc_;
};

// Sequential reader of a file with a running crc32c of what was read.
class FileReader {
 public:
  explicit FileReader(std::string path) : path_(std::move(path)) {}
  ~FileReader() {
    if (fd_ >= 0) close(fd_);
  }
  Status Open() {
    fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      int err = errno;
      if (err == ENOENT) return Status::NotFound("remote file " + path_ + " does not exist");
      return IoErr("open", path_, err);
    }
    struct stat st;
    if (fstat(fd_, &st) != 0) return IoErr("fstat", path_, errno);
    size_ = static_cast<uint64_t>(st.st_size);
    return Status::Ok();
  }
  // Reads exactly n bytes; Corruption if the file ends first.
  Status Read(void* out, uint64_t n) {
    if (n > size_ - pos_) {
      return Status::Corruption("remote file " + path_ + ": truncated at byte " +
                                std::to_string(pos_) + " (needs " + std::to_string(n) +
                                " more, size " + std::to_string(size_) + ")");
    }
    uint8_t* p = static_cast<uint8_t*>(out);
    uint64_t done = 0;
    while (done < n) {
      ssize_t r = ::read(fd_, p + done, std::min(n - done, kIoChunk));
      if (r < 0) {
        if (errno == EINTR) continue;
        return IoErr("read", path_, errno);
      }
      if (r == 0) return Status::Corruption("remote file " + path_ + ": unexpected end");
      done += static_cast<uint64_t>(r);
    }
    crc_.Update(p, n);
    pos_ += n;
    return Status::Ok();
  }
  // Moves past n bytes without reading them (crc() then no longer covers
  // the file); Corruption if the file ends first.
  Status Skip(uint64_t n) {
    if (n > size_ - pos_) {
      return Status::Corruption("remote file " + path_ + ": truncated at byte " +
                                std::to_string(pos_) + " (skips " + std::to_string(n) +
                                " more, size " + std::to_string(size_) + ")");
    }
    if (lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) return IoErr("lseek", path_, errno);
    pos_ += n;
    return Status::Ok();
  }
  const std::string& path() const { return path_; }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint32_t crc() const { return crc_.value(); }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
  Crc32cStream crc_;
};

// Little helpers to build / parse the binary records.
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string EncodeEntryRecord(const RemoteEntrySource& e, uint32_t payload_crc) {
  std::string rec;
  Put<uint32_t>(&rec, kEntryMagic);
  Put<uint32_t>(&rec, static_cast<uint32_t>(e.name.size()));
  Put<uint32_t>(&rec, static_cast<uint32_t>(e.layout.dtype.size()));
  Put<uint32_t>(&rec, static_cast<uint32_t>(e.layout.global_shape.size()));
  Put<uint64_t>(&rec, e.bytes);
  Put<uint32_t>(&rec, payload_crc);
  rec += e.name;
  rec += e.layout.dtype;
  for (const auto* v : {&e.layout.global_shape, &e.layout.shape, &e.layout.offsets}) {
    for (int64_t x : *v) Put<int64_t>(&rec, x);
  }
  Put<uint32_t>(&rec, Crc32c(rec.data(), rec.size()));
  return rec;
}

// Reads and validates one entry record (not its payload).
Status ReadEntryRecord(FileReader& in, int index, RemoteEntryInfo* out) {
  const std::string where = "remote file " + in.path() + " entry " + std::to_string(index);
  uint8_t fixed[28];
  MEMENTO_RETURN_IF_ERROR(in.Read(fixed, sizeof(fixed)));
  uint32_t magic, name_len, dtype_len, ndim, crc;
  uint64_t bytes;
  std::memcpy(&magic, fixed, 4);
  std::memcpy(&name_len, fixed + 4, 4);
  std::memcpy(&dtype_len, fixed + 8, 4);
  std::memcpy(&ndim, fixed + 12, 4);
  std::memcpy(&bytes, fixed + 16, 8);
  std::memcpy(&crc, fixed + 24, 4);
  if (magic != kEntryMagic) return Status::Corruption(where + ": bad record magic");
  if (name_len == 0 || name_len > 1024 || dtype_len > 64 || ndim > 64) {
    return Status::Corruption(where + ": record lengths out of range");
  }
  std::string var(name_len + dtype_len + 24ull * ndim, '\0');
  MEMENTO_RETURN_IF_ERROR(in.Read(var.data(), var.size()));
  uint32_t stored;
  MEMENTO_RETURN_IF_ERROR(in.Read(&stored, 4));
  Crc32cStream c;
  c.Update(fixed, sizeof(fixed));
  c.Update(var.data(), var.size());
  if (c.value() != stored) return Status::Corruption(where + ": record crc mismatch");
  RemoteEntryInfo info;
  info.name = var.substr(0, name_len);
  info.layout.dtype = var.substr(name_len, dtype_len);
  const char* p = var.data() + name_len + dtype_len;
  for (auto* v : {&info.layout.global_shape, &info.layout.shape, &info.layout.offsets}) {
    v->resize(ndim);
    if (ndim > 0) std::memcpy(v->data(), p, 8ull * ndim);
    p += 8ull * ndim;
  }
  info.bytes = bytes;
  info.crc = crc;
  *out = std::move(info);
  return Status::Ok();
}

struct RankHeader {
  std::string job;
  uint64_t version = 0;
  uint32_t rank = 0;
  uint32_t entries = 0;
};

Status ReadRankHeader(FileReader& in, RankHeader* out) {
  const std::string where = "remote file " + in.path();
  char magic[8];
  MEMENTO_RETURN_IF_ERROR(in.Read(magic, 8));
  if (std::memcmp(magic, kRankMagic, 8) != 0) return Status::Corruption(where + ": bad magic");
  uint32_t format, job_len;
  MEMENTO_RETURN_IF_ERROR(in.Read(&format, 4));
  if (format != kRankFormat) {
    return Status::Corruption(where + ": format " + std::to_string(format) + ", expected " +
                              std::to_string(kRankFormat));
  }
  MEMENTO_RETURN_IF_ERROR(in.Read(&job_len, 4));
  if (job_len == 0 || job_len > 64) return Status::Corruption(where + ": job length");
  RankHeader h;
  h.job.resize(job_len);
  MEMENTO_RETURN_IF_ERROR(in.Read(h.job.data(), job_len));
  MEMENTO_RETURN_IF_ERROR(in.Read(&h.version, 8));
  MEMENTO_RETURN_IF_ERROR(in.Read(&h.rank, 4));
  MEMENTO_RETURN_IF_ERROR(in.Read(&h.entries, 4));
  const uint32_t crc_so_far = in.crc();
  uint32_t stored;
  MEMENTO_RETURN_IF_ERROR(in.Read(&stored, 4));
  if (stored != crc_so_far) return Status::Corruption(where + ": header crc mismatch");
  *out = std::move(h);
  return Status::Ok();
}

bool ParseVersionDir(const std::string& name, uint64_t* version) {
  if (name.size() != 21 || name[0] != 'v') return false;
  uint64_t v = 0;
  for (size_t i = 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(name[i] - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;  // not a name this store writes
    v = v * 10 + digit;
  }
  *version = v;
  return true;
}

Result<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return IoErr("opendir", path, errno);
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* e = readdir(d);
    if (e == nullptr) break;
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  const int err = errno;  // a listing cut short must not look complete
  closedir(d);
  if (err != 0) return IoErr("readdir", path, err);
  std::sort(names.begin(), names.end());
  return names;
}

// "<final>.tmp.<host>.<pid>.<n>": is the writer gone (or the file old)?
bool IsStaleTemp(const std::string& dir, const std::string& name, double stale_seconds) {
  const size_t tmp = name.find(".tmp.");
  if (tmp == std::string::npos) return false;
  const std::string path = dir + "/" + name;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  const double age =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      static_cast<double>(st.st_mtime);
  if (age > stale_seconds) return true;
  // host may contain dots: parse pid and counter from the right.
  const size_t last = name.find_last_of('.');
  if (last == std::string::npos || last <= tmp + 5) return false;
  const size_t before = name.find_last_of('.', last - 1);
  if (before == std::string::npos || before <= tmp + 4) return false;
  const std::string host = name.substr(tmp + 5, before - (tmp + 5));
  const std::string pid_text = name.substr(before + 1, last - before - 1);
  if (host != HostName() || pid_text.empty() || pid_text.size() > 9 ||
      pid_text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

double AgeSeconds(const struct stat& st) {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
             .count() -
         static_cast<double>(st.st_mtime);
}

}  // namespace

Result<std::string> DirectoryRemoteStore::ResolveRoot(const std::string& root) {
  if (root.empty()) return Status::InvalidArgument("remote directory: empty path");
  if (root.find('\0') != std::string::npos) {
    return Status::InvalidArgument("remote directory: path contains a NUL byte");
  }
  if (root[0] == '/') return root;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    return IoErr("getcwd (to resolve the relative remote directory", root + ")", errno);
  }
  return std::string(cwd) + "/" + root;
}

Status DirectoryRemoteStore::CheckRoot(const std::string& root) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("remote directory '" + root + "' is unusable: " + why);
  };
  if (root.empty() || root[0] != '/') return bad("not an absolute path");
  struct stat st;
  if (stat(root.c_str(), &st) != 0) {
    if (errno != ENOENT) return bad("stat: " + Errno(errno));
    const std::string parent = Parent(root);
    struct stat pst;
    if (stat(parent.c_str(), &pst) != 0 || !S_ISDIR(pst.st_mode)) {
      return bad("it does not exist and its parent '" + parent +
                 "' is not an existing directory (the parent is never created)");
    }
    if (mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) return bad("mkdir: " + Errno(errno));
    if (Status synced = FsyncDir(parent); !synced.ok()) return bad(synced.message());
    if (stat(root.c_str(), &st) != 0) return bad("stat after mkdir: " + Errno(errno));
  }
  if (!S_ISDIR(st.st_mode)) return bad("not a directory");
  // Write access as the persists will need it (a read-only mount, a
  // pseudo file system such as /proc refuse here, whatever the mode bits say).
  // Unique per check: several threads of one process (ranks of an in-process
  // job, or a Checkpointer per thread) may check the same root at once.
  static std::atomic<uint64_t> probes{0};
  const std::string probe = root + "/.memento-probe." + HostName() + "." +
                            std::to_string(getpid()) + "." + std::to_string(probes++);
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return bad("cannot create a file in it: " + Errno(errno));
  const char byte = 0;
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int write_err = errno;
  close(fd);
  unlink(probe.c_str());
  if (!wrote) return bad("cannot write a file in it: " + Errno(write_err));
  return Status::Ok();
}

Result<std::shared_ptr<DirectoryRemoteStore>> DirectoryRemoteStore::Open(std::string root,
                                                                         std::string job) {
  return Open(std::move(root), std::move(job), Options());
}

Result<std::shared_ptr<DirectoryRemoteStore>> DirectoryRemoteStore::Open(std::string root,
                                                                         std::string job,
                                                                         Options options) {
  if (Status s = ValidateJobId(job); !s.ok()) return s;
  Result<std::string> resolved = ResolveRoot(root);
  if (!resolved.ok()) return resolved.status();
  if (Status s = CheckRoot(*resolved); !s.ok()) return s;
  return std::make_shared<DirectoryRemoteStore>(*resolved, std::move(job), options);
}

DirectoryRemoteStore::DirectoryRemoteStore(std::string root, std::string job)
    : DirectoryRemoteStore(std::move(root), std::move(job), Options()) {}

DirectoryRemoteStore::DirectoryRemoteStore(std::string root, std::string job, Options options)
    : root_(std::move(root)), job_(std::move(job)), options_(options) {
  job_dir_ = root_ + "/" + job_;
}

std::string DirectoryRemoteStore::VersionDir(uint64_t version) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "v%020llu", static_cast<unsigned long long>(version));
  return job_dir_ + "/" + buf;
}

std::string DirectoryRemoteStore::RankFilePath(uint64_t version, int rank, uint64_t lineage) const {
  char buf[64];
  if (lineage == 0) {
    std::snprintf(buf, sizeof(buf), "rank-%06d", rank);
  } else {
    std::snprintf(buf, sizeof(buf), "rank-%06d.%016llx", rank,
                  static_cast<unsigned long long>(lineage));
  }
  return VersionDir(version) + "/" + buf + (options_.format ? options_.format->RankFileSuffix() : ".mck");
}

Status DirectoryRemoteStore::WriteFileAtomically(const std::string& path, const std::string& bytes,
                                                 bool fsync) {
  AtomicFileWriter w(path, fsync);
  MEMENTO_RETURN_IF_ERROR(w.Open());
  MEMENTO_RETURN_IF_ERROR(w.Write(bytes.data(), bytes.size()));
  return w.Commit();
}

std::vector<std::string> DirectoryRemoteStore::FormatFiles() const {
  return options_.format ? options_.format->VersionFiles() : std::vector<std::string>{};
}

Status DirectoryRemoteStore::RemoveFormatFiles(uint64_t version) {
  bool removed = false;
  for (const std::string& f : FormatFiles()) {
    const std::string path = VersionDir(version) + "/" + f;
    if (unlink(path.c_str()) == 0) {
      removed = true;
    } else if (errno != ENOENT) {
      return IoErr("unlink", path, errno);
    }
  }
  if (removed && options_.fsync) return FsyncDir(VersionDir(version));
  return Status::Ok();
}

Result<std::string> DirectoryRemoteStore::RankFileOf(uint64_t version, int rank) {
  MEMENTO_ASSIGN_OR_RETURN(RemoteManifest manifest, ReadManifest(version));
  return RankFileIn(manifest, rank);
}

Result<std::string> DirectoryRemoteStore::RankFileIn(const RemoteManifest& manifest,
                                                     int rank) const {
  const uint64_t version = manifest.version;
  if (rank < 0 || rank >= manifest.world_size) {
    return Status::InvalidArgument("remote version " + std::to_string(version) + " has " +
                                   std::to_string(manifest.world_size) + " ranks, not rank " +
                                   std::to_string(rank));
  }
  const std::string& file = manifest.ranks[rank].file;
  if (file.empty() || file.find('/') != std::string::npos) {
    return Status::Corruption("remote version " + std::to_string(version) + " rank " +
                              std::to_string(rank) + ": bad file name '" + file + "'");
  }
  return VersionDir(version) + "/" + file;
}

std::string DirectoryRemoteStore::ManifestPath(uint64_t version) const {
  return VersionDir(version) + "/" + kManifestName;
}

std::string DirectoryRemoteStore::Describe() const { return "dir:" + job_dir_; }

Result<RankFileInfo> DirectoryRemoteStore::WriteRankFile(
    uint64_t version, int rank, const std::vector<RemoteEntrySource>& entries, uint64_t lineage) {
  MEMENTO_RETURN_IF_ERROR(ValidateJobId(job_));
  if (rank < 0) return Status::InvalidArgument("WriteRankFile: rank " + std::to_string(rank));
  for (const auto& e : entries) {
    if (e.name.empty() || e.name.size() > 1024) {
      return Status::InvalidArgument("WriteRankFile: entry name '" + e.name +
                                     "' must have 1..1024 bytes");
    }
    if (e.bytes > 0 && e.data == nullptr) {
      return Status::InvalidArgument("WriteRankFile: entry '" + e.name + "' has no data");
    }
    Status s = e.layout.Validate();
    if (!s.ok()) return s.WithContext("WriteRankFile: entry '" + e.name + "'");
  }
  bool created_root = false;
  bool created_job = false;
  bool created_version = false;
  MEMENTO_RETURN_IF_ERROR(MakeDir(root_, &created_root));
  MEMENTO_RETURN_IF_ERROR(MakeDir(job_dir_, &created_job));
  // A folder this call created is durable only once its parent is synced.
  if (options_.fsync && created_root) MEMENTO_RETURN_IF_ERROR(FsyncDir(Parent(root_)));
  // Another rank whose write failed removes the version folder it made
  // while it is still empty (below), which may fall between this call's
  // mkdir and its first file: the folder is then made again, a few times at
  // most, instead of this rank failing on a folder that is gone.
  Result<RankFileInfo> written = Status::Internal("not written");
  for (int attempt = 0; attempt < 3; ++attempt) {
    MEMENTO_RETURN_IF_ERROR(MakeDir(VersionDir(version), &created_version));
    written = WriteRankFileIn(version, rank, entries, lineage, created_job);
    struct stat st;
    if (written.ok() || stat(VersionDir(version).c_str(), &st) == 0) break;
  }
  if (!written.ok() && created_version) {
    // Never leave an empty version folder behind; rmdir fails (and keeps it)
    // when another rank's file is already in it.
    rmdir(VersionDir(version).c_str());
  }
  return written;
}

Result<RankFileInfo> DirectoryRemoteStore::WriteRankFileIn(
    uint64_t version, int rank, const std::vector<RemoteEntrySource>& entries, uint64_t lineage,
    bool created_job) {
  if (options_.fsync) MEMENTO_RETURN_IF_ERROR(FsyncDir(job_dir_));
  if (options_.fsync && created_job) MEMENTO_RETURN_IF_ERROR(FsyncDir(root_));

  const std::string path = RankFilePath(version, rank, lineage);
  MEMENTO_RETURN_IF_ERROR(WithdrawManifestNaming(version, path));
  AtomicFileWriter w(path, options_.fsync, options_.emulated_write_bytes_per_s);
  MEMENTO_RETURN_IF_ERROR(w.Open());
  if (options_.format) {
    MEMENTO_RETURN_IF_ERROR(
        options_.format->WriteRankFile({job_, version, rank, path}, entries, &w));
    MEMENTO_RETURN_IF_ERROR(w.Commit());
    Log(LogLevel::kDebug, "remote: wrote " + path + " (" + std::to_string(w.size()) + " bytes, " +
                              options_.format->Name() + ")");
    return RankFileInfo{rank, path.substr(path.find_last_of('/') + 1), w.size(), w.crc()};
  }
  std::string header(kRankMagic, 8);
  Put<uint32_t>(&header, kRankFormat);
  Put<uint32_t>(&header, static_cast<uint32_t>(job_.size()));
  header += job_;
  Put<uint64_t>(&header, version);
  Put<uint32_t>(&header, static_cast<uint32_t>(rank));
  Put<uint32_t>(&header, static_cast<uint32_t>(entries.size()));
  Put<uint32_t>(&header, Crc32c(header.data(), header.size()));
  MEMENTO_RETURN_IF_ERROR(w.Write(header.data(), header.size()));
  for (const auto& e : entries) {
    const uint32_t crc = Crc32c(e.data, e.bytes);
    if (e.crc && *e.crc != crc) {
      return Status::Corruption("WriteRankFile: entry '" + e.name + "' of v" +
                                std::to_string(version) +
                                " fails its sealed crc32c (its bytes changed since they were "
                                "sealed); not persisted");
    }
    const std::string rec = EncodeEntryRecord(e, crc);
    MEMENTO_RETURN_IF_ERROR(w.Write(rec.data(), rec.size()));
    if (e.bytes > 0) MEMENTO_RETURN_IF_ERROR(w.Write(e.data, e.bytes));
  }
  std::string trailer;
  Put<uint32_t>(&trailer, kTrailerMagic);
  Put<uint32_t>(&trailer, w.crc());
  MEMENTO_RETURN_IF_ERROR(w.Write(trailer.data(), trailer.size()));
  MEMENTO_RETURN_IF_ERROR(w.Commit());
  RankFileInfo info;
  info.rank = rank;
  info.file = path.substr(path.find_last_of('/') + 1);
  info.bytes = w.size();
  info.crc = w.crc();
  Log(LogLevel::kDebug, "remote: wrote " + path + " (" + std::to_string(info.bytes) + " bytes)");
  return info;
}

// A run persists a version number it persisted before when a restore passed
// over that version (a read error, say) and the job trained to it again. The
// rank files then have the same names, and a complete manifest naming them
// would stay visible while they are replaced one by one: a crash in between
// leaves a "complete" version whose files fail its crcs. The manifest is
// removed first, so the version is at every moment the old complete one,
// invisible, or the new complete one. A manifest of another run names other
// files and stays.
Status DirectoryRemoteStore::WithdrawManifestNaming(uint64_t version, const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::Ok();  // the usual case: a new file
  Result<RemoteManifest> manifest = ReadManifest(version);
  if (!manifest.ok()) return Status::Ok();  // nothing complete to withdraw
  const std::string file = path.substr(path.find_last_of('/') + 1);
  bool names = false;
  for (const RankFileInfo& r : manifest->ranks) names = names || r.file == file;
  if (!names) return Status::Ok();
  const std::string manifest_path = ManifestPath(version);
  if (unlink(manifest_path.c_str()) != 0 && errno != ENOENT) {
    return IoErr("unlink", manifest_path, errno);
  }
  MEMENTO_RETURN_IF_ERROR(RemoveFormatFiles(version));
  Log(LogLevel::kInfo, "remote: v" + std::to_string(version) +
                           " is persisted again; its earlier manifest is withdrawn until the "
                           "new one");
  if (options_.fsync) MEMENTO_RETURN_IF_ERROR(FsyncDir(VersionDir(version)));
  return Status::Ok();
}

Status DirectoryRemoteStore::CheckRankFiles(uint64_t version,
                                            const std::vector<RankFileInfo>& ranks) {
  for (const auto& r : ranks) {
    if (r.file.empty() || r.file.find('/') != std::string::npos) {
      return Status::InvalidArgument("remote version " + std::to_string(version) + " rank " +
                                     std::to_string(r.rank) + ": bad file name '" + r.file + "'");
    }
    const std::string path = VersionDir(version) + "/" + r.file;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::NotFound("remote rank file " + path + " is missing");
      return IoErr("stat", path, errno);
    }
    if (static_cast<uint64_t>(st.st_size) != r.bytes) {
      return Status::Corruption("remote rank file " + path + " has " + std::to_string(st.st_size) +
                                " bytes, expected " + std::to_string(r.bytes));
    }
  }
  return Status::Ok();
}

Status DirectoryRemoteStore::WriteManifest(uint64_t version, int world_size,
                                           const std::vector<RankFileInfo>& ranks,
                                           uint64_t lineage) {
  if (world_size < 1 || ranks.size() != static_cast<size_t>(world_size)) {
    return Status::InvalidArgument("WriteManifest: world size " + std::to_string(world_size) +
                                   " with " + std::to_string(ranks.size()) + " rank files");
  }
  for (int r = 0; r < world_size; ++r) {
    if (ranks[r].rank != r) {
      return Status::InvalidArgument("WriteManifest: ranks[" + std::to_string(r) + "].rank is " +
                                     std::to_string(ranks[r].rank));
    }
  }
  MEMENTO_RETURN_IF_ERROR(CheckRankFiles(version, ranks));
  if (options_.format) {
    RemoteManifest m{job_, version, lineage, world_size, ranks};
    MEMENTO_RETURN_IF_ERROR(
        options_.format->WriteVersionFiles(VersionDir(version), m, options_.fsync)
            .WithContext("remote: the " + options_.format->Name() + " files of version " +
                         std::to_string(version)));
  }
  std::ostringstream os;
  os << kManifestFirstLine << "\n"
     << "job " << job_ << "\n"
     << "version " << version << "\n"
     << "world_size " << world_size << "\n";
  if (lineage != 0) os << "lineage " << Hex64(lineage) << "\n";
  for (const auto& r : ranks) {
    os << "rank " << r.rank << " " << r.file << " " << r.bytes << " " << Hex(r.crc) << "\n";
  }
  std::string text = os.str();
  text += "crc " + Hex(Crc32c(text.data(), text.size())) + "\n";
  AtomicFileWriter w(ManifestPath(version), options_.fsync);
  MEMENTO_RETURN_IF_ERROR(w.Open());
  MEMENTO_RETURN_IF_ERROR(w.Write(text.data(), text.size()));
  MEMENTO_RETURN_IF_ERROR(w.Commit());
  Log(LogLevel::kInfo,
      "remote: version " + std::to_string(version) + " complete in " + VersionDir(version));
  return Status::Ok();
}

Result<RemoteManifest> DirectoryRemoteStore::ReadManifest(uint64_t version) {
  const std::string path = ManifestPath(version);
  FileReader in(path);
  MEMENTO_RETURN_IF_ERROR(in.Open());
  if (in.size() > (64ull << 20)) return Status::Corruption("manifest " + path + " too large");
  std::string text(in.size(), '\0');
  MEMENTO_RETURN_IF_ERROR(in.Read(text.data(), text.size()));
  auto bad = [&](const std::string& why) {
    return Status::Corruption("manifest " + path + ": " + why);
  };
  const size_t crc_pos = text.rfind("crc ");
  if (crc_pos == std::string::npos || text.back() != '\n') return bad("no crc line");
  if (text.substr(crc_pos) != "crc " + Hex(Crc32c(text.data(), crc_pos)) + "\n") {
    return bad("crc mismatch");
  }
  std::istringstream is(text.substr(0, crc_pos));
  std::string line;
  std::getline(is, line);
  if (line != kManifestFirstLine) return bad("unknown first line '" + line + "'");
  RemoteManifest m;
  std::string key;
  unsigned long long v = 0;
  if (!(is >> key >> m.job) || key != "job") return bad("job line");
  if (!(is >> key >> v) || key != "version") return bad("version line");
  m.version = v;
  if (!(is >> key >> m.world_size) || key != "world_size" || m.world_size < 1) {
    return bad("world_size line");
  }
  // Optional (manifests written before lineages existed have none).
  const std::streampos before_lineage = is.tellg();
  std::string lineage_hex;
  if (is >> key >> lineage_hex && key == "lineage") {
    if (lineage_hex.size() != 16 ||
        lineage_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad("lineage line");
    }
    m.lineage = std::stoull(lineage_hex, nullptr, 16);
  } else {
    is.clear();
    is.seekg(before_lineage);
  }
  if (m.job != job_) return bad("belongs to job '" + m.job + "', not '" + job_ + "'");
  if (m.version != version) return bad("names version " + std::to_string(m.version));
  for (int r = 0; r < m.world_size; ++r) {
    RankFileInfo info;
    std::string crc_hex;
    unsigned long long bytes = 0;
    if (!(is >> key >> info.rank >> info.file >> bytes >> crc_hex) || key != "rank" ||
        info.rank != r || crc_hex.size() != 8 ||
        crc_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad("rank line " + std::to_string(r));
    }
    info.bytes = bytes;
    info.crc = static_cast<uint32_t>(std::stoul(crc_hex, nullptr, 16));
    m.ranks.push_back(std::move(info));
  }
  if (is >> key) return bad("trailing text");
  return m;
}

Result<std::vector<uint64_t>> DirectoryRemoteStore::ListComplete() {
  MEMENTO_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(job_dir_));
  std::vector<uint64_t> complete;
  for (const auto& n : names) {
    uint64_t v = 0;
    if (!ParseVersionDir(n, &v)) continue;
    Result<RemoteManifest> m = ReadManifest(v);
    if (!m.ok()) {
      if (m.status().code() != StatusCode::kNotFound) {
        Log(LogLevel::kWarn,
            "remote: ignoring version " + std::to_string(v) + ": " + m.status().ToString());
      }
      continue;
    }
    Status files = CheckRankFiles(v, m->ranks);
    if (!files.ok()) {
      Log(LogLevel::kWarn,
          "remote: ignoring version " + std::to_string(v) + ": " + files.ToString());
      continue;
    }
    complete.push_back(v);
  }
  std::sort(complete.begin(), complete.end());
  return complete;
}

Result<std::optional<uint64_t>> DirectoryRemoteStore::NewestComplete() {
  MEMENTO_ASSIGN_OR_RETURN(std::vector<uint64_t> all, ListComplete());
  if (all.empty()) return std::optional<uint64_t>();
  return std::optional<uint64_t>(all.back());
}

Result<std::vector<RemoteEntryInfo>> DirectoryRemoteStore::ListEntries(uint64_t version, int rank) {
  MEMENTO_ASSIGN_OR_RETURN(std::string path, RankFileOf(version, rank));
  if (options_.format) return options_.format->ListEntries({job_, version, rank, path});
  FileReader in(path);
  MEMENTO_RETURN_IF_ERROR(in.Open());
  RankHeader h;
  MEMENTO_RETURN_IF_ERROR(ReadRankHeader(in, &h));
  if (h.job != job_ || h.version != version || h.rank != static_cast<uint32_t>(rank)) {
    return Status::Corruption("remote file " + in.path() + " holds job '" + h.job + "' version " +
                              std::to_string(h.version) + " rank " + std::to_string(h.rank));
  }
  std::vector<RemoteEntryInfo> out;
  for (uint32_t i = 0; i < h.entries; ++i) {
    RemoteEntryInfo info;
    MEMENTO_RETURN_IF_ERROR(ReadEntryRecord(in, static_cast<int>(i), &info));
    // The payload is skipped, not read: a restore reads the file once more
    // anyway (ReadRankFile, which checks every byte).
    if (info.bytes > in.size() - in.pos()) {
      return Status::Corruption("remote file " + in.path() + " entry '" + info.name +
                                "': payload runs past the end");
    }
    MEMENTO_RETURN_IF_ERROR(in.Skip(info.bytes));
    out.push_back(std::move(info));
  }
  return out;
}

Status DirectoryRemoteStore::ReadRankFile(uint64_t version, int rank,
                                          const std::vector<RemoteEntryTarget>& targets) {
  MEMENTO_ASSIGN_OR_RETURN(RemoteManifest manifest, ReadManifest(version));
  MEMENTO_ASSIGN_OR_RETURN(std::string path, RankFileIn(manifest, rank));
  const RankFileInfo& expect = manifest.ranks[rank];
  FileReader in(path);
  MEMENTO_RETURN_IF_ERROR(in.Open());
  const std::string where = "remote file " + in.path();
  if (in.size() != expect.bytes) {
    return Status::Corruption(where + ": " + std::to_string(in.size()) + " bytes, manifest says " +
                              std::to_string(expect.bytes));
  }
  if (options_.format) return options_.format->ReadRankFile({job_, version, rank, path}, targets);
  RankHeader h;
  MEMENTO_RETURN_IF_ERROR(ReadRankHeader(in, &h));
  if (h.job != job_ || h.version != version || h.rank != static_cast<uint32_t>(rank)) {
    return Status::Corruption(where + " holds job '" + h.job + "' version " +
                              std::to_string(h.version) + " rank " + std::to_string(h.rank));
  }
  std::map<std::string, const RemoteEntryTarget*> by_name;
  for (const auto& t : targets) by_name[t.name] = &t;
  std::map<std::string, bool> found;
  std::vector<uint8_t> scratch;
  for (uint32_t i = 0; i < h.entries; ++i) {
    RemoteEntryInfo info;
    MEMENTO_RETURN_IF_ERROR(ReadEntryRecord(in, static_cast<int>(i), &info));
    if (info.bytes > in.size() - in.pos()) {
      return Status::Corruption(where + " entry '" + info.name + "': payload runs past the end");
    }
    auto it = by_name.find(info.name);
    Crc32cStream payload_crc;
    if (it != by_name.end()) {
      if (it->second->capacity != info.bytes) {
        return Status::InvalidArgument(where + " entry '" + info.name + "' has " +
                                       std::to_string(info.bytes) + " bytes, target holds " +
                                       std::to_string(it->second->capacity));
      }
      if (info.bytes == 0) {
        // Nothing to read or hand over.
      } else if (it->second->data != nullptr) {
        MEMENTO_RETURN_IF_ERROR(in.Read(it->second->data, info.bytes));
        payload_crc.Update(it->second->data, info.bytes);
      } else if (it->second->sink) {
        scratch.resize(std::min(info.bytes, kIoChunk));
        for (uint64_t at = 0; at < info.bytes;) {
          const uint64_t piece = std::min(info.bytes - at, kIoChunk);
          MEMENTO_RETURN_IF_ERROR(in.Read(scratch.data(), piece));
          payload_crc.Update(scratch.data(), piece);
          it->second->sink(at, scratch.data(), piece);
          at += piece;
        }
      } else {
        return Status::InvalidArgument(where + " entry '" + info.name +
                                       "': a target with neither data nor sink");
      }
      found[info.name] = true;
    } else {
      uint64_t left = info.bytes;
      scratch.resize(std::min(left, kIoChunk));
      while (left > 0) {
        const uint64_t piece = std::min(left, kIoChunk);
        MEMENTO_RETURN_IF_ERROR(in.Read(scratch.data(), piece));
        payload_crc.Update(scratch.data(), piece);
        left -= piece;
      }
    }
    if (payload_crc.value() != info.crc) {
      return Status::Corruption(where + " entry '" + info.name + "': payload crc32c " +
                                Hex(payload_crc.value()) + ", recorded " + Hex(info.crc));
    }
  }
  const uint32_t body_crc = in.crc();
  uint32_t trailer[2];
  MEMENTO_RETURN_IF_ERROR(in.Read(trailer, sizeof(trailer)));
  if (trailer[0] != kTrailerMagic || trailer[1] != body_crc) {
    return Status::Corruption(where + ": trailer mismatch");
  }
  if (in.pos() != in.size()) return Status::Corruption(where + ": trailing bytes");
  if (in.crc() != expect.crc) {
    return Status::Corruption(where + ": file crc32c " + Hex(in.crc()) + ", manifest says " +
                              Hex(expect.crc));
  }
  for (const auto& t : targets) {
    if (!found.count(t.name)) {
      return Status::NotFound(where + " has no entry '" + t.name + "'");
    }
  }
  return Status::Ok();
}

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

Status DirectoryRemoteStore::Prune(int keep) {
  if (keep < 1) return Status::InvalidArgument("Prune: keep " + std::to_string(keep) + " < 1");
  MEMENTO_ASSIGN_OR_RETURN(std::vector<uint64_t> complete, ListComplete());
  // Keep the `keep` most recently completed versions (manifest time, then
  // number): a run that reuses the job id with lower step numbers keeps its
  // own versions instead of losing them to an older run's higher numbers.
  std::vector<std::pair<int64_t, uint64_t>> by_age;  // (manifest mtime ns, version)
  for (uint64_t v : complete) {
    struct stat st;
    // A manifest that cannot be stat'ed now counts as the newest (kept).
    int64_t mtime = std::numeric_limits<int64_t>::max();
    if (stat(ManifestPath(v).c_str(), &st) == 0) {
      mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    by_age.emplace_back(mtime, v);
  }
  std::sort(by_age.begin(), by_age.end());
  std::vector<uint64_t> kept;
  for (size_t i = by_age.size() - std::min(by_age.size(), static_cast<size_t>(keep));
       i < by_age.size(); ++i) {
    kept.push_back(by_age[i].second);
  }
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
      // A complete version takes its manifest's files with it; any other
      // file (another run's rank file or temporary of this version number,
      // maybe being written now) only once idle, as below.
      std::set<std::string> named;
      if (is_complete) {
        Result<RemoteManifest> manifest = ReadManifest(v);
        if (!manifest.ok()) continue;  // changed since ListComplete; the next Prune looks again
        for (const RankFileInfo& r : manifest->ranks) named.insert(r.file);
        for (const std::string& f : FormatFiles()) named.insert(f);
      }
      // The format's files and the manifest first: the version stops being
      // complete (for memento and for the format's readers) atomically.
      if (Status s = RemoveFormatFiles(v); !s.ok()) {
        failed(s);
        continue;
      }
      if (unlink((dir + "/" + kManifestName).c_str()) == 0 && options_.fsync) {
        if (Status s = FsyncDir(dir); !s.ok()) {
          failed(s);
          continue;
        }
      }
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
          failed(IoErr("unlink", path, errno));
          emptied = false;
        }
      }
      if (emptied && rmdir(dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY) {
        failed(IoErr("rmdir", dir, errno));
      }
      Log(LogLevel::kDebug, "remote: pruned version " + std::to_string(v));
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
