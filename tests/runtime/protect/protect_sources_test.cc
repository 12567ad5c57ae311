// Second sources and lost seals over the in-process transport (label local):
// a damaged replica gives way to another one, a version whose seals are lost
// to an older one, a late persist record stops no later persist, and a
// scheme the node count cannot hold is refused by name.
#include "protect_fixture.h"

namespace memento::runtime {
namespace {

using SealsLostTest = SecondSourceTest;

// The job's first version, v1, is sealed everywhere but its commit never
// completes (rank 2 dies at Stage::kCommit: nothing records a commit); node 0
// is lost and its replica on node 1 is damaged. The restore plans v1, the
// survivors copy it into their buffers, node 0's replica fails and nothing is
// left to plan: that is Unrecoverable, not NotFound ("nothing to restore",
// which the bindings take for a fresh start from buffers now partly holding
// v1).
TEST_P(SealsLostTest, NothingLeftAfterBuffersWereWrittenIsUnrecoverableNotAFreshStart) {
  const int n = GetParam().nodes;
  hooks_ = [this](int rank) {
    FaultHooks h;
    if (rank == 2) {
      h.at_stage = [this](Stage stage, uint64_t) {
        if (stage != Stage::kCommit) return Status::Ok();
        group_->Kill(2);  // sealed, then gone before the vote
        return Status::Unavailable("test: rank 2 died");
      };
    }
    return h;
  };
  Launch(n);
  const std::vector<Status> st = SaveEach(1);
  for (int r = 0; r < n; ++r) EXPECT_FALSE(st[r].ok()) << "rank " << r << " committed v1";
  hooks_ = nullptr;
  LoseNode(0);
  {
    auto holder = NodeStore::Attach({job_, NodeIdentity(MakeConfig(1), 1), 0});
    ASSERT_TRUE(holder.ok()) << holder.status().ToString();
    int damaged = 0;
    for (const SlotState& slot : holder->Inventory().slots) {
      if (!slot.ok || slot.version != 1) continue;
      for (int g = 0; g < holder->region_count(); ++g) {
        const RegionSpec& spec = holder->layout().regions[g];
        if (spec.kind != RegionKind::kReplica || spec.owner_node != 0) continue;
        auto view = holder->ReadRegion(slot.slot, g);
        ASSERT_TRUE(view.ok()) << view.status().ToString();
        const_cast<uint8_t*>(view->data)[view->length / 2] ^= 0x5A;  // the shm mapping
        ++damaged;
      }
    }
    ASSERT_EQ(damaged, 1) << "node 1 holds no sealed v1 replica of node 0";
  }
  Launch(n);
  std::vector<Result<RestoreReport>> out = RestoreEach();
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(out[r].ok()) << "rank " << r << ": " << out[r]->ToString();
    EXPECT_EQ(out[r].status().code(), StatusCode::kUnrecoverable)
        << "rank " << r << ": " << out[r].status().ToString();
  }
}

// The only copy of node 0's entry seals for v2 (node 1's seals region) is
// damaged and node 0 is lost: its replica of v2 cannot be checked end to
// end, so v2's memory copies are passed over and v1 comes from memory (no
// remote tier), bit-exact, instead of the restore failing over to a remote
// tier that is not there.
TEST_P(SealsLostTest, AVersionWhoseSealsAreLostGivesWayToAnOlderOneInMemory) {
  const int n = GetParam().nodes;
  SaveTwoVersions();
  bool crc_holds = true;
  CorruptRegionOfNode0(1, {0x5A}, 0, &crc_holds, RegionKind::kSeals);
  ASSERT_FALSE(crc_holds);
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  auto reports = RestoreAll("node 0's seals of v2 damaged on node 1, node 0 lost", 1);
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[0].entries[0].source, RestoreSource::kReplica) << reports[0].ToJson();
  // Passed over as a version, not blamed on node 1's replica (which is good).
  EXPECT_NE(reports[0].ToString().find("v2 in memory: no entry seals of a shard it rebuilds"),
            std::string::npos)
      << reports[0].ToString();
  EXPECT_EQ(reports[0].ToString().find("marked bad"), std::string::npos) << reports[0].ToString();
  // v2 was every survivor's guess: the seals of v1 took an allgather of their own.
  for (const auto& rep : reports) EXPECT_EQ(rep.stats.seals_exchanges, 1) << rep.ToJson();
}

