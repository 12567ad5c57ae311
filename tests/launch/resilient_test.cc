// launch::Resilient's parts in one process: the launcher's announcements, the
// environment a new membership sets, the connections shut down at a loss, and
// train() run again after one. The whole in-job recovery, with real node
// losses, is launch_injob_test.py.
#include "memento/launch/resilient.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "scoped_env.h"
#include "socket_util.h"

namespace memento::launch {
namespace {

namespace fs = std::filesystem;

class ResilientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("memento-resilient-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Announce(const std::string& json) const {
    std::ofstream(dir_ / "injob.json.tmp") << json;
    fs::rename(dir_ / "injob.json.tmp", dir_ / "injob.json");
  }

  ScopedEnv env_{"MEMENTO_LAUNCH_RECOVERY",
                 "MEMENTO_LAUNCH_DIR",
                 "MEMENTO_LAUNCH_ATTEMPT",
                 "MEMENTO_LAUNCH_GENERATION",
                 "MEMENTO_LAUNCH_FAULT",
                 "MEMENTO_LAUNCH_SPARE",
                 "MASTER_ADDR",
                 "MASTER_PORT",
                 "RANK",
                 "WORLD_SIZE",
                 "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE",
                 "MEMENTO_NODE"};
  fs::path dir_;
};

TEST_F(ResilientTest, AnnouncementsAreReadWhenNewer) {
  MembershipFile file(dir_.string());
  EXPECT_FALSE(file.Read().has_value());
  Announce("{\"attempt\": 2, \"master_port\": 4242, \"world_size\": 4, \"ranks_per_node\": 2,"
           " \"fault\": \"commit:7:1\", \"ranks\": {\"3\": {\"node\": \"vm-r1\","
           " \"local_rank\": 1, \"spare_pid\": 77}}}");
  auto m = file.Read();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->attempt, 2);
  EXPECT_EQ(m->master_port, 4242);
  EXPECT_EQ(m->fault, "commit:7:1");
  ASSERT_EQ(m->ranks.size(), 1u);
  EXPECT_EQ(m->ranks[0].rank, 3);
  EXPECT_EQ(m->ranks[0].spare_pid, 77);
  EXPECT_TRUE(file.NewerThan(1).has_value());
  EXPECT_FALSE(file.NewerThan(2).has_value());
  EXPECT_FALSE(file.WaitNewer(2, 0.05).has_value());
  auto [rank, assigned] = file.WaitAssignment(77);
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(assigned.attempt, 2);
  Announce("{\"attempt\": 3,");  // half written: not an announcement
  EXPECT_FALSE(file.Read().has_value());
}

TEST_F(ResilientTest, AdoptingAMembershipSetsItsEnvironment) {
  setenv("MEMENTO_LAUNCH_SPARE", "1", 1);
  setenv("MEMENTO_LAUNCH_FAULT", "snapshot:3:0", 1);
  Membership m;
  m.attempt = 5;
  m.master_port = 5151;
  m.world_size = 8;
  m.ranks_per_node = 2;
  m.ranks.push_back({6, "vm-r2", 0, 1234});
  AdoptMembership(m, 6);
  EXPECT_STREQ(std::getenv("MASTER_PORT"), "5151");
  EXPECT_STREQ(std::getenv("MEMENTO_LAUNCH_ATTEMPT"), "5");
  EXPECT_STREQ(std::getenv("MEMENTO_LAUNCH_GENERATION"), "5");
  EXPECT_STREQ(std::getenv("RANK"), "6");
  EXPECT_STREQ(std::getenv("WORLD_SIZE"), "8");
  EXPECT_STREQ(std::getenv("LOCAL_WORLD_SIZE"), "2");
  EXPECT_STREQ(std::getenv("MEMENTO_NODE"), "vm-r2");
  EXPECT_EQ(std::getenv("MEMENTO_LAUNCH_SPARE"), nullptr);
  EXPECT_EQ(std::getenv("MEMENTO_LAUNCH_FAULT"), nullptr);  // none armed for attempt 5
}

int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = Ipv4Address(INADDR_LOOPBACK, 0);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in a = Ipv4Address(INADDR_LOOPBACK, port);
  EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

