// Protect + distributed recovery over the in-process transport (label local).
//
// For each scheme and node count, every rank saves two versions under the
// scheme (shards streamed to replica / parity holders while snapshotted),
// then for every failure combination F (all of them for N = 4 and 6; up to
// three failed nodes for N = 8) the nodes in F lose their segments, the job
// is relaunched and restores. Expectation, from placement's predicate:
//   recoverable   -> v2 bit-exact on every rank, no shard from remote, every
//                    shard of a failed node from a replica or a decode;
//   unrecoverable -> v2 bit-exact with the lost shards from the remote tier.
// Each restore re-protects, so the next combination starts fully protected.
#include "protect_fixture.h"

namespace memento::runtime {
namespace {

TEST_P(ProtectRecoveryTest, EveryFailureCombination) {
  const Param p = GetParam();
  const int n = p.nodes;
  auto scheme = placement::Scheme::Parse(p.scheme).value();
  auto layout =
      placement::GroupLayout::Build(placement::Topology::Uniform(n).value(), scheme).value();

  Launch(n);
  for (uint64_t step : {1, 2}) {
    SaveOnAll(step);
    if (HasFatalFailure()) return;
  }
  const Config config = MakeConfig();
  int recoverable = 0, unrecoverable = 0;
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) > p.max_failures) continue;
    std::vector<char> failed(n, 0);
    std::string what = "failed {";
    for (int r = 0; r < n; ++r) {
      if (mask & (1u << r)) {
        failed[r] = 1;
        what += " " + std::to_string(r);
      }
    }
    what += " }";
    // Node r == rank r: identities "<host>/<r>" sort in rank order for n <= 10.
    cks_.clear();
    for (int r = 0; r < n; ++r) {
      if (failed[r]) {
        ASSERT_TRUE(NodeStore::Destroy({job_, NodeIdentity(config, r), 0}).ok()) << what;
      }
    }
    Launch(n);
    const bool expect = placement::IsRecoverable(layout, failed);
    if (expect) ++recoverable;
    if (!expect) ++unrecoverable;
    std::vector<Result<RestoreReport>> out = RestoreEach();
    bool any_remote = false;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(out[r].ok()) << what << " rank " << r << ": " << out[r].status().ToString();
      EXPECT_EQ(out[r]->version, 2u) << what;
      ASSERT_TRUE(Exact(r, 2)) << what << " rank " << r << " not bit-exact ("
                               << out[r]->source_detail << ")";
      const RestoreSource src = out[r]->entries[0].source;
      any_remote = any_remote || src == RestoreSource::kRemote;
      if (expect) {
        EXPECT_NE(src, RestoreSource::kRemote) << what << " rank " << r;
        EXPECT_EQ(src == RestoreSource::kLocalMemory, !failed[r]) << what << " rank " << r;
      } else if (!failed[r]) {
        EXPECT_EQ(src, RestoreSource::kLocalMemory) << what << " rank " << r;
      }
    }
    EXPECT_EQ(any_remote, !expect) << what;
    ASSERT_FALSE(HasFailure()) << what;
  }
  EXPECT_GT(recoverable, 0);
  if (scheme.tolerance() < n) {
    EXPECT_GT(unrecoverable, 0);
  }
}

// Memory: every node's store holds exactly what the placement map gives it
// (its shard, the replicas or parity it protects) in each of its slots,
// preallocated, plus a fixed overhead (header, layout, slot control blocks,
// seal records) that does not grow with the shard.
TEST_P(ProtectRecoveryTest, StoreIsSizedByThePlacementMap) {
  const int n = GetParam().nodes;
  auto layout = placement::GroupLayout::Build(placement::Topology::Uniform(n).value(),
                                              placement::Scheme::Parse(GetParam().scheme).value())
                    .value();
  std::vector<uint64_t> shards(n);
  for (int r = 0; r < n; ++r) shards[r] = ShardBytes(r);
  auto map = placement::PlacementMap::Build(layout, shards);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  Launch(n);
  SaveOnAll(1);
  cks_.clear();
  for (int node = 0; node < n; ++node) {
    auto store = NodeStore::Attach({job_, NodeIdentity(MakeConfig(node), node), 0});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    uint64_t data = 0, seals = 0;
    for (const RegionSpec& spec : store->layout().regions) {
      if (spec.kind == RegionKind::kSeals) {
        seals += spec.capacity;
      } else {
        data += spec.capacity;
      }
    }
    EXPECT_EQ(data, map->bytes_at(node)) << "node " << node;
    const uint64_t formula = map->bytes_at(node) * store->slot_count();
    EXPECT_GE(store->segment_bytes(), formula) << "node " << node;
    EXPECT_LE(store->segment_bytes(), formula + seals * store->slot_count() + (64u << 10))
        << "node " << node << ": overhead beyond the formula";
  }
}


