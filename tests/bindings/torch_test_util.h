// What the torch adapter's test files share: unique job ids, a guard that
// removes a job's segments, a configuration, bit comparison of tensors,
// in-process ranks.
#pragma once

#include <gtest/gtest.h>
#include <torch/types.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memento/runtime/config.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"

namespace memento::torch_adapter::testing {

inline std::string UniqueJob(const std::string& what) {
  static std::atomic<int> n{0};
  return "tt-" + what + "-" + runtime::testing::ProcessTag() + "-" + std::to_string(n++);
}

struct JobGuard {
  std::string job;
  ~JobGuard() { (void)runtime::CleanJob(job); }
};

// One rank per virtual node, 64 KiB chunks, a 60 s timeout.
inline runtime::Config MakeConfig(const std::string& job) {
  auto c = runtime::Config::FromMap({{"MEMENTO_JOB", job},
                                     {"MEMENTO_RANKS_PER_NODE", "1"},
                                     {"MEMENTO_CHUNK_BYTES", "64K"},
                                     {"MEMENTO_TIMEOUT_S", "60"}});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.value();
}

inline bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

// Runs f(rank, transport) on `n` in-process ranks; each returns "" or what went wrong.
inline std::vector<std::string> RunRanks(
    int n, const std::function<std::string(int, std::shared_ptr<runtime::Transport>)>& f) {
  auto group = runtime::InProcessGroup::Create(n, std::chrono::seconds(60));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { errors[r] = f(r, group->transport(r)); });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace memento::torch_adapter::testing
