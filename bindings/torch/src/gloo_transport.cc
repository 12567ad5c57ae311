#include "memento/torch/gloo_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace memento::torch_adapter {
namespace {

using runtime::Transport;

// A message on (peer, tag) is a lead on gloo tag 2*tag: its length (a
// uint64), then the bytes themselves when there are at most kInlineBytes;
// longer ones follow as a second gloo message of exactly that length on tag
// 2*tag + 1, which lands in place. Headers and other small messages thus
// cost one gloo operation, not two.
constexpr size_t kLengthBytes = sizeof(uint64_t);
constexpr size_t kLeadBytes = 1024;
constexpr size_t kInlineBytes = kLeadBytes - kLengthBytes;
// Lead receives kept posted on each (peer, tag) once it has been received
// on: a message whose receive is posted is written by the sender at once and
// read by gloo's thread as it arrives, instead of waiting for a round trip
// (the sender's "ready to send", the receiver's "ready to receive") when the
// receiver asks for it. 16 KiB a channel.
constexpr size_t kLeadsPosted = 16;
// Small sends are copied and left in flight (the caller's buffer is free at
// once, as MPI's eager protocol does); at most this many per peer, then a
// Send waits for the oldest.
constexpr size_t kEagerPerPeer = 128;

at::Tensor Blob(void* data, size_t bytes) {
  return at::from_blob(data, {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
}

Status WaitedTwice() {
  return Status::FailedPrecondition("a started transfer was already waited for");
}

// The gloo tag of the collectives' messages: above every message's (2 * tag
// + 1 for tags up to kMaxTag).
constexpr int kCollectiveTag = 2 * (runtime::kMaxTag + 1);

// Bytes per rank of Allgather's single-collective slot: 1 KiB up to 64
// ranks, then shrinking so that a slot allgather receives at most 64 KiB
// (never below 64 bytes).
size_t AllgatherSlotBytes(int size) {
  const size_t per_rank = (size_t{64} << 10) / static_cast<size_t>(std::max(size, 1));
  return std::clamp<size_t>(per_rank, 64, 1024);
}

class GlooTransport final : public Transport {
 public:
  GlooTransport(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size,
                std::chrono::milliseconds timeout)
      : pg_(std::move(pg)),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        send_mu_(static_cast<size_t>(size)),
        eager_(static_cast<size_t>(size)) {}

  ~GlooTransport() override {
    // Small messages sent eagerly are delivered before the connections close
    // (a blocking send would have waited for them too), within the timeout;
    // the lead receives stay posted meanwhile, so that peers closing at the
    // same time deliver theirs here. Then the posted receives and the
    // process group go.
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (auto& q : eager_) {
      for (auto& work : q) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (broken_.load() || left.count() <= 0) break;
        try {
          work->wait(left);
        } catch (const std::exception&) {
          broken_.store(true);
        }
      }
      q.clear();
    }
    channels_.clear();
    pg_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  Status Barrier() override {
    std::vector<at::Tensor> one{at::zeros({1}, at::kByte)};
    return GatherBytes(one, "barrier").status();
  }

  Result<bool> AllTrue(bool mine) override {
    MEMENTO_ASSIGN_OR_RETURN(int64_t v, Reduce(mine ? 1 : 0, c10d::ReduceOp::MIN));
    return v == 1;
  }
  Result<int64_t> AllReduceMax(int64_t mine) override { return Reduce(mine, c10d::ReduceOp::MAX); }
  Result<int64_t> AllReduceMin(int64_t mine) override { return Reduce(mine, c10d::ReduceOp::MIN); }

  Result<std::vector<std::vector<uint8_t>>> Allgather(const void* data, size_t bytes) override {
    // One allgather of a fixed slot per rank: the length, then the message's
    // first bytes. Only when a message did not fit does a second allgather
    // carry the rest (padded to the longest rest). The engine's allgathers are
    // mostly small, and a collective costs its latency, not its bytes.
    const size_t slot = AllgatherSlotBytes(size_);
    const size_t inline_bytes = slot - sizeof(int64_t);
    const auto head_bytes = std::min(bytes, inline_bytes);
    std::vector<at::Tensor> head{at::zeros({static_cast<int64_t>(slot)}, at::kByte)};
    const int64_t length = static_cast<int64_t>(bytes);
    std::memcpy(head[0].data_ptr(), &length, sizeof(length));
    if (head_bytes != 0) std::memcpy(head[0].data_ptr<uint8_t>() + sizeof(length), data, head_bytes);
    MEMENTO_ASSIGN_OR_RETURN(std::vector<at::Tensor> heads, GatherBytes(head, "allgather"));
    std::vector<size_t> lengths(size_);
    size_t longest = 0;
    std::vector<std::vector<uint8_t>> result(size_);
    for (int r = 0; r < size_; ++r) {
      const uint8_t* p = heads[r].data_ptr<uint8_t>();
      int64_t n = 0;
      std::memcpy(&n, p, sizeof(n));
      lengths[r] = static_cast<size_t>(n);
      longest = std::max(longest, lengths[r]);
      result[r].assign(p + sizeof(n), p + sizeof(n) + std::min(lengths[r], inline_bytes));
    }
    if (longest <= inline_bytes) return result;
    std::vector<at::Tensor> tail{at::zeros({static_cast<int64_t>(longest - inline_bytes)}, at::kByte)};
    if (bytes > inline_bytes) {
      std::memcpy(tail[0].data_ptr(), static_cast<const uint8_t*>(data) + inline_bytes,
                  bytes - inline_bytes);
    }
    MEMENTO_ASSIGN_OR_RETURN(std::vector<at::Tensor> tails, GatherBytes(tail, "allgather"));
    for (int r = 0; r < size_; ++r) {
      if (lengths[r] <= inline_bytes) continue;
      const uint8_t* p = tails[r].data_ptr<uint8_t>();
      result[r].insert(result[r].end(), p, p + (lengths[r] - inline_bytes));
    }
    return result;
  }

  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    MEMENTO_RETURN_IF_ERROR(CheckPeer(peer, tag));
    if (peer == rank_) return SendSelf(tag, data, bytes);
    c10::intrusive_ptr<c10d::Work> payload;
    MEMENTO_RETURN_IF_ERROR(Post(peer, tag, data, bytes, &payload));
    return payload ? WaitWork("send", payload) : Status::Ok();
  }

  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    MEMENTO_RETURN_IF_ERROR(CheckPeer(peer, tag));
    if (peer == rank_) return RecvSelf(tag, data, capacity);
    return Take(peer, tag, data, capacity);
  }

  // Each message costs a round trip (see PrefersFewerMessages in transport.h).
  bool PrefersFewerMessages() const override { return true; }

  // A send is posted at once: small messages are copied and left in flight,
  // a large payload moves while the caller goes on, until Wait.
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    MEMENTO_RETURN_IF_ERROR(CheckPeer(peer, tag));
    c10::intrusive_ptr<c10d::Work> payload;
    if (peer == rank_) {
      MEMENTO_RETURN_IF_ERROR(SendSelf(tag, data, bytes));
    } else {
      MEMENTO_RETURN_IF_ERROR(Post(peer, tag, data, bytes, &payload));
    }
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<PendingSend>(this, std::move(payload), bytes));
  }

  // The receive takes its message when waited for (dropped unwaited, it takes
  // none, as a cancelled one); starting it posts the channel's lead receives,
  // so that the message's lead, and the next ones, arrive meanwhile.
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    MEMENTO_RETURN_IF_ERROR(CheckPeer(peer, tag));
    if (peer != rank_) {
      // Busy: a receive of this channel is taking a message and tops it up.
      Channel& ch = ChannelOf(peer, tag);
      std::unique_lock<std::mutex> lock(ch.mu, std::try_to_lock);
      if (lock.owns_lock()) MEMENTO_RETURN_IF_ERROR(TopUpForTake(&ch, peer, tag));
    }
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<PendingRecv>(this, peer, tag, data, capacity));
  }

 private:
  // A lead receive posted on a channel: its buffer and its gloo work.
  struct Lead {
    at::Tensor buffer;
    c10::intrusive_ptr<c10d::Work> work;
  };
  // One (peer, tag) of receives: its leads, oldest first. `mu` is held by the
  // one receive taking a message, from its lead to its payload, so that the
  // payloads (matched by gloo in the order their receives are posted) go to
  // the receives whose leads announced them.
  struct Channel {
    std::mutex mu;
    std::deque<Lead> leads;
  };

  class PendingSend final : public PendingTransfer {
   public:
    PendingSend(GlooTransport* t, c10::intrusive_ptr<c10d::Work> payload, size_t bytes)
        : t_(t), payload_(std::move(payload)), bytes_(bytes) {}
    ~PendingSend() override {
      if (!waited_) (void)Wait();  // a send dropped unwaited is finished, as Wait
    }
    Result<size_t> Wait() override {
      if (std::exchange(waited_, true)) return WaitedTwice();
      if (payload_) MEMENTO_RETURN_IF_ERROR(t_->WaitWork("send", payload_));
      payload_.reset();
      return bytes_;
    }

   private:
    GlooTransport* const t_;
    c10::intrusive_ptr<c10d::Work> payload_;
    const size_t bytes_;
    bool waited_ = false;
  };

  class PendingRecv final : public PendingTransfer {
   public:
    PendingRecv(GlooTransport* t, int peer, int tag, void* data, size_t capacity)
        : t_(t), peer_(peer), tag_(tag), data_(data), capacity_(capacity) {}
    Result<size_t> Wait() override {
      if (std::exchange(waited_, true)) return WaitedTwice();  // would take another message
      return t_->Recv(peer_, tag_, data_, capacity_);
    }

   private:
    GlooTransport* const t_;
    const int peer_, tag_;
    void* const data_;
    const size_t capacity_;
    bool waited_ = false;
  };

  Status CheckPeer(int peer, int tag) const {
    if (peer < 0 || peer >= size_) {
      return Status::InvalidArgument("gloo transport: peer " + std::to_string(peer) +
                                     " out of range 0.." + std::to_string(size_ - 1));
    }
    if (tag < 0 || tag > runtime::kMaxTag) {
      return Status::InvalidArgument("gloo transport: tag " + std::to_string(tag) +
                                     " out of range 0.." + std::to_string(runtime::kMaxTag));
    }
    if (broken_.load()) return Status::Unavailable("gloo transport: broken by an earlier failure");
    return Status::Ok();
  }

  // Posts the lead of a message to `peer` and, for a long one, its payload,
  // whose work goes to *payload (left empty for a message sent inline).
  Status Post(int peer, int tag, const void* data, size_t bytes,
              c10::intrusive_ptr<c10d::Work>* payload) {
    // A message's lead and payload are posted back to back, so that two
    // threads' messages to one peer and tag never cross.
    std::lock_guard<std::mutex> lock(send_mu_[peer]);
    std::deque<c10::intrusive_ptr<c10d::Work>>& eager = eager_[peer];
    while (eager.size() >= kEagerPerPeer) {
      c10::intrusive_ptr<c10d::Work> oldest = std::move(eager.front());
      eager.pop_front();
      MEMENTO_RETURN_IF_ERROR(WaitWork("send", oldest));
    }
    const bool inline_bytes = bytes <= kInlineBytes;
    std::vector<at::Tensor> lead{
        at::empty({static_cast<int64_t>(kLengthBytes + (inline_bytes ? bytes : 0))}, at::kByte)};
    const uint64_t length = bytes;
    std::memcpy(lead[0].data_ptr(), &length, kLengthBytes);
    if (inline_bytes && bytes != 0) {
      std::memcpy(lead[0].data_ptr<uint8_t>() + kLengthBytes, data, bytes);
    }
    c10::intrusive_ptr<c10d::Work> work;
    MEMENTO_RETURN_IF_ERROR(Start(
        "send", [&] { return pg_->send(lead, peer, 2 * tag); }, &work));
    eager.push_back(std::move(work));  // its tensor stays alive with it
    if (inline_bytes) return Status::Ok();
    std::vector<at::Tensor> body{Blob(const_cast<void*>(data), bytes)};
    return Start(
        "send", [&] { return pg_->send(body, peer, 2 * tag + 1); }, payload);
  }

  Channel& ChannelOf(int peer, int tag) {
    std::lock_guard<std::mutex> lock(channels_mu_);
    std::unique_ptr<Channel>& ch = channels_[{peer, tag}];
    if (!ch) ch = std::make_unique<Channel>();
    return *ch;
  }

  // Keeps kLeadsPosted lead receives posted on `ch` (under ch->mu).
  Status TopUp(Channel* ch, int peer, int tag) {
    while (ch->leads.size() < kLeadsPosted) {
      Lead lead{at::empty({static_cast<int64_t>(kLeadBytes)}, at::kByte), {}};
      std::vector<at::Tensor> into{lead.buffer};
      MEMENTO_RETURN_IF_ERROR(Start(
          "recv", [&] { return pg_->recv(into, peer, 2 * tag); }, &lead.work));
      ch->leads.push_back(std::move(lead));
    }
    return Status::Ok();
  }

  // TopUp for a receive about to take a lead: a failure to post more (the
  // peer closed its connection after sending) fails it only when no lead is
  // left to take. Leads already posted may hold messages that arrived before
  // the close, which MPI would deliver as well.
  Status TopUpForTake(Channel* ch, int peer, int tag) {
    Status topped = TopUp(ch, peer, tag);
    return ch->leads.empty() ? topped : Status::Ok();
  }

  // Takes the next message of (peer, tag): its lead, then its payload.
  Result<size_t> Take(int peer, int tag, void* data, size_t capacity) {
    Channel& ch = ChannelOf(peer, tag);
    std::lock_guard<std::mutex> lock(ch.mu);
    MEMENTO_RETURN_IF_ERROR(TopUpForTake(&ch, peer, tag));
    Lead lead = std::move(ch.leads.front());
    ch.leads.pop_front();
    MEMENTO_RETURN_IF_ERROR(WaitWork("recv", lead.work));
    // This message arrived: it is returned whatever posting the next lead
    // does (the next Take reports a failure that leaves it nothing to take).
    (void)TopUp(&ch, peer, tag);
    uint64_t bytes = 0;
    std::memcpy(&bytes, lead.buffer.data_ptr(), kLengthBytes);
    if (bytes <= kInlineBytes) {
      if (bytes > capacity) return TooLong(peer, tag, bytes, capacity);
      if (bytes != 0) std::memcpy(data, lead.buffer.data_ptr<uint8_t>() + kLengthBytes, bytes);
      return static_cast<size_t>(bytes);
    }
    // Too long for `data`: taken into a buffer of its own, then refused.
    std::vector<at::Tensor> body{bytes <= capacity
                                     ? Blob(data, bytes)
                                     : at::empty({static_cast<int64_t>(bytes)}, at::kByte)};
    c10::intrusive_ptr<c10d::Work> work;
    MEMENTO_RETURN_IF_ERROR(Start(
        "recv", [&] { return pg_->recv(body, peer, 2 * tag + 1); }, &work));
    MEMENTO_RETURN_IF_ERROR(WaitWork("recv", work));
    if (bytes > capacity) return TooLong(peer, tag, bytes, capacity);
    return static_cast<size_t>(bytes);
  }

  static Status TooLong(int peer, int tag, uint64_t bytes, size_t capacity) {
    return Status::InvalidArgument("gloo transport: message of " + std::to_string(bytes) +
                                   " bytes from rank " + std::to_string(peer) + " tag " +
                                   std::to_string(tag) + " exceeds the receive capacity " +
                                   std::to_string(capacity));
  }

  Status SendSelf(int tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(self_mu_);
    self_box_[tag].emplace_back(static_cast<const uint8_t*>(data),
                                static_cast<const uint8_t*>(data) + bytes);
    self_cv_.notify_all();
    return Status::Ok();
  }

  Result<size_t> RecvSelf(int tag, void* data, size_t capacity) {
    std::unique_lock<std::mutex> lock(self_mu_);
    // Abort ends the wait too, as it ends those of other peers' messages.
    if (!self_cv_.wait_for(lock, timeout_,
                           [&] { return !self_box_[tag].empty() || broken_.load(); })) {
      return Status::Timeout("gloo transport: no message from self with tag " +
                             std::to_string(tag));
    }
    if (self_box_[tag].empty()) return Status::Unavailable("gloo transport: aborted");
    std::vector<uint8_t> m = std::move(self_box_[tag].front());
    self_box_[tag].pop_front();
    if (m.size() > capacity) {
      return Status::InvalidArgument("gloo transport: message of " + std::to_string(m.size()) +
                                     " bytes exceeds the receive capacity " +
                                     std::to_string(capacity));
    }
    if (!m.empty()) std::memcpy(data, m.data(), m.size());
    return m.size();
  }

  // Every rank's value gathered, reduced here (the collectives carry a few
  // bytes a rank: gathering costs what reducing on the way would).
  Result<int64_t> Reduce(int64_t mine, c10d::ReduceOp op) {
    std::vector<at::Tensor> t{at::empty({sizeof(int64_t)}, at::kByte)};
    std::memcpy(t[0].data_ptr(), &mine, sizeof(mine));
    MEMENTO_ASSIGN_OR_RETURN(std::vector<at::Tensor> all, GatherBytes(t, "allreduce"));
    int64_t out = mine;
    for (const at::Tensor& v : all) {
      int64_t x = 0;
      std::memcpy(&x, v.data_ptr(), sizeof(x));
      out = op == c10d::ReduceOp::MIN ? std::min(out, x) : std::max(out, x);
    }
    return out;
  }

  // A gloo failure as a Status. A collective's failure or any timeout breaks
  // the transport (gloo's own timeout has already failed every operation of
  // its context); a point-to-point operation that failed otherwise (a peer
  // gone) does not by itself.
  Status Failure(const char* what, const std::exception& e, bool collective) {
    const std::string msg = e.what();
    const bool timed_out =
        msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
    if (collective || timed_out) broken_.store(true);
    const std::string text =
        std::string("gloo transport: ") + what + " failed: " + msg.substr(0, msg.find('\n'));
    return timed_out ? Status::Timeout(text) : Status::Unavailable(text);
  }

  // Posts a point-to-point operation; its work goes to *work.
  template <typename F>
  Status Start(const char* what, F&& start, c10::intrusive_ptr<c10d::Work>* work) {
    if (broken_.load()) return Status::Unavailable("gloo transport: broken by an earlier failure");
    try {
      *work = start();
      return Status::Ok();
    } catch (const std::exception& e) {
      return Failure(what, e, false);
    }
  }

  // Aborts the receives and sends being waited for, the collectives' among
  // them: gloo keeps a receive pending in its context, not on the pair, so a
  // peer's closed connection does not end it; only its abort (or the
  // timeout) does.
  void Abort() override {
    broken_.store(true);
    {
      std::lock_guard<std::mutex> lock(waiting_mu_);
      for (const auto& [work, count] : waiting_) {
        try {
          work->abort();
        } catch (const std::exception&) {
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(self_mu_);  // a waiter checks broken_ under it
    }
    self_cv_.notify_all();
  }

  bool Aborted() const override { return broken_.load(); }

  // Registers `work` as waited for (Abort aborts it) for its lifetime.
  class Waiting {
   public:
    Waiting(GlooTransport* t, const c10::intrusive_ptr<c10d::Work>& w) : t_(t), w_(w.get()) {
      std::lock_guard<std::mutex> lock(t_->waiting_mu_);
      aborted_ = t_->broken_.load();
      if (!aborted_) ++t_->waiting_[w_];
    }
    ~Waiting() {
      if (aborted_) return;
      std::lock_guard<std::mutex> lock(t_->waiting_mu_);
      if (--t_->waiting_[w_] == 0) t_->waiting_.erase(w_);
    }
    bool aborted() const { return aborted_; }

   private:
    GlooTransport* t_;
    c10d::Work* w_;
    bool aborted_ = false;
  };

  // Waits for a posted point-to-point operation, at most `timeout` (the
  // transport's by default); a failed one is aborted, so nothing of it stays
  // posted.
  Status WaitWork(const char* what, const c10::intrusive_ptr<c10d::Work>& work,
                  bool collective = false, std::chrono::milliseconds timeout = {}) {
    Waiting waiting(this, work);
    if (waiting.aborted()) {
      AbortWork(work);
      return Status::Unavailable("gloo transport: aborted");
    }
    try {
      // gloo returns false, without throwing, when the operation was aborted
      // (Abort): nothing was received into the buffer, or sent. Taken as
      // done, a collective's last receive would hand back the bytes its
      // buffer held before, a vote no peer cast.
      if (!work->wait(timeout.count() > 0 ? timeout : timeout_)) {
        broken_.store(true);
        return Status::Unavailable(std::string("gloo transport: ") + what + " aborted");
      }
      return Status::Ok();
    } catch (const std::exception& e) {
      AbortWork(work);
      return Failure(what, e, collective);
    }
  }

  static void AbortWork(const c10::intrusive_ptr<c10d::Work>& work) {
    try {
      work->abort();
    } catch (const std::exception&) {
    }
  }

  // Every rank's `mine` (one byte tensor, the same length everywhere), in
  // rank order: Bruck's allgather, ceil(log2(size)) rounds of one send and one
  // receive, made of point-to-point operations because those are what gloo
  // can abort (Abort ends a collective a lost peer left waiting; gloo's own
  // collectives run to their timeout). Collectives of a rank run one at a
  // time, so that their messages, on one gloo tag, meet in order. A failure
  // breaks the transport, as the engine's collectives expect.
  Result<std::vector<at::Tensor>> GatherBytes(std::vector<at::Tensor>& mine, const char* what) {
    std::lock_guard<std::mutex> lock(collective_mu_);
    if (broken_.load()) return Status::Unavailable("gloo transport: broken by an earlier failure");
    const int64_t block = mine[0].numel();
    // blocks[i] is rank (rank_ + i) % size_'s, once received.
    at::Tensor blocks = at::empty({static_cast<int64_t>(size_) * block}, at::kByte);
    blocks.narrow(0, 0, block).copy_(mine[0]);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int k = 1; k < size_; k *= 2) {
      const int64_t count = std::min(k, size_ - k) * block;
      const int to = (rank_ - k + size_) % size_, from = (rank_ + k) % size_;
      std::vector<at::Tensor> out{blocks.narrow(0, 0, count)};
      std::vector<at::Tensor> in{blocks.narrow(0, static_cast<int64_t>(k) * block, count)};
      c10::intrusive_ptr<c10d::Work> recv, send;
      Status posted = Start(
          what, [&] { return pg_->recv(in, from, kCollectiveTag); }, &recv);
      if (posted.ok()) {
        posted = Start(
            what, [&] { return pg_->send(out, to, kCollectiveTag); }, &send);
      }
      Status done = posted;
      for (const auto* work : {&send, &recv}) {
        if (!*work) continue;
        if (!done.ok()) {
          AbortWork(*work);
          continue;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        done = WaitWork(what, *work, /*collective=*/true,
                        std::max(left, std::chrono::milliseconds(1)));
      }
      if (!done.ok()) {
        broken_.store(true);
        return done;
      }
    }
    std::vector<at::Tensor> all(size_);
    for (int i = 0; i < size_; ++i) {
      all[(rank_ + i) % size_] = blocks.narrow(0, static_cast<int64_t>(i) * block, block);
    }
    return all;
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> broken_{false};
  std::mutex collective_mu_;  // one collective at a time (GatherBytes)
  // The point-to-point works being waited for (how many waiters each), for Abort.
  std::mutex waiting_mu_;
  std::map<c10d::Work*, int> waiting_;
  std::vector<std::mutex> send_mu_;
  // Per peer: the leads (and inline messages) sent, oldest first, until
  // reclaimed (under send_mu_[peer]).
  std::vector<std::deque<c10::intrusive_ptr<c10d::Work>>> eager_;
  std::mutex channels_mu_;
  std::map<std::pair<int, int>, std::unique_ptr<Channel>> channels_;
  std::mutex self_mu_;
  std::condition_variable self_cv_;
  std::map<int, std::deque<std::vector<uint8_t>>> self_box_;
};

Result<int> EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return Status::InvalidArgument(std::string("torchrun launch: ") + name + " is not set");
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30)) {
    return Status::InvalidArgument(std::string("torchrun launch: ") + name + "='" + v +
                                   "' is not a non-negative integer");
  }
  return static_cast<int>(x);
}

}  // namespace