TEST_P(MinimalReprotectTest, RebuildsOnlyWhatWasLostAndSurvivesTheNextFailure) {
  background_reprotect_ = false;  // the re-protect's bytes and fallbacks are in the report
  const Param p = GetParam();
  const int n = p.nodes;
  auto scheme = placement::Scheme::Parse(p.scheme).value();
  Launch(n);
  SaveOnAll(2);
  if (HasFatalFailure()) return;
  // What a full re-protect moves: every shard to its copies / parity holders.
  const uint64_t fan_out = scheme.is_replica() ? scheme.copies() - 1 : scheme.parity();
  uint64_t full = 0;
  for (int r = 0; r < n; ++r) full += ShardBytes(r) * fan_out;

  // 1. Lose node 0.
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  Launch(n);
  auto reports = RestoreAll("lost {0}");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  uint64_t reprotect_sent = 0;
  for (const auto& rep : reports) {
    // The survivors' newest committed version is the one restored: its entry
    // seals came with the inventory, no allgather of their own.
    EXPECT_EQ(rep.stats.seals_exchanges, 0) << rep.ToJson();
    EXPECT_EQ(rep.stats.reprotect_mode, "minimal") << rep.ToJson();
    reprotect_sent += rep.stats.reprotect_bytes_sent;
  }
  const auto& per_node = reports[0].stats.bytes_received_per_node;
  ASSERT_EQ(per_node.size(), static_cast<size_t>(n));
  // The JSON record carries what was lost, where it came from, bytes per node
  // and time per phase, for logs.
  const std::string json = reports[0].ToJson();
  for (const char* key : {"\"lost_nodes\"", "\"source_detail\"", "\"bytes_received_per_node\"",
                          "\"inventory\"", "\"transfer\"", "\"reprotect\"", "\"plan\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " missing in " << json;
  }
  EXPECT_NE(json.find("\"lost_nodes\":[0]"), std::string::npos) << json;
  // Into the rebuilt node: its shard, once (a local decode would pull K' rows
  // per rebuilt piece).
  EXPECT_EQ(per_node[0], ShardBytes(0)) << reports[0].ToJson();
  // Re-protect: what node 0 held, not the whole version again.
  EXPECT_GT(reprotect_sent, 0u);
  EXPECT_LE(reprotect_sent * 2, full) << reports[0].ToJson();
  std::printf(
      "[ %s ] node 0 rebuilt: received %llu B (shard %llu B); re-protect moved %llu B, "
      "a full re-protect %llu B\n",
      p.scheme, static_cast<unsigned long long>(per_node[0]),
      static_cast<unsigned long long>(ShardBytes(0)),
      static_cast<unsigned long long>(reprotect_sent), static_cast<unsigned long long>(full));

  // 2. Lose node 1, with the remote tier gone: only what node 0 re-protected
  // (and the survivors) can serve. Node 1 comes back as a new identity.
  ASSERT_NO_FATAL_FAILURE(LoseNode(1));
  std::filesystem::remove_all(remote_dir_);
  replaced_rank_ = 1;
  Launch(n);
  reports = RestoreAll("lost {1}, replaced");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[1].lost_nodes, std::vector<int>{1});
  EXPECT_EQ(reports[1].stats.reprotect_mode, "minimal");
  EXPECT_EQ(reports[1].stats.bytes_received_per_node[1], ShardBytes(1)) << reports[1].ToJson();

  // 3. And once more: lose node 0 again; served by what the replacement holds.
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  Launch(n);
  reports = RestoreAll("lost {0} after the replacement");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
}

