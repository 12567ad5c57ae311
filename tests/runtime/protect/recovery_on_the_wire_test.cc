// Restores whose messages change on the way (label local): a byte flipped on
// the wire into a lost node, a piece of the wrong size, a damaged copy in a
// survivor's store; the restore must send again, take another holder, or blame
// the parity row, and end bit-exact.
#include <atomic>
#include <deque>
#include <functional>
#include <mutex>

#include "protect_fixture.h"

namespace memento::runtime {
namespace {

// Which restore messages FlipRestorePieceTransport changes: the first
// `max_flips` messages of at least `min_bytes` that one rank (the first to
// send such a message to `victim`) sends to `victim` on one tag. A rebuilt
// row of a few KiB is one message on its chain's tag, so each attempt of the
// same plan flips one byte, until `max_flips` attempts have.
struct FlipPlan {
  int victim = 0;
  size_t min_bytes = 1024;
  int max_flips = 1;
  // At most one flip per transfer: a message under min_bytes (a replica
  // transfer's header, sent again by each attempt) re-arms the flip.
  bool one_per_transfer = false;
  std::atomic<int> sender{-1};
  std::atomic<int> flips{0};
};

// Forwards to a rank's transport, its non-blocking transfers included (so
// the chains run on one thread, as over MPI), and flips one byte "on the
// wire" (a copy is sent) of the restore messages `plan` names.
class FlipRestorePieceTransport : public ForwardingTransport {
 public:
  FlipRestorePieceTransport(std::shared_ptr<Transport> inner, FlipPlan* plan)
      : ForwardingTransport(std::move(inner)), plan_(plan) {}
  bool TestsTransfers() const override { return inner()->TestsTransfers(); }
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    return inner()->StartRecv(peer, tag, data, capacity);
  }
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    return inner()->StartSend(peer, tag, MaybeFlipped(peer, tag, data, bytes), bytes);
  }
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    return inner()->Send(peer, tag, MaybeFlipped(peer, tag, data, bytes), bytes);
  }

 private:
  // `data`, or a copy with one byte flipped when the plan names this message.
  const void* MaybeFlipped(int peer, int tag, const void* data, size_t bytes) {
    const bool restore =
        tag >= wire::kTagRecoverBase && tag < wire::kTagRecoverBase + wire::kRecoverTagSpan;
    if (peer != plan_->victim || !restore) return data;
    std::lock_guard<std::mutex> lock(mu_);  // replica streams send from threads of their own
    if (bytes < plan_->min_bytes) {
      armed_ = true;
      return data;
    }
    int sender = -1;
    plan_->sender.compare_exchange_strong(sender, rank());
    if (tag_ < 0) tag_ = tag;
    if (plan_->sender != rank() || tag != tag_ || plan_->flips >= plan_->max_flips) return data;
    if (plan_->one_per_transfer && !armed_) return data;
    armed_ = false;
    ++plan_->flips;
    const auto* p = static_cast<const uint8_t*>(data);
    copies_.emplace_back(p, p + bytes);  // lives as long as this transport
    copies_.back()[bytes / 2] ^= 0x20;
    return copies_.back().data();
  }

  FlipPlan* plan_;
  std::mutex mu_;
  int tag_ = -1;       // of this rank's first such message
  bool armed_ = true;  // see FlipPlan::one_per_transfer
  std::deque<std::vector<uint8_t>> copies_;
};