Result<GlooTransportOptions> GlooOptionsFromEnv(const std::string& job,
                                                std::chrono::milliseconds timeout) {
  GlooTransportOptions o;
  MEMENTO_ASSIGN_OR_RETURN(o.rank, EnvInt("RANK"));
  MEMENTO_ASSIGN_OR_RETURN(o.size, EnvInt("WORLD_SIZE"));
  MEMENTO_ASSIGN_OR_RETURN(o.master_port, EnvInt("MASTER_PORT"));
  if (o.size < 1 || o.rank >= o.size) {
    return Status::InvalidArgument("torchrun launch: RANK " + std::to_string(o.rank) +
                                   " is not below WORLD_SIZE " + std::to_string(o.size));
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return Status::InvalidArgument("torchrun launch: MASTER_PORT " + std::to_string(o.master_port) +
                                   " is not a port");
  }
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  o.agent_store = agent != nullptr && std::string(agent) == "True";
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') {
    return Status::InvalidArgument("torchrun launch: MASTER_ADDR is not set");
  }
  o.master_addr = addr;
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  o.prefix = "memento/" + job + "/" + (restart != nullptr ? restart : "0") + "/";
  // In-job recovery: each membership of the job forms its transports anew.
  if (const char* generation = std::getenv("MEMENTO_LAUNCH_GENERATION"); generation != nullptr) {
    o.prefix += std::string("g") + generation + "/";
  }
  o.timeout = timeout;
  return o;
}

