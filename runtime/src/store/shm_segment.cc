#include "memento/runtime/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace memento::runtime {
namespace {

std::string Errno(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

Status CheckName(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.size() > NAME_MAX ||
      name.find('/', 1) != std::string::npos || name.find('\0') != std::string::npos) {
    return Status::InvalidArgument("shm name '" + name +
                                   "' must be '/' + 1..254 characters without '/'");
  }
  return Status::Ok();
}

std::string Human(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return std::to_string(bytes) + " bytes (" + buf + ")";
}

}  // namespace

const char* ShmSegment::Directory() { return "/dev/shm"; }

Result<uint64_t> ShmSegment::FreeBytes() {
  struct statvfs vfs;
  if (statvfs(Directory(), &vfs) != 0) {
    return Status::IoError(std::string("statvfs ") + Directory() + ": " + Errno(errno));
  }
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

ShmSegment::~ShmSegment() { Reset(); }

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(other.data_),
      size_(other.size_),
      access_(other.access_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    access_ = other.access_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void ShmSegment::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<ShmSegment> ShmSegment::Create(const std::string& name, uint64_t bytes) {
  MEMENTO_RETURN_IF_ERROR(CheckName(name));
  if (bytes == 0) return Status::InvalidArgument("shm segment " + name + ": size 0");
  // Check free space first: a tmpfs that runs out later turns page faults into
  // SIGBUS in the middle of a snapshot.
  MEMENTO_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytes());
  if (free_bytes < bytes) {
    return Status::ResourceExhausted("shm segment " + name + " needs " + Human(bytes) + " but " +
                                     Directory() + " has only " + Human(free_bytes) +
                                     " free; enlarge it (e.g. docker --shm-size) or use fewer "
                                     "MEMENTO_SLOTS / a lighter MEMENTO_SCHEME");
  }
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST) return Status::AlreadyExists("shm segment " + name + " already exists");
    return Status::IoError("shm_open(" + name + ", O_CREAT|O_EXCL): " + Errno(err));
  }
  // shm_open applies the umask; make the mode exactly 0600 regardless.
  auto fail = [&](const std::string& what, int err) -> Status {
    close(fd);
    shm_unlink(name.c_str());
    if (err == ENOSPC || err == ENOMEM) {
      return Status::ResourceExhausted("shm segment " + name + ": " + what + " of " + Human(bytes) +
                                       ": " + Errno(err) + " (" + Directory() + " full?)");
    }
    return Status::IoError("shm segment " + name + ": " + what + ": " + Errno(err));
  };
  if (fchmod(fd, 0600) != 0) return fail("fchmod 0600", errno);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate", errno);
  // Reserve the pages now (tmpfs supports fallocate): if another process takes
  // the space between the check and here we fail cleanly instead of SIGBUS.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0 && err != EOPNOTSUPP && err != EINVAL) return fail("posix_fallocate", err);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("mmap", errno);
  close(fd);
  return ShmSegment(name, static_cast<uint8_t*>(p), bytes, Access::kReadWrite);
}

Result<ShmSegment> ShmSegment::Open(const std::string& name, Access access) {
  MEMENTO_RETURN_IF_ERROR(CheckName(name));
  int fd = shm_open(name.c_str(), access == Access::kReadWrite ? O_RDWR : O_RDONLY, 0);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("shm segment " + name + " does not exist");
    return Status::IoError("shm_open(" + name + "): " + Errno(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Status::IoError("fstat(" + name + "): " + Errno(err));
  }
  if (st.st_size <= 0) {
    close(fd);
    return Status::Corruption("shm segment " + name + " is empty (creator died before sizing it)");
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  int prot = access == Access::kReadWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return Status::IoError("mmap(" + name + "): " + Errno(err));
  return ShmSegment(name, static_cast<uint8_t*>(p), bytes, access);
}

Status ShmSegment::Unlink(const std::string& name) {
  MEMENTO_RETURN_IF_ERROR(CheckName(name));
  if (shm_unlink(name.c_str()) != 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("shm segment " + name + " does not exist");
    return Status::IoError("shm_unlink(" + name + "): " + Errno(err));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ShmSegment::List(const std::string& prefix) {
  std::string p = prefix;
  if (!p.empty() && p[0] == '/') p.erase(0, 1);
  DIR* dir = opendir(Directory());
  if (dir == nullptr) {
    return Status::IoError(std::string("opendir ") + Directory() + ": " + Errno(errno));
  }
  std::vector<std::string> names;
  while (struct dirent* e = readdir(dir)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (n.compare(0, p.size(), p) == 0) names.push_back("/" + n);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace memento::runtime
