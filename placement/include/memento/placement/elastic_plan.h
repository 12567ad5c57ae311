// The elastic restore planner: a pure, deterministic function that decides how a job
// relaunched on N' nodes x L' lanes assembles the tensors it registered from the slices an
// N x L job checkpointed.
//
// Inputs:
//  * the old job's catalog: every old (node, lane) rank's entries, each with its tensor
//    layout (dtype, global shape, this rank's slice);
//  * where each old shard's bytes can be read at the chosen version: an ordinary
//    RecoveryPlan over the old topology (recovery_planner.h), whose failed nodes are the
//    old nodes with no process in the new job. A local or replica source is read where it
//    lies; a decoded shard is rebuilt once, on the new rank that needs most of it (the
//    decode host); a remote source is read by each new rank for its own pieces only;
//  * the new job's registrations and which old node each new node was (-1: a fresh node).
//
// Rules:
//  * Entries are matched by name. A tensor entry's dtype and global shape must be the
//    checkpoint's; its distinct slices (old, and new) must tile the global tensor: pairwise
//    disjoint and covering it. Identical slices on several ranks (data-parallel replicas)
//    are copies of one slice. Every new slice is assembled from the overlaps of the old
//    distinct slices with it, each overlap exactly once, from one copy.
//  * Opaque entries (no global shape) keep no slicing to follow: they restore only onto the
//    same number of ranks, old rank k (node-major) to new rank k.
//  * Choice of copy, per piece: the copy on the new rank's own node (first the own shard of
//    the old rank that ran at the same node and lane, so that an entry every rank holds
//    whole comes from the rank that ran there); else the memory copy
//    whose serving node has served least so far (ties: the first in old rank order), then a
//    decoded copy; remote storage only
//    for pieces no memory copy holds.
//
// Errors (InvalidArgument, naming the entry): a new entry not in the checkpoint, another
// dtype or global shape, slices that do not tile, an opaque entry on another rank count,
// bytes that do not match the slice. Thread-safety: pure. Cost: O(E * C^2) for E new
// entries and C old copies of a name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/recovery_plan.h"

namespace memento::placement {

// A slice of a global tensor (row-major, contiguous in the slice's own shape). An empty
// global_shape is an opaque entry.
struct TensorSlice {
  std::string dtype;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets;

  bool opaque() const { return global_shape.empty(); }
  bool operator==(const TensorSlice& o) const {
    return dtype == o.dtype && global_shape == o.global_shape && shape == o.shape &&
           offsets == o.offsets;
  }
};

struct CatalogEntry {
  std::string name;
  uint64_t bytes = 0;
  TensorSlice slice;
};

// The entries of one rank, in registration (shard) order.
struct RankCatalog {
  int node = -1;
  int lane = 0;
  std::vector<CatalogEntry> entries;
};

struct ElasticInput {
  int old_nodes = 0;
  int old_lanes = 0;
  std::vector<RankCatalog> old_ranks;  // every old (node, lane), node-major
  RecoveryPlan old_plan;               // where every old shard's bytes are, at its version
  int new_nodes = 0;
  int new_lanes = 0;
  std::vector<RankCatalog> new_ranks;  // every new (node, lane), node-major
  std::vector<int> old_node_of_new;    // per new node: the old node it was, or -1
};

enum class PieceSource {
  kShard,    // the old owner's own copy, in its node store (serving node = its node)
  kReplica,  // a replica of the old shard kept on the serving node
  kDecoded,  // the old shard as decoded on its decode host
  kRemote,   // the remote tier's file of the old rank, read by the new rank itself
};
const char* PieceSourceName(PieceSource source);  // "shard", "replica", "decoded", "remote"

// One overlap of an old slice with a new slice.
struct ElasticPiece {
  int old_node = -1;
  int old_lane = 0;
  int old_entry = -1;            // index in the old rank's entries
  std::vector<int64_t> offsets;  // the overlap box, global coordinates (empty: opaque, whole)
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  PieceSource source = PieceSource::kShard;
  int serve_node = -1;  // new node index that serves it (kRemote: -1)
  int serve_lane = 0;   // the new lane on serve_node that holds the old bytes
};

// What one new (node, lane) rank assembles, per registered entry (in its order).
struct ElasticTarget {
  int node = -1;
  int lane = 0;
  std::vector<std::vector<ElasticPiece>> pieces;  // [new entry] -> pieces
};

// An old shard rebuilt by decode, on its host.
struct DecodeHost {
  int old_node = -1;
  int old_lane = 0;
  int node = -1;  // new node
  int lane = 0;   // new lane
};

struct ElasticPlan {
  uint64_t version = 0;
  std::vector<ElasticTarget> targets;  // every new (node, lane), node-major
  std::vector<DecodeHost> decode_hosts;
  std::vector<uint64_t> served_bytes_per_node;    // new node -> bytes it serves to others
  std::vector<uint64_t> received_bytes_per_node;  // new node -> bytes it gets from others
  std::vector<uint64_t> remote_bytes_per_node;    // new node -> bytes it reads remotely
  // Per new node: bytes of its new slices that no copy on its own node holds (the least it
  // must receive, from memory or remote).
  std::vector<uint64_t> minimum_bytes_per_node;
  uint64_t max_served_bytes = 0;

  std::string Summary() const;
};

// The new lane that attaches old lane `old_lane`'s store on a surviving node.
inline int ServingLane(int old_lane, int new_lanes) { return old_lane % new_lanes; }

// Plans the elastic restore (see the rules above).
Result<ElasticPlan> PlanElastic(const ElasticInput& input);

// Element size of a tensor entry: bytes / elements; 0 for an empty slice of 0 bytes
// (InvalidArgument naming `name` when it does not divide).
Result<uint64_t> ElementBytes(const std::string& name, const TensorSlice& slice, uint64_t bytes);

// Calls fn(src_offset, dst_offset, length) for each contiguous byte run of the box
// (offsets/shape, global coordinates) inside `src` and `dst` (both contain it), in
// increasing order. `elem`: bytes per element. Opaque slices: one run of `opaque_bytes`.
void ForEachRun(const TensorSlice& src, const TensorSlice& dst,
                const std::vector<int64_t>& box_offsets, const std::vector<int64_t>& box_shape,
                uint64_t elem, uint64_t opaque_bytes,
                const std::function<void(uint64_t, uint64_t, uint64_t)>& fn);

}  // namespace memento::placement
