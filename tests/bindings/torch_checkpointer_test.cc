// memento::torch: registration, names, in-place bit-exact restore, changed
// tensors, layout errors, extra state (several ranks: torch_ranks_test.cc).
#include "memento/torch/torch_checkpointer.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/store_admin.h"
#include "memento/torch/launcher.h"
#include "test_job.h"
#include "torch_test_util.h"

namespace memento::torch_adapter {
namespace {

using runtime::Config;
using testing::BitEqual;
using testing::JobGuard;
using testing::MakeConfig;
using testing::UniqueJob;

std::unique_ptr<TorchCheckpointer> Make(const std::string& job, Options options = Options()) {
  auto group = runtime::InProcessGroup::Create(1);
  auto ck = TorchCheckpointer::Create(MakeConfig(job), group->transport(0), options);
  EXPECT_TRUE(ck.ok()) << ck.status().ToString();
  return std::move(ck).value();
}


struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    scale = register_buffer("scale", torch::ones({4}));
  }
  at::Tensor forward(at::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))) * scale; }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  at::Tensor scale;
};

void TrainSteps(Net& net, torch::optim::Optimizer& opt, int steps) {
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    at::Tensor loss = net.forward(torch::randn({5, 8})).pow(2).mean();
    loss.backward();
    opt.step();
  }
}

std::vector<at::Tensor> Snapshot(const std::vector<NamedTensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.tensor.detach().clone());
  return out;
}

TEST(TorchAdapter, StableModuleAndOptimizerNames) {
  Net net;
  torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(1e-3));
  std::vector<std::string> names;
  for (const auto& t : ModuleTensors(net, "model.", false)) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.fc1.weight", "model.fc1.bias",
                                             "model.fc2.weight", "model.fc2.bias", "model.scale"}));
  EXPECT_TRUE(OptimizerTensors(adam, "optimizer.", false).empty());  // lazily created
  EXPECT_EQ(PrimeOptimizerState(adam), 4);
  names.clear();
  for (const auto& t : OptimizerTensors(adam, "optimizer.", false)) names.push_back(t.name);
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(names[0], "optimizer.state.0.exp_avg");
  EXPECT_EQ(names[1], "optimizer.state.0.exp_avg_sq");
  EXPECT_EQ(names[7], "optimizer.state.3.exp_avg_sq");
}

// Priming Adam's state must not change what Adam computes.
TEST(TorchAdapter, PrimedAdamMatchesLazyAdam) {
  torch::manual_seed(3);
  Net a;
  Net b;
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a.parameters().size(); ++i) b.parameters()[i].copy_(a.parameters()[i]);
  }
  torch::optim::Adam oa(a.parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam ob(b.parameters(), torch::optim::AdamOptions(1e-2));
  PrimeOptimizerState(ob);
  torch::manual_seed(9);
  TrainSteps(a, oa, 3);
  torch::manual_seed(9);
  TrainSteps(b, ob, 3);
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    EXPECT_TRUE(BitEqual(a.parameters()[i], b.parameters()[i])) << i;
  }
}

