// The in-process transport: collectives, point-to-point, dead ranks, timeouts.
#include "memento/runtime/inprocess_transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

namespace memento::runtime {
namespace {

// Runs fn(rank, transport) on one thread per rank and joins them.
void RunRanks(const std::shared_ptr<InProcessGroup>& group,
              const std::function<void(int, Transport&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group->size(); ++r) {
    threads.emplace_back([&, r] { fn(r, *group->transport(r)); });
  }
  for (auto& t : threads) t.join();
}

class InProcessTransportTest : public ::testing::TestWithParam<int> {};

TEST_P(InProcessTransportTest, CollectivesAgree) {
  const int n = GetParam();
  auto group = InProcessGroup::Create(n);
  std::atomic<int> failures{0};
  RunRanks(group, [&](int rank, Transport& t) {
    auto fail = [&] { failures++; };
    if (t.rank() != rank || t.size() != n) fail();
    for (int round = 0; round < 20; ++round) {
      if (!t.Barrier().ok()) fail();
      auto all = t.AllTrue(true);
      if (!all.ok() || !*all) fail();
      auto some = t.AllTrue(rank != round % n);
      if (!some.ok() || *some) fail();  // rank round % n says false
      auto mx = t.AllReduceMax(rank * 10 + round);
      if (!mx.ok() || *mx != (n - 1) * 10 + round) fail();
      auto mn = t.AllReduceMin(-rank);
      if (!mn.ok() || *mn != -(n - 1)) fail();
      std::vector<uint8_t> mine(rank + round % 3, static_cast<uint8_t>(rank));
      auto gathered = t.Allgather(mine.data(), mine.size());
      if (!gathered.ok() || gathered->size() != static_cast<size_t>(n)) {
        fail();
        continue;
      }
      for (int p = 0; p < n; ++p) {
        if ((*gathered)[p] != std::vector<uint8_t>(p + round % 3, static_cast<uint8_t>(p))) fail();
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

// AllOk: a step that failed on one rank fails on every rank at once, with
// that rank's own error there and the given one elsewhere; OK when no rank
// failed.
TEST_P(InProcessTransportTest, AllOkGivesEveryRankTheOutcome) {
  const int n = GetParam();
  auto group = InProcessGroup::Create(n);
  std::vector<Status> none(n), one(n);
  RunRanks(group, [&](int rank, Transport& t) {
    const Status elsewhere = Status::Unavailable("failed on another rank");
    none[rank] = AllOk(t, Status::Ok(), elsewhere);
    one[rank] = AllOk(t, rank == n - 1 ? Status::IoError("mine") : Status::Ok(), elsewhere);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(none[r].ok()) << none[r].ToString();
    EXPECT_EQ(one[r],
              r == n - 1 ? Status::IoError("mine") : Status::Unavailable("failed on another rank"))
        << "rank " << r;
  }
}

// ForwardingTransport passes every call through unchanged: the same
// collectives and a point-to-point ring over wrapped transports give the
// same answers as over the bare ones.
TEST_P(InProcessTransportTest, ForwardingTransportPassesEveryCallThrough) {
  const int n = GetParam();
  auto group = InProcessGroup::Create(n);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ForwardingTransport t(group->transport(r));
      auto fail = [&] { failures++; };
      if (t.rank() != r || t.size() != n) fail();
      if (!t.Barrier().ok()) fail();
      auto all = t.AllTrue(r != 0);
      if (!all.ok() || *all) fail();
      auto mx = t.AllReduceMax(r);
      auto mn = t.AllReduceMin(r);
      if (!mx.ok() || *mx != n - 1 || !mn.ok() || *mn != 0) fail();
      const uint8_t mine = static_cast<uint8_t>(r + 1);
      auto gathered = t.Allgather(&mine, 1);
      if (!gathered.ok() || (*gathered)[n - 1] != std::vector<uint8_t>{static_cast<uint8_t>(n)})
        fail();
      const uint32_t out = 1000u + r;
      if (!t.Send((r + 1) % n, 7, &out, sizeof(out)).ok()) fail();
      uint32_t in = 0;
      auto got = t.Recv((r + n - 1) % n, 7, &in, sizeof(in));
      if (!got.ok() || *got != sizeof(in) || in != 1000u + (r + n - 1) % n) fail();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(InProcessTransportTest, RingSendRecvKeepsOrderPerTag) {
  const int n = GetParam();
  auto group = InProcessGroup::Create(n);
  std::atomic<int> failures{0};
  RunRanks(group, [&](int rank, Transport& t) {
    const int right = (rank + 1) % n;
    const int left = (rank + n - 1) % n;
    for (int i = 0; i < 50; ++i) {
      int64_t v = rank * 1000 + i;
      if (!t.Send(right, 7, &v, sizeof(v)).ok()) failures++;
      if (!t.Send(right, 8, &i, sizeof(i)).ok()) failures++;
    }
    for (int i = 0; i < 50; ++i) {
      int tag8 = -1;
      auto got8 = t.Recv(left, 8, &tag8, sizeof(tag8));
      if (!got8.ok() || *got8 != sizeof(int) || tag8 != i) failures++;
      int64_t v = -1;
      auto got = t.Recv(left, 7, &v, sizeof(v));
      if (!got.ok() || *got != sizeof(v) || v != left * 1000 + i) failures++;
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcessTransportTest, ::testing::Values(1, 2, 3, 8));

TEST(InProcessTransport, OversizedMessageIsAnError) {
  auto group = InProcessGroup::Create(2);
  std::vector<uint8_t> big(100, 1);
  ASSERT_TRUE(group->transport(0)->Send(1, 0, big.data(), big.size()).ok());
  uint8_t small[10];
  auto r = group->transport(1)->Recv(0, 0, small, sizeof(small));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// The default non-blocking path (the in-process transport has none of its
// own): a started send has happened, started receives finish in the order
// waited, and a receive dropped unwaited leaves its message for the next.
TEST(InProcessTransport, StartedTransfersUseTheBlockingOnes) {
  auto group = InProcessGroup::Create(2, std::chrono::seconds(20));
  Transport& a = *group->transport(0);
  Transport& b = *group->transport(1);
  int in[3] = {0, 0, 0};
  std::vector<std::unique_ptr<Transport::PendingTransfer>> recvs;
  for (int& slot : in) {
    auto r = b.StartRecv(0, 4, &slot, sizeof(slot));
    ASSERT_TRUE(r.ok());
    recvs.push_back(std::move(*r));
  }
  for (int v : {10, 20, 30}) {
    auto s = a.StartSend(1, 4, &v, sizeof(v));  // v may change once started
    ASSERT_TRUE(s.ok());
    auto done = (*s)->Wait();
    ASSERT_TRUE(done.ok());
    EXPECT_EQ(*done, sizeof(v));
  }
  for (auto& r : recvs) ASSERT_TRUE(r->Wait().ok());
  // A second Wait would take the next message; it is refused instead.
  EXPECT_EQ(recvs[0]->Wait().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(in[0], 10);
  EXPECT_EQ(in[1], 20);
  EXPECT_EQ(in[2], 30);
  int v = 40, got = 0;
  ASSERT_TRUE(a.Send(1, 4, &v, sizeof(v)).ok());
  { auto dropped = b.StartRecv(0, 4, &got, sizeof(got)); }
  ASSERT_TRUE(b.Recv(0, 4, &got, sizeof(got)).ok());
  EXPECT_EQ(got, 40);
  EXPECT_EQ(a.StartSend(2, 0, &v, 4).status().code(), StatusCode::kInvalidArgument);
}

TEST(InProcessTransport, BadPeerAndTagAreInvalidArgument) {
  auto group = InProcessGroup::Create(2);
  int x = 0;
  EXPECT_EQ(group->transport(0)->Send(2, 0, &x, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(group->transport(0)->Send(1, -1, &x, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(group->transport(0)->Send(1, kMaxTag + 1, &x, 4).code(), StatusCode::kInvalidArgument);
}

TEST(InProcessTransport, DeadRankMakesCollectiveUnavailableNotHang) {
  auto group = InProcessGroup::Create(3, std::chrono::seconds(60));
  std::vector<Status> results(3);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    group->Kill(2);
  });
  RunRanks(group, [&](int rank, Transport& t) {
    if (rank == 2) return;  // never arrives: it "crashed"
    results[rank] = t.AllTrue(true).status();
  });
  killer.join();
  EXPECT_EQ(results[0].code(), StatusCode::kUnavailable) << results[0].ToString();
  EXPECT_EQ(results[1].code(), StatusCode::kUnavailable) << results[1].ToString();
  EXPECT_NE(results[0].message().find("rank 2"), std::string::npos);
  // The dead rank itself cannot talk either.
  EXPECT_EQ(group->transport(2)->Barrier().code(), StatusCode::kUnavailable);
  int x = 0;
  EXPECT_EQ(group->transport(2)->Send(0, 0, &x, 4).code(), StatusCode::kUnavailable);
  EXPECT_EQ(group->transport(0)->Send(2, 0, &x, 4).code(), StatusCode::kUnavailable);
}

TEST(InProcessTransport, RecvFromDeadRankIsUnavailableButEarlierMessagesArrive) {
  auto group = InProcessGroup::Create(2, std::chrono::seconds(60));
  int v = 42;
  ASSERT_TRUE(group->transport(1)->Send(0, 3, &v, sizeof(v)).ok());
  group->Kill(1);
  int got = 0;
  auto r = group->transport(0)->Recv(1, 3, &got, sizeof(got));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, 42);
  r = group->transport(0)->Recv(1, 3, &got, sizeof(got));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

TEST(InProcessTransport, SilentPeerTimesOut) {
  auto group = InProcessGroup::Create(2, std::chrono::milliseconds(100));
  int got = 0;
  auto r = group->transport(0)->Recv(1, 0, &got, sizeof(got));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_EQ(group->transport(0)->Barrier().code(), StatusCode::kTimeout);
}

TEST(InProcessTransport, TransportKeepsGroupAlive) {
  std::shared_ptr<Transport> t;
  {
    auto group = InProcessGroup::Create(1);
    t = group->transport(0);
  }
  EXPECT_TRUE(t->Barrier().ok());
  auto all = t->AllTrue(true);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(*all);
}

// TouchForReceive writes the first byte of the range and of every later page
// it overlaps, and nothing outside the range.
TEST(TouchForReceive, WritesOneByteInEveryPageOfTheRangeOnly) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> memory(5 * page, 0xff);
  uint8_t* base = memory.data() + (page - reinterpret_cast<uintptr_t>(memory.data()) % page);
  const size_t from = 100, len = 2 * page;  // pages 0 (from byte 100), 1 and 2
  TouchForReceive(base + from, len);
  std::vector<size_t> zero;
  for (size_t i = 0; i < 4 * page; ++i) {
    if (base[i] == 0) zero.push_back(i);
  }
  EXPECT_EQ(zero, (std::vector<size_t>{from, page, 2 * page}));
  TouchForReceive(base + 3 * page, 0);  // an empty range touches nothing
  EXPECT_EQ(base[3 * page], 0xff);
}

// Test() on a started receive: false while nothing has arrived, true once
// the message is there (and stays true); Wait then returns it at once. A
// receive tested past its sender's death finishes with Unavailable.
TEST(InProcessTransport, TestFindsAReceiveFinishedWithoutBlocking) {
  auto group = InProcessGroup::Create(3, std::chrono::seconds(20));
  Transport& a = *group->transport(0);
  Transport& b = *group->transport(1);
  int got = 0;
  auto r = b.StartRecv(0, 6, &got, sizeof(got));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)->Test());
  EXPECT_FALSE((*r)->Test());
  int v = 77;
  auto s = a.StartSend(1, 6, &v, sizeof(v));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->Test());
  EXPECT_TRUE((*r)->Test());
  EXPECT_TRUE((*r)->Test());
  EXPECT_EQ(got, 77);
  auto n = (*r)->Wait();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, sizeof(v));
  auto from_dead = b.StartRecv(2, 6, &got, sizeof(got));
  ASSERT_TRUE(from_dead.ok());
  EXPECT_FALSE((*from_dead)->Test());
  group->Kill(2);
  EXPECT_TRUE((*from_dead)->Test());
  EXPECT_EQ((*from_dead)->Wait().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace memento::runtime
