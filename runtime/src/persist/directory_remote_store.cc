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
#include "persist/remote_files.h"

namespace memento::runtime {
namespace {

using erasure::Crc32c;
using erasure::Crc32cStream;
using remote_files::AtomicFileWriter;
using remote_files::Errno;
using remote_files::FileReader;
using remote_files::FsyncDir;
using remote_files::Hex;
using remote_files::Hex64;
using remote_files::IoErr;
using remote_files::kIoChunk;
using remote_files::kManifestName;
using remote_files::ListDir;
using remote_files::MakeDir;
using remote_files::Parent;
using remote_files::ParseVersionDir;

constexpr char kRankMagic[8] = {'M', 'C', 'K', 'R', 'A', 'N', 'K', '1'};
constexpr uint32_t kRankFormat = 1;
constexpr uint32_t kEntryMagic = 0x31544E45u;    // "ENT1"
constexpr uint32_t kTrailerMagic = 0x444E454Du;  // "MEND"
constexpr char kManifestFirstLine[] = "memento-manifest 1";

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
// invisible, or the new complete one. The format's files (DCP's .metadata)
// go before the manifest, as in RemoveVersion: a failure or crash between the
// two leaves the old version complete for memento and unread by the format,
// never a .metadata over rank files being replaced (which DCP would read as
// one checkpoint mixed from two writes), nor a committed version withdrawn by
// a write that then failed. A manifest of another run names other files and
// stays.
Status DirectoryRemoteStore::WithdrawManifestNaming(uint64_t version, const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::Ok();  // the usual case: a new file
  Result<RemoteManifest> manifest = ReadManifest(version);
  if (!manifest.ok()) return Status::Ok();  // nothing complete to withdraw
  const std::string file = path.substr(path.find_last_of('/') + 1);
  bool names = false;
  for (const RankFileInfo& r : manifest->ranks) names = names || r.file == file;
  if (!names) return Status::Ok();
  MEMENTO_RETURN_IF_ERROR(RemoveFormatFiles(version));
  const std::string manifest_path = ManifestPath(version);
  if (unlink(manifest_path.c_str()) != 0 && errno != ENOENT) {
    return IoErr("unlink", manifest_path, errno);
  }
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
  MEMENTO_RETURN_IF_ERROR(WriteFileAtomically(ManifestPath(version), text, options_.fsync));
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

}  // namespace memento::runtime