// Priming SGD's momentum must not change what SGD computes (plain and
// Nesterov, with weight decay); with dampening nothing is primed.
TEST(TorchAdapter, PrimedSgdMatchesLazySgd) {
  for (bool nesterov : {false, true}) {
    torch::manual_seed(3);
    Net a;
    Net b;
    {
      torch::NoGradGuard g;
      for (size_t i = 0; i < a.parameters().size(); ++i) b.parameters()[i].copy_(a.parameters()[i]);
    }
    const auto options =
        torch::optim::SGDOptions(1e-2).momentum(0.9).nesterov(nesterov).weight_decay(1e-3);
    torch::optim::SGD oa(a.parameters(), options);
    torch::optim::SGD ob(b.parameters(), options);
    EXPECT_EQ(PrimeOptimizerState(ob), 4);
    torch::manual_seed(9);
    TrainSteps(a, oa, 3);
    torch::manual_seed(9);
    TrainSteps(b, ob, 3);
    for (size_t i = 0; i < a.parameters().size(); ++i) {
      EXPECT_TRUE(BitEqual(a.parameters()[i], b.parameters()[i])) << i << " nesterov " << nesterov;
    }
  }
  Net c;
  torch::optim::SGD damped(c.parameters(),
                           torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  EXPECT_EQ(PrimeOptimizerState(damped), 0);
}

// A relaunch registers a fresh SGD, which has no momentum yet: the
// checkpoint's momentum buffers are restored into it.
TEST(TorchAdapter, SgdMomentumIsRestoredIntoAFreshOptimizer) {
  JobGuard guard{UniqueJob("sgd")};
  torch::manual_seed(4);
  Net net;
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  std::vector<at::Tensor> params, moments;
  {
    torch::optim::SGD sgd(net.parameters(), options);
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->RegisterModule(net).ok());
    ASSERT_TRUE(ck->RegisterOptimizer(sgd).ok());
    ASSERT_TRUE(ck->Restore().ok());
    TrainSteps(net, sgd, 2);
    ASSERT_TRUE(ck->Save(2).ok());
    ASSERT_TRUE(ck->Wait().ok());
    EXPECT_EQ(ck->reregistrations(), 0);
    params = Snapshot(ModuleTensors(net, "model.", false));
    moments = Snapshot(OptimizerTensors(sgd, "optimizer.", false));
    ASSERT_EQ(moments.size(), 4u);
  }
  {
    torch::NoGradGuard g;
    for (auto& p : net.parameters()) p.zero_();
  }
  torch::optim::SGD sgd(net.parameters(), options);
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->RegisterModule(net).ok());
  ASSERT_TRUE(ck->RegisterOptimizer(sgd).ok());
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->step, 2u);
  const auto now = ModuleTensors(net, "model.", false);
  for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(BitEqual(now[i].tensor, params[i])) << i;
  const auto state = OptimizerTensors(sgd, "optimizer.", false);
  ASSERT_EQ(state.size(), moments.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_TRUE(BitEqual(state[i].tensor, moments[i])) << state[i].name;
  }
}

TEST(TorchAdapter, ModelAndAdamRestoreBitExactInPlace) {
  JobGuard guard{UniqueJob("adam")};
  torch::manual_seed(1);
  Net net;
  torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(1e-2));
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->RegisterModule(net).ok());
  ASSERT_TRUE(ck->RegisterOptimizer(adam).ok());
  auto none = ck->Restore();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());

  TrainSteps(net, adam, 2);
  ASSERT_TRUE(ck->Save(2).ok());
  ASSERT_TRUE(ck->Wait().ok());
  EXPECT_EQ(ck->reregistrations(), 0);  // Adam state was primed at registration
  auto all = ModuleTensors(net, "model.", false);
  auto opt = OptimizerTensors(adam, "optimizer.", false);
  all.insert(all.end(), opt.begin(), opt.end());
  auto expect = Snapshot(all);
  std::vector<void*> ptrs;
  for (const auto& t : all) ptrs.push_back(t.tensor.data_ptr());
  const at::Tensor draw = torch::rand({4});

  TrainSteps(net, adam, 3);  // diverge
  auto restored = ck->Restore();
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ((*restored)->step, 2u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(BitEqual(all[i].tensor, expect[i])) << all[i].name;
    EXPECT_EQ(all[i].tensor.data_ptr(), ptrs[i]) << all[i].name << " restored out of place";
  }
  auto* s = static_cast<torch::optim::AdamParamState*>(adam.state().begin()->second.get());
  EXPECT_EQ(s->step(), 2);  // integer optimizer state travels in the extra state
  EXPECT_TRUE(BitEqual(torch::rand({4}), draw));  // CPU generator restored
}

