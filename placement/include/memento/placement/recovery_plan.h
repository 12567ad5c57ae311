// RecoveryPlan: what the recovery planner decided (recovery_planner.h). A plain value the
// executor follows and logs (ToJson).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/placement/placement_map.h"

namespace memento::placement {

enum class SourceKind {
  kLocal,    // the owner's own copy, still on its node, valid
  kReplica,  // a valid replica on node `from_node`
  kDecode,   // erasure decode of the stripes in `decodes` (see StripeDecode)
  kRemote,   // remote storage, at the plan's version
};
const char* SourceKindName(SourceKind kind);  // "local", "replica", "decode", "remote"

// Where one (node, lane) shard of the chosen version comes from.
struct ShardSource {
  int node = -1;  // owner index (a replacement node takes the failed node's index)
  int lane = 0;
  SourceKind kind = SourceKind::kLocal;
  int from_node = -1;           // kLocal: node; kReplica: the holder read from
  std::vector<int> decodes;     // kDecode: indices into RecoveryPlan::decodes
  std::vector<int> read_nodes;  // nodes read from (kLocal: none), increasing
  uint64_t bytes = 0;           // shard bytes when a copy says (local, replica), else 0
};

// One row read as decode input.
struct StripeRow {
  int node = -1;        // holder of the row
  bool parity = false;  // parity row (of the stripe) or data row
  int row = -1;         // parity row 0..M-1, or data row 0..K'-1 (= piece index of `node`)
  uint64_t bytes = 0;   // bytes read (data rows: real bytes, padding not sent)
};

// Decode of one stripe of one erasure group for one lane: read `inputs` (exactly K' valid
// rows), rebuild the lost data rows `rebuilt` (piece `row` of owner `node`).
struct StripeDecode {
  int lane = 0;
  int group = -1;
  int stripe = -1;
  int data_rows = 0;    // K'
  int parity_rows = 0;  // M
  uint64_t piece_bytes = 0;
  std::vector<StripeRow> inputs;
  std::vector<StripeRow> rebuilt;
};

// An item a node must (re)receive after the restore so that the version is fully protected
// again: copies and parity pieces held by lost nodes, or whose copy was unsealed/corrupt.
struct ReprotectItem {
  int node = -1;  // the holder that must get it (a replacement node takes the failed index)
  int lane = 0;
  ItemKind kind = ItemKind::kReplica;  // kReplica or kParity
  int owner = -1;                      // kReplica: whose shard
  int group = -1;                      // kParity
  int stripe = -1;                     // kParity
  int row = -1;                        // kParity: parity row
  uint64_t bytes = 0;                  // best known size (0 when unknown)
};

struct RecoveryPlan {
  uint64_t version = 0;              // the one version every (node, lane) restores
  bool memory_cannot_serve = false;  // every shard comes from remote storage
  std::string scheme;                // canonical scheme text
  int num_nodes = 0;
  int lanes = 0;
  std::vector<int> failed_nodes;              // increasing
  std::vector<uint64_t> skipped_versions;     // newer versions that could not be rebuilt
  std::vector<ShardSource> shards;            // every (node, lane), by node then lane
  std::vector<StripeDecode> decodes;          // by group, lane, first needed (see shards)
  std::vector<ReprotectItem> reprotect;       // by node, lane, kind
  std::vector<uint64_t> read_bytes_per_node;  // memory bytes each node serves to others
  uint64_t max_read_bytes = 0;                // the busiest node's share

  // One line: "version 12 from memory: 14 local, 2 replica, 0 decode, 0 remote; ...".
  std::string Summary() const;
  // Deterministic JSON object (stable key order), for logs.
  std::string ToJson() const;
};

}  // namespace memento::placement