TEST_F(ResilientTest, OnlyConnectionsOpenedSinceAreShutDown) {
  int port = 0;
  const int server = Listen(&port);
  const int old_client = Connect(port);
  const int old_peer = accept(server, nullptr, nullptr);
  const auto before = SocketInodes();
  const int client = Connect(port);
  const int peer = accept(server, nullptr, nullptr);
  EXPECT_EQ(ShutdownConnectionsSince(before), 2);  // both ends; the listener stays
  char c = 0;
  EXPECT_EQ(recv(peer, &c, 1, 0), 0);  // shut down: end of stream at once
  // The write side stays open: a write does not fail with EPIPE (which gloo's
  // asynchronous path would take as "write later" and never fail).
  EXPECT_EQ(send(client, "x", 1, MSG_NOSIGNAL), 1);
  EXPECT_EQ(send(old_client, "x", 1, MSG_NOSIGNAL), 1);
  EXPECT_EQ(recv(old_peer, &c, 1, 0), 1);  // the older connection still works
  const int later = Connect(port);          // and the listener still accepts
  EXPECT_GE(later, 0);
  for (int fd : {server, old_client, old_peer, client, peer, later}) close(fd);
}

TEST_F(ResilientTest, OutsideTheLauncherTrainRunsOnce) {
  unsetenv("MEMENTO_LAUNCH_RECOVERY");
  int calls = 0;
  EXPECT_EQ(Resilient([&] { return ++calls == 1 ? 7 : 0; }), 7);
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(Resilient([]() -> int { throw std::runtime_error("a bug"); }), std::runtime_error);
}

TEST_F(ResilientTest, ANewMembershipRunsTrainAgainWithItsEnvironment) {
  setenv("MEMENTO_LAUNCH_RECOVERY", "in-job", 1);
  setenv("MEMENTO_LAUNCH_DIR", dir_.c_str(), 1);
  setenv("MEMENTO_LAUNCH_ATTEMPT", "0", 1);
  setenv("RANK", "0", 1);
  unsetenv("MEMENTO_LAUNCH_GENERATION");
  std::vector<std::string> seen;
  std::atomic<int> aborts{0};
  ResilientOptions o;
  o.abort = [&] { ++aborts; };
  o.wait_s = 10;
  const int rc = Resilient(
      [&]() -> int {
        seen.push_back(std::string(std::getenv("MEMENTO_LAUNCH_ATTEMPT")) + "/" +
                       std::getenv("MEMENTO_LAUNCH_GENERATION"));
        if (seen.size() == 1) {
          // The launcher announces the loss while this attempt trains.
          Announce("{\"attempt\": 1, \"master_port\": 3131, \"world_size\": 2, \"ranks\": {}}");
          for (int i = 0; i < 500 && aborts == 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          throw std::runtime_error("peer lost");
        }
        return 0;
      },
      o);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(seen, (std::vector<std::string>{"0/0", "1/1"}));
  EXPECT_EQ(aborts, 1);  // the watcher aborted attempt 0 once, before train() failed
  EXPECT_STREQ(std::getenv("MASTER_PORT"), "3131");
}

TEST_F(ResilientTest, AFailureNoMembershipExplainsIsTheJobsOwn) {
  setenv("MEMENTO_LAUNCH_RECOVERY", "in-job", 1);
  setenv("MEMENTO_LAUNCH_DIR", dir_.c_str(), 1);
  setenv("MEMENTO_LAUNCH_ATTEMPT", "0", 1);
  setenv("RANK", "0", 1);
  ResilientOptions o;
  o.wait_s = 0.1;
  int calls = 0;
  EXPECT_EQ(Resilient([&] { ++calls; return 3; }, o), 3);
  EXPECT_THROW(Resilient([]() -> int { throw std::runtime_error("bug\nmore"); }, o),
               std::runtime_error);
  EXPECT_EQ(calls, 1);
  // It told the launcher first (raised.aA.rR, the first line), which relaunches a job whose
  // rank failed without a lost node at once.
  std::ifstream raised(dir_ / "raised.a0.r0");
  std::string line;
  ASSERT_TRUE(std::getline(raised, line));
  EXPECT_EQ(line, "bug");
}

}  // namespace
}  // namespace memento::launch
