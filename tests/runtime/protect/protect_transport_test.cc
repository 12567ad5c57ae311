// Protect and restore over transports that behave as networks do (label
// local): receives that complete before the stage reads them, a byte changed
// on the wire, a network slower than the snapshot, a receive that fails once,
// several transfers in flight at once.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "protect_fixture.h"

namespace memento::runtime {
namespace {

// The fixtures of protect_test.cc, under names of this file's own (a test suite
// belongs to one file's fixture class) with the same schemes.
class MinimalReprotectNetworkTest : public MinimalReprotectTest {};
class SecondSourceNetworkTest : public SecondSourceTest {};

// Completes every receive as soon as it is started, with the receives of the
// same peer and tag started before it (in order, as matching requires): the
// earliest a transport may fill a posted buffer. The in-process transport
// fills a receive only when it is tested or waited for, which would hide a
// buffer reused while a receive into it is still posted; under MPI, whether
// that shows depends on timing. Sends are forwarded (in-process they never
// wait for the receiver). Blocking at the start of a receive is safe only
// where no thread waits on a peer that waits on it: a replica's transfer,
// and a replica:2 re-protect after one lost node, where each rank is the
// destination of at most one chain. A thread that drives several decode
// chains posts receives it must not block on, so decodes run without it.
class EagerReceiveTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    return inner()->StartSend(peer, tag, data, bytes);
  }
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    MEMENTO_ASSIGN_OR_RETURN(auto receiving, inner()->StartRecv(peer, tag, data, capacity));
    auto done = std::make_unique<Done>(receiving->Wait());
    received_.fetch_add(1);
    return std::unique_ptr<PendingTransfer>(std::move(done));
  }
  bool TestsTransfers() const override { return inner()->TestsTransfers(); }
  int received() const { return received_.load(); }

 private:
  struct Done : PendingTransfer {
    explicit Done(Result<size_t> r) : result(std::move(r)) {}
    Result<size_t> Wait() override {
      if (waited) return Status::FailedPrecondition("a started transfer was already waited for");
      waited = true;
      return result;
    }
    bool Test() override { return true; }
    Result<size_t> result;
    bool waited = false;
  };
  std::atomic<int> received_{0};
};

// Entries much smaller than a chunk: every piece of a transfer or a decode
// row straddles several entries, so none lands in place and each goes through
// a bounce buffer, with the next pieces' receives already started (and, for
// a replica, over EagerReceiveTransport, already filled) while it is copied
// out.
TEST_P(MinimalReprotectNetworkTest, EveryPieceStraddlesEntries) {
  const Param p = GetParam();
  chunk_bytes_ = 16 << 10;
  entry_bytes_.clear();
  for (size_t e = 0; e < 40; ++e) entry_bytes_.push_back(3000 + 97 * e);
  Launch(p.nodes);
  SaveOnAll(1);
  SaveOnAll(2);
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  const bool replica = std::string(p.scheme).rfind("replica", 0) == 0;
  std::vector<std::shared_ptr<EagerReceiveTransport>> eager(p.nodes);
  if (replica) {
    wrap_ = [&](int r, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
      eager[r] = std::make_shared<EagerReceiveTransport>(std::move(t));
      return eager[r];
    };
  }
  Launch(p.nodes);
  wrap_ = nullptr;
  auto reports = RestoreAll("16 KiB chunks, 40 small entries");
  ASSERT_EQ(reports.size(), static_cast<size_t>(p.nodes));
  if (replica) {
    // Node 0's shard came from its replica, through started receives: at
    // least one per 16 KiB piece (the re-protect's receives count too).
    EXPECT_NE(reports[0].source_detail.find("replica from node"), std::string::npos)
        << reports[0].ToJson();
    EXPECT_GE(eager[0]->received(),
              static_cast<int>((ShardBytes(0) + chunk_bytes_ - 1) / chunk_bytes_));
  } else {
    EXPECT_NE(reports[0].source_detail.find("decode"), std::string::npos) << reports[0].ToJson();
  }
}