// The full re-protect fallback: rank 1 (a survivor) fails its part of the
// minimal re-protect (an injected failure at Stage::kReprotect), so every
// rank re-protects the whole version instead. The job must end fully
// protected: a second, different node is lost with the remote tier gone and
// is recovered bit-exactly from memory.
TEST_P(MinimalReprotectTest, FailedMinimalReprotectFallsBackToFullAndStaysProtected) {
  background_reprotect_ = false;  // the re-protect's bytes and fallbacks are in the report
  const int n = GetParam().nodes;

  // 1. Lose node 0; rank 1's minimal re-protect fails.
  ASSERT_NO_FATAL_FAILURE(SaveThenLoseNode0(n));
  RefuseReprotectOn(1);
  Launch(n);
  auto reports = RestoreAll("lost {0}, minimal re-protect fails on rank 1");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  for (const auto& rep : reports) {
    EXPECT_EQ(rep.stats.reprotect_mode, "full") << rep.ToJson();
    EXPECT_NE(rep.ToString().find("minimal re-protect failed"), std::string::npos)
        << rep.ToString();
    EXPECT_EQ(rep.ToString().find("not re-protected"), std::string::npos) << rep.ToString();
  }

  // 2. Lose node 1 with the remote tier gone: what the full re-protect wrote
  // (node 0's copies / parity) must serve.
  hooks_ = nullptr;
  ASSERT_NO_FATAL_FAILURE(LoseNode(1));
  std::filesystem::remove_all(remote_dir_);
  Launch(n);
  reports = RestoreAll("lost {1} after the full re-protect");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[1].lost_nodes, std::vector<int>{1});
  EXPECT_NE(reports[1].entries[0].source, RestoreSource::kLocalMemory) << reports[1].ToJson();
}

// A blocking re-protect that cannot commit (the minimal one refused on rank
// 1, then the full one's seal refused there too): the restore itself stands,
// bit-exact, but the report and ProtectionState() say the lost node's copies
// are missing, until the next Save commits.
TEST_P(MinimalReprotectTest, AFailedBlockingReprotectLeavesTheJobUnprotected) {
  background_reprotect_ = false;
  const int n = GetParam().nodes;
  ASSERT_NO_FATAL_FAILURE(SaveThenLoseNode0(n));
  auto refuse = std::make_shared<std::atomic<bool>>(true);
  hooks_ = [refuse](int rank) {
    FaultHooks h;
    if (rank == 1) {
      h.at_stage = [refuse](Stage stage, uint64_t) {
        return *refuse && (stage == Stage::kReprotect || stage == Stage::kSeal)
                   ? Status::Unavailable("test: re-protect refused")
                   : Status::Ok();
      };
    }
    return h;
  };
  Launch(n);
  auto reports = RestoreAll("lost {0}, every re-protect fails on rank 1");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_EQ(reports[r].protection, "unprotected") << reports[r].ToJson();
    EXPECT_NE(reports[r].ToString().find("not re-protected"), std::string::npos)
        << reports[r].ToString();
    EXPECT_EQ(cks_[r]->ProtectionState(), Protection::kUnprotected) << "rank " << r;
  }
  // The next Save commits everywhere and the job is protected again.
  *refuse = false;
  SaveOnAll(3);
  for (size_t r = 0; r < cks_.size(); ++r) {
    EXPECT_EQ(cks_[r]->ProtectionState(), Protection::kProtected) << "rank " << r;
  }
}

