#include "memento/runtime/inprocess_transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "memento/common/check.h"

namespace memento::runtime {
namespace {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

class GroupImpl;

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(GroupImpl* group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override;
  Status Barrier() override;
  Result<bool> AllTrue(bool mine) override;
  Result<int64_t> AllReduceMax(int64_t mine) override;
  Result<int64_t> AllReduceMin(int64_t mine) override;
  Result<std::vector<Bytes>> Allgather(const void* data, size_t bytes) override;
  Status Send(int peer, int tag, const void* data, size_t bytes) override;
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override;
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override;
  bool TestsTransfers() const override { return true; }
  std::chrono::milliseconds timeout() const override;

 private:
  Result<int64_t> ReduceInt(int64_t mine, bool max);

  GroupImpl* group_;  // owns this transport
  const int rank_;
  uint64_t next_collective_ = 0;  // collectives are single-threaded per rank
};

// All ranks' state behind one mutex: simple and far from any bottleneck for
// the tests it serves.
class GroupImpl final : public InProcessGroup, public std::enable_shared_from_this<GroupImpl> {
 public:
  GroupImpl(int size, std::chrono::milliseconds timeout)
      : InProcessGroup(size), timeout_(timeout), dead_(size, false) {}

  void Init() {
    for (int r = 0; r < size_; ++r) {
      transports_.push_back(std::make_unique<InProcessTransport>(this, r));
    }
  }

  // The returned pointer shares ownership of the group (aliasing
  // constructor), so a transport keeps its group alive without a cycle.
  std::shared_ptr<Transport> transport(int rank) override {
    MEMENTO_CHECK(rank >= 0 && rank < size_);
    return std::shared_ptr<Transport>(shared_from_this(), transports_[rank].get());
  }

  void Kill(int rank) override {
    MEMENTO_CHECK(rank >= 0 && rank < size_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      dead_[rank] = true;
    }
    cv_.notify_all();
  }

  bool IsDead(int rank) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return dead_[rank];
  }

  // One collective round `seq`: every rank contributes bytes and gets all.
  Result<std::vector<Bytes>> Exchange(int rank, uint64_t seq, Bytes mine) {
    std::unique_lock<std::mutex> lock(mu_);
    if (dead_[rank]) return Status::Unavailable(DeadMessage(rank));
    Round& round = rounds_[seq];
    if (round.parts.empty()) round.parts.resize(size_);
    round.parts[rank] = std::move(mine);
    ++round.arrived;
    cv_.notify_all();
    const auto deadline = Clock::now() + timeout_;
    Status error;
    while (true) {
      Round& r = rounds_[seq];
      if (r.arrived == size_) break;
      if (dead_[rank]) {
        error = Status::Unavailable(DeadMessage(rank));
        break;
      }
      int missing_dead = -1;
      for (int p = 0; p < size_; ++p) {
        if (!r.parts[p].has_value() && dead_[p]) missing_dead = p;
      }
      if (missing_dead >= 0) {
        error = Status::Unavailable("collective #" + std::to_string(seq) + ": rank " +
                                    std::to_string(missing_dead) + " is dead");
        break;
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
          rounds_[seq].arrived < size_) {
        error = Status::Timeout("collective #" + std::to_string(seq) + " on rank " +
                                std::to_string(rank) + ": not every rank arrived within " +
                                std::to_string(timeout_.count()) + " ms");
        break;
      }
    }
    Round& r = rounds_[seq];
    std::vector<Bytes> out;
    if (error.ok()) {
      out.reserve(size_);
      for (auto& p : r.parts) out.push_back(*p);
    }
    // A failed round is never freed before the group (it may still be
    // completed by late arrivals); a complete one is freed by its last reader.
    if (!error.ok()) return error;
    if (++r.left == size_) rounds_.erase(seq);
    return out;
  }

  Status Post(int src, int dst, int tag, const void* data, size_t bytes) {
    if (dst < 0 || dst >= size_) {
      return Status::InvalidArgument("Send: peer " + std::to_string(dst) + " out of range");
    }
    if (tag < 0 || tag > kMaxTag) {
      return Status::InvalidArgument("Send: tag " + std::to_string(tag) + " out of range");
    }
    Bytes message(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (dead_[src]) return Status::Unavailable(DeadMessage(src));
      if (dead_[dst]) {
        return Status::Unavailable("Send: peer rank " + std::to_string(dst) + " is dead");
      }
      mailboxes_[{src, dst, tag}].push_back(std::move(message));
    }
    cv_.notify_all();
    return Status::Ok();
  }