// Node 1's copy of node 0 (the planner's first pick: lowest index) fails its
// sealed crc32c as node 0 receives it, is marked bad, and the plan is made
// again: v2, node 0 from node 2's copy.
TEST_P(SecondSourceTest, CorruptChosenReplicaIsReplacedBySecondReplica) {
  const int n = GetParam().nodes;
  SaveTwoVersions();
  bool crc_holds = true;
  CorruptRegionOfNode0(1, {0x5A}, 100, &crc_holds);
  ASSERT_FALSE(crc_holds);
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  auto reports = RestoreAll("node 1's copy of node 0 corrupt, node 0 lost");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[0].source_detail, "replica from node 2") << reports[0].ToJson();
  EXPECT_EQ(reports[0].entries[0].source, RestoreSource::kReplica);
  std::string notes;
  for (const auto& rep : reports) notes += rep.ToString();
  EXPECT_NE(notes.find("crc"), std::string::npos) << notes;
}

// An end-to-end mismatch tries another memory source: node 1's copy of node
// 0 is corrupted so that its region crc holds (the CRC-32C polynomial XORed
// in, across the end of node 0's entry e0, as in
// EndToEndCheckCatchesCorruptionTheRegionCrcMisses); the shard rebuilt from
// it fails the check against node 0's entry seals, node 1's copy is marked
// bad and node 0 is restored from node 2's copy, with no remote tier at all.
TEST_P(SecondSourceTest, EndToEndMismatchRetriesAnotherReplica) {
  const int n = GetParam().nodes;
  SaveTwoVersions();
  bool crc_holds = false;
  CorruptRegionOfNode0(1, {0xF1, 0x76, 0xEC, 0x05, 0x01}, kEntryBytes[0] - 2, &crc_holds);
  ASSERT_TRUE(crc_holds) << "the pattern must keep the region crc";
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  auto reports = RestoreAll("node 1's copy of node 0 corrupt (crc holds), node 0 lost");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[0].source_detail, "replica from node 2") << reports[0].ToJson();
  EXPECT_EQ(reports[0].entries[0].source, RestoreSource::kReplica);
  for (const auto& rep : reports) {
    EXPECT_NE(rep.ToString().find("fails the end-to-end check; its sources are marked bad"),
              std::string::npos)
        << rep.ToString();
  }
}

// Drops the "still writing" persist records this rank sends (state byte 2).
class NoPersistHeartbeats : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    if (tag == wire::kTagPersistDone && bytes > 8 && static_cast<const uint8_t*>(data)[8] == 2) {
      return Status::Ok();
    }
    return ForwardingTransport::Send(peer, tag, data, bytes);
  }
};

// Rank 1 writes its v1 rank file after rank 0 has stopped waiting for it
// (transport timeout 2 s, rank 1 late by 3 s, its "still writing" records
// lost): v1 gets no manifest, and its late "done" record must not be taken
// for v2's, so v2 and v3 persist.
TEST_P(SecondSourceTest, ALatePersistRecordDoesNotStopLaterPersists) {
  const int n = GetParam().nodes;
  transport_timeout_ = std::chrono::milliseconds(2000);
  wrap_ = [](int r, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
    if (r != 1) return t;
    return std::make_shared<NoPersistHeartbeats>(std::move(t));
  };
  hooks_ = [](int rank) {
    FaultHooks h;
    if (rank == 1) {
      h.at_stage = [](Stage stage, uint64_t version) {
        if (stage == Stage::kPersist && version == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(3));
        }
        return Status::Ok();
      };
    }
    return h;
  };
  Launch(n);
  Run([&](int r) {
    Fill(r, 1);
    ASSERT_TRUE(cks_[r]->Save(1).ok());
    ASSERT_TRUE(cks_[r]->Wait().ok());
    (void)cks_[r]->WaitPersist();  // rank 0: v1 times out waiting for rank 1
  });
  for (uint64_t step : {2, 3}) {
    SaveOnAll(step);  // asserts that every persist succeeds
    if (HasFatalFailure()) return;
  }
  DirectoryRemoteStore remote(remote_dir_.string(), job_);
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok()) << complete.status().ToString();
  EXPECT_EQ(*complete, (std::vector<uint64_t>{2, 3}));
}

// A scheme the node count cannot satisfy (replica:3 on 2 nodes) is refused
// with an error naming the scheme and the requirement, before anything is saved.
TEST_P(SecondSourceTest, SchemeImpossibleForNodeCountIsAClearError) {
  Launch(2);
  std::vector<Status> st(2);
  Run([&](int r) { st[r] = cks_[r]->Save(1); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].ToString();
    EXPECT_NE(st[r].message().find("replica:3"), std::string::npos) << st[r].ToString();
    EXPECT_NE(st[r].message().find("at least"), std::string::npos) << st[r].ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, SecondSourceTest, ::testing::Values(Param{"replica:3", 3, 1}),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, SealsLostTest, ::testing::Values(Param{"replica:2", 4, 1}),
                         ParamName);

}  // namespace
}  // namespace memento::runtime
