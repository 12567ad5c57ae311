// Fault injection plan of `memento launch --inject SPEC`.
//
// SPEC is a comma-separated list of events, fired one after the other:
//
//   EVENT  := NODES '@' WHEN
//   NODES  := N ('+' N)*        these virtual nodes, lost together
//           | 'rand' [K]         K (default 1) distinct nodes drawn at random
//   WHEN   := STEPS [':' STAGE]  at a step, or at a stage of that checkpoint version
//           | 'recovery'         during the next recovery (a second failure while
//           | 'reprotect'        the job restores after the previous event)
//   STEPS  := (S | LO '-' HI) ['+' D 's']
//                                a step, or one drawn uniformly from [LO, HI]; with
//                                a delay, the loss comes D seconds (a decimal,
//                                0..3600) after the job reports that step: in the
//                                middle of the work that follows (step stage only)
//   STAGE  := step | snapshot | protect | commit | persist | rand
//
// Examples: "3@10" (node 3 lost when the job reports step 10), "3@10+0.25s"
// (a quarter of a second later), "1+2@7:snapshot"
// (nodes 1 and 2 lost while version 7 is snapshotted), "3@5,1@recovery" (node 3
// lost at step 5, node 1 lost while the job recovers from that), "rand2@3-9:rand".
//
// Random choices come from one generator seeded with `seed`, drawn in the
// order of the text: the same SPEC and seed give the same plan.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"

namespace memento::launch {

enum class InjectStage {
  kStep,      // the launcher SIGKILLs the node's ranks once the job reports the step
  kSnapshot,  // the job's first rank of the node SIGKILLs itself in these engine stages
  kProtect,   // (runtime::Stage snapshot, seal, commit, persist, recover, reprotect),
  kCommit,    // then the launcher unlinks the node's segments
  kPersist,
  kRecovery,
  kReprotect,
};

// "step", "snapshot", "protect", "commit", "persist", "recovery", "reprotect".
const char* InjectStageName(InjectStage stage);

// The engine stage (runtime::StageName) where the job kills itself; "" for kStep.
const char* EngineStageName(InjectStage stage);

struct InjectEvent {
  std::vector<int> nodes;  // distinct virtual node indices, sorted
  uint64_t step = 0;       // step (kStep) or checkpoint version; 0 for recovery stages
  InjectStage stage = InjectStage::kStep;
  double delay_s = 0;  // kStep: seconds after the step is reported
  std::string text;  // the event as written, e.g. "rand2@3-9:rand"

  // The resolved event, e.g. "nodes 2+5 at step 7 (snapshot)".
  std::string ToString() const;
};

// Parses SPEC for a job of `num_nodes` virtual nodes. InvalidArgument naming
// the offending event for bad syntax, a node outside 0..num_nodes-1, more
// random nodes than exist, or a recovery event with no earlier failure.
Result<std::vector<InjectEvent>> ParseInjectSpec(const std::string& spec, int num_nodes,
                                                 uint64_t seed);

}  // namespace memento::launch
