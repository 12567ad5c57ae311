#include "collectives.h"

#include <cstdlib>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

namespace memento::demo {
namespace {

class Gloo final : public Collectives {
 public:
  Gloo(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size)
      : pg_(std::move(pg)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void Allgather(const torch::Tensor& mine, torch::Tensor& all) override {
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(all.narrow(0, r * mine.numel(), mine.numel()));
    std::vector<at::Tensor> in{mine};
    Wait(pg_->allgather(out, in));
  }
  void AllToAll(const torch::Tensor& send, torch::Tensor& recv) override {
    at::Tensor in = send, out = recv;
    std::vector<int64_t> even;  // equal splits
    Wait(pg_->alltoall_base(out, in, even, even));
  }
  void AllgatherU64(uint64_t mine, uint64_t* all) override {
    at::Tensor in = torch::tensor({static_cast<int64_t>(mine)}, torch::kLong);
    at::Tensor out = torch::empty({size_}, torch::kLong);
    Allgather(in, out);
    for (int r = 0; r < size_; ++r) all[r] = static_cast<uint64_t>(out[r].item<int64_t>());
  }
  double AllreduceSum(double value) override {
    std::vector<at::Tensor> t{torch::tensor({value}, torch::kDouble)};
    Wait(pg_->allreduce(t));
    return t[0].item<double>();
  }
  uint64_t AllreduceMin(uint64_t value) override {
    std::vector<at::Tensor> t{torch::tensor({static_cast<int64_t>(value)}, torch::kLong)};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MIN;
    Wait(pg_->allreduce(t, o));
    return static_cast<uint64_t>(t[0].item<int64_t>());
  }
  void Barrier() override { Wait(pg_->barrier()); }

 private:
  static void Wait(const c10::intrusive_ptr<c10d::Work>& work) { work->wait(); }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int rank_, size_;
};

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    throw std::runtime_error(std::string("gloo collectives: ") + name + " is not set");
  }
  return std::atoi(v);
}

}  // namespace

void Collectives::ReduceScatterSum(const torch::Tensor& send, torch::Tensor& scratch,
                                   torch::Tensor& out) {
  AllToAll(send, scratch);
  const int64_t n = out.numel();
  out.zero_();
  for (int r = 0; r < size(); ++r) out.add_(scratch.narrow(0, r * n, n));
}

std::unique_ptr<Collectives> GlooCollectives(const std::string& prefix,
                                             std::chrono::milliseconds timeout) {
  const int rank = EnvInt("RANK"), size = EnvInt("WORLD_SIZE"), port = EnvInt("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = rank == 0;
  so.multiTenant = so.isServer;  // memento's gloo transport serves the same port
  so.numWorkers = size;
  so.waitWorkers = false;
  so.timeout = timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(addr != nullptr ? addr : "127.0.0.1", so);
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  options->threads = 1;
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return std::make_unique<Gloo>(std::move(pg), rank, size);
}

}  // namespace memento::demo
