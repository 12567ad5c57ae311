// DeviceRoutedTransport over the in-process transport, with a link that keeps
// NCCL's rules and checks them: a transfer moves only while its sender and its
// receiver are both inside it, a rank waits inside a transfer whose peer is
// busy with another one (as NCCL's calls queue on one stream), and a rank is
// never inside two transfers. A violation is counted and fails the test; a
// deadlock shows as the link's timeout. Then the engine over it: protect and
// the recovery of a lost node, bit-exact, with the shards' bytes on the link.
#include "memento/runtime/device_link.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/nccl_link.h"
#include "protect/protect_fixture.h"

namespace memento::runtime {
namespace {

// The link's rules, shared by the ranks of one in-process group.
class LinkHub {
 public:
  static constexpr auto kCancelPoll = std::chrono::milliseconds(2);
  explicit LinkHub(int n, std::chrono::milliseconds timeout) : ops_(n), timeout_(timeout) {}

  // `cancelled`: the link's DeviceLink::Cancelled, checked while it waits.
  Status Enter(int me, int peer, bool send, uint8_t* data, size_t bytes,
               const std::function<bool()>& cancelled) {
    std::unique_lock<std::mutex> lock(mu_);
    Op& mine = ops_[me];
    if (mine.active) {
      ++violations_;
      return Status::Internal("test link: rank " + std::to_string(me) + " in two transfers");
    }
    mine = Op{true, false, peer, send, data, bytes, Status::Ok()};
    cv_.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!mine.done) {
      Op& theirs = ops_[peer];
      if (theirs.active && !theirs.done && theirs.peer == me) {
        Status s = Status::Ok();
        if (theirs.send == send || theirs.bytes != bytes) {
          ++violations_;
          s = Status::Internal("test link: ranks " + std::to_string(me) + " and " +
                               std::to_string(peer) + " are in different transfers");
        } else if (bytes > 0) {
          std::memcpy(send ? theirs.data : data, send ? data : theirs.data, bytes);
        }
        mine.done = theirs.done = true;
        mine.result = theirs.result = s;
        ++transfers_;
        cv_.notify_all();
        break;
      }
      if (cancelled()) {
        mine.active = false;
        return Status::Unavailable("test link: rank " + std::to_string(me) + " cancelled");
      }
      const auto slice = std::min(deadline, std::chrono::steady_clock::now() + kCancelPoll);
      if (cv_.wait_until(lock, slice) == std::cv_status::timeout && !mine.done &&
          std::chrono::steady_clock::now() >= deadline) {
        mine.active = false;
        return Status::Timeout("test link: rank " + std::to_string(me) + " waited for rank " +
                               std::to_string(peer));
      }
    }
    mine.active = false;
    cv_.notify_all();
    return mine.result;
  }

  int violations() const { return violations_.load(); }
  int transfers() const { return transfers_.load(); }

