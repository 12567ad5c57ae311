// The protect + recovery fixture over the in-process transport: ranks as
// threads with real node stores and a directory remote tier; a rank's
// transport can be wrapped (wrap_) to observe or reroute its traffic.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "memento/placement/group_layout.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/recoverability.h"
#include "memento/placement/topology.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/chunk_stage.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "store_damage.h"
#include "test_job.h"
#include "test_pattern.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

const std::vector<size_t> kEntryBytes = {9001, 77, 0, 4096};

using testing::Pattern;

struct Param {
  const char* scheme;
  int nodes;
  int max_failures;
};

// Readable parameter in test listings (and so in ctest names), never raw bytes.
void PrintTo(const Param& p, std::ostream* os) {
  *os << p.scheme << " on " << p.nodes << " nodes, up to " << p.max_failures << " failed";
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  std::string s = std::string(info.param.scheme) + "_n" + std::to_string(info.param.nodes);
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

class ProtectRecoveryTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    job_ = "prt-" + ParamName({GetParam(), 0}) + "-" + testing::ProcessTag();
    for (char& c : job_) {
      if (c == '_') c = '-';
    }
    remote_dir_ = std::filesystem::temp_directory_path() / ("memento-" + job_);
  }
  void TearDown() override {
    cks_.clear();
    (void)CleanJob(job_);
    if (replaced_rank_ >= 0) {
      Config c = MakeConfig(replaced_rank_);
      (void)NodeStore::Destroy({job_, NodeIdentity(c, replaced_rank_), 0});
    }
    std::filesystem::remove_all(remote_dir_);
  }

  Config MakeConfig(int rank = -1) const {
    Config c;
    // A replacement node: this rank comes back under a new identity.
    if (rank >= 0 && rank == replaced_rank_) c.node = "replacement";
    c.job = job_;
    c.ranks_per_node = 1;
    c.chunk_bytes = chunk_bytes_;
    c.threads = 2;
    c.persist_every = 1;
    c.timeout_s = 20;
    c.scheme = GetParam().scheme;
    c.background_reprotect = background_reprotect_;
    if (configure_) configure_(rank, c);
    return c;
  }

  void Launch(int n) {
    cks_.clear();
    group_ = InProcessGroup::Create(n, transport_timeout_);
    cks_.resize(n);
    bufs_.assign(n, {});
    for (int r = 0; r < n; ++r) {
      auto remote = std::make_shared<DirectoryRemoteStore>(remote_dir_.string(), job_);
      std::shared_ptr<Transport> transport = group_->transport(r);
      if (wrap_) transport = wrap_(r, transport);
      auto ck =
          Checkpointer::Create(MakeConfig(r), transport, remote, hooks_ ? hooks_(r) : FaultHooks());
      ASSERT_TRUE(ck.ok()) << ck.status().ToString();
      cks_[r] = std::move(ck).value();
      for (size_t e = 0; e < entry_bytes_.size(); ++e) {
        bufs_[r].emplace_back(entry_bytes_[e] + 13 * r);  // shard sizes differ per rank
      }
      for (size_t e = 0; e < entry_bytes_.size(); ++e) {
        ASSERT_TRUE(
            cks_[r]
                ->RegisterBuffer("e" + std::to_string(e), bufs_[r][e].data(), bufs_[r][e].size())
                .ok());
      }
    }
  }

  void Run(const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < cks_.size(); ++r) threads.emplace_back(fn, static_cast<int>(r));
    for (auto& t : threads) t.join();
  }

  void Fill(int r, uint64_t step) {
    for (size_t e = 0; e < bufs_[r].size(); ++e) {
      for (size_t i = 0; i < bufs_[r][e].size(); ++i) bufs_[r][e][i] = Pattern(r, step, e, i);
    }
  }
  // Every rank writes the pattern of step `fill` (default `version`), saves
  // it as `version` and waits for its commit (and persist, with
  // `persist`); each rank's status.
  std::vector<Status> SaveEach(uint64_t version, bool persist = false, uint64_t fill = 0) {
    std::vector<Status> st(cks_.size());
    Run([&](int r) {
      Fill(r, fill != 0 ? fill : version);
      Status s = cks_[r]->Save(version);
      st[r] = s.ok() ? cks_[r]->Wait() : s;
      if (persist && st[r].ok()) st[r] = cks_[r]->WaitPersist();
    });
    return st;
  }
  // Every rank writes `step`'s pattern, saves it and waits for its commit and
  // persist; a failure on any rank fails the test.
  void SaveOnAll(uint64_t step) {
    const std::vector<Status> st = SaveEach(step, /*persist=*/true);
    for (size_t r = 0; r < st.size(); ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << " step " << step << ": " << st[r].ToString();
    }
  }
  // The job ends and `node`'s memory is gone (its store destroyed).
  void LoseNode(int node) {
    cks_.clear();
    ASSERT_TRUE(NodeStore::Destroy({job_, NodeIdentity(MakeConfig(node), node), 0}).ok());
  }
  // Every rank of `n` nodes saves v2; then the job ends and node 0's memory
  // is gone.
  void SaveThenLoseNode0(int n) {
    Launch(n);
    SaveOnAll(2);
    ASSERT_FALSE(HasFatalFailure());
    LoseNode(0);
  }
  // For the next Launch: rank `refusing`'s part of the minimal re-protect
  // fails at Stage::kReprotect.
  void RefuseReprotectOn(int refusing) {
    hooks_ = [refusing](int rank) {
      FaultHooks h;
      if (rank == refusing) {
        h.at_stage = [](Stage stage, uint64_t) {
          return stage == Stage::kReprotect ? Status::Unavailable("test: re-protect refused")
                                            : Status::Ok();
        };
      }
      return h;
    };
  }
  // Restores every rank, its buffers scribbled over first (so that nothing
  // passes by having been left in place).
  std::vector<Result<RestoreReport>> RestoreEach() {
    std::vector<Result<RestoreReport>> out(cks_.size(), Status::Internal("not run"));
    Run([&](int r) {
      for (auto& b : bufs_[r]) std::fill(b.begin(), b.end(), 0xEE);
      out[r] = cks_[r]->Restore();
    });
    return out;
  }

  bool Exact(int r, uint64_t step) const {
    for (size_t e = 0; e < bufs_[r].size(); ++e) {
      for (size_t i = 0; i < bufs_[r][e].size(); ++i) {
        if (bufs_[r][e][i] != Pattern(r, step, e, i)) return false;
      }
    }
    return true;
  }

  uint64_t ShardBytes(int r) const {
    uint64_t total = 0;
    for (size_t e = 0; e < entry_bytes_.size(); ++e) total += entry_bytes_[e] + 13 * r;
    return total;
  }

  int replaced_rank_ = -1;
  bool background_reprotect_ = true;                    // for the next Launch
  std::chrono::milliseconds transport_timeout_{20000};  // for the next Launch
  uint64_t chunk_bytes_ = 4096;                         // for the next Launch
  std::vector<size_t> entry_bytes_ = kEntryBytes;       // per rank r: + 13 r bytes each
  std::function<FaultHooks(int rank)> hooks_;           // per rank, for the next Launch
  std::function<void(int rank, Config&)> configure_;    // per rank (-1: any), last word
  // Wraps a rank's transport, for the next Launch.
  std::function<std::shared_ptr<Transport>(int rank, std::shared_ptr<Transport>)> wrap_;
  std::string job_;
  std::filesystem::path remote_dir_;
  std::shared_ptr<InProcessGroup> group_;
  std::vector<std::unique_ptr<Checkpointer>> cks_;
  std::vector<std::vector<std::vector<uint8_t>>> bufs_;
};

