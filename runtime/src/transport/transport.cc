#include "memento/runtime/transport.h"

#include <unistd.h>

#include <cstdint>
#include <utility>

namespace memento::runtime {
namespace {

Status WaitedTwice() {
  return Status::FailedPrecondition("a started transfer was already waited for");
}

// A send that already happened inside StartSend.
class FinishedTransfer final : public Transport::PendingTransfer {
 public:
  explicit FinishedTransfer(size_t bytes) : bytes_(bytes) {}
  Result<size_t> Wait() override {
    if (std::exchange(waited_, true)) return WaitedTwice();
    return bytes_;
  }

 private:
  const size_t bytes_;
  bool waited_ = false;
};

// A receive that happens when it is waited for; dropped unwaited, it never
// happens (the message stays queued, as after a cancelled MPI receive).
class DeferredRecv final : public Transport::PendingTransfer {
 public:
  DeferredRecv(Transport* t, int peer, int tag, void* data, size_t capacity)
      : t_(t), peer_(peer), tag_(tag), data_(data), capacity_(capacity) {}
  Result<size_t> Wait() override {
    if (std::exchange(waited_, true)) return WaitedTwice();  // would take another message
    return t_->Recv(peer_, tag_, data_, capacity_);
  }

 private:
  Transport* const t_;
  const int peer_, tag_;
  void* const data_;
  const size_t capacity_;
  bool waited_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport::PendingTransfer>> Transport::StartSend(int peer, int tag,
                                                                         const void* data,
                                                                         size_t bytes) {
  MEMENTO_RETURN_IF_ERROR(Send(peer, tag, data, bytes));
  return std::unique_ptr<PendingTransfer>(std::make_unique<FinishedTransfer>(bytes));
}

Result<std::unique_ptr<Transport::PendingTransfer>> Transport::StartRecv(int peer, int tag,
                                                                         void* data,
                                                                         size_t capacity) {
  return std::unique_ptr<PendingTransfer>(
      std::make_unique<DeferredRecv>(this, peer, tag, data, capacity));
}

Status AllOk(Transport& transport, const Status& local, const Status& elsewhere) {
  MEMENTO_ASSIGN_OR_RETURN(bool everyone, transport.AllTrue(local.ok()));
  if (!local.ok()) return local;
  return everyone ? Status::Ok() : elsewhere;
}

void TouchForReceive(void* data, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (bytes == 0) return;
  auto* p = static_cast<volatile uint8_t*>(data);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  // The first byte, then the first byte of every later page.
  for (uintptr_t at = begin; at < begin + bytes; at = (at / page + 1) * page) p[at - begin] = 0;
}

}  // namespace memento::runtime