// Forwards to a rank's transport; while armed, flips one byte of the first
// payload of at least `min_bytes` sent to `victim` (the sender's buffer is
// left alone: the byte changes "on the wire").
class FlipOnWireTransport : public ForwardingTransport {
 public:
  FlipOnWireTransport(std::shared_ptr<Transport> inner, int victim, size_t min_bytes)
      : ForwardingTransport(std::move(inner)), victim_(victim), min_bytes_(min_bytes) {}
  void Arm() { armed_ = true; }
  bool flipped() const { return flipped_; }
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    if (peer == victim_ && bytes >= min_bytes_ && armed_.exchange(false)) {
      std::vector<uint8_t> copy(static_cast<const uint8_t*>(data),
                                static_cast<const uint8_t*>(data) + bytes);
      copy[bytes / 2] ^= 0x20;
      flipped_ = true;
      return ForwardingTransport::Send(peer, tag, copy.data(), bytes);
    }
    return ForwardingTransport::Send(peer, tag, data, bytes);
  }

 private:
  const int victim_;
  const size_t min_bytes_;
  std::atomic<bool> armed_{false};
  std::atomic<bool> flipped_{false};
};

// Forwards to a rank's transport; while closed, every protect message
// (tag kTagProtect) waits until the gate opens: a network that is not moving.
class GatedTransport : public ForwardingTransport {
 public:
  explicit GatedTransport(std::shared_ptr<Transport> inner)
      : ForwardingTransport(std::move(inner)) {}
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  int held() const { return held_; }  // protect sends that found the gate closed
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    if (tag == wire::kTagProtect) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!open_) ++held_;
      cv_.wait(lock, [this] { return open_; });
    }
    return ForwardingTransport::Send(peer, tag, data, bytes);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  std::atomic<int> held_{0};
};

// The stall is the snapshot, not the network: with every protect message
// held back, Save + WaitSnapshot still return on every rank (the shard is
// in this node's slot); the application then overwrites its buffers, the
// network moves, v2 commits, and after node 0 is lost v2 comes back
// bit-exact from memory, so what was sent was the snapshot, not the
// overwritten buffers.
TEST_P(MinimalReprotectNetworkTest, SnapshotDoesNotWaitForTheNetwork) {
  const int n = GetParam().nodes;
  std::vector<std::shared_ptr<GatedTransport>> gates(n);
  wrap_ = [&](int r, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
    gates[r] = std::make_shared<GatedTransport>(std::move(t));
    return gates[r];
  };
  Launch(n);
  wrap_ = nullptr;
  SaveOnAll(1);
  for (auto& g : gates) g->Close();
  std::mutex mu;
  std::condition_variable cv;
  int snapshotted = 0;
  std::vector<Status> snap(n), done(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      Fill(r, 2);
      Status s = cks_[r]->Save(2);
      if (s.ok()) s = cks_[r]->WaitSnapshot();
      snap[r] = s;
      Fill(r, 99);  // training goes on and overwrites its buffers
      {
        std::lock_guard<std::mutex> lock(mu);
        ++snapshotted;
      }
      cv.notify_all();
      done[r] = s.ok() ? cks_[r]->Wait() : s;
    });
  }
  bool all_snapshotted = false;
  {
    std::unique_lock<std::mutex> lock(mu);
    all_snapshotted = cv.wait_for(lock, std::chrono::seconds(10), [&] { return snapshotted == n; });
  }
  // The background senders reach the closed gate in their own time: wait
  // (bounded) until one has, so the check below is not a race.
  int held = 0;
  for (int i = 0; i < 1000 && held == 0; ++i) {
    held = 0;
    for (auto& g : gates) held += g->held();
    if (held == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& g : gates) g->Open();
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(all_snapshotted) << "WaitSnapshot waited for the held-back protect messages";
  EXPECT_GT(held, 0) << "no protect message was held back";
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(snap[r].ok()) << "rank " << r << ": " << snap[r].ToString();
    ASSERT_TRUE(done[r].ok()) << "rank " << r << ": " << done[r].ToString();
  }
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  RestoreAll("protect messages held back until after the snapshot; node 0 lost");
}