// Gaps closed by the recovery branch, per scheme:
//  - partial-product decode: the node that is rebuilt receives exactly its
//    shard's bytes (not K' input rows per piece);
//  - minimal re-protect: only what the lost node held is rebuilt, far fewer
//    bytes than protecting the whole version again, and the job is fully
//    protected afterwards: a second, different node is lost with the remote
//    tier gone and is recovered bit-exactly from memory;
//  - replacement node: the second lost node comes back under a new identity.
class MinimalReprotectTest : public ProtectRecoveryTest {
 protected:
  // Restores every rank; checks bit-exactness and that nothing came from the
  // remote tier.
  std::vector<RestoreReport> RestoreAll(const std::string& what, uint64_t version = 2) {
    std::vector<Result<RestoreReport>> out = RestoreEach();
    std::vector<RestoreReport> reports;
    for (size_t r = 0; r < out.size(); ++r) {
      EXPECT_TRUE(out[r].ok()) << what << " rank " << r << ": " << out[r].status().ToString();
      if (!out[r].ok()) continue;
      EXPECT_EQ(out[r]->version, version) << what;
      EXPECT_TRUE(Exact(static_cast<int>(r), version)) << what << " rank " << r << " not bit-exact";
      EXPECT_NE(out[r]->entries[0].source, RestoreSource::kRemote) << what << " rank " << r;
      reports.push_back(*out[r]);
    }
    return reports;
  }
  // Every rank saves v2 and waits for it, which rank 1 fails: its Save names
  // `why`; the version commits nowhere (v1 stays the latest), every rank's
  // Wait fails (rank 1's naming `why`), none by a timeout, and some rank
  // learnt it from the version's own messages: replica holders from rank 1's
  // entry seals arriving before its shard, parity holders from its hops'
  // "failed" pieces.
  void ExpectV2FailedEverywhereAtOnce(const std::string& why) {
    const int n = static_cast<int>(cks_.size());
    std::vector<Status> save(n), wait(n);
    Run([&](int r) {
      Fill(r, 2);
      save[r] = cks_[r]->Save(2);
      wait[r] = cks_[r]->Wait();
    });
    EXPECT_NE(save[1].message().find(why), std::string::npos) << save[1].ToString();
    const char* told_by = placement::Scheme::Parse(GetParam().scheme).value().is_replica()
                              ? "before its entry seals"
                              : "could not serve its row";
    bool told = false;
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(wait[r].ok()) << "rank " << r;
      EXPECT_NE(wait[r].code(), StatusCode::kTimeout) << "rank " << r << ": " << wait[r].ToString();
      EXPECT_EQ(cks_[r]->LatestCommitted(), std::optional<uint64_t>(1)) << "rank " << r;
      told |= wait[r].message().find(told_by) != std::string::npos;
    }
    EXPECT_NE(wait[1].message().find(why), std::string::npos) << wait[1].ToString();
    EXPECT_TRUE(told) << told_by << ": " << wait[0].ToString();
  }
  // A relaunch on `n` nodes restores `version` on every rank, bit-exact,
  // from its own memory.
  void ExpectRelaunchRestoresLocally(int n, uint64_t version) {
    Launch(n);
    std::vector<Result<RestoreReport>> out(n, Status::Internal("not run"));
    Run([&](int r) { out[r] = cks_[r]->Restore(); });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(out[r].ok()) << out[r].status().ToString();
      EXPECT_EQ(out[r]->version, version);
      EXPECT_TRUE(Exact(r, version)) << "rank " << r;
      EXPECT_EQ(out[r]->entries[0].source, RestoreSource::kLocalMemory);
    }
  }
};

