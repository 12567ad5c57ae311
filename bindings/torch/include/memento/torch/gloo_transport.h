// GlooTransport: a runtime::Transport over libtorch's c10d ProcessGroupGloo,
// for jobs launched by torchrun (no MPI).
//
// Store. Ranks meet through the c10d TCPStore at MASTER_ADDR:MASTER_PORT and
// bind no other port. Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True)
// that is the elastic agent's store, which lives as long as the job: every
// rank is a client. Otherwise rank 0 serves it there, multi-tenant, as
// torch's env:// rendezvous does: the application's own init_process_group in
// the same process shares that server, whichever of the two comes first.
// memento's keys live under their own prefix
// "memento/<job>/<restart count>/<n>/" (the process's n-th transport of the
// job), so they never meet the application's or an earlier transport's.
// The process group is memento's own, never the application's default group.
//
// Operations.
//   Barrier / AllTrue / AllReduceMax / AllReduceMin: gloo barrier / allreduce
//     of one int64 (AllTrue = MIN of 0/1).
//   Allgather: one allgather of a fixed slot per rank (the length and the
//     message's first bytes; 1 KiB up to 64 ranks, at most 64 KiB in all);
//     only when a message is longer, a second allgather of the rests padded
//     to the longest. A collective costs its latency: the engine's small
//     allgathers take one.
//   Send / Recv: a message is a lead on gloo tag 2*tag (its length, and the
//     bytes themselves up to 1016 of them), then, when longer, its payload
//     on tag 2*tag + 1, received in place. A small message is copied and
//     sent eagerly: Send returns before it is received (MPI's eager
//     protocol). A receiver keeps a few lead receives posted on every
//     (peer, tag) it has received on, so that leads land as they arrive;
//     taking a message then costs the payload's one round trip at most.
//   StartSend posts the message and returns; Wait waits for the payload.
//   StartRecv posts the (peer, tag)'s lead receives; the message is taken
//     when waited for (dropped unwaited, it takes none). TestsTransfers() is
//     false: gloo's operations cannot be tested without blocking; and
//     PrefersFewerMessages() is true (a payload's receive waits for its lead).
//   Messages to oneself go through an in-memory mailbox.
// Failures: a gloo error or a wait longer than the timeout is Unavailable /
// Timeout; after a failed collective or a timed-out send or receive the
// transport is broken and answers Unavailable (as the MPI transport).
// Destruction delivers the eager sends still in flight (within the timeout).
// Abort() (in-job recovery: the group is gone) aborts every operation being
// waited for: gloo keeps a posted receive in its context, where a peer's
// closed connection does not end it.
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
  // true: MASTER_PORT is torchrun's agent store (a client on every rank);
  // false: rank 0 serves the store at master_port (multi-tenant, shared with
  // the application's own process group in that process).
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

// Connects to the store (serving it on rank 0 without an agent store) and
// builds the process group (blocks until every rank joined or the timeout
// passed). Unavailable naming MASTER_ADDR:MASTER_PORT when the store cannot
// be reached or served there.
Result<std::shared_ptr<runtime::Transport>> CreateGlooTransport(
    const GlooTransportOptions& options);

}  // namespace memento::torch_adapter
