// The timeline of a `memento launch` run, rendered from its JSON records.
//
// Records (one JSON object each, in order; `memento launch --json` prints
// them one per line, --records FILE writes them to a file). Every record has
// "record" (its kind) and "t" (seconds since the launch began):
//   job        the configuration: job, np, ranks_per_node, nodes, scheme, remote,
//              inject (the resolved events), seed, command
//   launch     an mpirun launch: attempt, backoff_s, replaced (new node identities)
//   failure    index, attempt, injected, what, nodes, identities, segments_unlinked,
//              last_step (the last step the job reported), job_exit, detection_s
//              (failure -> mpirun gone), output_tail (failures nobody injected)
//   restore    what an attempt's Restore() did on all ranks: ok, version,
//              state_hash, entries_by_source {"local-memory": n, "replica": n,
//              "decode": n, "remote": n}, from_memory, from_remote, lost_nodes,
//              reprotect_mode, restore_s, reprotect_s, bytes_received; and
//              "lost" for the failure it recovered from: steps_lost,
//              detection_s, relaunch_s, restore_s, reprotect_s, recompute_s
//   not_fired  an injected event the job never reached
//   summary    outcome (finished | failed | unrecoverable | interrupted),
//              exit_code, final_step, state_hash, failures, launches,
//              steps_lost, time_lost_s {detection, relaunch, restore,
//              reprotect, recompute}, wall_s, message
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace memento::launch {

// Human-readable timeline and summary of `records`.
std::string RenderTimeline(const std::vector<nlohmann::json>& records);

}  // namespace memento::launch
