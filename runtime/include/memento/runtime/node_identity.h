// Node identity and local rank (docs/architecture.md §4).
//
// A node is a failure domain. Its identity names the node's shared-memory
// segments, so it must be the same after a relaunch: MEMENTO_NODE if set, else
// the host name. With MEMENTO_RANKS_PER_NODE=R the ranks of one machine form
// virtual nodes "<host>/<rank / R>" so that tests run many nodes on one host.
// The local rank ("lane") tells the ranks of one node apart; it is the last
// part of the segment name.
//
// Thread-safety: pure functions (HostName() calls gethostname()).
#pragma once

#include <string>
#include <vector>

#include "memento/runtime/config.h"

namespace memento::runtime {

// The machine's host name (gethostname), "localhost" if it is unavailable.
std::string HostName();

// MEMENTO_NODE (config.node) if set, else HostName(); with
// config.ranks_per_node = R > 0 that base + "/" + (world_rank / R).
std::string NodeIdentity(const Config& config, int world_rank);

// world_rank % R when config.ranks_per_node = R > 0; otherwise -1 (unknown
// without the other ranks' identities: use LocalRankAmong).
int LocalRank(const Config& config, int world_rank);

// The local rank of `rank` given every rank's node identity (an allgather):
// the number of lower ranks with the same identity. Stable across relaunches
// as long as the launcher places ranks in the same order.
int LocalRankAmong(const std::vector<std::string>& identities, int rank);

}  // namespace memento::runtime
