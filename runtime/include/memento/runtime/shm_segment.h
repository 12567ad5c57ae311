// ShmSegment: one POSIX shared-memory object, mapped into this process.
//
// The thin OS layer under NodeStore: create (O_CREAT|O_EXCL, mode 0600,
// free-space check of the shm directory (Directory()), space reserved with
// posix_fallocate so that a full tmpfs is a ResourceExhausted error rather
// than a SIGBUS later: at once, or in the background up to WaitReserved()),
// open an existing one (read-write or
// read-only), list by name prefix, unlink. The object outlives the process
// until it is unlinked.
//
// Ownership: a ShmSegment owns its mapping but not the object: destruction
// never unlinks. A read-write mapping is not unmapped at destruction but
// parked (up to 8 per process), for the next read-write Open of the same
// object in this process to take as it is: a process that keeps running
// through a recovery (in-job) attaches its store again without mapping its
// pages again (about 0.2 s per GiB on a 2-core VM, on the path to
// resuming). A parked mapping is unmapped as soon as this process sees its
// object unlinked (Unlink, or the next Create / Open / destruction), when
// another object's mapping needs its place, or at exit. Move-only.
// Thread-safety: the mapping may be read/written from any thread; the object
// itself is not synchronized (do not move it while others use data()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memento/common/status.h"

namespace memento::runtime {

class PageReservation;

class ShmSegment {
 public:
  enum class Access { kReadOnly, kReadWrite };

  ShmSegment();
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creates `name` ("/x", one '/' at the start, <= 255 bytes) of `bytes` bytes,
  // zero-filled, mapped read-write. Errors: InvalidArgument (bad name, 0
  // bytes), AlreadyExists (the name exists: O_EXCL), ResourceExhausted (the
  // shm file system has fewer free bytes than needed; the message names both
  // numbers and the directory), IoError (any other OS error, with errno text).
  // Nothing is left behind on failure. Cost: the kernel zero-fills `bytes`
  // and maps every page into this process (MADV_POPULATE_WRITE, where the
  // kernel has it), so that no first access later pays a page fault: the
  // first `reserve_now` bytes before Create returns, the rest on a
  // background thread at the lowest priority (WaitReserved()). Read-write
  // Open() maps every page the same way in the background; read-only does
  // not.
  static Result<ShmSegment> Create(const std::string& name, uint64_t bytes,
                                   uint64_t reserve_now = UINT64_MAX);

  // Opens and maps an existing object whole. NotFound if it does not exist.
  // Unavailable, and the object left untouched, if it is not owned by the
  // effective uid or its mode is not exactly 0600 (someone else planted or
  // loosened it), or, for kReadWrite, if another process holds it.
  //
  // Ownership: Create() and a kReadWrite Open() take an exclusive advisory
  // lock (flock) on the object, held until the last read-write ShmSegment of
  // that object in this process is destroyed; mappings in the same process
  // share it. Another process's kReadWrite Open()/Create() then fails with
  // Unavailable naming the holder's pid. The kernel drops the lock when its
  // process dies, so a crashed holder never blocks a relaunch. kReadOnly opens
  // (inspection) take no lock.
  static Result<ShmSegment> Open(const std::string& name, Access access);

  // Unlinks `name`; mappings that exist stay valid until unmapped.
  // NotFound if it does not exist.
  static Status Unlink(const std::string& name);

  // The pid of the process holding `name`'s lock (a job that has it open
  // read-write, alive: the lock goes with its holder), from /proc/locks; 0
  // when none does or it cannot be told.
  static long HolderPid(const std::string& name);

  // Renames `from` to `to` (both "/x" names) in the shm directory, keeping its
  // bytes, owner and mode; mappings stay valid. AlreadyExists if `to` exists
  // (never replaced), NotFound if `from` does not. Linux (/dev/shm) only.
  static Status Rename(const std::string& from, const std::string& to);

  // Names ("/" + file name) of the objects in the shm directory whose name
  // starts with `prefix` (given with or without the leading '/'), sorted.
  static Result<std::vector<std::string>> List(const std::string& prefix);

  // The directory the objects live in: MEMENTO_SHM_DIR when it is set (read
  // from the environment at every call, so that a job, `memento inspect` and
  // `memento clean` agree without passing it around), else /dev/shm. Any
  // tmpfs mount will do; one mounted with huge=within_size gives the stores
  // 2 MiB pages without changing /dev/shm for every other user of it.
  static std::string Directory();

  // Ok when Directory() is an existing directory on a tmpfs; else
  // InvalidArgument naming MEMENTO_SHM_DIR, the path and what is wrong (a
  // store on a disk file system would be written back to the disk). Create,
  // Open and List check it.
  static Status CheckDirectory();

  // The huge= option of the tmpfs mount that Directory() is on, as
  // /proc/mounts gives it: "never" when the mount has none (tmpfs's default:
  // 4 KiB pages), else "always", "within_size" or "advise"; "unknown" when no
  // mount in /proc/mounts contains the directory. A process's first access
  // to each 4 KiB page of a store costs a fault (several µs on VMs with
  // shadow page tables), which is what makes restores of large shards
  // CPU-bound there; `memento inspect` shows this so a deployment can check it.
  static std::string HugePages();
  // The same for directory `dir`, from `mounts` in the /proc/mounts format
  // (mount points with \040-style escapes): the longest mount point that
  // contains `dir`, the last of equal ones (the one in effect).
  static std::string HugePagesIn(std::istream& mounts, const std::string& dir);

  // Free bytes of the shm file system (statvfs f_bavail * f_frsize).
  static Result<uint64_t> FreeBytes();

  bool valid() const { return data_ != nullptr; }
  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool writable() const { return access_ == Access::kReadWrite; }

  // Returns once every page of a created segment is reserved (Create's
  // background part; this thread helps with what is left): OK, or
  // ResourceExhausted when the file system filled up meanwhile. Writers of
  // the bytes past Create's `reserve_now` call it first. An attached
  // segment's pages exist: OK at once (their mapping goes on in the
  // background; an access before it only costs a page fault), unless some
  // never were (its creator died or its file system filled first): those
  // are reserved as Create's are. After a failure each call tries again.
  // Thread-safe.
  Status WaitReserved() const;

 private:
  ShmSegment(std::string name, uint8_t* data, uint64_t size, Access access);
  void Reset();

  std::string name_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  Access access_ = Access::kReadOnly;
  bool locked_ = false;                     // holds a share of this process's lock
  std::pair<uint64_t, uint64_t> lock_key_;  // (st_dev, st_ino) of the locked file
  // The object's descriptor (read-write only, else -1): the background
  // reservation allocates through it, and a mapping parked at Reset is
  // checked through it for an unlinked object.
  int fd_ = -1;
  // Pages still being reserved or mapped; ended before the mapping is.
  std::unique_ptr<PageReservation> reserving_;
  bool reserving_allocates_ = false;  // allocates pages (WaitReserved waits for it)
};

}  // namespace memento::runtime
