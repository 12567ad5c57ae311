// Scheme: how a group of nodes protects its shards (docs/architecture.md §5).
//
//   none            no redundancy: a shard lives on its own node only
//   replica:M       the shard lives on its node and M-1 peers (M >= 2); placement
//   replica:M:group   groups of M nodes mirror each other (default; Gemini)
//   replica:M:ring    node i's copies live on i+1..i+M-1 (mod N)
//   xor:K           groups of K data nodes + 1 parity (RAID-5 style rotating parity)
//   rs:K+M          groups of K data nodes + M parity (Reed-Solomon, RAID-6 style)
//
// Thread-safety: a plain value. Cost: O(length of the text) to parse.
#pragma once

#include <string>
#include <string_view>

#include "memento/common/status.h"

namespace memento::placement {

enum class SchemeKind { kNone, kReplica, kXor, kReedSolomon };
enum class ReplicaPlacement { kGroup, kRing };

class Scheme {
 public:
  // The forms Parse accepts, for error messages and --help.
  static constexpr const char* kAcceptedForms =
      "none, replica:M, replica:M:group, replica:M:ring (M >= 2), xor:K (1 <= K <= 127), "
      "rs:K+M (K >= 1, 1 <= M <= 32, K+M <= 128)";

  // Parses the text forms above (case-sensitive, no spaces). A malformed string is
  // InvalidArgument naming the string and kAcceptedForms.
  static Result<Scheme> Parse(std::string_view text);

  static Scheme None() { return Scheme(SchemeKind::kNone, 1, 0, 1, ReplicaPlacement::kGroup); }
  // Callers pass valid numbers (see kAcceptedForms); violations are bugs and throw.
  static Scheme Replica(int copies, ReplicaPlacement placement = ReplicaPlacement::kGroup);
  static Scheme Xor(int data);
  static Scheme ReedSolomon(int data, int parity);

  // Whether the scheme can protect N nodes: replica:M needs N >= M; xor/rs need N >= M+1
  // (one data node plus M parity nodes; fewer than K+M nodes form one partial group).
  // InvalidArgument names the scheme, N and the requirement.
  Status ValidateFor(int num_nodes) const;

  SchemeKind kind() const { return kind_; }
  bool is_erasure() const { return kind_ == SchemeKind::kXor || kind_ == SchemeKind::kReedSolomon; }
  bool is_replica() const { return kind_ == SchemeKind::kReplica; }
  // replica: M (copies including the owner's); 1 otherwise.
  int copies() const { return copies_; }
  // xor/rs: K data nodes per full group; 1 otherwise.
  int data() const { return data_; }
  // xor: 1, rs: M, otherwise 0.
  int parity() const { return parity_; }
  // Nodes of one group that may be lost with every shard of the group still rebuildable:
  // replica M-1 (group placement), xor 1, rs M, none 0.
  int tolerance() const { return is_replica() ? copies_ - 1 : parity_; }
  ReplicaPlacement placement() const { return placement_; }
  // The same scheme with another replica placement (no effect on other kinds).
  Scheme WithPlacement(ReplicaPlacement placement) const;

  // Memory per node as a multiple of the shard size S for full groups (docs/architecture.md §5):
  // none 1, replica:M M, xor:K / rs:K+M 1 + M/K.
  double NominalMemoryFactor() const;

  // Canonical text: "none", "replica:2", "replica:2:ring", "xor:3", "rs:6+2".
  std::string ToString() const;

  bool operator==(const Scheme& o) const {
    return kind_ == o.kind_ && copies_ == o.copies_ && data_ == o.data_ && parity_ == o.parity_ &&
           placement_ == o.placement_;
  }
  bool operator!=(const Scheme& o) const { return !(*this == o); }

 private:
  Scheme(SchemeKind kind, int copies, int parity, int data, ReplicaPlacement placement)
      : kind_(kind), copies_(copies), data_(data), parity_(parity), placement_(placement) {}

  SchemeKind kind_;
  int copies_;
  int data_;
  int parity_;
  ReplicaPlacement placement_;
};

}  // namespace memento::placement
