// DirectoryRemoteStore's finished mark (remote_store.h): <root>/<job>/FINISHED,
// a text file written to a temporary name, fsynced and renamed into place
// (WriteFileAtomically).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/log.h"
#include "persist/remote_files.h"

namespace memento::runtime {
namespace {

constexpr char kFirstLine[] = "memento-finished 1";

using remote_files::FsyncDir;
using remote_files::Hex;
using remote_files::Hex64;
using remote_files::IoErr;

}  // namespace

std::string DirectoryRemoteStore::FinishedPath() const { return job_dir_ + "/FINISHED"; }

Status DirectoryRemoteStore::WriteFinished(const FinishedRun& run) {
  if (mkdir(job_dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoErr("mkdir", job_dir_, errno);
  }
  std::ostringstream os;
  os << kFirstLine << "\n"
     << "job " << job_ << "\n"
     << "lineage " << Hex64(run.lineage) << "\n"
     << "version " << run.version << "\n"
     << "unix_ns " << run.unix_ns << "\n";
  std::string text = os.str();
  text += "crc " + Hex(erasure::Crc32c(text.data(), text.size())) + "\n";
  MEMENTO_RETURN_IF_ERROR(WriteFileAtomically(FinishedPath(), text, options_.fsync));
  Log(LogLevel::kInfo, "remote: marked run " + Hex64(run.lineage) + " finished at v" +
                           std::to_string(run.version) + " in " + FinishedPath());
  return Status::Ok();
}

Result<std::optional<FinishedRun>> DirectoryRemoteStore::ReadFinished() {
  const std::string path = FinishedPath();
  // The reader of the version files: a FIFO there is refused, not waited on.
  remote_files::FileReader in(path);
  if (Status opened = in.Open(); !opened.ok()) {
    if (opened.code() == StatusCode::kNotFound) return std::optional<FinishedRun>();
    return opened;
  }
  std::string text(std::min<uint64_t>(in.size(), 4097), '\0');
  MEMENTO_RETURN_IF_ERROR(in.Read(text.data(), text.size()));
  auto bad = [&](const std::string& why) {
    return Status::Corruption("finished mark " + path + ": " + why);
  };
  const size_t crc_pos = text.rfind("crc ");
  if (text.size() > 4096 || crc_pos == std::string::npos || text.back() != '\n') {
    return bad("no crc line");
  }
  if (text.substr(crc_pos) != "crc " + Hex(erasure::Crc32c(text.data(), crc_pos)) + "\n") {
    return bad("crc mismatch");
  }
  std::istringstream is(text.substr(0, crc_pos));
  std::string line, key, job, lineage_hex;
  unsigned long long version = 0, unix_ns = 0;
  std::getline(is, line);
  if (line != kFirstLine) return bad("unknown first line '" + line + "'");
  if (!(is >> key >> job) || key != "job") return bad("job line");
  if (job != job_) return bad("belongs to job '" + job + "', not '" + job_ + "'");
  if (!(is >> key >> lineage_hex) || key != "lineage" || lineage_hex.size() != 16 ||
      lineage_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return bad("lineage line");
  }
  if (!(is >> key >> version) || key != "version") return bad("version line");
  if (!(is >> key >> unix_ns) || key != "unix_ns") return bad("unix_ns line");
  FinishedRun run;
  run.lineage = std::stoull(lineage_hex, nullptr, 16);
  run.version = version;
  run.unix_ns = unix_ns;
  return std::optional<FinishedRun>(run);
}

Status DirectoryRemoteStore::ClearFinished(uint64_t lineage) {
  Result<std::optional<FinishedRun>> mark = ReadFinished();
  // A damaged mark names no run this one could resume: removed as well.
  if (mark.ok() && (!mark->has_value() || (*mark)->lineage != lineage)) return Status::Ok();
  if (!mark.ok() && mark.status().code() != StatusCode::kCorruption) return mark.status();
  if (unlink(FinishedPath().c_str()) != 0 && errno != ENOENT) {
    return IoErr("unlink", FinishedPath(), errno);
  }
  return options_.fsync ? FsyncDir(job_dir_) : Status::Ok();
}

}  // namespace memento::runtime
