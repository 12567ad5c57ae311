// memento::torch on another number of ranks: sharded tensors, their Adam state
// and replicated tensors restore elastically from the memory that survived.
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "harness/spawn.h"
#include "memento/torch/torch_checkpointer.h"
#include "optimizer_state_key.h"
#include "torch_test_util.h"

namespace memento::torch_adapter {
namespace {

using runtime::Config;
using testing::BitEqual;
using testing::JobGuard;
using testing::RunRanks;
using testing::UniqueJob;

// A tensor-parallel layer: rows [r0, r1) of a global [10 x 6] weight, and a
// per-rank buffer.
struct RowShard : torch::nn::Module {
  explicit RowShard(int64_t rows) {
    w = register_parameter("w", torch::zeros({rows, 6}));
    scale = register_buffer("scale", torch::zeros({3}));
  }
  at::Tensor w, scale;
};

constexpr int64_t kGlobalRows = 10;
at::Tensor GlobalW(double add) {
  return torch::arange(kGlobalRows * 6, at::kFloat).reshape({kGlobalRows, 6}) * 0.5 + add;
}
std::pair<int64_t, int64_t> RowRange(int n, int k) {
  return {kGlobalRows * k / n, kGlobalRows * (k + 1) / n};
}

// One rank of the elastic job: its slice of w (Adam state sharded with it),
// a replicated tensor and its own buffer, on node "vn/<id>".
struct ElasticRank {
  std::unique_ptr<TorchCheckpointer> ck;
  std::unique_ptr<RowShard> net;
  std::unique_ptr<torch::optim::Adam> adam;
  at::Tensor replicated = torch::zeros({37}, at::kLong);
  at::Tensor scalar = torch::tensor(0.0);  // 0-dimensional, whole on every rank
  int64_t r0 = 0, r1 = 0;
};

std::string OpenElastic(const std::string& job, int id, int rank, int n, bool elastic,
                        std::shared_ptr<runtime::Transport> transport, ElasticRank* out) {
  auto config = Config::FromMap({{"MEMENTO_JOB", job},
                                 {"MEMENTO_NODE", "vn/" + std::to_string(id)},
                                 {"MEMENTO_SCHEME", "replica:2"},
                                 {"MEMENTO_CHUNK_BYTES", "4K"},
                                 {"MEMENTO_TIMEOUT_S", "60"},
                                 {"MEMENTO_ELASTIC", elastic ? "1" : "0"}});
  if (!config.ok()) return config.status().ToString();
  auto ck = TorchCheckpointer::Create(*config, std::move(transport));
  if (!ck.ok()) return ck.status().ToString();
  out->ck = std::move(ck).value();
  std::tie(out->r0, out->r1) = RowRange(n, rank);
  out->net = std::make_unique<RowShard>(out->r1 - out->r0);
  out->adam = std::make_unique<torch::optim::Adam>(out->net->parameters());
  Status s = out->ck->RegisterModule(*out->net);
  if (s.ok()) s = out->ck->RegisterOptimizer(*out->adam);
  if (s.ok()) s = out->ck->SetShard("model.w", ShardSpec{{kGlobalRows, 6}, {out->r0, 0}});
  if (s.ok()) s = out->ck->Register("replicated", out->replicated, /*replicated=*/true);
  if (s.ok()) s = out->ck->Register("scalar", out->scalar);
  return s.ok() ? "" : s.ToString();
}

torch::optim::AdamParamState& AdamStateOfW(ElasticRank& e) {
  return static_cast<torch::optim::AdamParamState&>(*e.adam->state().at(StateKey(e.net->w)));
}

// Saved on 4 nodes, node 2 lost, relaunched on the 3 survivors: every rank
// gets its new rows of w and of Adam's state, the replicated tensor whole,
// and its own node's old buffer and extra state (step, user bytes).
TEST(TorchAdapterRanks, ShardedTensorsRestoreOntoFewerRanks) {
  JobGuard guard{UniqueJob("elastic")};
  auto saved = RunRanks(4, [&](int r, std::shared_ptr<runtime::Transport> t) -> std::string {
    ElasticRank e;
    if (std::string err = OpenElastic(guard.job, r, r, 4, false, t, &e); !err.empty()) return err;
    torch::NoGradGuard no_grad;
    at::Tensor mine = GlobalW(0).slice(0, e.r0, e.r1);
    e.net->w.copy_(mine);
    e.net->scale.fill_(r);
    e.scalar.fill_(r + 0.5);
    e.replicated.copy_(torch::arange(37, at::kLong) * 3);
    auto& st = AdamStateOfW(e);
    st.exp_avg().copy_(mine * 2);
    st.exp_avg_sq().copy_(mine * 3);
    st.step(11);
    e.ck->SetUserState("who", "rank " + std::to_string(r));
    Status s = e.ck->Save(5);
    if (s.ok()) s = e.ck->Wait();
    if (!s.ok()) return s.ToString();
    // Replicated and sharded entries are named after the tensor.
    for (const std::string& name : e.ck->EntryNames()) {
      if (name.find('@') != std::string::npos) return "entry " + name + " carries an offset";
    }
    return "";
  });
  for (int r = 0; r < 4; ++r) ASSERT_EQ(saved[r], "") << "rank " << r;
  ASSERT_NO_FATAL_FAILURE(runtime::testing::LoseNode(guard.job, "vn/2"));

  const std::vector<int> ids = {0, 1, 3};
  auto restored = RunRanks(3, [&](int r, std::shared_ptr<runtime::Transport> t) -> std::string {
    ElasticRank e;
    if (std::string err = OpenElastic(guard.job, ids[r], r, 3, true, t, &e); !err.empty()) {
      return err;
    }
    auto result = e.ck->Restore();
    if (!result.ok()) return result.status().ToString();
    if (!*result) return "nothing restored";
    const runtime::RestoreReport& rep = (*result)->report;
    if (!rep.elastic) return "not an elastic restore: " + rep.ToString();
    if ((*result)->step != 5) return "step " + std::to_string((*result)->step);
    for (const auto& entry : rep.entries) {
      if (entry.source == runtime::RestoreSource::kRemote) return entry.name + " from remote";
    }
    at::Tensor want = GlobalW(0).slice(0, e.r0, e.r1);
    auto& st = AdamStateOfW(e);
    if (!BitEqual(e.net->w, want)) return "w differs";
    if (!BitEqual(st.exp_avg(), want * 2) || !BitEqual(st.exp_avg_sq(), want * 3)) {
      return "Adam state differs";
    }
    if (st.step() != 11) return "Adam step " + std::to_string(st.step());
    if (!BitEqual(e.replicated, torch::arange(37, at::kLong) * 3)) return "replicated differs";
    // Whole per-rank tensors and the extra state: this node's old rank's.
    if (!BitEqual(e.net->scale, torch::full({3}, static_cast<float>(ids[r])))) {
      return "scale is not node " + std::to_string(ids[r]) + "'s";
    }
    if (e.scalar.item<double>() != ids[r] + 0.5) return "scalar is not node's";
    auto who = e.ck->UserState("who");
    if (!who || *who != "rank " + std::to_string(ids[r])) return "user state " + who.value_or("");
    // Training goes on under the new topology, once the snapshot is taken.
    if (Status w = e.ck->WaitSnapshot(); !w.ok()) return w.ToString();
    {
      torch::NoGradGuard no_grad;
      e.net->w.add_(1);
    }
    Status s = e.ck->Save(6);
    if (s.ok()) s = e.ck->Wait();
    return s.ok() ? "" : "save after the elastic restore: " + s.ToString();
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(restored[r], "") << "rank " << r;
}

}  // namespace
}  // namespace memento::torch_adapter
