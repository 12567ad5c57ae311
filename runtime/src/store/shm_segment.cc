#include "memento/runtime/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "store/page_reservation.h"

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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

// Maps every page of a fresh read-write mapping now, in one call. Each page of
// a shared mapping otherwise costs a page fault at its first access, and
// that first access is the snapshot, the protect receive or the recovery
// landing: a replacement node's store is touched for the first time by the
// shard arriving over the network (measured on a 2-core VM: 64 MiB of
// /dev/shm faulted page by page 200-260 ms, populated at once 14 ms). The
// pages are already allocated (posix_fallocate at creation), so this adds page
// table entries, not memory. Best effort: a kernel without
// MADV_POPULATE_WRITE (before 5.14) faults the pages on first access as
// before.
void MapEveryPage(void* p, uint64_t bytes) {
  (void)madvise(p, bytes, MADV_POPULATE_WRITE);
}

// The exclusive locks this process holds, one descriptor per segment file:
// every read-write mapping of one segment in this process shares it (so the
// engine and a test may map one store twice), and the lock is dropped when
// the last of them goes. flock locks belong to the open file description, so
// another process (another job) cannot take it while this one runs, and the
// kernel drops it when the process dies: a crash never blocks a relaunch.
struct HeldLock {
  int fd = -1;
  int users = 0;
  pid_t pid = 0;  // a forked child inherits the table but is another process
};
std::mutex g_locks_mu;
std::map<std::pair<uint64_t, uint64_t>, HeldLock> g_locks;  // (st_dev, st_ino) -> lock

// A child forked without exec (a data loader's worker) gets copies of the
// lock descriptors, and with them the locks: it would keep a store locked
// after this process died, and the relaunch would be refused as "in use"
// until the child ended. Close-on-exec does not cover fork, so the child
// closes its copies as it starts (close is async-signal-safe); its entries
// stay, marked closed, and are dropped as the parent's (other pid) are.
void CloseLocksInChild() {
  for (auto& [key, held] : g_locks) {
    if (held.fd >= 0) close(held.fd);
    held.fd = -1;
  }
  g_locks_mu.unlock();
}
void RegisterForkHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { g_locks_mu.lock(); }, [] { g_locks_mu.unlock(); }, CloseLocksInChild);
  });
}

// The pid holding a flock on (dev, ino), from /proc/locks; 0 if not found.
long LockHolderPid(dev_t dev, ino_t ino) {
  std::ifstream locks("/proc/locks");
  std::string line;
  char want[64];
  std::snprintf(want, sizeof(want), "%02x:%02x:%llu", major(dev), minor(dev),
                static_cast<unsigned long long>(ino));
  while (std::getline(locks, line)) {
    std::istringstream in(line);
    std::string index, type, mode, access, pid, file;
    in >> index >> type;
    if (type == "->") in >> type;  // a waiter's line
    in >> mode >> access >> pid >> file;
    if (type == "FLOCK" && file == want) return std::atol(pid.c_str());
  }
  return 0;
}

// Takes (or shares) this process's exclusive lock on the open segment `fd`.
Status AcquireLock(int fd, const std::string& name, const struct stat& st,
                   std::pair<uint64_t, uint64_t>* key) {
  *key = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  RegisterForkHandlers();
  std::lock_guard<std::mutex> lock(g_locks_mu);
  auto it = g_locks.find(*key);
  if (it != g_locks.end() && it->second.pid != getpid()) {
    // The parent's entry, its descriptor closed at the fork (the parent's lock
    // stays: its descriptor is still open there).
    g_locks.erase(it);
    it = g_locks.end();
  }
  if (it != g_locks.end()) {
    ++it->second.users;
    return Status::Ok();
  }
  // The lock is taken on an open file description of its own (the file
  // opened again through /proc), not on `fd`'s: an flock lasts while any
  // reference to its description does, and the segment's mappings hold one
  // to `fd`'s, which a forked child inherits with the mapping. Without /proc,
  // a duplicate of `fd` (a forked child then keeps the lock while it runs).
  // Close-on-exec like `fd`: a program this process starts must not inherit
  // the lock (and keep it past this process's death).
  int lock_fd = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd < 0) lock_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (lock_fd < 0) return Status::IoError("dup(" + name + "): " + Errno(errno));
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(lock_fd);
    if (err == EWOULDBLOCK) {
      const long pid = LockHolderPid(st.st_dev, st.st_ino);
      return Status::Unavailable("shm segment " + name + " is in use by another running process" +
                                 (pid > 0 ? " (pid " + std::to_string(pid) + ")" : ""));
    }
    return Status::IoError("flock(" + name + "): " + Errno(err));
  }
  g_locks[*key] = HeldLock{lock_fd, 1, getpid()};
  return Status::Ok();
}

