// memento::torch over several in-process ranks: replicated tensors stored
// once and gathered on restore; lost committed checkpoints are an error, not
// a fresh start.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/spawn.h"
#include "memento/runtime/config.h"
#include "memento/torch/torch_checkpointer.h"
#include "test_job.h"
#include "torch_test_util.h"

namespace memento::torch_adapter {
namespace {

using runtime::Config;
using testing::BitEqual;
using testing::JobGuard;
using testing::MakeConfig;
using testing::RunRanks;
using testing::UniqueJob;

// Replicated tensors on 4 in-process ranks: each rank stores a quarter, and
// Restore gives every rank the whole tensors back.
TEST(TorchAdapterRanks, ReplicatedTensorsAreStoredOnceAndGatheredOnRestore) {
  constexpr int kRanks = 4;
  JobGuard guard{UniqueJob("repl")};
  std::vector<uint64_t> stored(kRanks, 0);
  auto errors = RunRanks(kRanks, [&](int r, std::shared_ptr<runtime::Transport> t) {
    auto ck = TorchCheckpointer::Create(MakeConfig(guard.job), std::move(t));
    if (!ck.ok()) return "create: " + ck.status().ToString();
    at::Tensor w = torch::arange(1001, at::kFloat).reshape({7, 143});
    at::Tensor b = torch::arange(13, at::kLong);
    at::Tensor own = torch::full({3}, static_cast<float>(r));
    Status s = (*ck)->Register("w", w, true);
    if (s.ok()) s = (*ck)->Register("b", b, true);
    if (s.ok()) s = (*ck)->Register("own", own, false);
    if (s.ok()) s = (*ck)->Save(1);
    if (s.ok()) s = (*ck)->Wait();
    if (!s.ok()) return "save: " + s.ToString();
    // This rank's entries: the pieces of w and b in its quarter of their bytes.
    for (const auto& name : (*ck)->EntryNames()) {
      if (name == "w" || name == "b") ++stored[r];
    }
    w.zero_();
    b.zero_();
    own.zero_();
    auto rr = (*ck)->Restore();
    if (!rr.ok()) return "restore: " + rr.status().ToString();
    if (!BitEqual(w, torch::arange(1001, at::kFloat).reshape({7, 143})) ||
        !BitEqual(b, torch::arange(13, at::kLong)) ||
        !BitEqual(own, torch::full({3}, static_cast<float>(r)))) {
      return std::string("restored tensors differ");
    }
    return std::string();
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  // 4004 + 104 bytes cut into 4 ranges: w spans ranks 0..3, b lies in rank 3's range.
  EXPECT_EQ(stored[0], 1u);
  EXPECT_EQ(stored[3], 2u);
}

// Committed checkpoints that are lost (one of two nodes, no scheme, no
// remote) fail the restore as Unrecoverable; only a job that never committed
// one gets "nothing to restore" (std::nullopt), which a training loop takes
// for a fresh start.
TEST(TorchAdapterRanks, LostCommittedCheckpointsAreAnErrorNotAFreshStart) {
  JobGuard guard{UniqueJob("lost")};
  auto open = [&](int r, std::shared_ptr<runtime::Transport> t,
                  at::Tensor w) -> Result<std::unique_ptr<TorchCheckpointer>> {
    MEMENTO_ASSIGN_OR_RETURN(Config config,
                             Config::FromMap({{"MEMENTO_JOB", guard.job},
                                              {"MEMENTO_NODE", "vn/" + std::to_string(r)},
                                              {"MEMENTO_TIMEOUT_S", "60"}}));
    MEMENTO_ASSIGN_OR_RETURN(auto ck, TorchCheckpointer::Create(config, std::move(t)));
    MEMENTO_RETURN_IF_ERROR(ck->Register("w", w));
    return ck;
  };
  auto first = RunRanks(2, [&](int r, std::shared_ptr<runtime::Transport> t) -> std::string {
    at::Tensor w = torch::full({64}, static_cast<float>(r));
    auto ck = open(r, std::move(t), w);
    if (!ck.ok()) return ck.status().ToString();
    auto fresh = (*ck)->Restore();
    if (!fresh.ok() || fresh->has_value()) return "a fresh job restored something";
    Status s = (*ck)->Save(3);
    if (s.ok()) s = (*ck)->Wait();
    return s.ok() ? "" : s.ToString();
  });
  for (int r = 0; r < 2; ++r) ASSERT_EQ(first[r], "") << "rank " << r;
  ASSERT_NO_FATAL_FAILURE(runtime::testing::LoseNode(guard.job, "vn/1"));
  auto second = RunRanks(2, [&](int r, std::shared_ptr<runtime::Transport> t) -> std::string {
    auto ck = open(r, std::move(t), torch::zeros({64}));
    if (!ck.ok()) return ck.status().ToString();
    auto restored = (*ck)->Restore();
    if (restored.ok()) return restored->has_value() ? "restored" : "nothing to restore";
    if (restored.status().code() != StatusCode::kUnrecoverable) {
      return "not Unrecoverable: " + restored.status().ToString();
    }
    return "";
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(second[r], "") << "rank " << r;
}

}  // namespace
}  // namespace memento::torch_adapter
