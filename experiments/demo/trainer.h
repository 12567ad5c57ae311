// The demo's training job, whatever carries its collectives: a Trainer runs
// one attempt of the job (build the model, restore, train the steps left,
// finish) over the Collectives and the checkpoint transport it is given. The
// mains pick them: demo_main.cc (MPI_COMM_WORLD under mpirun, or gloo groups
// formed again after each loss under `memento launch --recovery in-job`) and
// demo_ulfm_main.cc (a world that repairs itself over ULFM).
//
// Thread-safety: one thread per Trainer.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives.h"
#include "gpt_model.h"
#include "memento/common/status.h"
#include "memento/launch/job_reporter.h"
#include "memento/runtime/config.h"
#include "memento/runtime/transport.h"
#include "memento/torch/torch_checkpointer.h"

namespace CLI {
class App;
}  // namespace CLI

namespace memento::demo {

struct Args {
  uint64_t steps = 40;
  uint64_t seed = 1;
  int64_t dim = 64, heads = 4, blocks = 2, context = 32, batch = 8;
  double lr = 3e-3;
  int ckpt_every = 1;
  std::string out;
  std::string hash_log;
  std::string baseline_remote;
  std::string pids;
  bool quiet = false;
};

// The options every main takes, into `args`.
void AddArgs(CLI::App& app, Args& args);
// Settings that CLI11 cannot check alone; the message names the problem ("" when fine).
std::string CheckArgs(const Args& args);

// What a Trainer's checkpointer runs over: the runtime's settings and a
// transport of the job's current membership. Called once per attempt, when
// the checkpointer is made (not for --baseline-remote).
struct Connection {
  runtime::Config config;
  std::shared_ptr<runtime::Transport> transport;
};
using ConnectFn = std::function<Result<Connection>()>;

class Trainer {
 public:
  // `reporter`: this attempt's side of `memento launch` (inactive without it).
  Trainer(const Args& args, Collectives& comm, launch::JobReporter reporter, ConnectFn connect);
  ~Trainer();

  // The whole attempt. Returns 0, or the exit code: 1 a checkpoint failed (or
  // no checkpointer could be made), 2 bad settings, 3 the restore failed.
  // A collective's failure throws (std::runtime_error, from comm).
  int Run();

 private:
  struct LoopStats {  // time per step and checkpoint stall, summed over this attempt's steps
    double step_sum = 0, stall_sum = 0;
    uint64_t counted = 0;
  };

  void Build();
  std::vector<std::pair<std::string, torch::Tensor>> Shard() const {
    return {{"param_slice", slice_}, {"adam_m", m_}, {"adam_v", v_}, {"meta", meta_}};
  }
  // Collective: hash of every rank's shard, combined in rank order.
  std::string StateHash() const;
  void GatherParams() { comm_.Allgather(slice_, flat_); }
  double TrainStep(uint64_t step);  // forward/backward/reduce-scatter; returns the mean loss
  void AdamUpdate(uint64_t step);
  Status BaselineSave(uint64_t step);
  uint64_t BaselineRestore();
  void ResumeBaseline(uint64_t* start);
  int ResumeMemento(uint64_t* start);
  int TrainLoop(uint64_t start, LoopStats* stats);
  int Finish(const LoopStats& stats);

  Args a_;
  Collectives& comm_;
  int rank_, size_;
  launch::JobReporter reporter_;
  ConnectFn connect_;
  std::vector<int64_t> data_;
  int64_t vocab_ = 0;
  Gpt model_{nullptr};
  std::vector<torch::Tensor> params_;
  int64_t total_ = 0, chunk_ = 0;
  torch::Tensor flat_, grad_flat_, grad_scratch_, grad_slice_, slice_, m_, v_, meta_;
  std::unique_ptr<torch_adapter::TorchCheckpointer> ck_;  // null for --baseline-remote
};

// Appends "rank pid attempt" to `path` (the in-job tests check that the
// survivors keep their processes); nothing when `path` is empty. The attempt
// is MEMENTO_LAUNCH_ATTEMPT + `generation` (a world repaired over ULFM counts
// its repairs as `memento launch` counts attempts).
void RecordProcess(const std::string& path, int rank, int generation = 0);

}  // namespace memento::demo