 private:
  struct Op {
    bool active = false;
    bool done = false;
    int peer = -1;
    bool send = false;
    uint8_t* data = nullptr;
    size_t bytes = 0;
    Status result;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Op> ops_;
  std::chrono::milliseconds timeout_;
  std::atomic<int> violations_{0};
  std::atomic<int> transfers_{0};
};

class HubLink : public DeviceLink {
 public:
  HubLink(std::shared_ptr<LinkHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  Status Send(int peer, const void* data, size_t bytes) override {
    return hub_->Enter(rank_, peer, true, static_cast<uint8_t*>(const_cast<void*>(data)), bytes,
                       [this] { return Cancelled(); });
  }
  Status Recv(int peer, void* data, size_t bytes) override {
    return hub_->Enter(rank_, peer, false, static_cast<uint8_t*>(data), bytes,
                       [this] { return Cancelled(); });
  }
  std::string name() const override { return "test"; }

 private:
  std::shared_ptr<LinkHub> hub_;
  int rank_;
};

struct RoutedGroup {
  RoutedGroup(int n, size_t min_bytes, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : group(InProcessGroup::Create(n, timeout)), hub(std::make_shared<LinkHub>(n, timeout)) {
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::make_shared<DeviceRoutedTransport>(
          group->transport(r), std::make_shared<HubLink>(hub, r), min_bytes));
    }
  }
  std::shared_ptr<InProcessGroup> group;
  std::shared_ptr<LinkHub> hub;
  std::vector<std::shared_ptr<DeviceRoutedTransport>> ranks;
};

std::vector<uint8_t> Message(int from, int to, int k, size_t bytes) {
  std::vector<uint8_t> m(bytes);
  for (size_t i = 0; i < bytes; ++i) m[i] = static_cast<uint8_t>(from * 31 + to * 7 + k * 3 + i);
  return m;
}

TEST(DeviceRoutedTransport, SmallMessagesStayInlineLargeOnesTakeTheLink) {
  constexpr size_t kMin = 1000;
  RoutedGroup g(3, kMin);
  const std::vector<size_t> sizes = {0, 1, kMin - 1, kMin, 3 * kMin + 7};
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      // Sends to the next rank, receives from the previous one (a ring), one
      // message of each size; and one large message to itself (inline).
      const int next = (r + 1) % 3, prev = (r + 2) % 3;
      std::thread sender([&] {
        for (size_t k = 0; k < sizes.size(); ++k) {
          auto m = Message(r, next, static_cast<int>(k), sizes[k]);
          if (!g.ranks[r]->Send(next, 5, m.data(), m.size()).ok()) ++bad;
        }
      });
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<uint8_t> got(sizes[k] + 10, 0xAA);
        auto n = g.ranks[r]->Recv(prev, 5, got.data(), got.size());
        if (!n.ok() || *n != sizes[k]) {
          ++bad;
          continue;
        }
        got.resize(*n);
        if (got != Message(prev, r, static_cast<int>(k), sizes[k])) ++bad;
      }
      sender.join();
      auto self = Message(r, r, 9, 5 * kMin);
      std::vector<uint8_t> back(self.size());
      if (!g.ranks[r]->Send(r, 6, self.data(), self.size()).ok()) ++bad;
      auto n = g.ranks[r]->Recv(r, 6, back.data(), back.size());
      if (!n.ok() || back != self) ++bad;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(g.hub->violations(), 0);
  // Two messages per rank at or above kMin to a peer: 6 transfers on the link.
  EXPECT_EQ(g.hub->transfers(), 6);
  for (int r = 0; r < 3; ++r) {
    const auto c = g.ranks[r]->counters();
    EXPECT_EQ(c.sent_messages, 2u) << "rank " << r;
    EXPECT_EQ(c.sent_bytes, kMin + 3 * kMin + 7) << "rank " << r;
    EXPECT_EQ(c.received_messages, 2u) << "rank " << r;
  }
}

// Every rank sends to and receives from every other rank at once, on several
// tags, from a thread per (peer, tag) and direction: cycles of transfers in
// both directions, which a link taken in the wrong order deadlocks.
TEST(DeviceRoutedTransport, TrafficBetweenEveryPairAtOnceNeverDeadlocks) {
  constexpr int kRanks = 5, kTags = 2, kMessages = 12;
  constexpr size_t kMin = 64;
  RoutedGroup g(kRanks, kMin, std::chrono::seconds(30));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    for (int p = 0; p < kRanks; ++p) {
      if (p == r) continue;
      for (int tag = 0; tag < kTags; ++tag) {
        threads.emplace_back([&, r, p, tag] {
          std::mt19937 rng(r * 100 + p * 10 + tag);
          for (int k = 0; k < kMessages; ++k) {
            const size_t bytes = (k % 3 == 0) ? rng() % kMin : kMin + rng() % 5000;
            auto m = Message(r, p, k + 100 * tag, bytes);
            Status s = g.ranks[r]->Send(p, tag, m.data(), m.size());
            if (!s.ok()) {
              ADD_FAILURE() << s.ToString();
              ++bad;
            }
          }
        });
        threads.emplace_back([&, r, p, tag] {
          std::mt19937 rng(p * 100 + r * 10 + tag);  // the sender's sizes
          for (int k = 0; k < kMessages; ++k) {
            const size_t bytes = (k % 3 == 0) ? rng() % kMin : kMin + rng() % 5000;
            std::vector<uint8_t> got(bytes);
            auto n = g.ranks[r]->Recv(p, tag, got.data(), got.size());
            if (!n.ok() || *n != bytes || got != Message(p, r, k + 100 * tag, bytes)) {
              ADD_FAILURE() << "rank " << r << " from " << p << " tag " << tag << " message " << k
                            << ": " << (n.ok() ? "wrong bytes" : n.status().ToString());
              ++bad;
            }
          }
        });
      }
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(g.hub->violations(), 0);
  EXPECT_GT(g.hub->transfers(), kRanks * (kRanks - 1) * kTags * kMessages / 2);
}

TEST(DeviceRoutedTransport, ALargeMessageThatDoesNotFitIsConsumedAndRefused) {
  RoutedGroup g(2, 100);
  auto big = Message(0, 1, 0, 500), next = Message(0, 1, 1, 300);
  std::thread sender([&] {
    EXPECT_TRUE(g.ranks[0]->Send(1, 3, big.data(), big.size()).ok());
    EXPECT_TRUE(g.ranks[0]->Send(1, 3, next.data(), next.size()).ok());
  });
  std::vector<uint8_t> small(200);
  auto r = g.ranks[1]->Recv(0, 3, small.data(), small.size());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("500 bytes from rank 0, tag 3"), std::string::npos)
      << r.status().ToString();
  // The link stayed in step: the next message arrives whole.
  std::vector<uint8_t> got(300);
  auto n = g.ranks[1]->Recv(0, 3, got.data(), got.size());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(got, next);
  sender.join();
  EXPECT_EQ(g.hub->violations(), 0);
}

// A damaged frame announcing more bytes than any allocation holds is an
// error naming its sender, not an exception out of Recv.
TEST(DeviceRoutedTransport, AFrameAnnouncingAnImpossibleSizeIsAnError) {
  RoutedGroup g(2, 100);
  wire::DeviceFrame f;
  f.kind = wire::kDeviceBytes;
  f.tag = 5;
  f.bytes = uint64_t{1} << 62;
  ASSERT_TRUE(g.group->transport(0)->Send(1, 5, &f, sizeof(f)).ok());
  std::vector<uint8_t> small(16);
  auto r = g.ranks[1]->Recv(0, 5, small.data(), small.size());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("rank 0, tag 5"), std::string::npos) << r.status().ToString();
}