// End-to-end check of rebuilt shards: every replica of node 0 / every parity
// piece on the survivors is corrupted with a pattern that leaves its region's
// crc32c unchanged (the CRC-32C polynomial itself, XORed in), so the
// inventory sees valid regions; the pattern straddles the end of node 0's
// first entry, so the per-entry crcs see it. The rebuilt shard of node 0 then fails the
// check against node 0's entry seals: no wrong byte is restored; its sources
// are marked bad and the restore is planned again, until no memory source of
// node 0 is left: node 0 comes from the remote tier, the others from memory.
TEST_P(MinimalReprotectTest, EndToEndCheckCatchesCorruptionTheRegionCrcMisses) {
  const Param p = GetParam();
  const int n = p.nodes;
  Launch(n);
  SaveOnAll(2);
  if (HasFatalFailure()) return;
  cks_.clear();
  const uint8_t kPolynomial[5] = {0xF1, 0x76, 0xEC, 0x05, 0x01};  // x^32 + ... + 1, LSB first
  int corrupted = 0;
  for (int r = 1; r < n; ++r) {
    auto store = NodeStore::Attach({job_, NodeIdentity(MakeConfig(r), r), 0});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const int slot = store->Inventory().NewestCommitted();
    ASSERT_GE(slot, 0);
    for (int g = 0; g < store->region_count(); ++g) {
      const RegionSpec& spec = store->layout().regions[g];
      const bool target = (spec.kind == RegionKind::kReplica && spec.owner_node == 0) ||
                          (spec.kind == RegionKind::kParity && spec.capacity >= 64);
      if (!target) continue;
      auto view = store->ReadRegion(slot, g);
      ASSERT_TRUE(view.ok());
      ASSERT_GE(view->length, 64u);
      uint8_t* data = const_cast<uint8_t*>(view->data);  // the shm mapping
      // Across the end of node 0's entry e0 (in its replica, or in the
      // decoded piece that holds it): each entry's crc sees half a pattern.
      const uint64_t at = (kEntryBytes[0] - 2) % view->length;
      ASSERT_LE(at + 5, view->length);
      for (int i = 0; i < 5; ++i) data[at + i] ^= kPolynomial[i];
      ASSERT_TRUE(store->VerifyRegion(slot, g).ok()) << "the pattern must keep the region crc";
      ++corrupted;
    }
  }
  ASSERT_GT(corrupted, 0);
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  Launch(n);
  std::vector<Result<RestoreReport>> out = RestoreEach();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status().ToString();
    EXPECT_TRUE(Exact(r, 2)) << "rank " << r << " restored wrong bytes";
    EXPECT_EQ(out[r]->entries[0].source,
              r == 0 ? RestoreSource::kRemote : RestoreSource::kLocalMemory)
        << "rank " << r;
  }
  EXPECT_NE(out[0]->ToString().find("end-to-end"), std::string::npos) << out[0]->ToString();
}

// Node 0 lost, and a survivor's own copy (node 1's) damaged so that its
// region crc fails: nothing is hashed before the transfer, so node 1 finds
// out while copying it into its buffers. Its copy is marked bad (not the
// parity rows of a decode that read it as a data row) and the restore is
// planned again: node 1 is rebuilt like node 0, from memory where the
// scheme covers both (rs:4+2), else from remote; v2 bit-exact on every rank.
TEST_P(MinimalReprotectTest, DamagedSurvivorCopyIsMarkedBadAndRebuilt) {
  const Param p = GetParam();
  const int n = p.nodes;
  ASSERT_NO_FATAL_FAILURE(SaveThenLoseNode0(n));
  {
    auto store = NodeStore::Attach({job_, NodeIdentity(MakeConfig(1), 1), 0});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const int slot = store->Inventory().NewestCommitted();
    ASSERT_GE(slot, 0);
    auto view = store->ReadRegion(slot, 1);  // node 1's entry e1
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    const_cast<uint8_t*>(view->data)[view->length / 2] ^= 0x40;  // the shm mapping
    ASSERT_FALSE(store->VerifyRegion(slot, 1).ok());
  }
  Launch(n);
  std::vector<Result<RestoreReport>> out = RestoreEach();
  const std::string scheme = p.scheme;
  // Where nodes 0 and 1 come from: replica:2 pairs them (node 1's only
  // replica was on node 0), xor:3 groups them, rs:4+2 covers both.
  const std::map<std::string, std::pair<RestoreSource, RestoreSource>> want = {
      {"replica:2", {RestoreSource::kReplica, RestoreSource::kRemote}},
      {"xor:3", {RestoreSource::kRemote, RestoreSource::kRemote}},
      {"rs:4+2", {RestoreSource::kDecode, RestoreSource::kDecode}}};
  ASSERT_EQ(want.count(scheme), 1u) << scheme;
  const bool memory_serves = scheme == "rs:4+2";
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status().ToString();
    EXPECT_EQ(out[r]->version, 2u) << out[r]->ToString();
    EXPECT_TRUE(Exact(r, 2)) << "rank " << r << " restored wrong bytes";
    const RestoreSource source = r == 0   ? want.at(scheme).first
                                 : r == 1 ? want.at(scheme).second
                                          : RestoreSource::kLocalMemory;
    EXPECT_EQ(out[r]->entries[1].source, source) << "rank " << r << ": " << out[r]->ToJson();
  }
  const std::string notes = out[1]->ToString();
  EXPECT_NE(notes.find("v2: node 1 lane 0: its own copy fails its sealed crc32c; it is marked bad"),
            std::string::npos)
      << notes;
  // A decode that read node 1's copy is not blamed on its parity rows.
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[r]->ToString().find("rebuilt by decode fails"), std::string::npos)
        << out[r]->ToString();
  }
  if (memory_serves) {
    for (auto& c : cks_) ASSERT_TRUE(c->Wait().ok());
  }
}

