// The launcher's rendezvous port: below the kernel's ephemeral range, where
// no socket the job opens meanwhile can take it, and free to listen on.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "job_command.h"

namespace memento::launch {
namespace {

TEST(FreePort, IsBelowTheEphemeralRangeAndFreeToListenOn) {
  const int ephemeral = EphemeralPortsFrom();
  ASSERT_GT(ephemeral, 11000) << "this machine's ephemeral range leaves no room below it";
  for (int i = 0; i < 20; ++i) {
    const int port = FreePort();
    ASSERT_GE(port, 10000);
    ASSERT_LT(port, ephemeral);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << "port " << port;
    EXPECT_EQ(listen(fd, 1), 0);
    close(fd);
  }
}

// A port already listened on is never handed out.
TEST(FreePort, SkipsAPortInUse) {
  std::vector<int> held;
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    const int port = FreePort();
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << "port " << port;
    ASSERT_EQ(listen(fd, 1), 0);
    for (int h : held) ASSERT_NE(port, h) << "a port in use was handed out";
    held.push_back(port);
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace memento::launch