// A module's buffers are copied inside Save: the next forward pass changes
// BatchNorm's running statistics before any WaitSnapshot, while the snapshot
// may still be copying the 64 MiB of weights that come before them.
TEST(TorchAdapter, BuffersChangedRightAfterSaveAreSavedAsTheyWere) {
  JobGuard guard{UniqueJob("bn")};
  torch::manual_seed(2);
  torch::nn::BatchNorm1d bn(2048);
  torch::nn::Sequential net(torch::nn::Linear(2048, 2048), torch::nn::Linear(2048, 2048),
                            torch::nn::Linear(2048, 2048), torch::nn::Linear(2048, 2048), bn);
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->RegisterModule(*net).ok());
  auto none = ck->Restore();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  net->forward(torch::randn({4, 2048}));
  const auto all = ModuleTensors(*net, "model.", false);
  int buffers = 0;
  for (const auto& t : all) {
    const bool buffer = t.name.find("running_") != std::string::npos ||
                        t.name.find("num_batches_tracked") != std::string::npos;
    EXPECT_EQ(t.copy_at_save, buffer) << t.name;
    buffers += buffer;
  }
  EXPECT_EQ(buffers, 3);
  const auto expect = Snapshot(all);
  ASSERT_TRUE(ck->Save(1).ok());
  bn->forward(torch::randn({4, 2048}) * 10 + 5);  // the next step's forward
  ASSERT_TRUE(ck->Wait().ok());
  ASSERT_FALSE(BitEqual(bn->running_mean, expect[expect.size() - 3]));
  auto restored = ck->Restore();
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_TRUE(restored->has_value());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(BitEqual(all[i].tensor, expect[i])) << all[i].name;
  }
  EXPECT_EQ(ck->reregistrations(), 0);
}

TEST(TorchAdapter, DtypesAndNonContiguousTensors) {
  JobGuard guard{UniqueJob("dtypes")};
  auto ck = Make(guard.job);
  std::vector<at::Tensor> ts = {
      torch::randn({7, 3}),
      torch::randn({5}).to(at::kHalf),
      torch::randn({2, 9}).to(at::kBFloat16),
      torch::randint(-1000, 1000, {11}, at::kLong),
      torch::randn({13}) > 0,
      torch::randn({4, 6}).t(),                // dense permutation: in place
      torch::randn({6, 8}).slice(1, 0, 8, 2),  // strided slice: staged
      torch::tensor(3.5),                      // 0-dim
      torch::empty({0, 4}),                    // empty
  };
  for (size_t i = 0; i < ts.size(); ++i) {
    ASSERT_TRUE(ck->Register("t" + std::to_string(i), ts[i]).ok());
  }
  ASSERT_TRUE(ck->Save(1).ok());
  ASSERT_TRUE(ck->Wait().ok());
  std::vector<at::Tensor> expect;
  for (auto& t : ts) expect.push_back(t.clone());
  for (auto& t : ts) {
    if (t.numel() > 0) t.zero_();
  }
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_TRUE(BitEqual(ts[i], expect[i])) << "t" << i;
  }
  EXPECT_FALSE(ts[5].is_contiguous());
}

TEST(TorchAdapter, MetaTensorsAreRefusedByName) {
  JobGuard guard{UniqueJob("meta")};
  auto ck = Make(guard.job);
  ASSERT_TRUE(
      ck->Register("deferred", torch::empty({3, 4}, at::TensorOptions().device(at::kMeta))).ok());
  Status s = ck->Save(1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'deferred' is on the meta device"), std::string::npos)
      << s.ToString();
}

TEST(TorchAdapter, ExpandedViewsAreRefusedByName) {
  JobGuard guard{UniqueJob("expand")};
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->Register("bias.expanded", torch::randn({3}).expand({4, 3})).ok());
  Status s = ck->Save(1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'bias.expanded'"), std::string::npos) << s.ToString();
}

TEST(TorchAdapter, ReallocatedStorageIsReRegisteredNeverRead) {
  JobGuard guard{UniqueJob("realloc")};
  auto ck = Make(guard.job);
  at::Tensor t = torch::arange(1000, at::kFloat);
  ASSERT_TRUE(ck->Register("w", t).ok());
  ASSERT_TRUE(ck->Save(1).ok());
  ASSERT_TRUE(ck->Wait().ok());
  void* old = t.data_ptr();
  t.set_(torch::full({1000}, 7.0f));  // the old storage is freed
  ASSERT_NE(t.data_ptr(), old);
  ASSERT_TRUE(ck->Save(2).ok());
  // The new engine continues the run: its latest is v1 until v2 commits (which
  // the commit thread may already have done: 4 KB), never none.
  const std::optional<uint64_t> latest = ck->LatestCommitted();
  EXPECT_TRUE(latest == std::optional<uint64_t>(1) || latest == std::optional<uint64_t>(2))
      << (latest ? std::to_string(*latest) : std::string("none"));
  ASSERT_TRUE(ck->Wait().ok());
  EXPECT_EQ(ck->reregistrations(), 1);
  EXPECT_EQ(ck->relayouts(), 0);  // same layout: the node store is re-attached
  t.zero_();
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->step, 2u);
  EXPECT_TRUE(BitEqual(t, torch::full({1000}, 7.0f)));
  // v1 and v2 are one run's: a restore passes over no "older run".
  for (const std::string& note : (*r)->report.notes) {
    EXPECT_EQ(note.find("older run"), std::string::npos) << note;
  }
}

