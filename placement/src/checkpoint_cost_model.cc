#include "memento/placement/checkpoint_cost_model.h"

#include <algorithm>
#include <cmath>

namespace memento::placement {

Status CostInputs::Validate() const {
  const std::pair<const char*, double> fields[] = {
      {"snapshot_gibps", snapshot_gibps}, {"link_gibps", link_gibps},
      {"decode_gibps", decode_gibps},     {"node_remote_gibps", node_remote_gibps},
      {"fs_write_gibps", fs_write_gibps}, {"fs_read_gibps", fs_read_gibps}};
  for (const auto& [name, v] : fields) {
    if (!(std::isfinite(v) && v > 0)) {
      return Status::InvalidArgument(std::string(name) + " must be > 0");
    }
  }
  if (!(std::isfinite(relaunch_s) && relaunch_s >= 0))
    return Status::InvalidArgument("relaunch_s must be >= 0");
  return Status::Ok();
}

double ProtectTrafficBytes(const Scheme& scheme, double shard_bytes) {
  switch (scheme.kind()) {
    case SchemeKind::kNone:
      return 0;
    case SchemeKind::kReplica:
      return (scheme.copies() - 1) * shard_bytes;
    case SchemeKind::kXor:
    case SchemeKind::kReedSolomon:
      return scheme.parity() * shard_bytes;
  }
  return 0;
}

CheckpointCosts EstimateCosts(const Scheme& scheme, int nodes, double shard_bytes,
                              const CostInputs& in, const MeasuredCosts* measured) {
  const double s = shard_bytes;
  const double traffic = ProtectTrafficBytes(scheme, s);
  CheckpointCosts c;
  c.stall_s = s / (in.snapshot_gibps * kGiB);
  c.protect_s = c.stall_s + traffic / (in.link_gibps * kGiB);
  c.recover_local_s = s / (in.snapshot_gibps * kGiB);
  c.recover_replica_s = (s + traffic) / (in.link_gibps * kGiB);
  c.recover_decode_s = (2 * s + traffic) / (in.link_gibps * kGiB) + s / (in.decode_gibps * kGiB);
  if (measured != nullptr && measured->reference_shard_bytes > 0) {
    const double scale = s / measured->reference_shard_bytes;
    c.stall_s = measured->stall_s * scale;
    c.protect_s = std::max(c.stall_s, measured->protect_s * scale);
    c.recover_local_s = c.stall_s;
    if (scheme.is_replica()) c.recover_replica_s = measured->recover_s * scale;
    if (scheme.is_erasure()) c.recover_decode_s = measured->recover_s * scale;
  }
  const double job_bytes = static_cast<double>(nodes) * s;
  const double write_s =
      std::max(s / (in.node_remote_gibps * kGiB), job_bytes / (in.fs_write_gibps * kGiB));
  c.persist_s = c.protect_s + write_s;
  c.recover_remote_s =
      std::max(s / (in.node_remote_gibps * kGiB), job_bytes / (in.fs_read_gibps * kGiB));
  c.relaunch_s = in.relaunch_s;
  return c;
}

}  // namespace memento::placement
