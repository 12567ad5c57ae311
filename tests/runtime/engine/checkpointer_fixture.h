// The fixture of the engine tests over the in-process transport: every rank
// is a thread with its own Checkpointer and its own node store segment
// (virtual nodes, MEMENTO_RANKS_PER_NODE=1); Launch() is one launch of the job.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memento/runtime/checkpointer.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/store_admin.h"
#include "test_job.h"
#include "test_pattern.h"

namespace memento::runtime::testing {

// Entry sizes: odd, bigger than a chunk, smaller than a chunk, empty.
inline const std::vector<size_t> kEntryBytes = {100003, 4096 * 3, 77, 0};

// Hooks under which stage `stage` of each version in `versions` fails with
// IoError("injected <what> failure") on every rank.
inline FaultHooks FailAt(Stage stage, std::vector<uint64_t> versions, const std::string& what) {
  FaultHooks hooks;
  hooks.at_stage = [stage, versions, what](Stage at, uint64_t version) {
    const bool hit =
        at == stage && std::find(versions.begin(), versions.end(), version) != versions.end();
    return hit ? Status::IoError("injected " + what + " failure") : Status::Ok();
  };
  return hooks;
}

struct Rank {
  std::vector<std::vector<uint8_t>> bufs;
  std::unique_ptr<Checkpointer> ck;

  void Fill(int rank, uint64_t step) {
    for (size_t e = 0; e < bufs.size(); ++e) {
      for (size_t i = 0; i < bufs[e].size(); ++i) bufs[e][i] = Pattern(rank, step, e, i);
    }
  }
  // First mismatching entry against the pattern of (rank, step), or -1.
  int Mismatch(int rank, uint64_t step) const {
    for (size_t e = 0; e < bufs.size(); ++e) {
      for (size_t i = 0; i < bufs[e].size(); ++i) {
        if (bufs[e][i] != Pattern(rank, step, e, i)) return static_cast<int>(e);
      }
    }
    return -1;
  }
  void Scribble() {
    for (auto& b : bufs) std::fill(b.begin(), b.end(), 0xEE);
  }
};

class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = std::string("ckt-") + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           "-" + ProcessTag();
    for (char& c : job_) {
      if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
    }
    if (job_.size() > 48) job_ = job_.substr(job_.size() - 48);
    remote_dir_ = std::filesystem::temp_directory_path() / ("memento-" + job_);
  }
  void TearDown() override {
    ranks_.clear();
    (void)CleanJob(job_);
    std::filesystem::remove_all(remote_dir_);
  }

  Config MakeConfig() const {
    Config c;
    c.job = job_;
    c.ranks_per_node = 1;
    c.chunk_bytes = 4096;
    c.threads = 2;
    c.persist_every = 0;
    c.timeout_s = 20;
    return c;
  }

  // Fresh group, fresh Checkpointers for n ranks (a "launch"); node stores
  // are re-attached when they exist.
  void Launch(int n, const Config& config, FaultHooks hooks = FaultHooks(),
              bool with_remote = false) {
    Launch(n, config, std::vector<FaultHooks>(n, hooks), with_remote);
  }
  // The same with hooks of each rank's own.
  void Launch(int n, const Config& config, const std::vector<FaultHooks>& hooks,
              bool with_remote) {
    ASSERT_EQ(hooks.size(), static_cast<size_t>(n));
    ranks_.clear();
    group_ = InProcessGroup::Create(n, std::chrono::seconds(20));
    ranks_.resize(n);
    for (int r = 0; r < n; ++r) {
      std::shared_ptr<RemoteStore> remote;
      if (with_remote) {
        const auto other = remote_dir_of_rank_.find(r);
        remote = std::make_shared<DirectoryRemoteStore>(
            other != remote_dir_of_rank_.end() ? other->second : remote_dir_, config.job);
      }
      auto ck = Checkpointer::Create(config, group_->transport(r), remote, hooks[r]);
      ASSERT_TRUE(ck.ok()) << ck.status().ToString();
      ranks_[r].ck = std::move(ck).value();
      for (size_t e = 0; e < kEntryBytes.size(); ++e) {
        ranks_[r].bufs.emplace_back(kEntryBytes[e] + r);  // sizes differ per rank too
        EntryLayout layout{"uint8",
                           {static_cast<int64_t>(kEntryBytes[e] + r)},
                           {static_cast<int64_t>(kEntryBytes[e] + r)},
                           {0}};
        ASSERT_TRUE(ranks_[r]
                        .ck
                        ->RegisterBuffer("e" + std::to_string(e), ranks_[r].bufs[e].data(),
                                         ranks_[r].bufs[e].size(), layout)
                        .ok());
      }
    }
  }

  // fn(rank) on one thread per rank.
  void Run(const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks_.size(); ++r) threads.emplace_back(fn, static_cast<int>(r));
    for (auto& t : threads) t.join();
  }

  // Every rank: fill with `step`'s pattern, Save, Wait; returns Wait statuses.
  std::vector<Status> SaveAll(uint64_t step) {
    std::vector<Status> out(ranks_.size());
    Run([&](int r) {
      ranks_[r].Fill(r, step);
      Status s = ranks_[r].ck->Save(step);
      out[r] = s.ok() ? ranks_[r].ck->Wait() : s;
    });
    return out;
  }

  // Launches n ranks with a remote tier (persist every 2nd commit, keep 2),
  // saves versions 1..steps on every rank and waits for the persists.
  void TrainPersisted(Config config, int n, uint64_t steps) {
    config.persist_every = 2;
    config.persist_keep = 2;
    Launch(n, config, FaultHooks(), /*with_remote=*/true);
    for (uint64_t step = 1; step <= steps; ++step) {
      for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
    }
    Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
  }

  std::vector<Result<RestoreReport>> RestoreAll() {
    std::vector<Result<RestoreReport>> out(ranks_.size(), Status::Internal("not run"));
    Run([&](int r) {
      ranks_[r].Scribble();
      out[r] = ranks_[r].ck->Restore();
    });
    return out;
  }

  // Every rank restored `version`, each of its buffers bit-exact.
  void ExpectRestored(const std::vector<Result<RestoreReport>>& reports, uint64_t version) {
    for (size_t r = 0; r < reports.size(); ++r) {
      ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
      EXPECT_EQ(reports[r]->version, version);
      EXPECT_EQ(ranks_[r].Mismatch(static_cast<int>(r), version), -1) << "rank " << r;
    }
  }

  std::string job_;
  std::filesystem::path remote_dir_;
  // Ranks whose remote tier is another directory than remote_dir_.
  std::map<int, std::filesystem::path> remote_dir_of_rank_;
  std::shared_ptr<InProcessGroup> group_;
  std::vector<Rank> ranks_;
};

}  // namespace memento::runtime::testing
