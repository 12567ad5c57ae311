#include "mpi_collectives.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace memento::demo {
namespace {

class Mpi final : public Collectives {
 public:
  Mpi(MPI_Comm comm, std::function<void()> on_error) : comm_(comm), on_error_(std::move(on_error)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void Allgather(const torch::Tensor& mine, torch::Tensor& all) override {
    Check("allgather",
          MPI_Allgather(mine.data_ptr<float>(), static_cast<int>(mine.numel()), MPI_FLOAT,
                        all.data_ptr<float>(), static_cast<int>(mine.numel()), MPI_FLOAT, comm_));
  }
  void AllToAll(const torch::Tensor& send, torch::Tensor& recv) override {
    const int n = static_cast<int>(send.numel() / size_);
    Check("all-to-all", MPI_Alltoall(send.data_ptr<float>(), n, MPI_FLOAT, recv.data_ptr<float>(),
                                     n, MPI_FLOAT, comm_));
  }
  void AllgatherU64(uint64_t mine, uint64_t* all) override {
    Check("allgather", MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, comm_));
  }
  double AllreduceSum(double value) override {
    double sum = 0;
    Check("allreduce", MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm_));
    return sum;
  }
  uint64_t AllreduceMin(uint64_t value) override {
    uint64_t min = 0;
    Check("allreduce", MPI_Allreduce(&value, &min, 1, MPI_UINT64_T, MPI_MIN, comm_));
    return min;
  }
  void Barrier() override { Check("barrier", MPI_Barrier(comm_)); }

 private:
  void Check(const char* what, int rc) {
    if (rc == MPI_SUCCESS) return;
    if (on_error_) on_error_();
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(std::string("the training's MPI ") + what +
                             " failed: " + std::string(text, static_cast<size_t>(len)));
  }

  MPI_Comm comm_;
  std::function<void()> on_error_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Collectives> MpiCollectives(MPI_Comm comm, std::function<void()> on_error) {
  return std::make_unique<Mpi>(comm, std::move(on_error));
}

}  // namespace memento::demo