// A buffer given a new tensor every step (copied at Save, so the engine
// never reads its memory) is followed where it moved: no re-registration,
// and a restore writes into the tensor registered now.
TEST(TorchAdapter, AStagedTensorThatMovesIsFollowedNotReRegistered) {
  JobGuard guard{UniqueJob("moved")};
  auto ck = Make(guard.job);
  at::Tensor weights = torch::arange(64, at::kFloat);
  at::Tensor count = torch::zeros({1}, at::kLong);
  ASSERT_TRUE(ck->Register("w", weights).ok());
  ASSERT_TRUE(ck->RegisterSource([&] {
                  NamedTensor nt;
                  nt.name = "count";
                  nt.tensor = count;
                  nt.copy_at_save = true;
                  return std::vector<NamedTensor>{nt};
                }).ok());
  for (uint64_t step = 1; step <= 3; ++step) {
    count = count + 1;  // a new tensor, the old one freed once untracked
    ASSERT_TRUE(ck->Save(step).ok());
    ASSERT_TRUE(ck->Wait().ok());
  }
  EXPECT_EQ(ck->reregistrations(), 0);
  count = torch::full({1}, 99, at::kLong);
  at::Tensor now = count;
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->step, 3u);
  EXPECT_EQ(now.item<int64_t>(), 3);
  EXPECT_EQ(ck->reregistrations(), 0);
}

// A version that failed just before a re-registration is reported by the
// next Wait(), once, although its engine was closed in between.
TEST(TorchAdapter, AFailureBeforeAReRegistrationIsReportedByWait) {
  JobGuard guard{UniqueJob("regfail")};
  Options options;
  options.hooks.at_stage = [](runtime::Stage stage, uint64_t version) {
    return stage == runtime::Stage::kSeal && version == 2
               ? Status::IoError("injected seal failure of v2")
               : Status::Ok();
  };
  auto ck = Make(guard.job, options);
  at::Tensor t = torch::arange(1000, at::kFloat);
  ASSERT_TRUE(ck->Register("w", t).ok());
  ASSERT_TRUE(ck->Save(1).ok());
  ASSERT_TRUE(ck->Save(2).ok());      // fails at its seal
  t.set_(torch::full({1000}, 7.0f));  // the next Save re-registers
  ASSERT_TRUE(ck->Save(3).ok());
  EXPECT_EQ(ck->reregistrations(), 1);
  Status first = ck->Wait();
  EXPECT_NE(first.message().find("injected seal failure of v2"), std::string::npos)
      << first.ToString();
  EXPECT_TRUE(ck->Wait().ok());
  EXPECT_EQ(ck->LatestCommitted(), std::optional<uint64_t>(3));
}

// Restore never lays the node store out anew: with a changed set of tensors
// it is refused, and the stored versions stay for a restore of the set they
// hold.
TEST(TorchAdapter, ARestoreAfterTheSetChangedIsRefusedAndKeepsTheVersions) {
  JobGuard guard{UniqueJob("setchange")};
  torch::manual_seed(3);
  Net net;
  torch::optim::SGD sgd(net.parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  auto expect = Snapshot(ModuleTensors(net, "model.", false));
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->RegisterModule(net).ok());
    ASSERT_TRUE(ck->RegisterOptimizer(sgd).ok());
    ASSERT_TRUE(ck->Save(1).ok());
    ASSERT_TRUE(ck->Wait().ok());
    TrainSteps(net, sgd, 1);  // momentum buffers appear
    auto r = ck->Restore();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("changed since the node store was laid out"),
              std::string::npos)
        << r.status().ToString();
  }
  Net fresh;
  torch::optim::SGD fresh_sgd(fresh.parameters(),
                              torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->RegisterModule(fresh).ok());
  ASSERT_TRUE(ck->RegisterOptimizer(fresh_sgd).ok());
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->step, 1u);
  auto got = ModuleTensors(fresh, "model.", false);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(BitEqual(got[i].tensor, expect[i])) << i;
}