void ReleaseLock(const std::pair<uint64_t, uint64_t>& key) {
  std::lock_guard<std::mutex> lock(g_locks_mu);
  auto it = g_locks.find(key);
  if (it == g_locks.end()) return;
  if (it->second.pid != getpid()) return;  // the parent's entry, copied by fork
  if (--it->second.users == 0) {
    close(it->second.fd);  // drops the flock
    g_locks.erase(it);
  }
}

// Whether some pages of the object were never allocated: its creator died
// or its file system filled before every page was reserved. Writing there
// allocates at the fault: a SIGBUS if the file system is full.
bool Sparse(const struct stat& st) {
  return static_cast<uint64_t>(st.st_blocks) * 512 < static_cast<uint64_t>(st.st_size);
}

// A segment is ours only if the effective user owns it and nobody else may
// read or write it; anything else was planted or loosened by someone else.
Status CheckOwnership(const std::string& name, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    return Status::Unavailable("shm segment " + name +
                               " is not a regular file; refusing to use it (it was left "
                               "untouched)");
  }
  if (st.st_uid != geteuid()) {
    return Status::Unavailable("shm segment " + name + " is owned by uid " +
                               std::to_string(st.st_uid) + ", not by this process's uid " +
                               std::to_string(geteuid()) +
                               "; refusing to use it (it was left untouched)");
  }
  if ((st.st_mode & 07777) != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::Unavailable("shm segment " + name + " has mode " + mode +
                               ", not 0600; refusing to use it (it was left untouched)");
  }
  return Status::Ok();
}

// Read-write mappings kept after their ShmSegment went (see the header's
// Ownership), most recently parked last, with the object's descriptor.
struct Parked {
  uint64_t dev = 0, ino = 0;
  uint8_t* data = nullptr;
  uint64_t size = 0;
  int fd = -1;
  bool mapped = false;  // every page mapped (else the taker maps them again)
};
constexpr size_t kMaxParked = 8;
std::mutex g_parked_mu;
std::vector<Parked> g_parked;

void Unmap(const Parked& p) {
  munmap(p.data, p.size);
  close(p.fd);
}

// Unmaps the parked mappings whose object is gone (unlinked by any process)
// or resized, so that they hold no memory the file system has released.
// Under g_parked_mu.
void DropStaleParked() {
  for (auto it = g_parked.begin(); it != g_parked.end();) {
    struct stat st;
    if (fstat(it->fd, &st) != 0 || st.st_nlink == 0 ||
        static_cast<uint64_t>(st.st_size) != it->size) {
      Unmap(*it);
      it = g_parked.erase(it);
    } else {
      ++it;
    }
  }
}

// A parked mapping of the object `st` describes, taken out of the table
// (its descriptor with it); nullopt if none.
std::optional<Parked> TakeParked(const struct stat& st) {
  std::lock_guard<std::mutex> lock(g_parked_mu);
  DropStaleParked();
  for (auto it = g_parked.begin(); it != g_parked.end(); ++it) {
    if (it->dev == static_cast<uint64_t>(st.st_dev) && it->ino == static_cast<uint64_t>(st.st_ino) &&
        it->size == static_cast<uint64_t>(st.st_size)) {
      Parked p = *it;
      g_parked.erase(it);
      return p;
    }
  }
  return std::nullopt;
}

// Keeps a read-write mapping for a later Open (unmapped instead when its
// object is already gone); the oldest parked one makes room.
void Park(uint8_t* data, uint64_t size, int fd, bool mapped) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_nlink == 0 || static_cast<uint64_t>(st.st_size) != size) {
    Unmap(Parked{0, 0, data, size, fd, mapped});
    return;
  }
  std::lock_guard<std::mutex> lock(g_parked_mu);
  DropStaleParked();
  if (g_parked.size() >= kMaxParked) {
    Unmap(g_parked.front());
    g_parked.erase(g_parked.begin());
  }
  g_parked.push_back(Parked{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                            data, size, fd, mapped});
}

}  // namespace

