#include "persist/remote_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "memento/runtime/node_identity.h"

namespace memento::runtime::remote_files {

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

const std::string& WriterId() {
  static const std::string id = [] {
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) != 0) return HostName() + "@?";
    std::string boot;
    std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot);
    return HostName() + "@" + std::to_string(ns.st_ino) + "-" + boot.substr(0, 8);
  }();
  return id;
}

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
  // The writer id may contain dots: parse pid and counter from the right.
  const size_t last = name.find_last_of('.');
  if (last == std::string::npos || last <= tmp + 5) return false;
  const size_t before = name.find_last_of('.', last - 1);
  if (before == std::string::npos || before <= tmp + 4) return false;
  const std::string host = name.substr(tmp + 5, before - (tmp + 5));
  const std::string pid_text = name.substr(before + 1, last - before - 1);
  if (host != WriterId() || host.back() == '?' || pid_text.empty() || pid_text.size() > 9 ||
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

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) close(fd_);
  if (!tmp_.empty()) unlink(tmp_.c_str());
}

Status AtomicFileWriter::Open() {
  opened_ = std::chrono::steady_clock::now();
  static std::atomic<uint64_t> counter{0};
  tmp_ = path_ + ".tmp." + WriterId() + "." + std::to_string(getpid()) + "." +
         std::to_string(counter++);
  fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int err = errno;
    tmp_.clear();
    return IoErr("create", path_ + ".tmp.*", err);
  }
  return Status::Ok();
}

Status AtomicFileWriter::Write(const void* data, uint64_t n) {
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

Status AtomicFileWriter::Commit() {
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

FileReader::~FileReader() {
  if (fd_ >= 0) close(fd_);
}

Status FileReader::Open() {
  // O_NONBLOCK: a FIFO under a version's names (anyone who can write the
  // folder may make one) would block the open until a writer came; it is
  // refused below instead. A regular file ignores the flag.
  fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("remote file " + path_ + " does not exist");
    return IoErr("open", path_, err);
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) return IoErr("fstat", path_, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status::Corruption("remote file " + path_ + " is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

Status FileReader::Read(void* out, uint64_t n) {
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

Status FileReader::Skip(uint64_t n) {
  if (n > size_ - pos_) {
    return Status::Corruption("remote file " + path_ + ": truncated at byte " +
                              std::to_string(pos_) + " (skips " + std::to_string(n) +
                              " more, size " + std::to_string(size_) + ")");
  }
  if (lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) return IoErr("lseek", path_, errno);
  pos_ += n;
  return Status::Ok();
}

}  // namespace memento::runtime::remote_files