// replica:2 on 4 nodes: node 0's seals and replica are on node 1 only.
// A chunk stage that refuses to begin one version.
class RefusingStage : public ChunkStage {
 public:
  explicit RefusingStage(uint64_t refuse) : refuse_(refuse) {}
  Status Begin(uint64_t version, int, int) override {
    return version == refuse_
               ? Status::Unavailable("test: stage refuses v" + std::to_string(version))
               : Status::Ok();
  }
  Status OnChunk(const Chunk&) override { return Status::Ok(); }
  Status End(uint64_t, const Status&) override { return Status::Ok(); }

 private:
  const uint64_t refuse_;
};

// A chunk stage that records an End of a version it did not begin.
class EndsWhatItBegan : public ChunkStage {
 public:
  Status Begin(uint64_t version, int, int) override {
    begun_ = version;
    return Status::Ok();
  }
  Status OnChunk(const Chunk&) override { return Status::Ok(); }
  Status End(uint64_t version, const Status&) override {
    if (version != begun_) ended_unbegun_ = true;
    return Status::Ok();
  }
  bool ended_unbegun() const { return ended_unbegun_; }

 private:
  uint64_t begun_ = 0;
  std::atomic<bool> ended_unbegun_{false};
};

// A stage of rank 1 refuses to begin v2: rank 1 copies nothing, votes
// "false" with this version's error (not the previous version's outcome),
// and its peers learn it at once (not from a timeout): replica holders from
// its entry seals arriving before its shard, erasure parity holders from
// its hops forwarding "failed" pieces; v2 commits nowhere and v1 stays
// restorable from memory.
TEST_P(MinimalReprotectTest, StageRefusingToBeginFailsTheVersionEverywhere) {
  const int n = GetParam().nodes;
  Launch(n);
  RefusingStage stage(2);
  EndsWhatItBegan later;  // every stage begins the version the commit ends
  ASSERT_TRUE(cks_[1]->AddChunkStage(&stage).ok());
  ASSERT_TRUE(cks_[1]->AddChunkStage(&later).ok());
  SaveOnAll(1);
  if (HasFatalFailure()) return;
  ExpectV2FailedEverywhereAtOnce("stage refuses v2");
  EXPECT_FALSE(later.ended_unbegun());
  ExpectRelaunchRestoresLocally(n, 1);  // the relaunch drops cks_ before `stage` goes
}

// Rank 1 cannot begin v2's slot (its store's file system filled before the
// slot's pages were reserved, say): the version still runs through every
// stage of rank 1 without a slot, so its peers learn at once that it failed
// (not from a timeout, after which the transport, and so checkpointing,
// would be broken), v2 commits nowhere, v1 stays committed, and v3 then
// commits everywhere over channels left in step.
TEST_P(MinimalReprotectTest, ASlotThatCannotBeBegunFailsTheVersionAndTheNextCommits) {
  const int n = GetParam().nodes;
  hooks_ = [](int rank) {
    FaultHooks h;
    if (rank == 1) {
      h.at_stage = [](Stage stage, uint64_t version) {
        return stage == Stage::kSlot && version == 2
                   ? Status::ResourceExhausted("test: no space left for the slot")
                   : Status::Ok();
      };
    }
    return h;
  };
  Launch(n);
  SaveOnAll(1);
  if (HasFatalFailure()) return;
  ExpectV2FailedEverywhereAtOnce("no space left for the slot");
  SaveOnAll(3);
  if (HasFatalFailure()) return;
  ExpectRelaunchRestoresLocally(n, 3);
}