TEST(DeviceRoutedTransport, TheControlTagIsReservedAndCollectivesPassThrough) {
  RoutedGroup g(2, 100);
  uint8_t x = 1;
  Status s = g.ranks[0]->Send(1, kDeviceControlTag, &x, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("reserved"), std::string::npos) << s.ToString();
  std::vector<Result<int64_t>> max(2, Status::Internal("not run"));
  std::thread t([&] { max[1] = g.ranks[1]->AllReduceMax(7); });
  max[0] = g.ranks[0]->AllReduceMax(3);
  t.join();
  EXPECT_EQ(max[0].value(), 7);
  EXPECT_EQ(max[1].value(), 7);
}

TEST(DeviceRoutedTransport, APeerThatNeverJoinsTimesOutNamingIt) {
  RoutedGroup g(2, 100, std::chrono::milliseconds(300));
  auto big = Message(0, 1, 0, 1000);
  // Rank 1 never receives: rank 0 (lower) waits for its "ready" and gives up.
  Status s = g.ranks[0]->Send(1, 4, big.data(), big.size());
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_NE(s.ToString().find("rank 1, tag 4"), std::string::npos) << s.ToString();
}

// A link whose transfers never move (a peer's GPU that hangs): they end only
// when cancelled, or after a minute.
class StuckLink : public DeviceLink {
 public:
  Status Send(int, const void*, size_t) override { return Stay(); }
  Status Recv(int, void*, size_t) override { return Stay(); }
  std::string name() const override { return "stuck"; }

 private:
  Status Stay() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (std::chrono::steady_clock::now() < end) {
      if (Cancelled()) return Status::Unavailable("stuck link: cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return Status::Timeout("stuck link: a minute passed");
  }
};

// A transport that can be aborted (Aborted() says so), over another.
class AbortableTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void Abort() override {
    aborted_.store(true);
    ForwardingTransport::Abort();
  }
  bool Aborted() const override { return aborted_.load(); }

 private:
  std::atomic<bool> aborted_{false};
};

// In-job recovery's watcher aborts the job's transport, which never sees the
// link: that ends the transfers waiting inside the link on both ranks at
// once, not at the link's timeout.
TEST(DeviceRoutedTransport, AnAbortOfTheJobsTransportEndsTheTransfersInTheLink) {
  constexpr auto kTimeout = std::chrono::seconds(30);
  auto group = InProcessGroup::Create(2, kTimeout);
  auto hub = std::make_shared<LinkHub>(2, kTimeout);
  auto inner0 = std::make_shared<AbortableTransport>(group->transport(0));
  auto inner1 = std::make_shared<AbortableTransport>(group->transport(1));
  DeviceRoutedTransport rank0(inner0, std::make_shared<HubLink>(hub, 0), 100);
  DeviceRoutedTransport rank1(inner1, std::make_shared<StuckLink>(), 100);
  auto big = Message(0, 1, 0, 1000);
  std::vector<uint8_t> got(1000);
  Status sent = Status::Internal("not run"), received = Status::Internal("not run");
  const auto t0 = std::chrono::steady_clock::now();
  std::thread sender([&] { sent = rank0.Send(1, 4, big.data(), big.size()); });
  std::thread receiver([&] { received = rank1.Recv(0, 4, got.data(), got.size()).status(); });
  // Both past the handshake and inside their links: rank 0 waits in the hub
  // for rank 1, whose link never moves.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  inner0->Abort();
  inner1->Abort();
  sender.join();
  receiver.join();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(sent.code(), StatusCode::kUnavailable) << sent.ToString();
  EXPECT_NE(sent.ToString().find("cancelled"), std::string::npos) << sent.ToString();
  EXPECT_EQ(received.code(), StatusCode::kUnavailable) << received.ToString();
  EXPECT_NE(received.ToString().find("stuck link: cancelled"), std::string::npos)
      << received.ToString();
  EXPECT_LT(waited, 10.0) << "the transfers ended at the timeout, not at the abort";
  EXPECT_EQ(hub->transfers(), 0);
}

