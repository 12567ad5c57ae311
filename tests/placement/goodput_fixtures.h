// Shared inputs of the goodput model and simulation tests: a typical set of measured
// costs, a failure process from MTBFs in hours, a job of 1 GiB shards.
#pragma once

#include "memento/placement/goodput_model.h"

namespace memento::placement::testing {

constexpr double kHour = 3600;

// Stall 0.5 s, protect 2 s, persist 30 s, relaunch 120 s; restore 1 s from local memory,
// 5 s from a replica, 8 s by decode, 60 s from remote storage.
inline CheckpointCosts Costs() {
  CheckpointCosts c;
  c.stall_s = 0.5;
  c.protect_s = 2;
  c.persist_s = 30;
  c.relaunch_s = 120;
  c.recover_local_s = 1;
  c.recover_replica_s = 5;
  c.recover_decode_s = 8;
  c.recover_remote_s = 60;
  return c;
}

// MTBFs in hours (kNever: that kind of failure does not happen).
inline FailureProcess Failures(double node_h, double process_h = kNever, double rack_h = kNever,
                               int per_rack = 0, double multi_per_day = 0, int multi_nodes = 2) {
  FailureProcess f;
  f.node_mtbf_s = node_h == kNever ? kNever : node_h * kHour;
  f.process_mtbf_s = process_h == kNever ? kNever : process_h * kHour;
  f.rack_mtbf_s = rack_h == kNever ? kNever : rack_h * kHour;
  f.nodes_per_rack = per_rack;
  f.multi_events_per_day = multi_per_day;
  f.multi_event_nodes = multi_nodes;
  return f;
}

// N nodes of 1 GiB shards, `step_s` per step.
inline JobShape Job(int nodes, double step_s) { return JobShape{nodes, 1 << 30, step_s}; }

}  // namespace memento::placement::testing