// A full re-protect that fails keeps the restored version in memory: after
// node 0 is lost, the minimal re-protect is refused (rank 1) and the full
// one's commit too (rank 2 fails to seal it). The survivors must still hold
// v2 as it was, so the next relaunch, with no remote tier, restores v2 from
// memory; a reseed that dropped the old copy before the new one committed
// would leave nothing to restore.
TEST_P(MinimalReprotectTest, FailedFullReprotectKeepsTheRestoredVersion) {
  background_reprotect_ = false;  // the re-protect's bytes and fallbacks are in the report
  const int n = GetParam().nodes;
  Launch(n);
  SaveOnAll(1);
  SaveOnAll(2);
  if (HasFatalFailure()) return;
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  hooks_ = [](int rank) {
    FaultHooks h;
    h.at_stage = [rank](Stage stage, uint64_t) {
      if (rank == 1 && stage == Stage::kReprotect) return Status::Unavailable("test: refused");
      if (rank == 2 && stage == Stage::kSeal) return Status::Unavailable("test: seal refused");
      return Status::Ok();
    };
    return h;
  };
  Launch(n);
  auto reports = RestoreAll("lost {0}, minimal and full re-protect fail");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_NE(reports[1].ToString().find("not re-protected"), std::string::npos)
      << reports[1].ToString();

  hooks_ = nullptr;
  cks_.clear();
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  RestoreAll("relaunch after the failed re-protect");
}

// Restore returns before the re-protect: it is held at Stage::kReprotect on
// every rank until every rank has saved v3, so the Save runs while the
// re-protect does and must not wait for it (the slots it needs are pinned).
// v3 then commits bit-exactly, the job is protected again, and a second,
// different node lost with the remote tier gone restores v3 from memory.
TEST_P(MinimalReprotectTest, SaveDuringTheBackgroundReprotectCommitsAndStaysProtected) {
  const int n = GetParam().nodes;
  ASSERT_NO_FATAL_FAILURE(SaveThenLoseNode0(n));
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> held{0}, saved{0};
  hooks_ = [&](int) {
    FaultHooks h;
    h.at_stage = [&](Stage stage, uint64_t) {
      if (stage != Stage::kReprotect) return Status::Ok();
      ++held;
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
      return Status::Ok();
    };
    return h;
  };
  Launch(n);
  std::vector<Result<RestoreReport>> out(n, Status::Internal("not run"));
  std::vector<Protection> at_return(n), while_saving(n), after_wait(n);
  std::vector<Status> save(n), wait(n);
  // One byte per rank: the rank threads write their own elements at once
  // (std::vector<bool> would pack them into shared words, a data race).
  std::vector<uint8_t> exact(n, 0);
  Run([&](int r) {
    for (auto& b : bufs_[r]) std::fill(b.begin(), b.end(), 0xEE);
    out[r] = cks_[r]->Restore();
    at_return[r] = cks_[r]->ProtectionState();
    exact[r] = Exact(r, 2);
    save[r] = cks_[r]->WaitSnapshot();
    Fill(r, 3);
    if (save[r].ok()) save[r] = cks_[r]->Save(3);
    while_saving[r] = cks_[r]->ProtectionState();
    if (++saved == n) {  // every rank saved while every re-protect is held
      std::lock_guard<std::mutex> lock(mu);
      release = true;
      cv.notify_all();
    }
    wait[r] = cks_[r]->Wait();
    after_wait[r] = cks_[r]->ProtectionState();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status().ToString();
    EXPECT_EQ(out[r]->version, 2u);
    EXPECT_TRUE(exact[r]) << "rank " << r << " not bit-exact when Restore returned";
    EXPECT_EQ(out[r]->stats.reprotect_mode, "minimal, background") << out[r]->ToJson();
    EXPECT_EQ(out[r]->protection, "re-protecting");
    EXPECT_EQ(at_return[r], Protection::kReprotecting) << "rank " << r;
    EXPECT_TRUE(save[r].ok()) << "rank " << r << ": " << save[r].ToString();
    EXPECT_EQ(while_saving[r], Protection::kReprotecting) << "rank " << r;
    EXPECT_TRUE(wait[r].ok()) << "rank " << r << ": " << wait[r].ToString();
    EXPECT_EQ(after_wait[r], Protection::kProtected) << "rank " << r;
    EXPECT_EQ(cks_[r]->LatestCommitted().value_or(0), 3u) << "rank " << r;
  }
  EXPECT_EQ(held.load(), n) << "every rank's re-protect reached Stage::kReprotect";

  // A second, different node lost, no remote tier: v3 from memory.
  hooks_ = nullptr;
  ASSERT_NO_FATAL_FAILURE(LoseNode(1));
  std::filesystem::remove_all(remote_dir_);
  Launch(n);
  auto reports = RestoreAll("lost {1} after v3 was saved during the re-protect", 3);
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[1].lost_nodes, std::vector<int>{1});
}

