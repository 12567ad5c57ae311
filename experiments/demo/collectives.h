// The demo's training collectives, over one of two process groups:
//   MpiCollectives   an MPI communicator (mpi_collectives.h): MPI_COMM_WORLD
//                    under a plain mpirun, the working ranks of a world that
//                    repairs itself over ULFM.
//   GlooCollectives  libtorch's c10d ProcessGroupGloo over the TCP store at
//                    MASTER_ADDR:MASTER_PORT (rank 0 serves it, multi-tenant:
//                    memento's own gloo transport shares the server), for
//                    in-job recovery, where replacement ranks join processes
//                    that mpirun did not start. An error throws.
// Both give bit-identical results: the gradient's reduce-scatter is an
// all-to-all of the chunks followed by a local sum in rank order, so the
// arithmetic does not depend on the library's reduction order.
//
// Thread-safety: one thread per object.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/types.h>

namespace memento::demo {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // every rank's `mine` (n floats each) into `all` (size * n), in rank order.
  virtual void Allgather(const torch::Tensor& mine, torch::Tensor& all) = 0;
  // send: size chunks of n floats, chunk r for rank r; recv: rank r's chunk for
  // this rank at r * n.
  virtual void AllToAll(const torch::Tensor& send, torch::Tensor& recv) = 0;
  virtual void AllgatherU64(uint64_t mine, uint64_t* all) = 0;
  virtual double AllreduceSum(double value) = 0;
  virtual uint64_t AllreduceMin(uint64_t value) = 0;
  virtual void Barrier() = 0;

  // sum over ranks of their send chunk for this rank, in rank order, into `out`
  // (n floats); `scratch` holds size * n.
  void ReduceScatterSum(const torch::Tensor& send, torch::Tensor& scratch, torch::Tensor& out);
};

// Joins the group of RANK / WORLD_SIZE through the store at MASTER_ADDR /
// MASTER_PORT under the key prefix `prefix`; blocks until every rank joined.
// Throws (std::runtime_error naming the variable or the store) on failure.
std::unique_ptr<Collectives> GlooCollectives(const std::string& prefix,
                                             std::chrono::milliseconds timeout);

}  // namespace memento::demo
