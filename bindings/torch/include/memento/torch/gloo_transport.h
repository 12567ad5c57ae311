// GlooTransport: a runtime::Transport over libtorch's c10d ProcessGroupGloo,
// for jobs launched by torchrun (no MPI).
//
// Store. Ranks meet through a c10d TCPStore at MASTER_ADDR. Under torchrun
// (TORCHELASTIC_USE_AGENT_STORE=True) that is the elastic agent's store at
// MASTER_PORT, which lives as long as the job; otherwise rank 0 hosts one at
// MASTER_PORT + 1 (MASTER_PORT is left to the application's own
// init_process_group). memento's keys live under their own prefix
// "memento/<job>/<restart count>/<n>/" (the process's n-th transport of the
// job), so they never meet the application's or an earlier transport's.
// The process group is memento's own, never the application's default group.
//
// Operations.
//   Barrier / AllTrue / AllReduceMax / AllReduceMin: gloo barrier / allreduce
//     of one int64 (AllTrue = MIN of 0/1).
//   Allgather: an allgather of the lengths, then of the byte strings padded
//     to the longest.
//   Send / Recv: a gloo send of the length (gloo tag 2*tag), then of the
//     payload (tag 2*tag + 1). A sender holds a per-peer lock so that the two
//     halves of concurrent sends never interleave; a receiver holds a per
//     (peer, tag) lock. Messages to oneself go through an in-memory mailbox.
// Failures: a gloo error or a wait longer than the timeout is Unavailable /
// Timeout; after a failed collective or a timed-out send or receive the
// transport is broken and answers Unavailable (as the MPI transport).
//
// Thread-safety: as transport.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::torch_adapter {

struct GlooTransportOptions {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // true: MASTER_PORT is torchrun's agent store (client on every rank);
  // false: rank 0 hosts a store at master_port + 1.
  bool agent_store = false;
  // Key prefix of memento's keys in the store.
  std::string prefix = "memento/";
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

// Fills rank, size, master address/port, agent_store and the prefix (with
// `job`) from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_USE_AGENT_STORE and TORCHELASTIC_RESTART_COUNT.
// InvalidArgument naming a variable that is missing or malformed.
Result<GlooTransportOptions> GlooOptionsFromEnv(const std::string& job,
                                                std::chrono::milliseconds timeout);

// Connects to the store and builds the process group (blocks until every
// rank joined or the timeout passed).
Result<std::shared_ptr<runtime::Transport>> CreateGlooTransport(
    const GlooTransportOptions& options);

}  // namespace memento::torch_adapter
