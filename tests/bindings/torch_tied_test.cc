// memento::torch: a weight tied under two names (an output head sharing the
// token embedding's, which named_parameters lists under both) is one entry,
// stored once and restored into the one tensor both names share.
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/embedding.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>

#include "memento/runtime/config.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/torch/torch_checkpointer.h"
#include "torch_test_util.h"

namespace memento::torch_adapter {
namespace {

using testing::BitEqual;
using testing::JobGuard;
using testing::UniqueJob;

struct TiedLm : torch::nn::Module {
  TiedLm() {
    tok = register_module("tok", torch::nn::Embedding(16, 8));
    // The output head is the embedding's weight under a second name.
    head = register_parameter("head", tok->weight);
  }
  at::Tensor forward(const at::Tensor& idx) { return torch::matmul(tok->forward(idx), head.t()); }
  torch::nn::Embedding tok{nullptr};
  at::Tensor head;
};

void Train(TiedLm& lm, torch::optim::Optimizer& opt, int steps) {
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    at::Tensor idx = torch::randint(16, {4, 6});
    torch::nn::functional::cross_entropy(lm.forward(idx).reshape({-1, 16}),
                                         torch::randint(16, {24}))
        .backward();
    opt.step();
  }
}

TEST(TorchAdapterTied, ATiedWeightIsOneEntryRestoredTied) {
  JobGuard guard{UniqueJob("tied")};
  torch::manual_seed(5);
  TiedLm lm;
  ASSERT_EQ(lm.named_parameters().size(), 2u);  // libtorch lists it under both names
  const auto tensors = ModuleTensors(lm, "model.", false);
  ASSERT_EQ(tensors.size(), 1u);
  // Under its first name in named_parameters' order (a module's own before its children's).
  const std::string first = "model." + lm.named_parameters()[0].key();
  const std::string second = "model." + lm.named_parameters()[1].key();
  EXPECT_EQ(tensors[0].name, first);

  torch::optim::AdamW opt(lm.parameters(), torch::optim::AdamWOptions(1e-2));
  auto config = runtime::Config::FromMap({{"MEMENTO_JOB", guard.job},
                                          {"MEMENTO_RANKS_PER_NODE", "1"},
                                          {"MEMENTO_TIMEOUT_S", "60"}});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto group = runtime::InProcessGroup::Create(1);
  auto ck = TorchCheckpointer::Create(*config, group->transport(0));
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  ASSERT_TRUE((*ck)->RegisterModule(lm).ok());
  ASSERT_TRUE((*ck)->RegisterOptimizer(opt).ok());
  ASSERT_TRUE((*ck)->Restore().ok());
  Train(lm, opt, 2);
  ASSERT_TRUE((*ck)->Save(2).ok());
  ASSERT_TRUE((*ck)->Wait().ok());
  const auto names = (*ck)->EntryNames();
  EXPECT_NE(std::find(names.begin(), names.end(), first), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), second), names.end())
      << "the tied weight is stored a second time, as " << second;
  const at::Tensor expect = lm.tok->weight.detach().clone();

  Train(lm, opt, 2);  // diverge
  auto restored = (*ck)->Restore();
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_TRUE(restored->has_value());
  EXPECT_TRUE(BitEqual(lm.tok->weight, expect));
  EXPECT_EQ(lm.head.data_ptr(), lm.tok->weight.data_ptr()) << "no longer tied";
}

}  // namespace
}  // namespace memento::torch_adapter
