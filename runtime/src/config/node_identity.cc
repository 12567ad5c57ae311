#include "memento/runtime/node_identity.h"

#include <sys/utsname.h>

#include <cstring>

#include "memento/common/check.h"

namespace memento::runtime {

std::string HostName() {
  // uname's nodename holds any host name the kernel allows (64 bytes and its
  // terminator); gethostname into a buffer one byte short fails on a name of
  // exactly 64 bytes.
  struct utsname u = {};
  if (uname(&u) != 0 || u.nodename[0] == '\0') return "localhost";
  return std::string(u.nodename, strnlen(u.nodename, sizeof(u.nodename)));
}

std::string NodeIdentity(const Config& config, int world_rank) {
  MEMENTO_CHECK_GE(world_rank, 0);
  std::string base = config.node.empty() ? HostName() : config.node;
  if (config.ranks_per_node > 0) {
    base += "/" + std::to_string(world_rank / config.ranks_per_node);
  }
  return base;
}

int LocalRank(const Config& config, int world_rank) {
  MEMENTO_CHECK_GE(world_rank, 0);
  if (config.ranks_per_node > 0) return world_rank % config.ranks_per_node;
  return -1;
}

int LocalRankAmong(const std::vector<std::string>& identities, int rank) {
  MEMENTO_CHECK_GE(rank, 0);
  MEMENTO_CHECK_LT(static_cast<size_t>(rank), identities.size());
  int lane = 0;
  for (int r = 0; r < rank; ++r) {
    if (identities[r] == identities[rank]) ++lane;
  }
  return lane;
}

}  // namespace memento::runtime
