// RestoreReport: what Checkpointer::Restore restored, from where, and what it
// cost. A plain value: copy it, log it (ToString), record it (ToJson).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memento::runtime {

// Where a restored entry came from.
enum class RestoreSource {
  kLocalMemory,  // this node's store
  kRemote,       // the remote tier
  kReplica,      // a peer node's replica
  kDecode,       // rebuilt by an erasure decode from the group's survivors
};

// "local-memory", "remote", "replica", "decode".
const char* RestoreSourceName(RestoreSource source);

struct RestoredEntry {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc = 0;  // crc32c of the restored bytes
  RestoreSource source = RestoreSource::kLocalMemory;
};

// Bytes and seconds of one restore (this rank unless "per node").
struct RestoreStats {
  uint64_t bytes_sent = 0;      // restore transfers (payload)
  uint64_t bytes_received = 0;  // restore transfers (payload)
  std::vector<uint64_t> plan_read_bytes_per_node;  // planner's bytes served per node
  // Restore transfers received per node (all its lanes; replica copies, decode
  // chain hops and decoded rows).
  std::vector<uint64_t> bytes_received_per_node;
  // Re-protect: "none" (nothing was lost), "minimal" (only what lost nodes
  // held was rebuilt) or "full" (the version re-snapshotted and protected
  // again), each with ", background" when it runs after Restore returned
  // (its bytes are then not in this report). Bytes this rank sent / received for it (payload), and bytes
  // received per node (all lanes).
  std::string reprotect_mode = "none";
  uint64_t reprotect_bytes_sent = 0;
  uint64_t reprotect_bytes_received = 0;
  std::vector<uint64_t> reprotect_bytes_received_per_node;
  // Allgathers of entry seals the restore ran: 0 when every rank's seals of
  // the version restored came with the inventory (its newest committed one,
  // the usual case), one per attempt of the plan otherwise.
  int seals_exchanges = 0;
  double inventory_s = 0;  // phase times on this rank
  double plan_s = 0;
  double transfer_s = 0;  // fetch + decode + copy into buffers
  double reprotect_s = 0;
};

struct RestoreReport {
  uint64_t version = 0;
  std::vector<RestoredEntry> entries;  // in registration order
  // Why newer candidates were passed over (e.g. "v12: rank 3 lacks it"), for logs.
  std::vector<std::string> notes;
  std::vector<int> lost_nodes;  // node indices whose memory was gone
  std::string source_detail;    // e.g. "replica from node 2", "decode of 3 stripes"
  RestoreStats stats;
  std::string plan_json;  // the planner's plan (placement::RecoveryPlan::ToJson)
  // When Restore returned: "protected" (a failure the scheme tolerates is
  // survivable now), "re-protecting" (what the lost nodes held is being
  // rebuilt in the background; Checkpointer::ProtectionState() follows it)
  // or "unprotected" (a blocking re-protect failed: the lost nodes' copies
  // are still missing until the next Save commits).
  std::string protection = "protected";

  // Elastic restore (onto another topology): the plan's summary, and per new
  // node the bytes its slices got from other nodes' memory, from remote, and
  // the least it had to get (the bytes of its new slices no copy on the node
  // holds); lost_nodes are old node indices then.
  bool elastic = false;
  std::string elastic_plan;
  std::vector<uint64_t> elastic_received_per_node;
  std::vector<uint64_t> elastic_remote_per_node;
  std::vector<uint64_t> elastic_minimum_per_node;
  std::vector<uint64_t> elastic_served_per_node;

  // One short line, whatever the number of entries: "restored v12: 5 decode,
  // 35 local-memory; lost nodes [3]; elastic; 0.129 s" (the version, this
  // rank's entries counted per source, the lost node indices when any,
  // "elastic" for an elastic restore, the seconds Restore took on this rank:
  // inventory + plan + transfer + re-protect until it returned). Each
  // entry's name, bytes, crc and source, the notes and the timings are in
  // ToJson.
  std::string Summary() const;
  // Summary() followed by the notes ("; v13: rank 3 lacks it"): the line the
  // engine logs after a restore.
  std::string ToString() const;
  // A JSON object (the recovery report record): version, entries,
  // lost_nodes, source_detail, bytes_sent, bytes_received,
  // plan_read_bytes_per_node, bytes_received_per_node, reprotect {mode,
  // bytes_sent, bytes_received, bytes_received_per_node}, protection,
  // seconds {inventory, plan, transfer, reprotect}, notes, elastic {plan,
  // byte counts per node} (elastic restores only), plan (when planned).
  std::string ToJson() const;
};

}  // namespace memento::runtime