// A byte of node 0's v2 replica changed on the way to node 1: node 1 seals
// its copy with the sender's chunk crc, not with a hash of what it received,
// so the copy fails its sealed crc32c as node 0 receives it (before any
// end-to-end check); node 1's own check of its copy fails too, so it is
// marked bad at once, and node 0 comes back from node 2's copy.
TEST_P(SecondSourceNetworkTest, ByteChangedOnTheWireFailsTheHoldersSeal) {
  const int n = GetParam().nodes;
  std::shared_ptr<FlipOnWireTransport> wire;
  wrap_ = [&](int r, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
    if (r != 0) return t;
    wire = std::make_shared<FlipOnWireTransport>(std::move(t), /*victim=*/1, /*min_bytes=*/4096);
    return wire;
  };
  Launch(n);
  wrap_ = nullptr;
  ASSERT_NE(wire, nullptr);
  SaveOnAll(1);
  wire->Arm();
  SaveOnAll(2);  // commits: the holder cannot tell, it only stores and seals
  ASSERT_TRUE(wire->flipped());
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  auto reports = RestoreAll("node 0's replica to node 1 changed on the wire, node 0 lost");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_EQ(reports[0].source_detail, "replica from node 2") << reports[0].ToJson();
  std::string notes;
  for (const auto& rep : reports) notes += rep.ToString();
  EXPECT_NE(notes.find("the replica on node 1 fails its sealed crc32c; it is marked bad"),
            std::string::npos)
      << notes;
  EXPECT_EQ(notes.find("end-to-end"), std::string::npos) << notes;
  // Node 1's copy fails its seal on node 1 too: blamed at once, not sent again.
  EXPECT_EQ(notes.find("sent again"), std::string::npos) << notes;
}

// Relaunching on fewer nodes than the checkpoint was protected for is not a
// restore this engine can do in place: every rank gets a clear
// ElasticRestoreNeeded naming "elastic restore needed", and nothing is
// overwritten (the same node count afterwards still restores v2 bit-exactly).
TEST_P(SecondSourceNetworkTest, FewerNodesIsElasticRestoreNeeded) {
  const int n = GetParam().nodes;
  SaveTwoVersions();
  Launch(n - 1);
  std::vector<Status> st(n - 1);
  Run([&](int r) { st[r] = cks_[r]->Restore().status(); });
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kElasticRestoreNeeded)
        << "rank " << r << ": " << st[r].ToString();
    EXPECT_NE(st[r].message().find("elastic restore needed"), std::string::npos)
        << st[r].ToString();
  }
  Launch(n);
  auto reports = RestoreAll("the original node count again");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  for (const auto& rep : reports) EXPECT_EQ(rep.entries[0].source, RestoreSource::kLocalMemory);
}

// Forwards to a rank's transport; while armed, the first protect receive
// from `peer` fails without taking the message (a receiver that gave up
// mid-version): what that peer sent stays queued.
class FailOnceRecvTransport : public ForwardingTransport {
 public:
  FailOnceRecvTransport(std::shared_ptr<Transport> inner, int peer)
      : ForwardingTransport(std::move(inner)), peer_(peer) {}
  void Arm() { armed_ = true; }
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    if (peer == peer_ && tag == wire::kTagProtect && armed_.exchange(false)) {
      return Status::Corruption("test: receive failed");
    }
    return ForwardingTransport::Recv(peer, tag, data, capacity);
  }

 private:
  const int peer_;
  std::atomic<bool> armed_{false};
};

