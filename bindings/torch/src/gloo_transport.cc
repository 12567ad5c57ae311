#include "memento/torch/gloo_transport.h"

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

at::Tensor Blob(void* data, size_t bytes) {
  return at::from_blob(data, {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
}

class GlooTransport final : public Transport {
 public:
  GlooTransport(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size,
                std::chrono::milliseconds timeout)
      : pg_(std::move(pg)),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        send_mu_(static_cast<size_t>(size)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  Status Barrier() override {
    return Collective("barrier", [&] { return pg_->barrier(); });
  }

  Result<bool> AllTrue(bool mine) override {
    MEMENTO_ASSIGN_OR_RETURN(int64_t v, Reduce(mine ? 1 : 0, c10d::ReduceOp::MIN));
    return v == 1;
  }
  Result<int64_t> AllReduceMax(int64_t mine) override { return Reduce(mine, c10d::ReduceOp::MAX); }
  Result<int64_t> AllReduceMin(int64_t mine) override { return Reduce(mine, c10d::ReduceOp::MIN); }

  Result<std::vector<std::vector<uint8_t>>> Allgather(const void* data, size_t bytes) override {
    std::vector<at::Tensor> in{at::full({1}, static_cast<int64_t>(bytes), at::kLong)};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(at::empty({1}, at::kLong));
    MEMENTO_RETURN_IF_ERROR(Collective("allgather", [&] { return pg_->allgather(out, in); }));
    std::vector<size_t> lengths(size_);
    size_t longest = 0;
    for (int r = 0; r < size_; ++r) {
      lengths[r] = static_cast<size_t>(out[0][r].item<int64_t>());
      longest = std::max(longest, lengths[r]);
    }
    std::vector<std::vector<uint8_t>> result(size_);
    if (longest == 0) return result;
    std::vector<at::Tensor> payload{at::zeros({static_cast<int64_t>(longest)}, at::kByte)};
    if (bytes != 0) std::memcpy(payload[0].data_ptr(), data, bytes);
    std::vector<std::vector<at::Tensor>> gathered(1);
    for (int r = 0; r < size_; ++r) {
      gathered[0].push_back(at::empty({static_cast<int64_t>(longest)}, at::kByte));
    }
    MEMENTO_RETURN_IF_ERROR(
        Collective("allgather", [&] { return pg_->allgather(gathered, payload); }));
    for (int r = 0; r < size_; ++r) {
      const uint8_t* p = gathered[0][r].data_ptr<uint8_t>();
      result[r].assign(p, p + lengths[r]);
    }
    return result;
  }

  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    MEMENTO_RETURN_IF_ERROR(CheckPeer(peer, tag));
    if (peer == rank_) {
      std::lock_guard<std::mutex> lock(self_mu_);
      self_box_[tag].emplace_back(static_cast<const uint8_t*>(data),
                                  static_cast<const uint8_t*>(data) + bytes);
      self_cv_.notify_all();
      return Status::Ok();
    }
    std::lock_guard<std::mutex> lock(send_mu_[peer]);
    std::vector<at::Tensor> header{at::full({1}, static_cast<int64_t>(bytes), at::kLong)};
    MEMENTO_RETURN_IF_ERROR(PointToPoint("send", [&] { return pg_->send(header, peer, 2 * tag); }));
    if (bytes == 0) return Status::Ok();
    std::vector<at::Tensor> payload{Blob(const_cast<void*>(data), bytes)};
    return PointToPoint("send", [&] { return pg_->send(payload, peer, 2 * tag + 1); });
  }

  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    MEMENTO_RETURN_IF_ERROR(CheckPeer(peer, tag));
    if (peer == rank_) return RecvSelf(tag, data, capacity);
    std::mutex* mu;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      mu = &recv_mu_[{peer, tag}];
    }
    std::lock_guard<std::mutex> lock(*mu);
    std::vector<at::Tensor> header{at::empty({1}, at::kLong)};
    MEMENTO_RETURN_IF_ERROR(PointToPoint("recv", [&] { return pg_->recv(header, peer, 2 * tag); }));
    const size_t bytes = static_cast<size_t>(header[0].item<int64_t>());
    if (bytes == 0) return size_t{0};
    at::Tensor into =
        bytes <= capacity ? Blob(data, bytes) : at::empty({(int64_t)bytes}, at::kByte);
    std::vector<at::Tensor> payload{into};
    MEMENTO_RETURN_IF_ERROR(
        PointToPoint("recv", [&] { return pg_->recv(payload, peer, 2 * tag + 1); }));
    if (bytes > capacity) {
      return Status::InvalidArgument("gloo transport: message of " + std::to_string(bytes) +
                                     " bytes from rank " + std::to_string(peer) + " tag " +
                                     std::to_string(tag) + " exceeds the receive capacity " +
                                     std::to_string(capacity));
    }
    return bytes;
  }

 private:
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

  Result<size_t> RecvSelf(int tag, void* data, size_t capacity) {
    std::unique_lock<std::mutex> lock(self_mu_);
    if (!self_cv_.wait_for(lock, timeout_, [&] { return !self_box_[tag].empty(); })) {
      return Status::Timeout("gloo transport: no message from self with tag " +
                             std::to_string(tag));
    }
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

  Result<int64_t> Reduce(int64_t mine, c10d::ReduceOp op) {
    std::vector<at::Tensor> t{at::full({1}, mine, at::kLong)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    MEMENTO_RETURN_IF_ERROR(Collective("allreduce", [&] { return pg_->allreduce(t, opts); }));
    return t[0].item<int64_t>();
  }

  // Runs a gloo operation and waits for it; a failure breaks the transport
  // when `breaks` (collectives, timed-out receives).
  template <typename F>
  Status Run(const char* what, F&& start, bool collective) {
    if (broken_.load()) return Status::Unavailable("gloo transport: broken by an earlier failure");
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = start();
      work->wait(timeout_);
      return Status::Ok();
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      const bool timed_out =
          msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
      if (collective || timed_out) broken_.store(true);
      if (work && !collective) {
        try {
          work->abort();
        } catch (const std::exception&) {
        }
      }
      const std::string text =
          std::string("gloo transport: ") + what + " failed: " + msg.substr(0, msg.find('\n'));
      return timed_out ? Status::Timeout(text) : Status::Unavailable(text);
    }
  }
  template <typename F>
  Status Collective(const char* what, F&& start) {
    return Run(what, std::forward<F>(start), true);
  }
  template <typename F>
  Status PointToPoint(const char* what, F&& start) {
    return Run(what, std::forward<F>(start), false);
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> broken_{false};
  std::vector<std::mutex> send_mu_;
  std::mutex map_mu_;
  std::map<std::pair<int, int>, std::mutex> recv_mu_;
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
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  o.agent_store = agent != nullptr && std::string(agent) == "True";
  // Without the agent's store, rank 0 hosts one at MASTER_PORT + 1.
  if (o.master_port < 1 || o.master_port > (o.agent_store ? 65535 : 65534)) {
    return Status::InvalidArgument("torchrun launch: MASTER_PORT " + std::to_string(o.master_port) +
                                   " is not a port");
  }
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') {
    return Status::InvalidArgument("torchrun launch: MASTER_ADDR is not set");
  }
  o.master_addr = addr;
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  o.prefix = "memento/" + job + "/" + (restart != nullptr ? restart : "0") + "/";
  o.timeout = timeout;
  return o;
}

Result<std::shared_ptr<runtime::Transport>> CreateGlooTransport(
    const GlooTransportOptions& options) {
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(options.agent_store ? options.master_port
                                                             : options.master_port + 1);
    so.isServer = !options.agent_store && options.rank == 0;
    so.numWorkers = options.size;
    so.waitWorkers = false;
    so.timeout = options.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(options.master_addr, so);
    // The n-th transport a process creates under a prefix meets the other
    // ranks' n-th (creation is collective) under keys of its own: a later
    // one (a second Checkpointer, or one opened again after close) would
    // otherwise read the addresses an earlier one left in the store.
    int n = 0;
    {
      static std::mutex mu;
      static std::map<std::string, int> created;
      std::lock_guard<std::mutex> lock(mu);
      n = created[options.prefix]++;
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
    return Status::Unavailable("gloo transport: cannot join the process group at " +
                               options.master_addr + ": " + msg.substr(0, msg.find('\n')));
  }
}

}  // namespace memento::torch_adapter
