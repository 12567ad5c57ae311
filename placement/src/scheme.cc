#include "memento/placement/scheme.h"

#include <cstdio>
#include <string>

#include "memento/common/check.h"

namespace memento::placement {
namespace {

// Largest group the erasure codecs encode and decode (erasure/: RsCodec and
// XorCodec take at most 128 data rows, RsCodec at most 32 parity rows). A
// group may gain up to M extra data rows when GroupLayout folds the last,
// partial group into it, so K + M itself must fit in 128 data rows.
constexpr int kMaxGroupRows = 128;
constexpr int kMaxParity = 32;

Status BadScheme(std::string_view text, const std::string& why) {
  return Status::InvalidArgument("bad scheme '" + std::string(text) + "' (" + why +
                                 "): accepted forms are " + Scheme::kAcceptedForms);
}

// Parses a decimal integer made of digits only, in [1, 100000].
bool ParseCount(std::string_view s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > 100000) return false;
  *out = v;
  return true;
}

}  // namespace

Scheme Scheme::Replica(int copies, ReplicaPlacement placement) {
  MEMENTO_CHECK_GE(copies, 2);
  return Scheme(SchemeKind::kReplica, copies, 0, 1, placement);
}

Scheme Scheme::Xor(int data) {
  MEMENTO_CHECK_GE(data, 1);
  MEMENTO_CHECK_LE(data + 1, kMaxGroupRows);
  return Scheme(SchemeKind::kXor, 1, 1, data, ReplicaPlacement::kGroup);
}

Scheme Scheme::ReedSolomon(int data, int parity) {
  MEMENTO_CHECK_GE(data, 1);
  MEMENTO_CHECK_GE(parity, 1);
  MEMENTO_CHECK_LE(data + parity, kMaxGroupRows);
  MEMENTO_CHECK_LE(parity, kMaxParity);
  return Scheme(SchemeKind::kReedSolomon, 1, parity, data, ReplicaPlacement::kGroup);
}

Result<Scheme> Scheme::Parse(std::string_view text) {
  if (text == "none") return None();
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return BadScheme(text, "unknown kind");
  const std::string_view kind = text.substr(0, colon);
  std::string_view rest = text.substr(colon + 1);
  if (kind == "replica") {
    ReplicaPlacement placement = ReplicaPlacement::kGroup;
    const size_t colon2 = rest.find(':');
    if (colon2 != std::string_view::npos) {
      const std::string_view p = rest.substr(colon2 + 1);
      if (p == "group") {
        placement = ReplicaPlacement::kGroup;
      } else if (p == "ring") {
        placement = ReplicaPlacement::kRing;
      } else {
        return BadScheme(text, "placement must be group or ring");
      }
      rest = rest.substr(0, colon2);
    }
    int m = 0;
    if (!ParseCount(rest, &m)) return BadScheme(text, "M must be an integer from 1 to 100000");
    if (m < 2) return BadScheme(text, "replica needs M >= 2 copies; use none for one");
    return Replica(m, placement);
  }
  if (kind == "xor") {
    int k = 0;
    if (!ParseCount(rest, &k)) return BadScheme(text, "K must be an integer from 1 to 100000");
    if (k + 1 > kMaxGroupRows) {
      return BadScheme(text,
                       "K+1 must be <= 128 (the codecs' largest group, partial groups "
                       "folded in)");
    }
    return Xor(k);
  }
  if (kind == "rs") {
    const size_t plus = rest.find('+');
    if (plus == std::string_view::npos) return BadScheme(text, "rs needs K+M");
    int k = 0;
    int m = 0;
    if (!ParseCount(rest.substr(0, plus), &k) || !ParseCount(rest.substr(plus + 1), &m)) {
      return BadScheme(text, "K and M must be integers from 1 to 100000");
    }
    if (m > kMaxParity) return BadScheme(text, "M must be <= 32 (the codec's parity rows)");
    if (k + m > kMaxGroupRows) {
      return BadScheme(text,
                       "K+M must be <= 128 (the codecs' largest group, partial groups "
                       "folded in)");
    }
    return ReedSolomon(k, m);
  }
  return BadScheme(text, "unknown kind '" + std::string(kind) + "'");
}

Status Scheme::ValidateFor(int num_nodes) const {
  const std::string head = "scheme " + ToString() + " on " + std::to_string(num_nodes) + " nodes";
  if (num_nodes < 1) return Status::InvalidArgument(head + ": need at least 1 node");
  if (is_replica() && num_nodes < copies_) {
    return Status::InvalidArgument(
        head + ": replica:M needs at least M nodes (M = " + std::to_string(copies_) + ")");
  }
  if (is_erasure() && num_nodes < parity_ + 1) {
    return Status::InvalidArgument(head + ": needs at least " + std::to_string(parity_ + 1) +
                                   " nodes (one data node plus " + std::to_string(parity_) +
                                   " parity)");
  }
  return Status::Ok();
}

Scheme Scheme::WithPlacement(ReplicaPlacement placement) const {
  Scheme s = *this;
  if (is_replica()) s.placement_ = placement;
  return s;
}

double Scheme::NominalMemoryFactor() const {
  switch (kind_) {
    case SchemeKind::kNone:
      return 1.0;
    case SchemeKind::kReplica:
      return copies_;
    case SchemeKind::kXor:
    case SchemeKind::kReedSolomon:
      return 1.0 + static_cast<double>(parity_) / data_;
  }
  return 1.0;
}

std::string Scheme::ToString() const {
  switch (kind_) {
    case SchemeKind::kNone:
      return "none";
    case SchemeKind::kReplica:
      return "replica:" + std::to_string(copies_) +
             (placement_ == ReplicaPlacement::kRing ? ":ring" : "");
    case SchemeKind::kXor:
      return "xor:" + std::to_string(data_);
    case SchemeKind::kReedSolomon:
      return "rs:" + std::to_string(data_) + "+" + std::to_string(parity_);
  }
  return "?";
}

}  // namespace memento::placement