std::string ShmSegment::Directory() {
  const char* dir = std::getenv("MEMENTO_SHM_DIR");
  if (dir == nullptr || *dir == '\0') return "/dev/shm";
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

namespace {

// A /proc/mounts field with its octal escapes (\040 for a space) decoded.
std::string UnescapeMountField(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() &&
        std::isdigit(static_cast<unsigned char>(field[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(field[i + 2])) &&
        std::isdigit(static_cast<unsigned char>(field[i + 3]))) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

}  // namespace

std::string ShmSegment::HugePagesIn(std::istream& mounts, const std::string& dir) {
  const std::string within = dir == "/" ? dir : dir + "/";
  std::string found = "unknown";
  size_t longest = 0;
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string device, point, type, options;
    if (!(fields >> device >> point >> type >> options)) continue;
    point = UnescapeMountField(point);
    const std::string prefix = point == "/" ? point : point + "/";
    if (within.compare(0, prefix.size(), prefix) != 0 || prefix.size() < longest) continue;
    longest = prefix.size();
    found = "never";
    std::istringstream opts(options);
    for (std::string o; std::getline(opts, o, ',');) {
      if (o.rfind("huge=", 0) == 0) found = o.substr(5);
    }
  }
  return found;
}

std::string ShmSegment::HugePages() {
  std::ifstream mounts("/proc/mounts");
  return HugePagesIn(mounts, Directory());
}

Status ShmSegment::CheckDirectory() {
  constexpr long kTmpfsMagic = 0x01021994;  // TMPFS_MAGIC, <linux/magic.h>
  const std::string dir = Directory();
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("MEMENTO_SHM_DIR='" + dir + "' " + why +
                                   "; it must name an existing directory on a tmpfs (e.g. "
                                   "/dev/shm, or `mount -t tmpfs -o size=64g,huge=within_size "
                                   "tmpfs " +
                                   dir + "` for 2 MiB pages), or be unset");
  };
  if (dir.empty() || dir[0] != '/') return bad("is not an absolute path");
  // Set but empty: refused as Config refuses it, so that a job and
  // `memento inspect` / `clean` in one environment agree (Directory() reads
  // it as /dev/shm).
  if (const char* env = std::getenv("MEMENTO_SHM_DIR"); env != nullptr && *env == '\0') {
    return Status::InvalidArgument(
        "MEMENTO_SHM_DIR='' is empty; it must name an existing directory on a tmpfs, or be unset");
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return bad("cannot be used: " + Errno(errno));
  if (!S_ISDIR(st.st_mode)) return bad("is not a directory");
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0) return bad("cannot be used: " + Errno(errno));
  if (static_cast<long>(fs.f_type) != kTmpfsMagic) {
    char type[32];
    std::snprintf(type, sizeof(type), "0x%lx", static_cast<unsigned long>(fs.f_type));
    return bad(std::string("is not on a tmpfs (file system type ") + type +
               "), so the node store would be written back to a disk");
  }
  return Status::Ok();
}

Result<uint64_t> ShmSegment::FreeBytes() {
  struct statvfs vfs;
  if (statvfs(Directory().c_str(), &vfs) != 0) {
    return Status::IoError("statvfs " + Directory() + ": " + Errno(errno));
  }
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

ShmSegment::ShmSegment(std::string name, uint8_t* data, uint64_t size, Access access)
    : name_(std::move(name)), data_(data), size_(size), access_(access) {}

ShmSegment::ShmSegment() = default;

ShmSegment::~ShmSegment() { Reset(); }

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(other.data_),
      size_(other.size_),
      access_(other.access_),
      locked_(other.locked_),
      lock_key_(other.lock_key_),
      fd_(other.fd_),
      reserving_(std::move(other.reserving_)),
      reserving_allocates_(other.reserving_allocates_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.locked_ = false;
  other.fd_ = -1;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    access_ = other.access_;
    locked_ = other.locked_;
    lock_key_ = other.lock_key_;
    fd_ = other.fd_;
    reserving_ = std::move(other.reserving_);
    reserving_allocates_ = other.reserving_allocates_;
    other.fd_ = -1;
    other.data_ = nullptr;
    other.size_ = 0;
    other.locked_ = false;
  }
  return *this;
}

void ShmSegment::Reset() {
  // Its thread works on the mapping: ended first. A mapping whose pages were
  // not all reserved is not parked (the next Open would not wait for them).
  const bool mapped = reserving_ == nullptr || reserving_->complete();
  const bool complete = mapped || !reserving_allocates_;
  reserving_.reset();
  reserving_allocates_ = false;
  if (data_ != nullptr && fd_ >= 0 && complete) {
    Park(data_, size_, fd_, mapped);
  } else {
    if (data_ != nullptr) munmap(data_, size_);
    if (fd_ >= 0) close(fd_);
  }
  fd_ = -1;
  data_ = nullptr;
  size_ = 0;
  if (locked_) ReleaseLock(lock_key_);
  locked_ = false;
}

Status ShmSegment::WaitReserved() const {
  if (reserving_ == nullptr || !reserving_allocates_) return Status::Ok();
  return reserving_->Wait();
}

Result<ShmSegment> ShmSegment::Create(const std::string& name, uint64_t bytes,
                                      uint64_t reserve_now) {
  MEMENTO_RETURN_IF_ERROR(CheckName(name));
  if (bytes == 0) return Status::InvalidArgument("shm segment " + name + ": size 0");
  MEMENTO_RETURN_IF_ERROR(CheckDirectory());
  const std::string path = Directory() + name;
  {
    // A parked mapping of an object unlinked since holds memory the free
    // space below would not count.
    std::lock_guard<std::mutex> lock(g_parked_mu);
    DropStaleParked();
  }
  // Check free space first: a tmpfs that runs out later turns page faults into
  // SIGBUS in the middle of a snapshot.
  MEMENTO_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytes());
  if (free_bytes < bytes) {
    return Status::ResourceExhausted("shm segment " + name + " needs " + Human(bytes) + " but " +
                                     Directory() + " has only " + Human(free_bytes) +
                                     " free; enlarge it (e.g. docker --shm-size) or use fewer "
                                     "MEMENTO_SLOTS / a lighter MEMENTO_SCHEME");
  }
  // What shm_open does, in Directory() (which may be another tmpfs).
  int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EEXIST) return Status::AlreadyExists("shm segment " + name + " already exists");
    return Status::IoError("creating " + path + " (O_CREAT|O_EXCL): " + Errno(err));
  }
  // open applies the umask; make the mode exactly 0600 regardless.
  auto fail = [&](const std::string& what, int err) -> Status {
    close(fd);
    unlink(path.c_str());
    if (err == ENOSPC || err == ENOMEM) {
      return Status::ResourceExhausted("shm segment " + name + ": " + what + " of " + Human(bytes) +
                                       ": " + Errno(err) + " (" + Directory() + " full?)");
    }
    return Status::IoError("shm segment " + name + ": " + what + ": " + Errno(err));
  };
  if (fchmod(fd, 0600) != 0) return fail("fchmod 0600", errno);
  struct stat st;
  if (fstat(fd, &st) != 0) return fail("fstat", errno);
  std::pair<uint64_t, uint64_t> key;
  if (Status locked = AcquireLock(fd, name, st, &key); !locked.ok()) {
    // Unavailable: another process locked it between O_EXCL and here; it is
    // theirs now. Any other failure (no descriptor left): still ours, and
    // nothing is left behind.
    close(fd);
    if (locked.code() != StatusCode::kUnavailable) unlink(path.c_str());
    return locked;
  }
  auto fail_locked = [&](const std::string& what, int err) -> Status {
    ReleaseLock(key);
    return fail(what, err);
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail_locked("ftruncate", errno);
  // Reserve the pages (tmpfs supports fallocate): if another process takes
  // the space between the check and here we fail cleanly instead of SIGBUS.
  // Those past `now` are the background reservation's.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t now = std::min(bytes, (std::min(reserve_now, bytes) + page - 1) / page * page);
  int err = posix_fallocate(fd, 0, static_cast<off_t>(now));
  if (err != 0 && err != EOPNOTSUPP && err != EINVAL) return fail_locked("posix_fallocate", err);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail_locked("mmap", errno);
  MapEveryPage(p, now);
  ShmSegment seg(name, static_cast<uint8_t*>(p), bytes, Access::kReadWrite);
  seg.locked_ = true;
  seg.lock_key_ = key;
  seg.fd_ = fd;
  if (now < bytes) {
    seg.reserving_ = std::make_unique<PageReservation>(name, seg.data_, now, bytes, fd);
    seg.reserving_allocates_ = true;
  }
  return seg;
}

