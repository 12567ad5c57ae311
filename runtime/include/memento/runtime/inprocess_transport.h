// InProcessTransport: threads of one process acting as the ranks of a job.
//
// An InProcessGroup owns the shared mailboxes of N ranks and hands out one
// Transport per rank; each rank is then driven by its own thread (gloo's
// base_test.h harness does the same). Used by the `local` tests so that every
// multi-rank scenario runs in milliseconds without mpirun.
//
// Dead ranks: Kill(r) marks rank r as failed. From then on every call made by
// r returns Unavailable, and every collective or Recv of another rank that
// needs r returns Unavailable instead of hanging. Messages r sent before it
// died stay deliverable (as on a real network once they left the sender).
//
// Timeouts: an operation that waits longer than the group's timeout returns
// Timeout (a rank that simply never calls is indistinguishable from a slow one).
//
// Ownership: the group must outlive all the transports it created; each
// transport keeps the group alive through a shared_ptr, so holding the
// transports is enough.
//
// Thread-safety: as in transport.h. The group itself (Kill, transport()) is
// thread-safe.
#pragma once

#include <chrono>
#include <memory>

#include "memento/runtime/transport.h"

namespace memento::runtime {

class InProcessGroup {
 public:
  // Creates the shared state of `size` ranks (size >= 1). `timeout` bounds
  // every wait inside a collective or Recv.
  static std::shared_ptr<InProcessGroup> Create(
      int size, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  virtual ~InProcessGroup() = default;

  int size() const { return size_; }

  // The transport of rank `rank` (0..size-1). The same object is returned on
  // every call for a given rank.
  virtual std::shared_ptr<Transport> transport(int rank) = 0;

  // Simulates the crash of rank `rank`: see the header comment.
  virtual void Kill(int rank) = 0;
  virtual bool IsDead(int rank) const = 0;

 protected:
  explicit InProcessGroup(int size) : size_(size) {}
  const int size_;
};

}  // namespace memento::runtime
