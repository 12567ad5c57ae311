#include "store/page_reservation.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

namespace memento::runtime {

PageReservation::PageReservation(std::string name, uint8_t* data, uint64_t from, uint64_t bytes,
                                 int fd)
    : name_(std::move(name)),
      data_(data),
      from_(from),
      bytes_(bytes),
      fd_(fd),
      chunks_(bytes > from ? (bytes - from + kChunk - 1) / kChunk : 0) {
  thread_ = std::thread([this] { Run(); });
}

PageReservation::~PageReservation() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PageReservation::Run() {
  // Lowest priority: on a busy node this runs in what the training, the
  // transfers and the engine's threads leave. Raising a nice value needs no
  // privilege (lowering it back would, hence Wait() helps instead).
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  Work();
}

void PageReservation::Work() {
  for (;;) {
    if (stop_.load()) return;
    const uint64_t i = next_.fetch_add(1);
    if (i >= chunks_) return;
    bool skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      skip = !failed_.ok();
    }
    Status s = skip ? Status::Ok() : ReserveChunk(i);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() && failed_.ok()) failed_ = std::move(s);
    if (finished_.fetch_add(1) + 1 == chunks_) cv_.notify_all();
  }
}

Status PageReservation::ReserveChunk(uint64_t index) {
  const uint64_t off = from_ + index * kChunk;
  const uint64_t len = std::min(kChunk, bytes_ - off);
  if (fd_ >= 0) {
    const int err = posix_fallocate(fd_, static_cast<off_t>(off), static_cast<off_t>(len));
    if (err == ENOSPC || err == ENOMEM) {
      return Status::ResourceExhausted("shm segment " + name_ + ": reserving its pages: " +
                                       std::strerror(err) + " (the shm file system is full)");
    }
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      return Status::IoError("shm segment " + name_ + ": posix_fallocate: " + std::strerror(err));
    }
  }
  // Best effort: a kernel without MADV_POPULATE_WRITE (before 5.14) maps
  // the pages at their first access instead.
  (void)madvise(data_ + off, len, MADV_POPULATE_WRITE);
  return Status::Ok();
}

Status PageReservation::Wait() {
  Work();  // the chunks nobody has claimed yet, at this thread's priority
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_.load() == chunks_ || stop_.load(); });
  if (failed_.ok() || fd_ < 0 || stop_.load()) return failed_;
  // The last pass failed (the file system was full): one more pass, which
  // the waiters that come meanwhile share.
  failed_ = Status::Ok();
  finished_ = 0;
  next_ = 0;
  lock.unlock();
  Work();
  lock.lock();
  cv_.wait(lock, [&] { return finished_.load() == chunks_ || stop_.load(); });
  return failed_;
}

bool PageReservation::complete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_.load() == chunks_ && failed_.ok();
}

}  // namespace memento::runtime
