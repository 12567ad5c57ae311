// The gloo transport (what memento runs on under torchrun), its ranks threads
// of this process that meet through a TCPStore the test serves, as torchrun's
// ranks meet through its agent's store: transfers that overlap (a started send
// never waits for its receive, a small send returns before it is received),
// the Transport contract's order, sizes and self-sends with many transfers in
// flight, and a Checkpointer whose many entries are protected over it and
// restored bit-exactly after a node is lost.
#include "memento/torch/gloo_transport.h"

#include <gtest/gtest.h>
#include <torch/types.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "harness/spawn.h"
#include "memento/runtime/transport.h"
#include "memento/torch/torch_checkpointer.h"
#include "test_job.h"
#include "torch_test_util.h"

namespace memento::torch_adapter {
namespace {

using runtime::Config;
using runtime::Transport;
using testing::BitEqual;
using testing::JobGuard;
using testing::UniqueJob;

using RankBody = std::function<std::string(int, Transport&)>;

// A store served on a free port, as torchrun's agent serves one, and the
// transports of ranks that meet through it (every rank a client).
struct ServedStore {
  explicit ServedStore(std::chrono::milliseconds t) : timeout(t) {
    c10d::TCPStoreOptions so;
    so.port = 0;  // any free port
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = timeout;
    server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  }
  Result<std::shared_ptr<Transport>> Open(const std::string& prefix, int rank, int size) const {
    GlooTransportOptions o;
    o.rank = rank;
    o.size = size;
    o.master_addr = "127.0.0.1";
    o.master_port = server->getPort();
    o.agent_store = true;
    o.prefix = prefix;
    o.timeout = timeout;
    return CreateGlooTransport(o);
  }
  std::chrono::milliseconds timeout;
  c10::intrusive_ptr<c10d::TCPStore> server;
};

// Runs body(rank, transport) on `n` gloo ranks (threads), each returning ""
// or what went wrong. Each rank keeps its transport until every rank is done
// (a barrier), as the ranks of a job do.
std::vector<std::string> RunGlooRanks(int n, std::chrono::milliseconds timeout,
                                      const RankBody& body) {
  const ServedStore store(timeout);
  static std::atomic<int> launch{0};
  const std::string prefix =
      "gt/" + runtime::testing::ProcessTag() + "/" + std::to_string(launch++) + "/";
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = store.Open(prefix, r, n);
      if (!t.ok()) {
        errors[r] = "create: " + t.status().ToString();
        return;
      }
      errors[r] = body(r, **t);
      if (Status s = (*t)->Barrier(); !s.ok() && errors[r].empty()) {
        errors[r] = "final barrier: " + s.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Bytes that tell apart the sender, receiver, tag and index of a message.
std::vector<uint8_t> Pattern(int src, int dst, int tag, int i, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  uint32_t x = 2654435761u * static_cast<uint32_t>(1 + src + 7 * dst + 131 * tag + 977 * i);
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::string Check(const Result<size_t>& got, const std::vector<uint8_t>& want,
                  const std::vector<uint8_t>& buf, const std::string& what) {
  if (!got.ok()) return what + ": " + got.status().ToString();
  if (*got != want.size()) {
    return what + ": " + std::to_string(*got) + " bytes, sent " + std::to_string(want.size());
  }
  if (!want.empty() && std::memcmp(buf.data(), want.data(), want.size()) != 0) {
    return what + ": other bytes than sent";
  }
  return "";
}

// Allgather carries messages of every size, each rank's own, in rank order:
// empty ones, ones that fit the single collective's slot (1 KiB at 3 ranks:
// 1016 bytes after the length), one byte more, and long ones, mixed in one
// call, so that only some ranks' messages take the second collective.
TEST(GlooTransport, AllgatherCarriesEverySizeInRankOrder) {
  const std::vector<std::vector<size_t>> rounds = {
      {0, 0, 0}, {1, 0, 7}, {1016, 1016, 1016}, {1017, 3, 0}, {5000, 1016, 70000}};
  auto errors = RunGlooRanks(3, std::chrono::seconds(60), [&](int rank, Transport& t) {
    for (size_t i = 0; i < rounds.size(); ++i) {
      const auto mine = Pattern(rank, 0, 0, static_cast<int>(i), rounds[i][rank]);
      auto all = t.Allgather(mine.data(), mine.size());
      if (!all.ok()) return "round " + std::to_string(i) + ": " + all.status().ToString();
      if (all->size() != 3) return std::string("not one message per rank");
      for (int r = 0; r < 3; ++r) {
        if ((*all)[r] != Pattern(r, 0, 0, static_cast<int>(i), rounds[i][r])) {
          return "round " + std::to_string(i) + ": rank " + std::to_string(r) + "'s " +
                 std::to_string(rounds[i][r]) + " bytes came back as " +
                 std::to_string((*all)[r].size()) + " other bytes";
        }
      }
    }
    return std::string();
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// The reductions and the barrier on one rank, two, and five (rounds of
// Bruck's allgather that carry fewer blocks than the round before): every
// rank gets the same maximum, minimum and conjunction of all ranks' values.
TEST(GlooTransport, ReductionsAgreeOnEveryRankCount) {
  for (int n : {1, 2, 5}) {
    auto errors = RunGlooRanks(n, std::chrono::seconds(60), [n](int rank, Transport& t) {
      auto max = t.AllReduceMax(10 * rank - 7);
      auto min = t.AllReduceMin(1000 - rank * rank);
      auto all = t.AllTrue(rank != n - 1 || n == 1);
      auto none_false = t.AllTrue(true);
      if (!max.ok() || !min.ok() || !all.ok() || !none_false.ok()) {
        return std::string("a reduction failed");
      }
      if (*max != 10 * (n - 1) - 7) return "max " + std::to_string(*max);
      if (*min != 1000 - (n - 1) * (n - 1)) return "min " + std::to_string(*min);
      if (*all != (n == 1)) return std::string("AllTrue with one false rank said true");
      if (!*none_false) return std::string("AllTrue of all true said false");
      Status b = t.Barrier();
      return b.ok() ? std::string() : "barrier: " + b.ToString();
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << n << " ranks, rank " << r;
  }
}

// A collective that a peer never joins ends at once when the transport is
// aborted (what in-job recovery does when a rank is lost), with Unavailable,
// not after the timeout: gloo's own collectives cannot be aborted, so the
// transport's are made of point-to-point operations, which can.
TEST(GlooTransport, AbortEndsACollectiveAPeerNeverJoins) {
  constexpr auto kTimeout = std::chrono::seconds(60);
  std::atomic<int> returned{0};
  auto errors = RunGlooRanks(3, kTimeout, [&](int rank, Transport& t) {
    if (rank == 2) {  // never joins; aborts once the others came back
      while (returned.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      t.Abort();
      return std::string("stayed out");
    }
    std::thread aborter([&t] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      t.Abort();
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto all = t.AllTrue(true);
    const auto waited = std::chrono::steady_clock::now() - t0;
    aborter.join();
    ++returned;
    if (all.ok()) return std::string("AllTrue succeeded without rank 2");
    if (all.status().code() != StatusCode::kUnavailable) {
      return "AllTrue ended with " + all.status().ToString() + " after " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) +
             " s, not Unavailable at the abort";
    }
    if (waited >= kTimeout / 2) return std::string("AllTrue waited for the timeout");
    if (!t.Aborted()) return std::string("the transport does not say it was aborted");
    return std::string("aborted");
  });
  EXPECT_EQ(errors[0], "aborted");
  EXPECT_EQ(errors[1], "aborted");
  EXPECT_EQ(errors[2], "stayed out");
}

// A collective's receive aborted after every send of it went out: the
// last round of rank 0's AllTrue sends its vote to a peer that takes it and
// dies before sending its own (a lost node, killed between the two). The
// abort that in-job recovery then makes must fail the AllTrue; gloo reports
// an aborted wait by returning false, not by throwing, and taken as done it
// handed back a "result" made of the receive buffer's old bytes (a version
// then committed or invalidated by a vote no peer cast).
TEST(GlooTransport, ACollectiveWhosePeerTookItsVoteAndDiedFailsAtTheAbort) {
  constexpr auto kTimeout = std::chrono::seconds(60);
  const ServedStore served(kTimeout);
  const std::string prefix = "gt-dies/" + runtime::testing::ProcessTag() + "/";
  std::atomic<bool> done{false};
  std::thread peer([&] {
    // Rank 1 as the process group under rank 0's transport (its first under
    // this prefix) sees it: it posts the receive of rank 0's vote on the
    // collectives' gloo tag, and never sends its own.
    c10d::TCPStoreOptions co;
    co.port = served.server->getPort();
    co.timeout = kTimeout;
    auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co);
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix + "0/", client);
    auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 1, 2, options);
    std::vector<at::Tensor> vote{at::empty({8}, at::kByte)};
    auto recv = pg->recv(vote, 0, 2 * (runtime::kMaxTag + 1));
    recv->wait();
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  auto t = served.Open(prefix, 0, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::thread aborter([&t] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (*t)->Abort();
  });
  const Result<bool> all = (*t)->AllTrue(true);
  aborter.join();
  done.store(true);
  peer.join();
  ASSERT_FALSE(all.ok()) << "AllTrue returned " << *all << " with a peer that never voted";
  EXPECT_EQ(all.status().code(), StatusCode::kUnavailable) << all.status().ToString();
  EXPECT_TRUE((*t)->Aborted());
}

// Messages a peer sent before it closed its transport are received, as MPI
// delivers what a rank sent before its MPI_Finalize: the receive that takes
// one posts the channel's next lead, which fails on the closed connection,
// and that failure took the message with it ("Connection closed by peer").
// A rank's last persist record was lost so when it closed before rank 0
// collected it.
TEST(GlooTransport, MessagesSentBeforeThePeerClosedAreReceived) {
  const ServedStore served(std::chrono::seconds(30));
  const std::string prefix = "gt-closed/" + runtime::testing::ProcessTag() + "/";
  auto open = [&](int rank) { return served.Open(prefix, rank, 2); };
  std::atomic<bool> closed{false};
  std::string sender_error;
  std::thread sender([&] {
    auto t = open(1);
    if (!t.ok()) {
      sender_error = t.status().ToString();
      return;
    }
    for (const char* m : {"first", "second", "third"}) {
      if (Status s = (*t)->Send(0, 5, m, std::strlen(m)); !s.ok()) sender_error = s.ToString();
    }
    t->reset();  // delivers its small sends, then closes its connections
    closed.store(true);
  });
  auto t = open(0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::string> got;
  char buf[64];
  auto recv = [&] {
    auto n = (*t)->Recv(1, 5, buf, sizeof(buf));
    got.push_back(n.ok() ? std::string(buf, *n) : "error: " + n.status().ToString());
  };
  recv();  // posts the channel's leads: the other two land in them
  while (!closed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the close is seen
  recv();
  recv();
  sender.join();
  EXPECT_EQ(sender_error, "");
  EXPECT_EQ(got, (std::vector<std::string>{"first", "second", "third"}));
}

// Abort ends a receive of a message to self as it ends those from peers (an
// elastic restore's reduce chain sends its last hop to itself), with
// Unavailable, not after the transport's timeout.
TEST(GlooTransport, AbortEndsAReceiveFromSelf) {
  const auto errors = RunGlooRanks(1, std::chrono::seconds(30), [](int, Transport& t) {
    std::thread aborter([&t] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t.Abort();
    });
    char buf[8];
    const auto t0 = std::chrono::steady_clock::now();
    auto n = t.Recv(0, 3, buf, sizeof(buf));
    const auto waited = std::chrono::steady_clock::now() - t0;
    aborter.join();
    if (n.ok()) return std::string("received from self after the abort");
    if (n.status().code() != StatusCode::kUnavailable || waited > std::chrono::seconds(5)) {
      return n.status().ToString() + " after " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) +
             " s";
    }
    return std::string("aborted");
  });
  EXPECT_EQ(errors[0], "aborted");
}

// A started send returns before its receive is posted, and a small Send
// before it is received: rank 1 takes the messages in another order than
// rank 0 sends them. A transport whose sends wait for their receives
// deadlocks here until its timeout.
TEST(GlooTransport, SendsDoNotWaitForTheirReceives) {
  const auto errors = RunGlooRanks(2, std::chrono::seconds(15), [](int r, Transport& t) {
    const auto big = Pattern(0, 1, 7, 0, 3 << 20);
    const auto first = Pattern(0, 1, 9, 0, 24);
    const auto second = Pattern(0, 1, 10, 0, 40);
    const auto go = Pattern(0, 1, 8, 0, 8);
    if (r == 0) {
      auto started = t.StartSend(1, 7, big.data(), big.size());
      if (!started.ok()) return "start: " + started.status().ToString();
      for (const auto* m : {&first, &second, &go}) {
        const int tag = m == &first ? 9 : m == &second ? 10 : 8;
        if (Status s = t.Send(1, tag, m->data(), m->size()); !s.ok()) return s.ToString();
      }
      auto sent = (*started)->Wait();
      if (!sent.ok() || *sent != big.size()) return "big send: " + sent.status().ToString();
      return std::string();
    }
    std::vector<uint8_t> buf(big.size());
    std::string e = Check(t.Recv(0, 8, buf.data(), buf.size()), go, buf, "go");
    if (e.empty()) e = Check(t.Recv(0, 10, buf.data(), buf.size()), second, buf, "second");
    if (e.empty()) e = Check(t.Recv(0, 7, buf.data(), buf.size()), big, buf, "big");
    if (e.empty()) e = Check(t.Recv(0, 9, buf.data(), buf.size()), first, buf, "first");
    return e;
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Every rank streams messages of many sizes (empty, around the size that
// fits one gloo message, up to MiBs) to every rank, itself included, on two
// tags at once, with up to 8 sends and 8 receives in flight per stream: each
// receive gets its stream's next message, whole. A message longer than its
// receive is refused (InvalidArgument) and consumed; the stream goes on.
TEST(GlooTransport, StreamsKeepTheirOrderWithManyTransfersInFlight) {
  constexpr int kRanks = 3;
  constexpr int kMessages = 30;
  constexpr int kTags[] = {3, 4};
  constexpr size_t kSizes[] = {0, 1, 56, 1015, 1016, 1017, 4099, 65536 + 3, 1 << 20};
  constexpr size_t kInFlight = 8;
  constexpr int kTooLong = 11;  // this message goes to a receive one byte too small
  auto size_of = [&](int i) { return kSizes[i % (sizeof(kSizes) / sizeof(kSizes[0]))]; };
  const auto errors = RunGlooRanks(kRanks, std::chrono::seconds(60), [&](int me, Transport& t) {
    std::vector<std::string> errs(2 * kRanks * 2);
    std::vector<std::thread> threads;
    for (int peer = 0; peer < kRanks; ++peer) {
      for (int k = 0; k < 2; ++k) {
        const int tag = kTags[k];
        // Sends of (me -> peer, tag).
        threads.emplace_back([&, peer, tag, k] {
          std::deque<std::pair<std::vector<uint8_t>, std::unique_ptr<Transport::PendingTransfer>>>
              flight;
          auto finish = [&]() -> std::string {
            auto sent = flight.front().second->Wait();
            flight.pop_front();
            return sent.ok() ? "" : "send: " + sent.status().ToString();
          };
          std::string& e = errs[(peer * 2 + k) * 2];
          for (int i = 0; i < kMessages && e.empty(); ++i) {
            auto m = Pattern(me, peer, tag, i, size_of(i));
            auto started = t.StartSend(peer, tag, m.data(), m.size());
            if (!started.ok()) {
              e = "start send: " + started.status().ToString();
              break;
            }
            flight.emplace_back(std::move(m), std::move(started).value());
            if (flight.size() >= kInFlight) e = finish();
          }
          while (!flight.empty() && e.empty()) e = finish();
        });
        // Receives of (peer -> me, tag).
        threads.emplace_back([&, peer, tag, k] {
          struct Posted {
            int i;
            std::vector<uint8_t> buf;
            std::unique_ptr<Transport::PendingTransfer> t;
          };
          std::deque<Posted> flight;
          std::string& e = errs[(peer * 2 + k) * 2 + 1];
          auto finish = [&]() {
            Posted p = std::move(flight.front());
            flight.pop_front();
            auto got = p.t->Wait();
            const auto want = Pattern(peer, me, tag, p.i, size_of(p.i));
            if (p.i == kTooLong) {
              if (got.ok() || got.status().code() != StatusCode::kInvalidArgument) {
                e = "a message longer than its receive was not refused";
              }
              return;
            }
            e = Check(got, want, p.buf,
                      "message " + std::to_string(p.i) + " from rank " + std::to_string(peer) +
                          " tag " + std::to_string(tag));
          };
          for (int i = 0; i < kMessages && e.empty(); ++i) {
            const size_t capacity = i == kTooLong ? size_of(i) - 1 : size_of(i) + 5;
            Posted p{i, std::vector<uint8_t>(capacity), nullptr};
            auto started = t.StartRecv(peer, tag, p.buf.data(), p.buf.size());
            if (!started.ok()) {
              e = "start recv: " + started.status().ToString();
              break;
            }
            p.t = std::move(started).value();
            flight.push_back(std::move(p));
            if (flight.size() >= kInFlight) finish();
          }
          while (!flight.empty() && e.empty()) finish();
        });
      }
    }
    for (auto& th : threads) th.join();
    std::string all;
    for (const auto& e : errs) {
      if (!e.empty()) all += e + "; ";
    }
    return all;
  });
  static_assert(kTooLong % (sizeof(kSizes) / sizeof(kSizes[0])) != 0, "an empty message");
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A receive dropped before it is waited for takes no message (as a
// cancelled one): the next receive of the stream gets it.
TEST(GlooTransport, AReceiveDroppedUnwaitedTakesNoMessage) {
  const auto errors = RunGlooRanks(2, std::chrono::seconds(15), [](int r, Transport& t) {
    const auto a = Pattern(0, 1, 5, 0, 32), b = Pattern(0, 1, 5, 1, 70000);
    if (r == 0) {
      Status s = t.Send(1, 5, a.data(), a.size());
      if (s.ok()) s = t.Send(1, 5, b.data(), b.size());
      return s.ok() ? std::string() : s.ToString();
    }
    std::vector<uint8_t> buf(b.size());
    {
      auto dropped = t.StartRecv(0, 5, buf.data(), buf.size());
      if (!dropped.ok()) return dropped.status().ToString();
    }
    std::string e = Check(t.Recv(0, 5, buf.data(), buf.size()), a, buf, "first");
    if (e.empty()) e = Check(t.Recv(0, 5, buf.data(), buf.size()), b, buf, "second");
    return e;
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// 4 ranks on 2 nodes, replica:2, 160 tensors of many sizes in 64 KiB chunks
// (hundreds of replica parts a version, streamed over gloo): three versions
// commit; the job is relaunched on fresh transports with node 1's memory
// gone, and every tensor of every rank comes back bit-exact as of the last
// version, node 1's from the replicas on node 0.
TEST(GlooTransport, ManyEntriesAreProtectedAndRestoredBitExactly) {
  constexpr int kRanks = 4;
  constexpr int kTensors = 160;
  JobGuard guard{UniqueJob("gloo")};
  auto values = [](int r, int i, int version) {
    const int64_t n = 37 + (i * 977) % 20000;  // 148 B .. 80 KiB
    return (torch::arange(n, at::kFloat) * (i + 1) + 1000 * r + version).contiguous();
  };
  auto open = [&](int r, Transport& t,
                  std::vector<at::Tensor>& ts) -> Result<std::unique_ptr<TorchCheckpointer>> {
    MEMENTO_ASSIGN_OR_RETURN(Config config,
                             Config::FromMap({{"MEMENTO_JOB", guard.job},
                                              {"MEMENTO_NODE", "gn/" + std::to_string(r / 2)},
                                              {"MEMENTO_SCHEME", "replica:2"},
                                              {"MEMENTO_CHUNK_BYTES", "64K"},
                                              {"MEMENTO_TIMEOUT_S", "60"}}));
    // Not owned: the test's RunGlooRanks keeps the transport until every rank is done.
    std::shared_ptr<Transport> borrowed(&t, [](Transport*) {});
    MEMENTO_ASSIGN_OR_RETURN(auto ck, TorchCheckpointer::Create(config, borrowed));
    for (int i = 0; i < kTensors; ++i) {
      MEMENTO_RETURN_IF_ERROR(ck->Register("t" + std::to_string(i), ts[i]));
    }
    return ck;
  };
  const auto saved = RunGlooRanks(kRanks, std::chrono::seconds(60), [&](int r, Transport& t) {
    std::vector<at::Tensor> ts;
    for (int i = 0; i < kTensors; ++i) ts.push_back(values(r, i, 0));
    auto ck = open(r, t, ts);
    if (!ck.ok()) return "open: " + ck.status().ToString();
    for (int v = 1; v <= 3; ++v) {
      for (int i = 0; i < kTensors; ++i) ts[i].copy_(values(r, i, v));
      Status s = (*ck)->Save(v);
      if (s.ok()) s = (*ck)->Wait();
      if (!s.ok()) return "save v" + std::to_string(v) + ": " + s.ToString();
    }
    return std::string();
  });
  for (int r = 0; r < kRanks; ++r) ASSERT_EQ(saved[r], "") << "rank " << r;
  ASSERT_NO_FATAL_FAILURE(runtime::testing::LoseNode(guard.job, "gn/1"));
  const auto restored = RunGlooRanks(kRanks, std::chrono::seconds(60), [&](int r, Transport& t) {
    std::vector<at::Tensor> ts;
    for (int i = 0; i < kTensors; ++i) ts.push_back(torch::zeros_like(values(r, i, 0)));
    auto ck = open(r, t, ts);
    if (!ck.ok()) return "open: " + ck.status().ToString();
    auto got = (*ck)->Restore();
    if (!got.ok()) return "restore: " + got.status().ToString();
    if (!got->has_value() || (*got)->step != 3) return std::string("not restored at v3");
    if (r >= 2) {
      for (const auto& e : (*got)->report.entries) {
        if (e.source != runtime::RestoreSource::kReplica) {
          return "entry " + e.name + " of a lost node from " + RestoreSourceName(e.source);
        }
      }
    }
    for (int i = 0; i < kTensors; ++i) {
      if (!BitEqual(ts[i], values(r, i, 3))) return "tensor t" + std::to_string(i) + " differs";
    }
    return std::string();
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(restored[r], "") << "rank " << r;
}

}  // namespace
}  // namespace memento::torch_adapter
