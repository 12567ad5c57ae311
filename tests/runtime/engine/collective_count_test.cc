// How many collectives Prepare and a restore wait in. Each is a point where
// every rank waits for the slowest; over gloo with 8 processes on 2 cores one
// costs about 10 ms, about as much as an in-job recovery's whole transfer.
// Prepare: the settings (which carry the topology records, with the entries
// and rank 0's draw of the run's lineage, when every rank knows its lane
// without the others' identities; else those follow in an allgather of their
// own) and the stores' opening. A restore from memory: the inventory (which
// carries the finished-run check and the entry seals of the restored
// version) and the agreement on the outcome; a finished run is refused after
// the inventory alone.
#include <cstdlib>
#include <mutex>
#include <thread>

#include "protect/protect_fixture.h"

namespace memento::runtime {
namespace {

// Counts the collectives issued on one thread (the one that called Watch).
class CollectiveCounter : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;

  void Watch() {
    std::lock_guard<std::mutex> lock(mu_);
    watched_ = std::this_thread::get_id();
    count_ = 0;
  }
  int count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

  Status Barrier() override {
    Count();
    return ForwardingTransport::Barrier();
  }
  Result<bool> AllTrue(bool mine) override {
    Count();
    return ForwardingTransport::AllTrue(mine);
  }
  Result<int64_t> AllReduceMax(int64_t mine) override {
    Count();
    return ForwardingTransport::AllReduceMax(mine);
  }
  Result<int64_t> AllReduceMin(int64_t mine) override {
    Count();
    return ForwardingTransport::AllReduceMin(mine);
  }
  Result<std::vector<std::vector<uint8_t>>> Allgather(const void* data, size_t bytes) override {
    Count();
    return ForwardingTransport::Allgather(data, bytes);
  }

 private:
  void Count() {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::this_thread::get_id() == watched_) ++count_;
  }

  mutable std::mutex mu_;
  std::thread::id watched_;
  int count_ = 0;
};

class CollectiveCountTest : public ProtectRecoveryTest {
 protected:
  void SetUp() override {
    ProtectRecoveryTest::SetUp();
    wrap_ = [this](int rank, std::shared_ptr<Transport> inner) -> std::shared_ptr<Transport> {
      auto counter = std::make_shared<CollectiveCounter>(std::move(inner));
      counters_.resize(std::max<size_t>(counters_.size(), rank + 1));
      counters_[rank] = counter;
      return counter;
    };
  }

  // Every rank prepares, then restores, with its calling thread watched;
  // each rank's result and the counts of both.
  std::vector<Result<RestoreReport>> CountedRestore(std::vector<int>* counts,
                                                    std::vector<int>* prepare_counts = nullptr) {
    std::vector<Result<RestoreReport>> out(cks_.size(), Status::Internal("not run"));
    counts->assign(cks_.size(), -1);
    if (prepare_counts != nullptr) prepare_counts->assign(cks_.size(), -1);
    Run([&](int r) {
      counters_[r]->Watch();
      Status prepared = cks_[r]->Prepare();
      if (prepare_counts != nullptr) (*prepare_counts)[r] = counters_[r]->count();
      if (!prepared.ok()) {
        out[r] = prepared;
        return;
      }
      for (auto& b : bufs_[r]) std::fill(b.begin(), b.end(), 0xEE);
      counters_[r]->Watch();
      out[r] = cks_[r]->Restore();
      (*counts)[r] = counters_[r]->count();
    });
    return out;
  }

  // Node 0 is lost after v2; every rank prepares in `prepare_collectives`
  // collectives, then restores v2 from memory, bit-exact, in two: the
  // inventory (with the finished-run check and the entry seals) and the
  // agreement on the outcome (the re-protect runs on the commit thread).
  void ExpectLostNodeRestored(int prepare_collectives) {
    ASSERT_NO_FATAL_FAILURE(SaveThenLoseNode0(GetParam().nodes));
    Launch(GetParam().nodes);
    std::vector<int> counts, prepare_counts;
    const std::vector<Result<RestoreReport>> out = CountedRestore(&counts, &prepare_counts);
    for (size_t r = 0; r < out.size(); ++r) {
      EXPECT_EQ(prepare_counts[r], prepare_collectives) << "rank " << r;
      ASSERT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status().ToString();
      EXPECT_EQ(out[r]->version, 2u);
      EXPECT_TRUE(Exact(static_cast<int>(r), 2)) << "rank " << r << " not bit-exact";
      EXPECT_EQ(out[r]->lost_nodes, std::vector<int>{0}) << out[r]->ToJson();
      EXPECT_NE(out[r]->entries[0].source, RestoreSource::kRemote) << "rank " << r;
      EXPECT_EQ(out[r]->stats.seals_exchanges, 0) << out[r]->ToJson();
      EXPECT_EQ(counts[r], 2) << "rank " << r;
    }
  }

  std::vector<std::shared_ptr<CollectiveCounter>> counters_;
};

TEST_P(CollectiveCountTest, ALostNodeIsPreparedAfterTwoAndRestoredAfterTwoCollectives) {
  // The settings with the topology records (every rank knew its lane: one
  // rank per node) and the lineage; the stores' opening.
  ExpectLostNodeRestored(/*prepare_collectives=*/2);
}

// Without ranks per node (nor LOCAL_RANK) a rank learns its lane from the
// others' node identities: the topology records follow in an allgather of
// their own, and the restore is the same.
TEST_P(CollectiveCountTest, RanksThatLearnTheirLanesFromTheIdentitiesPrepareAfterThree) {
  if (std::getenv("LOCAL_RANK") != nullptr) GTEST_SKIP() << "LOCAL_RANK is set";
  configure_ = [](int rank, Config& c) {
    c.ranks_per_node = 0;
    c.node = (c.node.empty() ? "node" : c.node) + std::to_string(rank);
  };
  ExpectLostNodeRestored(/*prepare_collectives=*/3);
}

TEST_P(CollectiveCountTest, AFinishedRunIsRefusedAfterOneCollective) {
  Launch(GetParam().nodes);
  SaveOnAll(2);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<Status> finished(cks_.size());
  Run([&](int r) { finished[r] = cks_[r]->Finish(); });
  for (const Status& s : finished) ASSERT_TRUE(s.ok()) << s.ToString();
  Launch(GetParam().nodes);
  std::vector<int> counts;
  const std::vector<Result<RestoreReport>> out = CountedRestore(&counts);
  for (size_t r = 0; r < out.size(); ++r) {
    ASSERT_FALSE(out[r].ok()) << "rank " << r << " restored a finished run";
    EXPECT_EQ(out[r].status().code(), StatusCode::kNotFound) << out[r].status().ToString();
    EXPECT_NE(out[r].status().message().find("finished at step 2"), std::string::npos)
        << out[r].status().ToString();
    EXPECT_EQ(counts[r], 1) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, CollectiveCountTest,
                         ::testing::Values(Param{"replica:2", 4, 1}, Param{"rs:4+2", 6, 1}),
                         ParamName);

}  // namespace
}  // namespace memento::runtime