TEST(TorchAdapter, SparseLayoutsAreRefusedByName) {
  JobGuard guard{UniqueJob("csr")};
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->Register("csr", torch::eye(4).to_sparse_csr()).ok());
  Status s = ck->Save(1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tensor 'csr' is sparse"), std::string::npos) << s.ToString();
}

TEST(TorchAdapter, LazyOptimizerStateReRegistersOnce) {
  JobGuard guard{UniqueJob("lazy")};
  torch::manual_seed(2);
  Net net;
  // Momentum buffers of an SGD with dampening are not created at registration.
  torch::optim::SGD sgd(net.parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->RegisterModule(net).ok());
  ASSERT_TRUE(ck->RegisterOptimizer(sgd).ok());
  ASSERT_TRUE(ck->Restore().ok());
  TrainSteps(net, sgd, 1);  // momentum buffers appear
  ASSERT_TRUE(ck->Save(1).ok());
  TrainSteps(net, sgd, 1);
  ASSERT_TRUE(ck->Save(2).ok());
  ASSERT_TRUE(ck->Wait().ok());
  EXPECT_EQ(ck->reregistrations(), 1);
  EXPECT_EQ(ck->relayouts(), 1);
  auto names = ck->EntryNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "optimizer.state.0.momentum_buffer"),
            names.end());
  auto opt = OptimizerTensors(sgd, "optimizer.", false);
  auto expect = Snapshot(opt);
  TrainSteps(net, sgd, 1);
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < opt.size(); ++i) EXPECT_TRUE(BitEqual(opt[i].tensor, expect[i]));
}

TEST(TorchAdapter, LayoutMismatchNamesTheTensor) {
  JobGuard guard{UniqueJob("mismatch")};
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("encoder.weight", torch::zeros({3, 4})).ok());
    ASSERT_TRUE(ck->Register("bias", torch::zeros({4})).ok());
    ASSERT_TRUE(ck->Save(1).ok());
    ASSERT_TRUE(ck->Wait().ok());
  }
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->Register("encoder.weight", torch::zeros({4, 3})).ok());
  ASSERT_TRUE(ck->Register("bias", torch::zeros({4})).ok());
  auto r = ck->Restore();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("tensor 'encoder.weight': stored float32 [3,4]"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("registered float32 [4,3]"), std::string::npos);
  EXPECT_EQ(r.status().message().find("'bias'"), std::string::npos);
}

// A replicated tensor relaunched with another shape of as many bytes is
// refused by name, not restored as reinterpreted bytes; so is another
// extra_capacity, with the one that restores.
TEST(TorchAdapter, ReplicatedShapeAndExtraCapacityMismatchesAreNamed) {
  JobGuard guard{UniqueJob("repshape")};
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("w", torch::arange(12, at::kFloat).reshape({3, 4}), true).ok());
    ASSERT_TRUE(ck->Save(1).ok());
    ASSERT_TRUE(ck->Wait().ok());
  }
  {
    auto ck = Make(guard.job);
    at::Tensor w = torch::zeros({4, 3});
    ASSERT_TRUE(ck->Register("w", w, true).ok());
    auto r = ck->Restore();
    ASSERT_FALSE(r.ok()) << "restored into another shape";
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("tensor 'w': stored float32 shape=[3,4]"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_TRUE(BitEqual(w, torch::zeros({4, 3})));
  }
  Options bigger;
  bigger.extra_capacity = 512 << 10;
  auto ck = Make(guard.job, bigger);
  ASSERT_TRUE(ck->Register("w", torch::zeros({3, 4}), true).ok());
  auto r = ck->Restore();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("relaunch with extra_capacity 262144"), std::string::npos)
      << r.status().ToString();
}

// Permuted tensors of many dimensions: their strides (and a replicated
// tensor's shape) take more than the store's 64 bytes of layout dtype.
at::Tensor Permuted(int dims, bool swap_last) {
  std::vector<int64_t> order(dims);
  for (int i = 0; i < dims; ++i) order[i] = dims - 1 - i;
  if (swap_last) std::swap(order[dims - 2], order[dims - 1]);
  return torch::arange(int64_t{1} << dims, at::kFloat)
      .reshape(std::vector<int64_t>(dims, 2))
      .permute(order);
}

