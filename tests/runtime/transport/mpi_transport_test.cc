// The MPI transport under mpirun (label mpi): the same checks as the
// in-process transport's, each rank a process. Run with any -np >= 1.
#include "memento/runtime/mpi_transport.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace memento::runtime {
namespace {

std::shared_ptr<Transport> g_transport;

class MpiTransportTest : public ::testing::Test {
 protected:
  Transport& t() { return *g_transport; }
};

TEST_F(MpiTransportTest, CollectivesAgree) {
  const int n = t().size();
  const int rank = t().rank();
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE(t().Barrier().ok());
    auto all = t().AllTrue(true);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_TRUE(*all);
    auto some = t().AllTrue(rank != round % n);
    ASSERT_TRUE(some.ok());
    EXPECT_FALSE(*some);
    auto mx = t().AllReduceMax(rank * 10 + round);
    ASSERT_TRUE(mx.ok());
    EXPECT_EQ(*mx, (n - 1) * 10 + round);
    auto mn = t().AllReduceMin(-rank);
    ASSERT_TRUE(mn.ok());
    EXPECT_EQ(*mn, -(n - 1));
    std::vector<uint8_t> mine(rank + round % 3, static_cast<uint8_t>(rank));
    auto gathered = t().Allgather(mine.data(), mine.size());
    ASSERT_TRUE(gathered.ok()) << gathered.status().ToString();
    ASSERT_EQ(gathered->size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ((*gathered)[p], std::vector<uint8_t>(p + round % 3, static_cast<uint8_t>(p)));
    }
  }
}

// Sends and receives on two threads at once while the main thread runs
// collectives: the thread-safety contract of transport.h.
TEST_F(MpiTransportTest, ConcurrentPointToPointAndCollectives) {
  const int n = t().size();
  const int rank = t().rank();
  const int right = (rank + 1) % n;
  const int left = (rank + n - 1) % n;
  constexpr int kMessages = 64;
  constexpr size_t kBytes = 1 << 16;
  int bad = 0;
  std::thread sender([&] {
    std::vector<uint8_t> buf(kBytes);
    for (int i = 0; i < kMessages; ++i) {
      std::fill(buf.begin(), buf.end(), static_cast<uint8_t>(rank * 31 + i));
      if (!t().Send(right, 5, buf.data(), buf.size()).ok()) ++bad;
    }
  });
  int bad_recv = 0;
  std::thread receiver([&] {
    std::vector<uint8_t> buf(kBytes);
    for (int i = 0; i < kMessages; ++i) {
      auto got = t().Recv(left, 5, buf.data(), buf.size());
      if (!got.ok() || *got != kBytes || buf[kBytes - 1] != static_cast<uint8_t>(left * 31 + i)) {
        ++bad_recv;
      }
    }
  });
  for (int i = 0; i < 20; ++i) {
    auto all = t().AllTrue(true);
    EXPECT_TRUE(all.ok() && *all);
  }
  sender.join();
  receiver.join();
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(bad_recv, 0);
}

TEST_F(MpiTransportTest, OversizedMessageIsInvalidArgument) {
  const int rank = t().rank();
  std::vector<uint8_t> big(64, 1);
  ASSERT_TRUE(t().Send(rank, 9, big.data(), big.size()).ok());
  uint8_t small[8];
  auto r = t().Recv(rank, 9, small, sizeof(small));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t().Send(t().size(), 0, big.data(), 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t().Send(rank, kMaxTag + 1, big.data(), 1).code(), StatusCode::kInvalidArgument);
}

TEST_F(MpiTransportTest, RecvWithNoSenderTimesOut) {
  MpiTransportOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto short_lived = CreateMpiTransport(options);
  ASSERT_TRUE(short_lived.ok()) << short_lived.status().ToString();
  int x = 0;
  auto r = (*short_lived)->Recv(t().rank(), 11, &x, sizeof(x));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  // Still usable: a timed out receive is cancelled, not a broken collective.
  EXPECT_TRUE((*short_lived)->Barrier().ok());
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto t = memento::runtime::CreateMpiTransport();
  if (!t.ok()) {
    fprintf(stderr, "CreateMpiTransport: %s\n", t.status().ToString().c_str());
    return 1;
  }
  memento::runtime::g_transport = *t;
  if (memento::runtime::g_transport->rank() != 0) {
    // Only rank 0 prints; every rank's failures still fail its exit code.
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  memento::runtime::g_transport.reset();  // finalizes MPI (we initialized it)
  return rc;
}