// A background re-protect that fails on one rank leaves the job unprotected
// (what node 0 held is still missing) until the next Save commits; that Save
// protects it again: node 0 lost once more, with no remote tier, restores the
// new version from memory.
TEST_P(MinimalReprotectTest, FailedBackgroundReprotectIsUnprotectedUntilTheNextSave) {
  const int n = GetParam().nodes;
  ASSERT_NO_FATAL_FAILURE(SaveThenLoseNode0(n));
  RefuseReprotectOn(1);
  Launch(n);
  auto reports = RestoreAll("lost {0}, background re-protect fails on rank 1");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  std::vector<Status> waited(n);
  Run([&](int r) { waited[r] = cks_[r]->Wait(); });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(waited[r].ok()) << "a failed re-protect does not stop checkpointing: "
                                << waited[r].ToString();
    EXPECT_EQ(cks_[r]->ProtectionState(), Protection::kUnprotected) << "rank " << r;
  }
  SaveOnAll(3);
  if (HasFatalFailure()) return;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(cks_[r]->ProtectionState(), Protection::kProtected) << "rank " << r;
  }
  hooks_ = nullptr;
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);
  Launch(n);
  RestoreAll("lost {0} again after v3", 3);
}

// Chunks larger than a parity chain's piece (1 MiB chunks, 256 KiB pieces),
// entries that end inside a piece and a shard that ends inside a stripe
// piece: the chains fold from the slot where a piece lies in one entry and
// from a copy where it crosses entries or the shard's end; v2 still decodes
// bit-exactly after the loss of node 0, and after that of nodes 0 and 1
// where the scheme allows it (rs).
TEST_P(MinimalReprotectTest, ChunksLargerThanAParityPart) {
  const Param p = GetParam();
  chunk_bytes_ = 1 << 20;
  entry_bytes_ = {(3u << 20) + 1234, 77, 0, 700001};
  Launch(p.nodes);
  SaveOnAll(1);
  SaveOnAll(2);
  for (const std::vector<int>& lost : std::vector<std::vector<int>>{{0}, {0, 1}}) {
    if (std::string(p.scheme).rfind("rs:", 0) != 0 && lost.size() > 1) continue;
    for (int node : lost) ASSERT_NO_FATAL_FAILURE(LoseNode(node));
    std::filesystem::remove_all(remote_dir_);  // memory must serve
    Launch(p.nodes);
    auto reports = RestoreAll("1 MiB chunks, nodes lost: " + std::to_string(lost.size()));
    ASSERT_EQ(reports.size(), static_cast<size_t>(p.nodes));
    if (std::string(p.scheme).rfind("replica", 0) != 0) {
      EXPECT_NE(reports[0].source_detail.find("decode"), std::string::npos) << reports[0].ToJson();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, MinimalReprotectTest,
                         ::testing::Values(Param{"replica:2", 4, 1}, Param{"xor:3", 4, 1},
                                           Param{"rs:4+2", 6, 1}),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, ProtectRecoveryTest,
                         ::testing::Values(Param{"replica:2", 4, 4}, Param{"replica:2:ring", 4, 4},
                                           Param{"xor:3", 4, 4}, Param{"rs:4+2", 6, 6},
                                           Param{"replica:2", 6, 6}, Param{"replica:2:ring", 6, 6},
                                           Param{"xor:3", 6, 6}, Param{"replica:2", 8, 3},
                                           Param{"replica:2:ring", 8, 3}, Param{"xor:3", 8, 3},
                                           Param{"rs:4+2", 8, 3}),
                         ParamName);

}  // namespace
}  // namespace memento::runtime