Result<std::shared_ptr<runtime::Transport>> CreateGlooTransport(
    const GlooTransportOptions& options) {
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(options.master_port);
    // Without the agent's store, rank 0 serves the store at MASTER_PORT as
    // torch's env:// rendezvous does, multi-tenant: the application's own
    // init_process_group in the same process, before or after this, shares
    // that server instead of binding the port a second time.
    so.isServer = !options.agent_store && options.rank == 0;
    so.multiTenant = so.isServer;
    so.numWorkers = options.size;
    so.waitWorkers = false;
    so.timeout = options.timeout;
    tcp = c10::make_intrusive<c10d::TCPStore>(options.master_addr, so);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    const std::string how =
        options.agent_store
            ? "as a client of torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True)"
        : options.rank == 0 ? "hosting it (TORCHELASTIC_USE_AGENT_STORE is not True: rank 0 "
                              "serves the store there, shared with the application's own "
                              "process group; another process holds the port?)"
                            : "as a client of rank 0's store";
    return Status::Unavailable("gloo transport: cannot open the store at MASTER_ADDR:MASTER_PORT " +
                               where + " " + how + ": " + msg.substr(0, msg.find('\n')));
  }
  try {
    // The n-th transport a process creates for a rank under a prefix meets
    // the other ranks' n-th (creation is collective) under keys of its own: a
    // later one (a second Checkpointer, or one opened again after close)
    // would otherwise read the addresses an earlier one left in the store.
    // Counted per rank too, so that ranks that are threads of one process
    // (tests) count alike.
    int n = 0;
    {
      static std::mutex mu;
      static std::map<std::pair<std::string, int>, int> created;
      std::lock_guard<std::mutex> lock(mu);
      n = created[{options.prefix, options.rank}]++;
    }
    auto store =
        c10::make_intrusive<c10d::PrefixStore>(options.prefix + std::to_string(n) + "/", tcp);
    auto pg_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    pg_options->devices.push_back(ifname != nullptr && *ifname != '\0'
                                      ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                      : c10d::ProcessGroupGloo::createDefaultDevice());
    pg_options->threads = 2;
    auto pg =
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank, options.size, pg_options);
    return std::shared_ptr<runtime::Transport>(std::make_shared<GlooTransport>(
        std::move(pg), options.rank, options.size, options.timeout));
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return Status::Unavailable(
        "gloo transport: cannot join the process group through the store at " + where + ": " +
        msg.substr(0, msg.find('\n')));
  }
}

}  // namespace memento::torch_adapter