// Restores after bytes changed on the way into the lost node, or in a
// survivor's store.
class OnTheWireTest : public MinimalReprotectTest {
 protected:
  // Saves v1 and v2; the job ends, node 0's memory is gone and so is the
  // remote tier. `damage` (if set) then runs on the survivors' stores, and
  // the job is relaunched with every rank's transport flipping what `plan`
  // names. Requires every rank back bit-exact from memory and node 0 from a
  // source naming `source`; returns every report's text.
  std::string LoseNode0AndRestore(FlipPlan* plan, const std::string& source,
                                  const std::function<void()>& damage = nullptr) {
    const int n = GetParam().nodes;
    Launch(n);
    SaveOnAll(1);
    SaveOnAll(2);
    cks_.clear();
    if (damage) damage();
    LoseNode(0);
    std::filesystem::remove_all(remote_dir_);  // memory must serve
    wrap_ = [&](int, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
      return std::make_shared<FlipRestorePieceTransport>(std::move(t), plan);
    };
    Launch(n);
    wrap_ = nullptr;
    auto reports = RestoreAll("node 0 lost, bytes changed");
    EXPECT_EQ(reports.size(), static_cast<size_t>(n));
    std::string notes;
    for (const auto& rep : reports) notes += rep.ToString();
    if (!reports.empty()) {
      EXPECT_NE(reports[0].source_detail.find(source), std::string::npos) << reports[0].ToJson();
    }
    return notes;
  }
};

// Erasure schemes, whose lost shards are decoded.
class DecodeOnTheWireTest : public OnTheWireTest {};

// Replica schemes, whose lost shards are copied from a holder.
class ReplicaOnTheWireTest : public OnTheWireTest {};

// A byte of node 0's replica changed on the way from its holder: the copy
// fails its holder's seal where it lands, passes it on the holder, and is
// sent again from the same holder, bit-exact from memory; nothing is
// marked bad (with replica:2 that copy is node 0's only one in memory).
TEST_P(ReplicaOnTheWireTest, AByteChangedOnTheWayIsSentAgain) {
  FlipPlan plan;
  const std::string notes = LoseNode0AndRestore(&plan, "replica from node");
  EXPECT_EQ(plan.flips, 1) << "no restore piece of 1 KiB or more went to node 0";
  EXPECT_NE(notes.find("fails its sealed crc32c where it landed and passes it on its holder: the "
                       "bytes changed on the way; it is sent again (attempt 2)"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("marked bad"), std::string::npos) << notes;
}

// A byte of a rebuilt row changed on the way into the lost node (the chains
// carry no per-piece crc32c at restore): the rebuilt shard fails the
// end-to-end check before anything counts; the parity rows it read pass
// their sealed crc32c, so nothing is marked bad and the same plan runs
// again, rebuilding node 0 bit-exactly from memory (xor has no other parity
// row: blaming it would have sent the restore to the deleted remote tier).
TEST_P(DecodeOnTheWireTest, AByteChangedOnTheWayIsDecodedAgain) {
  FlipPlan plan;
  const std::string notes = LoseNode0AndRestore(&plan, "decode");
  EXPECT_EQ(plan.flips, 1) << "no restore piece of 1 KiB or more went to node 0";
  EXPECT_NE(notes.find("rebuilt by decode fails the end-to-end check while every row it read "
                       "passes its sealed crc32c: the bytes changed on the way; it is decoded "
                       "again (attempt 2)"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("marked bad"), std::string::npos) << notes;
}

// Shared by every rank's OffSizePieceTransport.
struct OffSizePiecePlan {
  int victim = 0;
  size_t min_bytes = 1024;
  int delta = -1;  // bytes added to the piece that goes out of size
  std::mutex mu;
  int tag = -1;                    // of that piece
  std::map<int, int> sent, taken;  // restore pieces to / into the victim, per tag
  std::vector<uint8_t> longer;     // what a piece one byte too long is sent from
};

// Forwards to a rank's transport, its non-blocking transfers included. The
// first restore piece of at least `min_bytes` sent to the victim goes out
// `delta` bytes off its size; the restore pieces sent to the victim and those
// its receives took (waited for, whatever they got) are counted per tag. A
// receive dropped without a wait takes nothing: under MPI, the holder's send
// of that piece would then never finish.
class OffSizePieceTransport : public ForwardingTransport {
 public:
  OffSizePieceTransport(std::shared_ptr<Transport> inner, OffSizePiecePlan* plan)
      : ForwardingTransport(std::move(inner)), plan_(plan) {}
  bool TestsTransfers() const override { return inner()->TestsTransfers(); }
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    size_t n = bytes;
    if (peer == plan_->victim && Counted(tag, bytes)) {
      std::lock_guard<std::mutex> lock(plan_->mu);
      if (plan_->tag < 0) {
        plan_->tag = tag;
        n = bytes + plan_->delta;
        if (n > bytes) {
          const auto* p = static_cast<const uint8_t*>(data);
          plan_->longer.assign(p, p + bytes);
          plan_->longer.resize(n, 0);
          data = plan_->longer.data();
        }
      }
      ++plan_->sent[tag];
    }
    return inner()->StartSend(peer, tag, data, n);
  }
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    MEMENTO_ASSIGN_OR_RETURN(auto receiving, inner()->StartRecv(peer, tag, data, capacity));
    if (rank() != plan_->victim || !Counted(tag, capacity)) return receiving;
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<Taken>(std::move(receiving), plan_, tag));
  }

 private:
  bool Counted(int tag, size_t bytes) const {
    return tag >= wire::kTagRecoverBase && tag < wire::kTagRecoverBase + wire::kRecoverTagSpan &&
           bytes >= plan_->min_bytes;
  }
  struct Taken : PendingTransfer {
    Taken(std::unique_ptr<PendingTransfer> inner, OffSizePiecePlan* plan, int tag)
        : inner(std::move(inner)), plan(plan), tag(tag) {}
    Result<size_t> Wait() override {
      Result<size_t> r = inner->Wait();
      std::lock_guard<std::mutex> lock(plan->mu);
      ++plan->taken[tag];
      return r;
    }
    bool Test() override { return inner->Test(); }
    std::unique_ptr<PendingTransfer> inner;
    OffSizePiecePlan* plan;
    int tag;
  };
  OffSizePiecePlan* plan_;
};