TEST(TorchAdapter, LongLayoutsAreStoredAndStillToldApart) {
  JobGuard guard{UniqueJob("longlayout")};
  at::Tensor a = Permuted(16, false), b = Permuted(10, false);
  const at::Tensor want_a = a.clone(), want_b = b.clone();
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("a", a).ok());
    ASSERT_TRUE(ck->Register("b", b, true).ok());
    Status s = ck->Save(1);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(ck->Wait().ok());
    a.zero_();
    b.zero_();
    auto r = ck->Restore();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->has_value());
    EXPECT_TRUE(BitEqual(a, want_a));
    EXPECT_TRUE(BitEqual(b, want_b));
  }
  // The same bytes in another order differ only at the end of their strides,
  // past what the store keeps of the description.
  auto ck = Make(guard.job);
  at::Tensor other = Permuted(16, true).zero_();
  ASSERT_TRUE(ck->Register("a", other).ok());
  ASSERT_TRUE(ck->Register("b", b, true).ok());
  auto r = ck->Restore();
  ASSERT_FALSE(r.ok()) << "restored into another memory order";
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_TRUE(BitEqual(other, torch::zeros_like(other)));
}

TEST(TorchAdapter, TheLaunchersTransportTakesTheTimeoutRoundedUpToWholeMs) {
  auto c = Config::FromMap({{"MEMENTO_JOB", "launcher-timeout"}, {"MEMENTO_TIMEOUT_S", "0.0019"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto t = CreateLauncherTransport(Launcher::kSingle, *c);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->timeout(), std::chrono::milliseconds(2));
}

TEST(TorchAdapter, UserStateAndExtraCapacity) {
  JobGuard guard{UniqueJob("user")};
  Options small;
  small.extra_capacity = 8192;
  auto ck = Make(guard.job, small);
  at::Tensor t = torch::ones({4});
  ASSERT_TRUE(ck->Register("t", t).ok());
  ck->SetUserState("loader", "position=42");
  ASSERT_TRUE(ck->Save(1).ok());
  ASSERT_TRUE(ck->Wait().ok());
  ck->SetUserState("loader", "moved on");
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(ck->UserState("loader").value_or(""), "position=42");
  ck->SetUserState("big", std::string(10000, 'x'));
  Status s = ck->Save(2);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("extra_capacity"), std::string::npos);
}

TEST(TorchAdapter, ExtraStateRegisteredAfterTheSaveIsAnErrorNotAFreshStart) {
  JobGuard guard{UniqueJob("extra-new")};
  at::Tensor t = torch::arange(6, torch::kFloat32);
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("t", t).ok());
    ASSERT_TRUE(ck->Save(1).ok());
    ASSERT_TRUE(ck->Wait().ok());
  }
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->Register("t", t).ok());
  ExtraHooks hooks{[] { return std::string("state"); },
                   [](const std::string&) { return Status::Ok(); }};
  ASSERT_TRUE(ck->RegisterExtra("sched", hooks).ok());
  auto r = ck->Restore();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("no extra state 'sched'"), std::string::npos)
      << r.status().ToString();
}

TEST(TorchAdapter, DuplicateAndReservedNamesAreRefused) {
  JobGuard guard{UniqueJob("names")};
  auto ck = Make(guard.job);
  ASSERT_TRUE(ck->Register("a", torch::ones({2})).ok());
  ASSERT_TRUE(ck->Register("a", torch::ones({2})).ok());
  Status s = ck->Save(1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'a' is registered twice"), std::string::npos) << s.ToString();
}

// CUDA tensors: the snapshot is ordered after the kernels that produce them
// (queued on the current stream, not yet finished when Save is called).
TEST(TorchAdapter, CudaTensorsSnapshotAfterTheProducingStream) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device visible to libtorch (a CPU-only libtorch, or no GPU)";
  }
  JobGuard guard{UniqueJob("cuda")};
  auto ck = Make(guard.job);
  at::Tensor a = torch::randn({2048, 2048}, torch::kCUDA);
  at::Tensor w = torch::zeros({2048, 2048}, torch::kCUDA);
  at::Tensor half = torch::randn({1000}, torch::kCUDA).to(at::kHalf);
  ASSERT_TRUE(ck->Register("w", w).ok());
  ASSERT_TRUE(ck->Register("half", half).ok());
  ASSERT_TRUE(ck->Save(1).ok());
  ASSERT_TRUE(ck->Wait().ok());
  for (int i = 0; i < 4; ++i) w.copy_(torch::matmul(a, a).div_(2048.0f));  // queued work
  ASSERT_TRUE(ck->Save(2).ok());  // must wait for it, not copy a half-written w
  ASSERT_TRUE(ck->WaitSnapshot().ok());
  at::Tensor expect = w.cpu();
  at::Tensor expect_half = half.cpu();
  w.zero_();
  half.zero_();
  ASSERT_TRUE(ck->Wait().ok());
  auto r = ck->Restore();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->step, 2u);
  EXPECT_TRUE(BitEqual(w.cpu(), expect));
  EXPECT_TRUE(BitEqual(half.cpu(), expect_half));
  EXPECT_TRUE(w.is_cuda());
}