// Two copies of node 0's shard besides its own (replica:3), so another
// valid source of the same version remains when one is corrupt.
class SecondSourceTest : public MinimalReprotectTest {
 protected:
  // Saves v1 and v2 on every rank; then closes the job.
  void SaveTwoVersions() {
    const int n = GetParam().nodes;
    Launch(n);
    for (uint64_t step : {1, 2}) {
      SaveOnAll(step);
      if (HasFatalFailure()) return;
    }
    cks_.clear();
  }
  // XORs `pattern` into node `holder`'s newest region of `kind` for node 0
  // (its replica, or its entry seals) at `at` (modulo its length); returns
  // whether its region crc still holds.
  void CorruptRegionOfNode0(int holder, const std::vector<uint8_t>& pattern, uint64_t at,
                            bool* crc_holds, RegionKind kind = RegionKind::kReplica) {
    auto store = NodeStore::Attach({job_, NodeIdentity(MakeConfig(holder), holder), 0});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const int slot = store->Inventory().NewestCommitted();
    ASSERT_GE(slot, 0);
    int done = 0;
    for (int g = 0; g < store->region_count(); ++g) {
      const RegionSpec& spec = store->layout().regions[g];
      if (spec.kind != kind || spec.owner_node != 0) continue;
      auto view = store->ReadRegion(slot, g);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      EXPECT_EQ(view->version, 2u);
      const uint64_t from = at % view->length;
      ASSERT_LE(from + pattern.size(), view->length);
      uint8_t* data = const_cast<uint8_t*>(view->data);  // the shm mapping
      for (size_t i = 0; i < pattern.size(); ++i) data[from + i] ^= pattern[i];
      *crc_holds = store->VerifyRegion(slot, g).ok();
      ++done;
    }
    ASSERT_EQ(done, 1) << "node " << holder << " holds no such region of node 0";
  }
};

}  // namespace
}  // namespace memento::runtime