// Save(2) fails because node 1 stopped receiving node 0's parts, which stay
// queued; Save(2) is then retried with new buffer contents. Node 1 must drain
// the failed attempt's parts and keep the retry's: after node 0 is lost, its
// v2 comes back from node 1's copy with the retry's contents.
TEST_P(SecondSourceNetworkTest, RetriedVersionDoesNotTakeAFailedAttemptsParts) {
  const int n = GetParam().nodes;
  std::shared_ptr<FailOnceRecvTransport> rank1;
  wrap_ = [&](int r, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
    if (r != 1) return t;
    rank1 = std::make_shared<FailOnceRecvTransport>(std::move(t), /*peer=*/0);
    return rank1;
  };
  Launch(n);
  wrap_ = nullptr;
  SaveOnAll(1);
  if (HasFatalFailure()) return;
  rank1->Arm();
  const std::vector<Status> first = SaveEach(2);
  for (int r = 0; r < n; ++r) ASSERT_FALSE(first[r].ok()) << "rank " << r << " committed v2";
  const std::vector<Status> retry = SaveEach(2, false, /*fill=*/3);  // other contents, same version
  for (int r = 0; r < n; ++r) ASSERT_TRUE(retry[r].ok()) << retry[r].ToString();
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);
  Launch(n);
  std::vector<Result<RestoreReport>> out(n, Status::Internal("not run"));
  Run([&](int r) { out[r] = cks_[r]->Restore(); });
  ASSERT_TRUE(out[0].ok()) << out[0].status().ToString();
  EXPECT_EQ(out[0]->version, 2u);
  EXPECT_EQ(out[0]->source_detail, "replica from node 1") << out[0]->ToJson();
  EXPECT_TRUE(Exact(0, 3)) << "node 0's v2 is not the retry's contents";
}
// Forwards to a rank's transport, its non-blocking transfers included, and
// counts the protect payload receives posted and not yet waited for: the
// most there ever were at once.
class InFlightTransport : public ForwardingTransport {
 public:
  explicit InFlightTransport(std::shared_ptr<Transport> inner)
      : ForwardingTransport(inner), inner_(std::move(inner)) {}
  int most() const { return most_; }
  bool TestsTransfers() const override { return inner_->TestsTransfers(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    return inner_->StartSend(peer, tag, data, bytes);
  }
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    MEMENTO_ASSIGN_OR_RETURN(auto t, inner_->StartRecv(peer, tag, data, capacity));
    if (tag != wire::kTagProtectPayload) return t;
    const int now = ++open_;
    for (int m = most_; now > m && !most_.compare_exchange_weak(m, now);) {
    }
    return std::unique_ptr<PendingTransfer>(std::make_unique<Counted>(std::move(t), &open_));
  }

 private:
  class Counted : public PendingTransfer {
   public:
    Counted(std::unique_ptr<PendingTransfer> t, std::atomic<int>* open)
        : t_(std::move(t)), open_(open) {}
    ~Counted() override {
      if (!waited_) --*open_;
    }
    Result<size_t> Wait() override {
      if (!waited_) --*open_;
      waited_ = true;
      return t_->Wait();
    }
    bool Test() override { return t_->Test(); }

   private:
    std::unique_ptr<PendingTransfer> t_;
    std::atomic<int>* open_;
    bool waited_ = false;
  };
  std::shared_ptr<Transport> inner_;
  std::atomic<int> open_{0};
  std::atomic<int> most_{0};
};

// A holder keeps several replica payloads in flight from one owner, each
// landing in place at the offset its header named (the n-th payload with the
// n-th header), and the copies still restore bit-exactly: node 0's v2 comes
// back from node 1's or node 2's memory.
TEST_P(SecondSourceNetworkTest, ReplicaPayloadsLandInPlaceSeveralAtOnce) {
  const int n = GetParam().nodes;
  std::shared_ptr<InFlightTransport> holder;
  wrap_ = [&](int r, std::shared_ptr<Transport> t) -> std::shared_ptr<Transport> {
    if (r != 1) return t;
    holder = std::make_shared<InFlightTransport>(std::move(t));
    return holder;
  };
  Launch(n);
  wrap_ = nullptr;
  ASSERT_NE(holder, nullptr);
  SaveOnAll(1);
  SaveOnAll(2);
  EXPECT_GE(holder->most(), 2) << "replica payloads were received one at a time";
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  std::filesystem::remove_all(remote_dir_);  // memory must serve
  Launch(n);
  auto reports = RestoreAll("node 0 lost after pipelined replica parts");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_NE(reports[0].source_detail.find("replica from node"), std::string::npos)
      << reports[0].ToJson();
}

INSTANTIATE_TEST_SUITE_P(Schemes, MinimalReprotectNetworkTest,
                         ::testing::Values(Param{"replica:2", 4, 1}, Param{"xor:3", 4, 1},
                                           Param{"rs:4+2", 6, 1}),
                         ParamName);

INSTANTIATE_TEST_SUITE_P(Schemes, SecondSourceNetworkTest,
                         ::testing::Values(Param{"replica:3", 3, 1}), ParamName);

}  // namespace
}  // namespace memento::runtime