// Replica schemes whose replica pieces into the lost node go wrong in size.
class OffSizePieceTest : public ProtectRecoveryTest {
 protected:
  // Node 0 is lost after v2; its relaunch gets the first piece of its
  // replica `delta` bytes off. Requires every rank back bit-exact, node 0
  // from the remote tier, and every piece its holder sent received (the rest
  // of the replica is taken: under MPI the holder's sends would otherwise
  // wait for the timeout, and in any transport the next attempt, on the
  // same tags, would match them). Returns node 0's report text.
  std::string LoseNode0WithAPieceOff(int delta) {
    const int n = GetParam().nodes;
    Launch(n);
    SaveOnAll(1);
    SaveOnAll(2);
    LoseNode(0);
    if (HasFatalFailure()) return "";
    OffSizePiecePlan plan;
    plan.delta = delta;
    wrap_ = [&](int, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
      return std::make_shared<OffSizePieceTransport>(std::move(t), &plan);
    };
    Launch(n);
    wrap_ = nullptr;
    std::vector<Result<RestoreReport>> out = RestoreEach();
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].status().ToString();
      if (!out[r].ok()) return "";
      EXPECT_EQ(out[r]->version, 2u);
      EXPECT_TRUE(Exact(r, 2)) << "rank " << r << " not bit-exact";
    }
    EXPECT_EQ(out[0]->entries[0].source, RestoreSource::kRemote) << out[0]->ToJson();
    EXPECT_GE(plan.tag, 0) << "no restore piece of 1 KiB or more went to node 0";
    const uint64_t pieces = (ShardBytes(0) + chunk_bytes_ - 1) / chunk_bytes_;
    EXPECT_GE(plan.sent[plan.tag], static_cast<int>(pieces) - 1);
    EXPECT_EQ(plan.taken[plan.tag], plan.sent[plan.tag])
        << "node 0 left pieces of its replica unreceived";
    return out[0]->ToString();
  }
};

// A piece a byte short: node 0 names it and takes the rest of the replica.
TEST_P(OffSizePieceTest, AShortPieceIsReportedAndTheRestOfTheReplicaIsTaken) {
  const std::string notes = LoseNode0WithAPieceOff(-1);
  EXPECT_NE(notes.find("piece of " + std::to_string(chunk_bytes_ - 1) + " bytes from rank"),
            std::string::npos)
      << notes;
}

