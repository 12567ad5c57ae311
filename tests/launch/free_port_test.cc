// The launcher's rendezvous port: below the kernel's ephemeral range, where
// no socket the job opens meanwhile can take it, and free to listen on.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "job_command.h"
#include "socket_util.h"

namespace memento::launch {
namespace {

// A listener on `port` (every address), or -1.
int Listen(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = Ipv4Address(INADDR_ANY, port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 1) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(FreePort, IsBelowTheEphemeralRangeAndFreeToListenOn) {
  const int ephemeral = EphemeralPortsFrom();
  ASSERT_GT(ephemeral, 11000) << "this machine's ephemeral range leaves no room below it";
  for (int i = 0; i < 20; ++i) {
    const int port = FreePort();
    ASSERT_GE(port, 10000);
    ASSERT_LT(port, ephemeral);
    const int fd = Listen(port);
    EXPECT_GE(fd, 0) << "port " << port;
    if (fd >= 0) close(fd);
  }
}

// A port already listened on is never handed out.
TEST(FreePort, SkipsAPortInUse) {
  std::vector<int> held;
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    const int port = FreePort();
    const int fd = Listen(port);
    ASSERT_GE(fd, 0) << "port " << port;
    for (int h : held) ASSERT_NE(port, h) << "a port in use was handed out";
    held.push_back(port);
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace memento::launch
