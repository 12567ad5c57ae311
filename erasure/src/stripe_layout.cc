#include "memento/erasure/stripe_layout.h"

#include <algorithm>
#include <string>
#include <utility>

namespace memento::erasure {

namespace {

// Largest group accepted: ISA-L's Cauchy matrix needs k + m <= 255.
constexpr int kMaxGroupSize = 255;

int Mod(int a, int n) { return ((a % n) + n) % n; }

Status CheckIndex(const char* what, int value, int limit) {
  if (value < 0 || value >= limit) {
    return Status::InvalidArgument(std::string("stripe layout: ") + what + " " +
                                   std::to_string(value) + " is outside 0.." +
                                   std::to_string(limit - 1));
  }
  return Status::Ok();
}

}  // namespace

StripeLayout::StripeLayout(int k, int m, std::vector<size_t> shard_bytes, size_t piece_bytes)
    : k_(k), m_(m), shard_bytes_(std::move(shard_bytes)), piece_bytes_(piece_bytes) {}

Result<StripeLayout> StripeLayout::Create(int k, int m, size_t shard_bytes) {
  if (k < 1 || m < 1 || k + m > kMaxGroupSize) {
    return Status::InvalidArgument(
        "stripe layout: k=" + std::to_string(k) + ", m=" + std::to_string(m) +
        " needs k >= 1, m >= 1 and k + m <= " + std::to_string(kMaxGroupSize));
  }
  return Create(k, m, std::vector<size_t>(static_cast<size_t>(k + m), shard_bytes));
}

Result<StripeLayout> StripeLayout::Create(int k, int m, std::vector<size_t> shard_bytes) {
  if (k < 1 || m < 1 || k + m > kMaxGroupSize) {
    return Status::InvalidArgument(
        "stripe layout: k=" + std::to_string(k) + ", m=" + std::to_string(m) +
        " needs k >= 1, m >= 1 and k + m <= " + std::to_string(kMaxGroupSize));
  }
  if (shard_bytes.size() != static_cast<size_t>(k + m)) {
    return Status::InvalidArgument(
        "stripe layout: " + std::to_string(shard_bytes.size()) +
        " shard sizes given for a group of k+m=" + std::to_string(k + m) + " nodes");
  }
  size_t largest = *std::max_element(shard_bytes.begin(), shard_bytes.end());
  size_t ku = static_cast<size_t>(k);
  size_t piece = largest / ku + (largest % ku != 0 ? 1 : 0);
  return StripeLayout(k, m, std::move(shard_bytes), piece);
}

size_t StripeLayout::shard_bytes(int node) const {
  if (node < 0 || node >= group_size()) return 0;
  return shard_bytes_[static_cast<size_t>(node)];
}

Status StripeLayout::CheckNode(int node) const { return CheckIndex("node", node, group_size()); }

Result<StripeRow> StripeLayout::DataRowOf(int node, int piece) const {
  if (Status s = CheckNode(node); !s.ok()) return s;
  if (Status s = CheckIndex("piece", piece, k_); !s.ok()) return s;
  return StripeRow{Mod(node - m_ - piece, group_size()), piece};
}

Result<StripeRow> StripeLayout::ParityRowOf(int node, int slot) const {
  if (Status s = CheckNode(node); !s.ok()) return s;
  if (Status s = CheckIndex("parity slot", slot, m_); !s.ok()) return s;
  return StripeRow{Mod(node - slot, group_size()), k_ + slot};
}

Result<RowLocation> StripeLayout::Locate(int stripe, int row) const {
  if (Status s = CheckIndex("stripe", stripe, num_stripes()); !s.ok()) return s;
  if (Status s = CheckIndex("row", row, k_ + m_); !s.ok()) return s;
  RowLocation loc;
  if (row < k_) {
    loc.node = Mod(stripe + m_ + row, group_size());
    loc.parity = false;
    loc.index = row;
    auto range = PieceRange(loc.node, row);
    if (!range.ok()) return range.status();
    loc.offset = range->offset;
    loc.length = range->length;
  } else {
    int slot = row - k_;
    loc.node = Mod(stripe + slot, group_size());
    loc.parity = true;
    loc.index = slot;
    loc.offset = static_cast<size_t>(slot) * piece_bytes_;
    loc.length = piece_bytes_;
  }
  return loc;
}

Result<std::vector<int>> StripeLayout::ParityNodes(int stripe) const {
  if (Status s = CheckIndex("stripe", stripe, num_stripes()); !s.ok()) return s;
  std::vector<int> nodes;
  nodes.reserve(static_cast<size_t>(m_));
  for (int r = 0; r < m_; ++r) nodes.push_back(Mod(stripe + r, group_size()));
  return nodes;
}

Result<ByteRange> StripeLayout::PieceRange(int node, int piece) const {
  if (Status s = CheckNode(node); !s.ok()) return s;
  if (Status s = CheckIndex("piece", piece, k_); !s.ok()) return s;
  size_t shard = shard_bytes_[static_cast<size_t>(node)];
  size_t begin = std::min(static_cast<size_t>(piece) * piece_bytes_, shard);
  size_t end = std::min(begin + piece_bytes_, shard);
  return ByteRange{begin, end - begin};
}

}  // namespace memento::erasure
