#include "memento/placement/recovery_planner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "memento/common/check.h"

namespace memento::placement {
namespace {

std::string Describe(const InventoryItem& it) {
  std::string s = std::string(ItemKindName(it.kind)) + " item (node " + std::to_string(it.node) +
                  ", lane " + std::to_string(it.lane) + ", version " + std::to_string(it.version);
  if (it.kind == ItemKind::kReplica) s += ", owner " + std::to_string(it.owner);
  if (it.kind == ItemKind::kParity) {
    s += ", stripe " + std::to_string(it.stripe) + ", row " + std::to_string(it.row);
  }
  return s + ")";
}

// Checks that an item fits the layout; the message names the item and what was expected.
Status ValidateItem(const GroupLayout& layout, int lanes, const InventoryItem& it) {
  const int n = layout.num_nodes();
  if (it.node < 0 || it.node >= n) {
    return Status::InvalidArgument(Describe(it) + ": node out of range 0.." +
                                   std::to_string(n - 1));
  }
  if (it.lane < 0 || it.lane >= lanes) {
    return Status::InvalidArgument(Describe(it) + ": lane out of range 0.." +
                                   std::to_string(lanes - 1));
  }
  switch (it.kind) {
    case ItemKind::kShard:
      if (it.owner != -1 && it.owner != it.node) {
        return Status::InvalidArgument(Describe(it) + ": a shard item's owner must be its node");
      }
      return Status::Ok();
    case ItemKind::kReplica: {
      if (it.owner < 0 || it.owner >= n) {
        return Status::InvalidArgument(Describe(it) + ": owner out of range");
      }
      const auto holders = layout.ReplicaHolders(it.owner);
      if (std::find(holders.begin(), holders.end(), it.node) == holders.end()) {
        return Status::InvalidArgument(Describe(it) + ": scheme " + layout.scheme().ToString() +
                                       " places no replica of node " + std::to_string(it.owner) +
                                       " there");
      }
      return Status::Ok();
    }
    case ItemKind::kParity: {
      const int g = layout.group_of(it.node);
      const ProtectionGroup& grp = layout.group(g);
      if (grp.kind != GroupKind::kErasure || it.stripe < 0 || it.stripe >= grp.size() ||
          it.row < 0 || it.row >= grp.parity ||
          layout.ParityHolder(g, it.stripe, it.row) != it.node) {
        return Status::InvalidArgument(Describe(it) + ": scheme " + layout.scheme().ToString() +
                                       " places no such parity piece on that node");
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// The valid (sealed, crc_ok, on a surviving node) items of one version.
struct VersionItems {
  std::map<std::pair<int, int>, uint64_t> shard;              // (node, lane) -> bytes
  std::map<std::tuple<int, int, int>, uint64_t> replica;      // (owner, lane, holder)
  std::map<std::tuple<int, int, int, int>, uint64_t> parity;  // (lane, group, stripe, row)
};

class VersionPlanner {
 public:
  VersionPlanner(const GroupLayout& layout, int lanes, const VersionItems& items, bool in_remote)
      : layout_(layout), lanes_(lanes), items_(items), in_remote_(in_remote) {}

  // Fills `plan` for this version, or returns false with `why` naming a shard without source.
  bool Plan(RecoveryPlan* plan, std::string* why) {
    const int n = layout_.num_nodes();
    load_.assign(n, 0);
    plan->shards.clear();
    plan->decodes.clear();
    for (int node = 0; node < n; ++node) {
      for (int lane = 0; lane < lanes_; ++lane) {
        ShardSource s;
        s.node = node;
        s.lane = lane;
        auto it = items_.shard.find({node, lane});
        if (it != items_.shard.end()) {
          s.kind = SourceKind::kLocal;
          s.from_node = node;
          s.bytes = it->second;
        } else {
          s.kind = SourceKind::kRemote;  // until memory finds a source
        }
        plan->shards.push_back(s);
      }
    }
    for (int g = 0; g < static_cast<int>(layout_.groups().size()); ++g) {
      const ProtectionGroup& grp = layout_.group(g);
      for (int lane = 0; lane < lanes_; ++lane) {
        if (grp.kind == GroupKind::kReplica) PlanReplicas(grp, lane, plan);
        if (grp.kind == GroupKind::kErasure) PlanDecodes(g, lane, plan);
      }
    }
    bool any_memory = false;
    for (const ShardSource& s : plan->shards) {
      if (s.kind != SourceKind::kRemote) {
        any_memory = true;
      } else if (!in_remote_) {
        *why = "the shard of node " + std::to_string(s.node) + " lane " + std::to_string(s.lane) +
               " has no valid copy, replica or decode";
        return false;
      }
    }
    plan->memory_cannot_serve = !any_memory;
    plan->read_bytes_per_node = load_;
    plan->max_read_bytes = load_.empty() ? 0 : *std::max_element(load_.begin(), load_.end());
    AddReprotect(plan);
    return true;
  }

 private:
  ShardSource& Source(RecoveryPlan* plan, int node, int lane) {
    return plan->shards[static_cast<size_t>(node) * lanes_ + lane];
  }

  // Lost shards of a replica group, fewest valid replicas first, each from the holder that
  // leaves the least load (ties: lower node index).
  void PlanReplicas(const ProtectionGroup& grp, int lane, RecoveryPlan* plan) {
    struct Need {
      int owner;
      std::vector<std::pair<int, uint64_t>> options;  // (holder, bytes)
    };
    std::vector<Need> needs;
    for (int owner : grp.members) {
      if (Source(plan, owner, lane).kind != SourceKind::kRemote) continue;
      Need need{owner, {}};
      for (int h : layout_.ReplicaHolders(owner)) {
        auto it = items_.replica.find({owner, lane, h});
        if (it != items_.replica.end()) need.options.emplace_back(h, it->second);
      }
      if (!need.options.empty()) needs.push_back(std::move(need));
    }
    std::stable_sort(needs.begin(), needs.end(), [](const Need& a, const Need& b) {
      return a.options.size() < b.options.size();
    });
    for (const Need& need : needs) {
      int best = -1;
      for (int i = 0; i < static_cast<int>(need.options.size()); ++i) {
        const auto [h, bytes] = need.options[i];
        if (best < 0) {
          best = i;
          continue;
        }
        const auto [bh, bbytes] = need.options[best];
        const uint64_t a = load_[h] + bytes;
        const uint64_t b = load_[bh] + bbytes;
        if (a < b || (a == b && h < bh)) best = i;
      }
      const auto [h, bytes] = need.options[best];
      load_[h] += bytes;
      ShardSource& s = Source(plan, need.owner, lane);
      s.kind = SourceKind::kReplica;
      s.from_node = h;
      s.read_nodes = {h};
      s.bytes = bytes;
    }
  }

  // Lost shards of an erasure group: every stripe holding one of their pieces is decoded
  // from K' valid rows; an owner with an undecodable stripe is left to remote storage.
  void PlanDecodes(int g, int lane, RecoveryPlan* plan) {
    const ProtectionGroup& grp = layout_.group(g);
    const int size = grp.size();
    std::vector<bool> lost(size, false);
    bool any_lost = false;
    for (int p = 0; p < size; ++p) {
      lost[p] = Source(plan, grp.members[p], lane).kind == SourceKind::kRemote;
      any_lost = any_lost || lost[p];
    }
    if (!any_lost) return;
    uint64_t piece = 0;
    for (int j = 0; j < size; ++j) {
      for (int t = 0; t < grp.parity; ++t) {
        auto it = items_.parity.find({lane, g, j, t});
        if (it != items_.parity.end()) piece = std::max(piece, it->second);
      }
    }
    // Per stripe: its available rows, or nothing when fewer than K'.
    std::vector<std::vector<StripeRow>> available(size);
    std::vector<bool> decodable(size, false);
    std::vector<bool> needed(size, false);
    for (int j = 0; j < size; ++j) {
      for (int r = 0; r < grp.data; ++r) {
        const int node = layout_.DataRowNode(g, j, r);
        if (lost[layout_.position_of(node)]) {
          needed[j] = true;
          continue;
        }
        const uint64_t s = items_.shard.at({node, lane});
        const uint64_t start = piece * static_cast<uint64_t>(r);
        const uint64_t bytes = start >= s ? 0 : std::min(piece, s - start);
        available[j].push_back({node, false, r, bytes});
      }
      for (int t = 0; t < grp.parity; ++t) {
        auto it = items_.parity.find({lane, g, j, t});
        if (it != items_.parity.end()) {
          available[j].push_back({layout_.ParityHolder(g, j, t), true, t, it->second});
        }
      }
      decodable[j] = static_cast<int>(available[j].size()) >= grp.data;
    }
    std::vector<int> decode_index(size, -1);
    for (int p = 0; p < size; ++p) {
      if (!lost[p]) continue;
      const int owner = grp.members[p];
      bool ok = true;
      for (int i = 0; i < grp.data; ++i) ok = ok && decodable[layout_.StripeOfPiece(owner, i)];
      if (!ok) continue;  // stays kRemote
      ShardSource& s = Source(plan, owner, lane);
      s.kind = SourceKind::kDecode;
      std::vector<int> stripes;
      for (int i = 0; i < grp.data; ++i) stripes.push_back(layout_.StripeOfPiece(owner, i));
      std::sort(stripes.begin(), stripes.end());
      for (int j : stripes) {
        if (decode_index[j] < 0)
          decode_index[j] = ChooseRows(g, lane, j, piece, available[j], plan);
        s.decodes.push_back(decode_index[j]);
      }
    }
    // Record which rows each decode rebuilds (only those of owners being decoded), and the
    // nodes each decoded shard reads from.
    for (int p = 0; p < size; ++p) {
      const int owner = grp.members[p];
      ShardSource& s = Source(plan, owner, lane);
      if (s.kind != SourceKind::kDecode) continue;
      std::vector<int> reads;
      for (int d : s.decodes) {
        StripeDecode& dec = plan->decodes[d];
        for (int r = 0; r < grp.data; ++r) {
          if (layout_.DataRowNode(g, dec.stripe, r) == owner) {
            dec.rebuilt.push_back({owner, false, r, piece});
          }
        }
        for (const StripeRow& in : dec.inputs) reads.push_back(in.node);
      }
      std::sort(reads.begin(), reads.end());
      reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
      s.read_nodes = std::move(reads);
    }
  }

  // Picks K' rows of a stripe, each time the one that leaves the least load (ties: data rows
  // before parity, then lower node index).
  int ChooseRows(int g, int lane, int stripe, uint64_t piece, std::vector<StripeRow> rows,
                 RecoveryPlan* plan) {
    const ProtectionGroup& grp = layout_.group(g);
    StripeDecode dec;
    dec.lane = lane;
    dec.group = g;
    dec.stripe = stripe;
    dec.data_rows = grp.data;
    dec.parity_rows = grp.parity;
    dec.piece_bytes = piece;
    for (int k = 0; k < grp.data; ++k) {
      auto key = [&](const StripeRow& r) {
        return std::make_tuple(load_[r.node] + r.bytes, r.parity, r.node);
      };
      auto best = std::min_element(rows.begin(), rows.end(),
                                   [&](const auto& a, const auto& b) { return key(a) < key(b); });
      load_[best->node] += best->bytes;
      dec.inputs.push_back(*best);
      rows.erase(best);
    }
    std::sort(dec.inputs.begin(), dec.inputs.end(), [](const StripeRow& a, const StripeRow& b) {
      return std::make_tuple(a.parity, a.row) < std::make_tuple(b.parity, b.row);
    });
    plan->decodes.push_back(std::move(dec));
    return static_cast<int>(plan->decodes.size()) - 1;
  }

  // Copies and parity pieces that the placement names but that are not valid now.
  void AddReprotect(RecoveryPlan* plan) {
    plan->reprotect.clear();
    for (int g = 0; g < static_cast<int>(layout_.groups().size()); ++g) {
      const ProtectionGroup& grp = layout_.group(g);
      for (int lane = 0; lane < lanes_; ++lane) {
        if (grp.kind == GroupKind::kReplica) {
          for (int owner : grp.members) {
            for (int h : layout_.ReplicaHolders(owner)) {
              if (items_.replica.count({owner, lane, h})) continue;
              ReprotectItem r;
              r.node = h;
              r.lane = lane;
              r.kind = ItemKind::kReplica;
              r.owner = owner;
              r.bytes = Source(plan, owner, lane).bytes;
              plan->reprotect.push_back(r);
            }
          }
        } else if (grp.kind == GroupKind::kErasure) {
          uint64_t piece = 0;
          for (const auto& [key, bytes] : items_.parity) {
            if (std::get<0>(key) == lane && std::get<1>(key) == g) piece = std::max(piece, bytes);
          }
          for (int j = 0; j < grp.size(); ++j) {
            for (int t = 0; t < grp.parity; ++t) {
              if (items_.parity.count({lane, g, j, t})) continue;
              ReprotectItem r;
              r.node = layout_.ParityHolder(g, j, t);
              r.lane = lane;
              r.kind = ItemKind::kParity;
              r.group = g;
              r.stripe = j;
              r.row = t;
              r.bytes = piece;
              plan->reprotect.push_back(r);
            }
          }
        }
      }
    }
    std::stable_sort(plan->reprotect.begin(), plan->reprotect.end(),
                     [](const ReprotectItem& a, const ReprotectItem& b) {
                       return std::make_tuple(a.node, a.lane, a.kind, a.owner, a.stripe, a.row) <
                              std::make_tuple(b.node, b.lane, b.kind, b.owner, b.stripe, b.row);
                     });
  }

  const GroupLayout& layout_;
  const int lanes_;
  const VersionItems& items_;
  const bool in_remote_;
  std::vector<uint64_t> load_;
};

}  // namespace

Result<RecoveryPlan> PlanRecovery(const Topology& topology, const Scheme& scheme,
                                  const RecoveryInput& input) {
  auto built = GroupLayout::Build(topology, scheme);
  if (!built.ok()) return built.status();
  const GroupLayout layout = std::move(built).value();
  return PlanRecovery(topology, layout, input);
}

Result<RecoveryPlan> PlanRecovery(const Topology& topology, const GroupLayout& layout,
                                  const RecoveryInput& input) {
  const int n = topology.num_nodes();
  if (layout.num_nodes() != n) {
    return Status::InvalidArgument("recovery planner: layout is for " +
                                   std::to_string(layout.num_nodes()) + " nodes, topology has " +
                                   std::to_string(n));
  }
  if (!topology.uniform_ranks()) {
    return Status::InvalidArgument(
        "recovery planner: every node must run the same number of ranks (lanes)");
  }
  const int lanes = topology.ranks(0);
  std::vector<char> failed(n, 0);
  for (int f : input.failed_nodes) {
    if (f < 0 || f >= n) {
      return Status::InvalidArgument("recovery planner: failed node " + std::to_string(f) +
                                     " out of range 0.." + std::to_string(n - 1));
    }
    failed[f] = 1;
  }
  if (input.new_num_nodes != n) {
    return Status::ElasticRestoreNeeded("elastic restore needed: the checkpoint was taken on " +
                                        std::to_string(n) + " nodes and the job now runs on " +
                                        std::to_string(input.new_num_nodes) +
                                        " (replacement nodes must take the failed nodes' places)");
  }
  std::map<uint64_t, VersionItems> by_version;
  std::set<uint64_t> candidates(input.remote_versions.begin(), input.remote_versions.end());
  for (const InventoryItem& it : input.inventory) {
    if (Status valid = ValidateItem(layout, lanes, it); !valid.ok()) return valid;
    candidates.insert(it.version);
    if (!it.sealed || !it.crc_ok || failed[it.node]) continue;
    VersionItems& v = by_version[it.version];
    switch (it.kind) {
      case ItemKind::kShard:
        v.shard.emplace(std::make_pair(it.node, it.lane), it.bytes);
        break;
      case ItemKind::kReplica:
        v.replica.emplace(std::make_tuple(it.owner, it.lane, it.node), it.bytes);
        break;
      case ItemKind::kParity:
        v.parity.emplace(std::make_tuple(it.lane, layout.group_of(it.node), it.stripe, it.row),
                         it.bytes);
        break;
    }
  }
  RecoveryPlan plan;
  plan.scheme = layout.scheme().ToString();
  plan.num_nodes = n;
  plan.lanes = lanes;
  for (int i = 0; i < n; ++i) {
    if (failed[i]) plan.failed_nodes.push_back(i);
  }
  const VersionItems empty;
  std::string first_why;
  for (auto v = candidates.rbegin(); v != candidates.rend(); ++v) {
    auto items = by_version.find(*v);
    VersionPlanner planner(layout, lanes, items == by_version.end() ? empty : items->second,
                           input.remote_versions.count(*v) > 0);
    std::string why;
    if (planner.Plan(&plan, &why)) {
      plan.version = *v;
      return plan;
    }
    if (first_why.empty()) first_why = "newest version " + std::to_string(*v) + ": " + why;
    plan.skipped_versions.push_back(*v);
  }
  if (candidates.empty()) first_why = "no version in memory or remote storage";
  return Status::Unrecoverable("nothing restorable: no version can be rebuilt for every rank (" +
                               first_why + ")");
}

}  // namespace memento::placement