// The engine over routed transports: protect streams and a lost node's
// recovery go over the link (pieces of at least 512 bytes), bit-exact.
class DeviceRoutedEngineTest : public MinimalReprotectTest {};

TEST_P(DeviceRoutedEngineTest, ProtectAndRecoveryOfALostNodeGoOverTheLink) {
  const int n = GetParam().nodes;
  auto hub = std::make_shared<LinkHub>(n, std::chrono::seconds(20));
  std::vector<std::shared_ptr<DeviceRoutedTransport>> routed(n);
  wrap_ = [&](int r, std::shared_ptr<Transport> inner) {
    routed[r] = std::make_shared<DeviceRoutedTransport>(inner, std::make_shared<HubLink>(hub, r),
                                                        /*min_bytes=*/512);
    return routed[r];
  };
  Launch(n);
  SaveOnAll(1);
  ASSERT_FALSE(HasFatalFailure());
  uint64_t protected_bytes = 0;
  for (int r = 0; r < n; ++r) protected_bytes += routed[r]->counters().sent_bytes;
  EXPECT_GT(protected_bytes, 0u) << "protect sent nothing over the link";
  SaveOnAll(2);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  const int before = hub->transfers();
  Launch(n);
  auto reports = RestoreAll("lost {0}");
  ASSERT_EQ(reports.size(), static_cast<size_t>(n));
  EXPECT_GT(routed[0]->counters().received_bytes, ShardBytes(0) / 2)
      << "the lost node's shard did not come over the link";
  EXPECT_GT(hub->transfers(), before);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(cks_[r]->Wait().ok()) << "re-protect of rank " << r;
  EXPECT_EQ(hub->violations(), 0);
}

// MEMENTO_TRANSPORT_DEVICE=nccl where NCCL cannot run (no GPU here, or host
// buffers on a GPU machine): the job goes on over its own transport, and a
// lost node comes back bit-exact.
TEST_P(DeviceRoutedEngineTest, NcclAskedForWhereItCannotRunFallsBackToTheJobsTransport) {
  configure_ = [](int, Config& c) { c.device_transport = "nccl"; };
  Launch(GetParam().nodes);
  SaveOnAll(1);
  SaveOnAll(2);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_NO_FATAL_FAILURE(LoseNode(0));
  Launch(GetParam().nodes);
  EXPECT_EQ(RestoreAll("lost {0}").size(), static_cast<size_t>(GetParam().nodes));
}

// The setting shapes the protocol: ranks that differ are refused by name.
TEST_P(DeviceRoutedEngineTest, RanksThatDifferOnTheDeviceTransportAreRefusedByName) {
  configure_ = [](int rank, Config& c) { c.device_transport = rank == 1 ? "auto" : "off"; };
  Launch(GetParam().nodes);
  std::vector<Status> st = SaveEach(1);
  for (size_t r = 0; r < st.size(); ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << "rank " << r;
    EXPECT_NE(st[r].ToString().find("MEMENTO_TRANSPORT_DEVICE"), std::string::npos)
        << st[r].ToString();
  }
}

TEST(NcclLink, WhereItCannotRunItSaysWhy) {
  const Status s = NcclLinkUsable();
  if (s.ok()) {
    EXPECT_TRUE(NcclLinkBuilt());  // a GPU and NCCL: nothing to explain
    return;
  }
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_TRUE(s.message().find("NCCL") != std::string::npos ||
              s.message().find("CUDA device") != std::string::npos)
      << s.ToString();
  // Every rank of a group learns the same reason, none is left waiting.
  auto group = InProcessGroup::Create(2, std::chrono::seconds(10));
  std::vector<Result<std::shared_ptr<DeviceLink>>> out(2, Status::Internal("not run"));
  std::thread t([&] { out[1] = CreateNcclLink(*group->transport(1), 0); });
  out[0] = CreateNcclLink(*group->transport(0), 0);
  t.join();
  for (const auto& o : out) {
    EXPECT_EQ(o.status().code(), StatusCode::kFailedPrecondition) << o.status().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, DeviceRoutedEngineTest,
                         ::testing::Values(Param{"replica:2", 4, 1}, Param{"xor:3", 4, 1},
                                           Param{"rs:4+2", 6, 1}),
                         ParamName);

}  // namespace
}  // namespace memento::runtime
