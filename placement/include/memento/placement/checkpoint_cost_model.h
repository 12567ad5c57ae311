// Checkpoint costs of a scheme at a job's N and S, from bandwidths or from costs measured by
// memento's own benchmarks (bench_cluster) at a reference shard size.
//
// Per-node costs scale with the shard: a snapshot copies S at `snapshot_gibps`; protect
// sends the scheme's traffic over the node's link (replica:M: (M-1) S, xor: S, rs:K+M: M S,
// each data piece to every parity holder of its stripe); a replica recovery fetches S and
// re-protects it; a decode also reads the survivors' partial products (about S) and runs the
// decode at `decode_gibps`. They do not grow with N: peers are a fixed set of nodes.
// Remote storage is shared: persisting or reading the whole job's N S bytes is limited by the
// aggregate bandwidth of the file system and by each node's own path to it, whichever is
// slower. Measured costs (MeasuredCosts) replace the bandwidth forms for the same scheme,
// scaled by S / reference_shard_bytes.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <string>

#include "memento/common/status.h"
#include "memento/placement/goodput_model.h"
#include "memento/placement/scheme.h"

namespace memento::placement {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct CostInputs {
  double snapshot_gibps = 10;    // device/host memory to shared memory, per node
  double link_gibps = 12.5;      // per-node network bandwidth (100 Gb/s)
  double decode_gibps = 4;       // erasure decode (ISA-L) per node
  double node_remote_gibps = 2;  // one node's path to remote storage
  double fs_write_gibps = 100;   // remote storage, aggregate write
  double fs_read_gibps = 200;    // remote storage, aggregate read
  double relaunch_s = 300;       // reschedule, restart processes, rendezvous

  Status Validate() const;  // InvalidArgument names the field
};

// Costs measured for one scheme at a reference shard size (e.g. a bench_cluster record).
struct MeasuredCosts {
  double reference_shard_bytes = 0;
  double stall_s = 0;
  double protect_s = 0;
  double recover_s = 0;  // one lost node: its new store and restore; relaunch and re-protect
                         // excluded
  std::string source;    // where they come from, for reports
};

// Bytes a node sends to protect its shard of `shard_bytes` under `scheme`.
double ProtectTrafficBytes(const Scheme& scheme, double shard_bytes);

// The costs of `scheme` for N nodes of S bytes; `measured` (may be null) replaces the
// per-node terms. Remote-only uses persist_s as its checkpoint cost (goodput_model.h).
CheckpointCosts EstimateCosts(const Scheme& scheme, int nodes, double shard_bytes,
                              const CostInputs& inputs, const MeasuredCosts* measured);

}  // namespace memento::placement
