// An IPv4 socket address for the launch tests' own listeners and clients.
#pragma once

#include <netinet/in.h>

#include <cstdint>

namespace memento::launch {

// `host` in host byte order (INADDR_ANY, INADDR_LOOPBACK); port 0: any.
inline sockaddr_in Ipv4Address(uint32_t host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

}  // namespace memento::launch
