#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "memento/common/status.h"

namespace memento::runtime {

// PageReservation: the pages of a shared mapping reserved and mapped in the
// background, so that creating or attaching a node store costs no time on
// the path to resuming training.
//
// Reserving a page of a tmpfs object (posix_fallocate: the kernel allocates
// and zeroes it) and mapping it into the process (MADV_POPULATE_WRITE) cost
// about 0.6 s per GiB on a 2-core VM, where a replacement node's restore
// moves a 256 MiB shard in 0.08 s: done in Create, that dominated its
// resume. Here a thread at the lowest priority (nice 19: the transfers and
// training come first) works through the range in chunks; a writer that
// needs the pages calls Wait(), which works through the chunks not yet
// claimed on the caller's own thread alongside it, so a wait costs no more
// than doing the work itself. Memory a writer touches before Wait() is
// still correct (a page fault allocates it), only slower, and exposed to a
// SIGBUS if the file system fills up meanwhile: the free-space check at
// creation and Wait()'s error cover the writers that wait.
class PageReservation {
 public:
  // Starts on [from, bytes) of the mapping `data` (page-aligned `from`).
  // `fd` >= 0: the object's descriptor (borrowed: it must outlive this); the
  // pages are allocated with posix_fallocate on it, so that a full file
  // system is Wait()'s ResourceExhausted, not a SIGBUS. -1: the pages
  // exist (an object attached again) and are only mapped.
  PageReservation(std::string name, uint8_t* data, uint64_t from, uint64_t bytes, int fd);
  ~PageReservation();  // stops after the chunks in progress and joins
  PageReservation(const PageReservation&) = delete;
  PageReservation& operator=(const PageReservation&) = delete;

  // Returns once every page is reserved: OK, or the first failure
  // (ResourceExhausted naming the object when the file system is full).
  // After a failure each Wait() reserves the range again on the caller's
  // thread (pages reserved already cost a lookup): a file system that was
  // full for a moment fails the writes of that moment, not every later one.
  // Thread-safe.
  Status Wait();
  // Every page reserved (and mapped), without a failure.
  bool complete() const;

 private:
  static constexpr uint64_t kChunk = 8ull << 20;
  void Run();
  // Claims and reserves chunks until none is left; false if stopped.
  void Work();
  Status ReserveChunk(uint64_t index);

  const std::string name_;
  uint8_t* const data_;
  const uint64_t from_;
  const uint64_t bytes_;
  const int fd_;
  const uint64_t chunks_;
  std::atomic<uint64_t> next_{0};      // the next chunk to claim
  std::atomic<uint64_t> finished_{0};  // chunks done (or skipped after a failure)
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status failed_;
  std::thread thread_;
};

}  // namespace memento::runtime