TEST(TorchAdapter, BadShardSpecsAreRefusedByName) {
  JobGuard guard{UniqueJob("badshard")};
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("x", torch::zeros({3, 2}), ShardSpec{{4, 2}, {2, 0}}).ok());
    Status s = ck->Save(1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("'x'"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.ToString();
  }
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("y", torch::zeros({3, 2}), ShardSpec{{6}, {0}}).ok());
    Status s = ck->Save(1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("one global size and one offset per dimension"),
              std::string::npos)
        << s.ToString();
  }
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("z", torch::zeros({2}), /*replicated=*/true).ok());
    ASSERT_TRUE(ck->SetShard("z", ShardSpec{{4}, {0}}).ok());
    ASSERT_TRUE(ck->SetShard("missing", ShardSpec{{4}, {0}}).ok());
    Status s = ck->Save(1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("'missing'"), std::string::npos) << s.ToString();
  }
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("s", torch::tensor(1.0), ShardSpec{{}, {}}).ok());
    Status s = ck->Save(1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("'s'"), std::string::npos) << s.ToString();
  }
  {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register("z", torch::zeros({2}), /*replicated=*/true).ok());
    ASSERT_TRUE(ck->SetShard("z", ShardSpec{{4}, {0}}).ok());
    Status s = ck->Save(1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("both replicated and sharded"), std::string::npos)
        << s.ToString();
  }
}

// A tensor whose memory does not hold its values is refused by name at the
// save, before anything is read: its storage freed in place (the snapshot read
// megabytes from a one-byte placeholder and crashed), shrunk under it, a lazy
// conjugate or negative view (its bytes came back as the other value), a
// nested tensor (torch's own internal error, naming nothing).
TEST(TorchAdapter, ATensorWhoseMemoryDoesNotHoldItsValuesIsRefusedByName) {
  JobGuard guard{UniqueJob("nobytes")};
  auto refused = [&](const std::string& name, const at::Tensor& t, const std::string& what) {
    auto ck = Make(guard.job);
    ASSERT_TRUE(ck->Register(name, t).ok());
    Status s = ck->Save(1);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name << ": " << s.ToString();
    EXPECT_NE(s.message().find("'" + name + "'"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  };
  at::Tensor freed = torch::ones({1 << 20});
  freed.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl()->set_nbytes(0);
  refused("freed", freed, "needs 4194304 bytes of storage and has 0");
  at::Tensor base = torch::ones({64});
  at::Tensor tail = base.narrow(0, 32, 32);
  base.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl()->set_nbytes(100);
  refused("tail", tail, "needs 256 bytes of storage and has 100");
  refused("conj", torch::ones({4}, torch::kComplexFloat).conj(), "lazy conjugate view");
  refused("neg", at::_neg_view(torch::ones({4})), "lazy negative view");
  refused("nested", at::_nested_tensor_from_tensor_list({torch::ones({2}), torch::ones({3})}),
          "nested tensor");
  // The same tensors resolved are saved.
  auto ck = Make(guard.job);
  ASSERT_TRUE(
      ck->Register("conj", torch::ones({4}, torch::kComplexFloat).conj().resolve_conj()).ok());
  EXPECT_TRUE(ck->Save(1).ok());
  EXPECT_TRUE(ck->Wait().ok());
}

}  // namespace
}  // namespace memento::torch_adapter