Result<ShmSegment> ShmSegment::Open(const std::string& name, Access access) {
  MEMENTO_RETURN_IF_ERROR(CheckName(name));
  MEMENTO_RETURN_IF_ERROR(CheckDirectory());
  const std::string path = Directory() + name;
  // O_NONBLOCK: a FIFO of this name (anyone may make one in /dev/shm) would
  // block a read-only open until some writer came; it is refused below
  // instead. A regular file's mapping ignores the flag.
  int fd = open(path.c_str(), (access == Access::kReadWrite ? O_RDWR : O_RDONLY) | O_NOFOLLOW |
                                  O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("shm segment " + name + " does not exist");
    return Status::IoError("opening " + path + ": " + Errno(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Status::IoError("fstat(" + name + "): " + Errno(err));
  }
  if (Status owned = CheckOwnership(name, st); !owned.ok()) {
    close(fd);
    return owned;
  }
  std::pair<uint64_t, uint64_t> key;
  if (access == Access::kReadWrite) {
    if (Status locked = AcquireLock(fd, name, st, &key); !locked.ok()) {
      close(fd);
      return locked;
    }
  }
  auto fail = [&](Status s) {
    close(fd);
    if (access == Access::kReadWrite) ReleaseLock(key);
    return s;
  };
  if (st.st_size <= 0) {
    return fail(
        Status::Corruption("shm segment " + name + " is empty (creator died before sizing it)"));
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (access == Access::kReadWrite) {
    // This process's own mapping of it, parked: taken as it is.
    if (std::optional<Parked> parked = TakeParked(st)) {
      close(fd);
      ShmSegment seg(name, parked->data, bytes, access);
      seg.locked_ = true;
      seg.lock_key_ = key;
      seg.fd_ = parked->fd;
      if (Sparse(st)) {
        seg.reserving_ = std::make_unique<PageReservation>(name, seg.data_, 0, bytes, seg.fd_);
        seg.reserving_allocates_ = true;
      } else if (!parked->mapped) {
        seg.reserving_ = std::make_unique<PageReservation>(name, seg.data_, 0, bytes, -1);
      }
      return seg;
    }
  }
  int prot = access == Access::kReadWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(Status::IoError("mmap(" + name + "): " + Errno(errno)));
  ShmSegment seg(name, static_cast<uint8_t*>(p), bytes, access);
  seg.locked_ = access == Access::kReadWrite;
  seg.lock_key_ = key;
  if (access == Access::kReadWrite) {
    seg.fd_ = fd;
    // The pages exist: mapped in the background (an attaching survivor's
    // restore starts at once; what it reads first costs a fault instead).
    // Pages that do not are reserved as Create's are: writers wait for them.
    seg.reserving_allocates_ = Sparse(st);
    seg.reserving_ = std::make_unique<PageReservation>(name, seg.data_, 0, bytes,
                                                       seg.reserving_allocates_ ? fd : -1);
  } else {
    close(fd);
  }
  return seg;
}

long ShmSegment::HolderPid(const std::string& name) {
  struct stat st;
  if (stat((Directory() + name).c_str(), &st) != 0) return 0;
  return LockHolderPid(st.st_dev, st.st_ino);
}

Status ShmSegment::Unlink(const std::string& name) {
  MEMENTO_RETURN_IF_ERROR(CheckName(name));
  const std::string path = Directory() + name;
  if (unlink(path.c_str()) != 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("shm segment " + name + " does not exist");
    return Status::IoError("unlinking " + path + ": " + Errno(err));
  }
  std::lock_guard<std::mutex> lock(g_parked_mu);
  DropStaleParked();  // its memory goes now, not at this process's next store call
  return Status::Ok();
}

Status ShmSegment::Rename(const std::string& from, const std::string& to) {
  MEMENTO_RETURN_IF_ERROR(CheckName(from));
  MEMENTO_RETURN_IF_ERROR(CheckName(to));
  const std::string dir = Directory();
  // A hard link then an unlink: unlike rename(2), never replaces `to`.
  if (link((dir + from).c_str(), (dir + to).c_str()) != 0) {
    const int err = errno;
    if (err == EEXIST) return Status::AlreadyExists("shm segment " + to + " exists");
    if (err == ENOENT) return Status::NotFound("shm segment " + from + " does not exist");
    return Status::IoError("renaming shm segment " + from + " to " + to + ": " + Errno(err));
  }
  if (unlink((dir + from).c_str()) != 0) {
    const int err = errno;
    return Status::IoError("renaming shm segment " + from + " to " + to + ": " + Errno(err));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> ShmSegment::List(const std::string& prefix) {
  std::string p = prefix;
  if (!p.empty() && p[0] == '/') p.erase(0, 1);
  MEMENTO_RETURN_IF_ERROR(CheckDirectory());
  DIR* dir = opendir(Directory().c_str());
  if (dir == nullptr) return Status::IoError("opendir " + Directory() + ": " + Errno(errno));
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