// A piece a byte too long (the transport takes it and refuses it): the same.
TEST_P(OffSizePieceTest, AnOversizedPieceIsReportedAndTheRestOfTheReplicaIsTaken) {
  const std::string notes = LoseNode0WithAPieceOff(+1);
  EXPECT_NE(notes.find("restore: piece from rank"), std::string::npos) << notes;
  EXPECT_NE(notes.find("exceeds capacity " + std::to_string(chunk_bytes_)), std::string::npos)
      << notes;
}

// Three copies: node 0's replica on a second holder.
class SecondReplicaTest : public OnTheWireTest {};

// The replica from one holder changes on the way twice: sent again the first
// time; the second time that holder's copy, which still passes its seal
// there, is not used again, and the third plan brings node 0 back
// bit-exactly from the other holder. The note says the copy passes on its
// holder rather than blaming the holder's bytes.
TEST_P(SecondReplicaTest, AReplicaThatChangesOnTheWayAgainIsTakenFromTheOtherHolder) {
  FlipPlan plan;
  plan.max_flips = 2;
  plan.one_per_transfer = true;
  const std::string notes = LoseNode0AndRestore(&plan, "replica from node");
  EXPECT_EQ(plan.flips, 2);
  EXPECT_NE(notes.find("it is sent again (attempt 2)"), std::string::npos) << notes;
  EXPECT_NE(notes.find("fails its sealed crc32c where it landed again, though it passes it on its "
                       "holder; it is not used again and the restore is planned again (attempt 3)"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("the replica on node"), std::string::npos) << notes;
}

// Reed-Solomon, with a second parity row to decode from.
class SecondParityTest : public DecodeOnTheWireTest {};

// The same decode fails the end-to-end check twice: the second time its
// parity rows are blamed although they pass their crc32c (what a region crc
// cannot see, such as parity folded from a piece changed on its way at
// protect), and the third plan rebuilds node 0 bit-exactly from memory
// with the other parity row.
TEST_P(SecondParityTest, ADecodeThatFailsAgainIsBlamedOnItsParity) {
  FlipPlan plan;
  plan.max_flips = 2;
  const std::string notes = LoseNode0AndRestore(&plan, "decode");
  EXPECT_EQ(plan.flips, 2);
  EXPECT_NE(notes.find("it is decoded again (attempt 2)"), std::string::npos) << notes;
  EXPECT_NE(notes.find("fails the end-to-end check; its sources are marked bad and the restore "
                       "is planned again (attempt 3)"),
            std::string::npos)
      << notes;
}

// A parity row that really is damaged (a byte of node 1's parity regions of
// v2 flipped in its store, so that they fail their sealed crc32c): the
// decode that read one fails the end-to-end check, its holder's check finds
// it, and only that row is marked bad at once; the second plan rebuilds
// node 0 from memory with another row, not running the same decode again.
TEST_P(SecondParityTest, ADamagedParityRowIsBlamedAtOnce) {
  FlipPlan none;
  none.max_flips = 0;
  int flipped = 0;
  const std::string notes = LoseNode0AndRestore(&none, "decode", [&] {
    const int holder = 1;
    auto store = NodeStore::Attach({job_, NodeIdentity(MakeConfig(holder), holder), 0});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    flipped = testing::FlipNewestParityRegions(*store);
  });
  ASSERT_GT(flipped, 0) << "node 1 holds no parity row";
  EXPECT_NE(notes.find("fails the end-to-end check; its sources are marked bad and the restore "
                       "is planned again (attempt 2)"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("decoded again"), std::string::npos) << notes;
}

INSTANTIATE_TEST_SUITE_P(Schemes, ReplicaOnTheWireTest, ::testing::Values(Param{"replica:2", 4, 1}),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, OffSizePieceTest, ::testing::Values(Param{"replica:2", 4, 1}),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, SecondReplicaTest, ::testing::Values(Param{"replica:3", 4, 1}),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, DecodeOnTheWireTest,
                         ::testing::Values(Param{"xor:3", 4, 1}, Param{"rs:4+2", 6, 1}), ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, SecondParityTest, ::testing::Values(Param{"rs:4+2", 6, 1}),
                         ParamName);

}  // namespace
}  // namespace memento::runtime