  // Takes the next message from src to dst with tag into data: waits for
  // it up to the timeout, or with `wait` false answers nothing (nullopt) at
  // once when none is there and its sender is alive.
  std::optional<Result<size_t>> Take(int src, int dst, int tag, void* data, size_t capacity,
                                     bool wait = true) {
    if (src < 0 || src >= size_) {
      return Status::InvalidArgument("Recv: peer " + std::to_string(src) + " out of range");
    }
    std::unique_lock<std::mutex> lock(mu_);
    const auto key = std::make_tuple(src, dst, tag);
    const auto deadline = Clock::now() + timeout_;
    while (true) {
      if (dead_[dst]) return Status::Unavailable(DeadMessage(dst));
      auto it = mailboxes_.find(key);
      if (it != mailboxes_.end() && !it->second.empty()) {
        Bytes message = std::move(it->second.front());
        it->second.pop_front();
        if (message.size() > capacity) {
          return Status::InvalidArgument("Recv from rank " + std::to_string(src) + " tag " +
                                         std::to_string(tag) + ": message of " +
                                         std::to_string(message.size()) +
                                         " bytes exceeds capacity " + std::to_string(capacity));
        }
        if (!message.empty()) std::memcpy(data, message.data(), message.size());
        return message.size();
      }
      if (dead_[src]) {
        return Status::Unavailable("Recv: peer rank " + std::to_string(src) + " is dead");
      }
      if (!wait) return std::nullopt;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        auto again = mailboxes_.find(key);
        if (again == mailboxes_.end() || again->second.empty()) {
          return Status::Timeout("Recv from rank " + std::to_string(src) + " tag " +
                                 std::to_string(tag) + " timed out after " +
                                 std::to_string(timeout_.count()) + " ms");
        }
      }
    }
  }

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Round {
    std::vector<std::optional<Bytes>> parts;
    int arrived = 0;
    int left = 0;
  };

  static std::string DeadMessage(int rank) {
    return "rank " + std::to_string(rank) + " is dead (simulated failure)";
  }

  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> dead_;
  std::map<uint64_t, Round> rounds_;
  std::map<std::tuple<int, int, int>, std::deque<Bytes>> mailboxes_;
  std::vector<std::unique_ptr<InProcessTransport>> transports_;
};

int InProcessTransport::size() const { return group_->size(); }

Status InProcessTransport::Barrier() {
  auto r = group_->Exchange(rank_, next_collective_++, {});
  return r.status();
}

Result<bool> InProcessTransport::AllTrue(bool mine) {
  MEMENTO_ASSIGN_OR_RETURN(auto parts,
                           group_->Exchange(rank_, next_collective_++, Bytes{uint8_t{mine}}));
  bool all = true;
  for (const auto& p : parts) all = all && p.size() == 1 && p[0] != 0;
  return all;
}

Result<int64_t> InProcessTransport::ReduceInt(int64_t mine, bool max) {
  Bytes b(sizeof(mine));
  std::memcpy(b.data(), &mine, sizeof(mine));
  MEMENTO_ASSIGN_OR_RETURN(auto parts, group_->Exchange(rank_, next_collective_++, std::move(b)));
  int64_t out = mine;
  for (const auto& p : parts) {
    MEMENTO_CHECK_EQ(p.size(), sizeof(int64_t));
    int64_t v;
    std::memcpy(&v, p.data(), sizeof(v));
    out = max ? std::max(out, v) : std::min(out, v);
  }
  return out;
}

Result<int64_t> InProcessTransport::AllReduceMax(int64_t mine) { return ReduceInt(mine, true); }
Result<int64_t> InProcessTransport::AllReduceMin(int64_t mine) { return ReduceInt(mine, false); }

Result<std::vector<Bytes>> InProcessTransport::Allgather(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  return group_->Exchange(rank_, next_collective_++, Bytes(p, p + bytes));
}

Status InProcessTransport::Send(int peer, int tag, const void* data, size_t bytes) {
  return group_->Post(rank_, peer, tag, data, bytes);
}

Result<size_t> InProcessTransport::Recv(int peer, int tag, void* data, size_t capacity) {
  return *group_->Take(peer, rank_, tag, data, capacity);
}

// A receive from a mailbox: Test takes the message when it is there, Wait
// takes it (waiting for it) unless Test already did. Dropped before either
// took it, it never happens (the message stays queued, as after a cancelled
// MPI receive).
class MailboxRecv final : public Transport::PendingTransfer {
 public:
  MailboxRecv(GroupImpl* group, int src, int dst, int tag, void* data, size_t capacity)
      : group_(group), src_(src), dst_(dst), tag_(tag), data_(data), capacity_(capacity) {}
  bool Test() override {
    if (!result_.has_value()) result_ = group_->Take(src_, dst_, tag_, data_, capacity_, false);
    return result_.has_value();
  }
  Result<size_t> Wait() override {
    if (waited_) return Status::FailedPrecondition("a started transfer was already waited for");
    waited_ = true;
    if (!result_.has_value()) result_ = group_->Take(src_, dst_, tag_, data_, capacity_);
    return *result_;
  }

 private:
  GroupImpl* const group_;
  const int src_, dst_, tag_;
  void* const data_;
  const size_t capacity_;
  std::optional<Result<size_t>> result_;
  bool waited_ = false;
};

Result<std::unique_ptr<Transport::PendingTransfer>> InProcessTransport::StartRecv(int peer, int tag,
                                                                                  void* data,
                                                                                  size_t capacity) {
  return std::unique_ptr<PendingTransfer>(
      std::make_unique<MailboxRecv>(group_, peer, rank_, tag, data, capacity));
}

std::chrono::milliseconds InProcessTransport::timeout() const { return group_->timeout(); }

}  // namespace

std::shared_ptr<InProcessGroup> InProcessGroup::Create(int size,
                                                       std::chrono::milliseconds timeout) {
  MEMENTO_CHECK_GE(size, 1);
  auto group = std::make_shared<GroupImpl>(size, timeout);
  group->Init();
  return group;
}

}  // namespace memento::runtime
