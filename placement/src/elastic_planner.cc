#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "memento/common/check.h"
#include "memento/placement/elastic_plan.h"

namespace memento::placement {
namespace {

using Shape = std::vector<int64_t>;

int64_t Volume(const Shape& shape) {
  int64_t v = 1;
  for (int64_t x : shape) v *= x;
  return v;
}

std::string Dims(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Quote(const std::string& name) { return "'" + name + "'"; }

// The overlap box of two slices of one tensor; nullopt when empty.
std::optional<std::pair<Shape, Shape>> Overlap(const TensorSlice& a, const TensorSlice& b) {
  Shape off(a.shape.size()), ext(a.shape.size());
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.shape[d], b.offsets[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    off[d] = lo;
    ext[d] = hi - lo;
  }
  return std::make_pair(off, ext);
}

Status CheckSlice(const std::string& what, const TensorSlice& s) {
  const size_t rank = s.global_shape.size();
  if (s.shape.size() != rank || s.offsets.size() != rank) {
    return Status::InvalidArgument(what + ": global shape " + Dims(s.global_shape) + ", shape " +
                                   Dims(s.shape) + " and offsets " + Dims(s.offsets) +
                                   " differ in length");
  }
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (s.global_shape[d] < 0 || __builtin_mul_overflow(elements, s.global_shape[d], &elements)) {
      return Status::InvalidArgument(what + ": global shape " + Dims(s.global_shape) +
                                     " has more than 2^63 elements, or a negative dimension");
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    // Both sides of the comparison are >= 0 and <= the global extent: no overflow.
    if (s.shape[d] < 0 || s.offsets[d] < 0 || s.shape[d] > s.global_shape[d] ||
        s.offsets[d] > s.global_shape[d] - s.shape[d]) {
      return Status::InvalidArgument(what + ": slice " + Dims(s.offsets) + "+" + Dims(s.shape) +
                                     " does not fit global shape " + Dims(s.global_shape));
    }
  }
  return Status::Ok();
}

// One (rank, entry) holding a slice.
struct Copy {
  int rank = -1;  // node-major index into old_ranks / new_ranks
  int entry = -1;
};

// A distinct slice of one tensor and the ranks that hold it.
struct Distinct {
  TensorSlice slice;
  std::vector<Copy> copies;
};

// Everything known about one tensor name on one side (old or new).
struct Tensor {
  TensorSlice first;  // dtype and global shape
  uint64_t elem = 0;
  bool opaque = false;
  std::vector<Distinct> slices;
};

// Collects one side's entries by name, checking each against the first of its name.
Result<std::map<std::string, Tensor>> Collect(const std::vector<RankCatalog>& ranks,
                                              const std::string& side) {
  std::map<std::string, Tensor> out;
  for (size_t k = 0; k < ranks.size(); ++k) {
    for (size_t e = 0; e < ranks[k].entries.size(); ++e) {
      const CatalogEntry& ce = ranks[k].entries[e];
      const std::string what = side + " entry " + Quote(ce.name) + " of node " +
                               std::to_string(ranks[k].node) + " lane " +
                               std::to_string(ranks[k].lane);
      auto [it, fresh] = out.try_emplace(ce.name);
      Tensor& t = it->second;
      if (fresh) {
        t.first = ce.slice;
        t.opaque = ce.slice.opaque();
      } else if (t.opaque != ce.slice.opaque()) {
        return Status::InvalidArgument(what + ": opaque on some ranks and a tensor on others");
      }
      const Copy copy{static_cast<int>(k), static_cast<int>(e)};
      if (t.opaque) {
        t.slices.push_back({ce.slice, {copy}});
        continue;
      }
      MEMENTO_RETURN_IF_ERROR(CheckSlice(what, ce.slice));
      MEMENTO_ASSIGN_OR_RETURN(uint64_t elem, ElementBytes(what, ce.slice, ce.bytes));
      const bool empty = Volume(ce.slice.shape) == 0;  // fits any element size
      if (!fresh && (ce.slice.dtype != t.first.dtype ||
                     ce.slice.global_shape != t.first.global_shape ||
                     (!empty && t.elem != 0 && elem != t.elem))) {
        return Status::InvalidArgument(
            what + ": dtype " + ce.slice.dtype + ", global shape " + Dims(ce.slice.global_shape) +
            ", " + std::to_string(elem) + " bytes per element differ from the " + side +
            " job's other slices of it (" + t.first.dtype + ", " + Dims(t.first.global_shape) +
            ", " + std::to_string(t.elem) + ")");
      }
      if (!empty) t.elem = elem;
      auto same = std::find_if(t.slices.begin(), t.slices.end(),
                               [&](const Distinct& d) { return d.slice == ce.slice; });
      if (same == t.slices.end()) {
        t.slices.push_back({ce.slice, {copy}});
      } else {
        same->copies.push_back(copy);
      }
    }
  }
  return out;
}

// The distinct slices of a tensor are pairwise disjoint and cover it.
Status CheckTiles(const std::string& name, const Tensor& t, const std::string& side) {
  int64_t covered = 0;
  for (size_t i = 0; i < t.slices.size(); ++i) {
    covered += Volume(t.slices[i].slice.shape);
    for (size_t j = i + 1; j < t.slices.size(); ++j) {
      if (Volume(t.slices[i].slice.shape) == 0 || Volume(t.slices[j].slice.shape) == 0) continue;
      if (Overlap(t.slices[i].slice, t.slices[j].slice)) {
        const TensorSlice& a = t.slices[i].slice;
        const TensorSlice& b = t.slices[j].slice;
        return Status::InvalidArgument(
            side + " slices of " + Quote(name) + " do not tile the global tensor: " +
            Dims(a.offsets) + "+" + Dims(a.shape) + " and " + Dims(b.offsets) + "+" +
            Dims(b.shape) + " overlap");
      }
    }
  }
  if (covered != Volume(t.first.global_shape)) {
    return Status::InvalidArgument(side + " slices of " + Quote(name) +
                                   " do not tile the global tensor " +
                                   Dims(t.first.global_shape) + ": they cover " +
                                   std::to_string(covered) + " of " +
                                   std::to_string(Volume(t.first.global_shape)) + " elements");
  }
  return Status::Ok();
}

Status CheckRanks(const std::vector<RankCatalog>& ranks, int nodes, int lanes,
                  const std::string& side) {
  if (nodes <= 0 || lanes <= 0 || ranks.size() != static_cast<size_t>(nodes) * lanes) {
    return Status::InvalidArgument(side + " job: " + std::to_string(ranks.size()) +
                                   " rank catalogs for " + std::to_string(nodes) + " nodes x " +
                                   std::to_string(lanes) + " lanes");
  }
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (ranks[k].node != static_cast<int>(k) / lanes || ranks[k].lane != static_cast<int>(k) % lanes) {
      return Status::InvalidArgument(side + " rank catalogs are not in node-major order at " +
                                     std::to_string(k));
    }
  }
  return Status::Ok();
}

// Where one old shard's bytes can be read.
struct OldSource {
  PieceSource kind = PieceSource::kRemote;
  int node = -1;  // new node (kShard, kReplica); decode host once chosen
  int lane = 0;
};

class Planner {
 public:
  explicit Planner(const ElasticInput& in) : in_(in) {}

  Result<ElasticPlan> Run() {
    MEMENTO_RETURN_IF_ERROR(CheckRanks(in_.old_ranks, in_.old_nodes, in_.old_lanes, "old"));
    MEMENTO_RETURN_IF_ERROR(CheckRanks(in_.new_ranks, in_.new_nodes, in_.new_lanes, "new"));
    if (in_.old_node_of_new.size() != static_cast<size_t>(in_.new_nodes)) {
      return Status::InvalidArgument("old_node_of_new has " +
                                     std::to_string(in_.old_node_of_new.size()) + " nodes, the new job " +
                                     std::to_string(in_.new_nodes));
    }
    MEMENTO_RETURN_IF_ERROR(LocateOldShards());
    MEMENTO_ASSIGN_OR_RETURN(old_, Collect(in_.old_ranks, "old"));
    MEMENTO_ASSIGN_OR_RETURN(auto fresh, Collect(in_.new_ranks, "new"));
    for (const auto& [name, t] : old_) {
      if (!t.opaque) MEMENTO_RETURN_IF_ERROR(CheckTiles(name, t, "the checkpoint's"));
    }
    for (const auto& [name, t] : fresh) MEMENTO_RETURN_IF_ERROR(CheckAgainstOld(name, t));
    // The old stores go once the new topology commits: what the new job does
    // not take would be lost without a word (a plain restore refuses it too).
    for (const auto& [name, t] : old_) {
      if (!fresh.count(name)) {
        return Status::InvalidArgument("entry " + Quote(name) +
                                       " is in the checkpoint but not registered: an elastic "
                                       "restore would drop it (register it as the job that "
                                       "saved did)");
      }
    }

    plan_.version = in_.old_plan.version;
    const size_t n = in_.new_nodes;
    plan_.served_bytes_per_node.assign(n, 0);
    plan_.received_bytes_per_node.assign(n, 0);
    plan_.remote_bytes_per_node.assign(n, 0);
    plan_.minimum_bytes_per_node.assign(n, 0);
    for (const RankCatalog& rc : in_.new_ranks) {
      ElasticTarget target{rc.node, rc.lane, {}};
      for (const CatalogEntry& ce : rc.entries) {
        MEMENTO_ASSIGN_OR_RETURN(auto pieces, PiecesOf(rc, ce));
        target.pieces.push_back(std::move(pieces));
      }
      plan_.targets.push_back(std::move(target));
    }
    ChooseDecodeHosts();
    Account();
    return std::move(plan_);
  }

 private:
  int NewNodeOf(int old_node) const {
    for (int j = 0; j < in_.new_nodes; ++j) {
      if (in_.old_node_of_new[j] == old_node) return j;
    }
    return -1;
  }

  Status LocateOldShards() {
    const RecoveryPlan& p = in_.old_plan;
    if (p.num_nodes != in_.old_nodes || p.lanes != in_.old_lanes ||
        p.shards.size() != in_.old_ranks.size()) {
      return Status::InvalidArgument("the old plan is for " + std::to_string(p.num_nodes) + "x" +
                                     std::to_string(p.lanes) + " ranks, the catalog for " +
                                     std::to_string(in_.old_nodes) + "x" +
                                     std::to_string(in_.old_lanes));
    }
    sources_.resize(p.shards.size());
    for (const ShardSource& s : p.shards) {
      const size_t k = static_cast<size_t>(s.node) * in_.old_lanes + s.lane;
      if (k >= sources_.size()) return Status::InvalidArgument("old plan names a shard out of range");
      OldSource& src = sources_[k];
      src.lane = ServingLane(s.lane, in_.new_lanes);
      switch (s.kind) {
        case SourceKind::kLocal:
        case SourceKind::kReplica: {
          const int at = s.kind == SourceKind::kLocal ? s.node : s.from_node;
          src.kind = s.kind == SourceKind::kLocal ? PieceSource::kShard : PieceSource::kReplica;
          src.node = NewNodeOf(at);
          if (src.node < 0) {
            return Status::InvalidArgument("old node " + std::to_string(at) +
                                           " serves a shard in the old plan but is not in the new job");
          }
          break;
        }
        case SourceKind::kDecode:
          src.kind = PieceSource::kDecoded;
          break;
        case SourceKind::kRemote:
          src.kind = PieceSource::kRemote;
          break;
      }
    }
    return Status::Ok();
  }

  Status CheckAgainstOld(const std::string& name, const Tensor& t) const {
    auto it = old_.find(name);
    if (it == old_.end()) {
      return Status::InvalidArgument("entry " + Quote(name) + " is not in the checkpoint");
    }
    const Tensor& o = it->second;
    if (t.opaque != o.opaque) {
      return Status::InvalidArgument("entry " + Quote(name) + (o.opaque ? " was" : " was not") +
                                     " opaque in the checkpoint and " +
                                     (t.opaque ? "is" : "is not") + " now");
    }
    if (t.opaque) {
      if (in_.new_ranks.size() != in_.old_ranks.size()) {
        return Status::InvalidArgument(
            "entry " + Quote(name) + " has no tensor layout (opaque bytes): it restores only onto " +
            std::to_string(in_.old_ranks.size()) + " ranks, not " +
            std::to_string(in_.new_ranks.size()) + "; register it with its global shape and slice");
      }
      return Status::Ok();
    }
    if (t.first.dtype != o.first.dtype || t.first.global_shape != o.first.global_shape) {
      return Status::InvalidArgument("entry " + Quote(name) + ": dtype " + t.first.dtype +
                                     " and global shape " + Dims(t.first.global_shape) +
                                     " differ from the checkpoint's (" + o.first.dtype + ", " +
                                     Dims(o.first.global_shape) + ")");
    }
    if (t.elem != 0 && o.elem != 0 && t.elem != o.elem) {
      return Status::InvalidArgument("entry " + Quote(name) + ": " + std::to_string(t.elem) +
                                     " bytes per element, the checkpoint has " +
                                     std::to_string(o.elem));
    }
    return CheckTiles(name, t, "new");
  }

  // The pieces of one new entry.
  Result<std::vector<ElasticPiece>> PiecesOf(const RankCatalog& rc, const CatalogEntry& ce) {
    const Tensor& o = old_.at(ce.name);
    std::vector<ElasticPiece> out;
    if (o.opaque) {
      const size_t k = static_cast<size_t>(rc.node) * in_.new_lanes + rc.lane;
      const RankCatalog& old_rank = in_.old_ranks.at(k);
      for (size_t e = 0; e < old_rank.entries.size(); ++e) {
        if (old_rank.entries[e].name != ce.name) continue;
        if (old_rank.entries[e].bytes != ce.bytes) {
          return Status::InvalidArgument("opaque entry " + Quote(ce.name) + " of new rank " +
                                         std::to_string(k) + " has " + std::to_string(ce.bytes) +
                                         " bytes, the checkpoint's " +
                                         std::to_string(old_rank.entries[e].bytes));
        }
        ElasticPiece p =
            Choose(rc.node, rc.lane, {{static_cast<int>(k), static_cast<int>(e)}}, ce.bytes);
        out.push_back(std::move(p));
        return out;
      }
      return Status::InvalidArgument("opaque entry " + Quote(ce.name) + " is not on old rank " +
                                     std::to_string(k) + " (node-major), which new rank " +
                                     std::to_string(k) + " restores from");
    }
    for (const Distinct& d : o.slices) {
      auto box = Overlap(d.slice, ce.slice);
      if (!box) continue;
      const uint64_t bytes = static_cast<uint64_t>(Volume(box->second)) * o.elem;
      if (bytes == 0) continue;
      ElasticPiece p = Choose(rc.node, rc.lane, d.copies, bytes);
      p.offsets = box->first;
      p.shape = box->second;
      out.push_back(std::move(p));
    }
    return out;
  }

  // Picks the copy a piece is read from (the rules in the header) for the new
  // rank (node, lane).
  ElasticPiece Choose(int node, int lane, const std::vector<Copy>& copies, uint64_t bytes) {
    const Copy* best = nullptr;
    // 0 the own shard of the old rank at this node and lane, 1 another copy on
    // the own node, 2 a peer's memory, 3 decode, 4 remote.
    int best_rank = 5;
    for (const Copy& c : copies) {
      const OldSource& src = sources_[c.rank];
      int r = 4;
      if (src.kind == PieceSource::kShard || src.kind == PieceSource::kReplica) {
        r = src.node != node ? 2
            : src.kind == PieceSource::kShard && in_.old_ranks[c.rank].lane == lane ? 0
                                                                                     : 1;
      } else if (src.kind == PieceSource::kDecoded) {
        r = 3;
      }
      const bool better =
          r < best_rank ||
          (r == 2 && best_rank == 2 &&
           plan_.served_bytes_per_node[src.node] < plan_.served_bytes_per_node[sources_[best->rank].node]);
      if (better) {
        best = &c;
        best_rank = r;
      }
    }
    const OldSource& src = sources_[best->rank];
    if (best_rank == 2) plan_.served_bytes_per_node[src.node] += bytes;
    ElasticPiece p;
    p.old_node = in_.old_ranks[best->rank].node;
    p.old_lane = in_.old_ranks[best->rank].lane;
    p.old_entry = best->entry;
    p.bytes = bytes;
    p.source = src.kind;
    p.serve_node = best_rank <= 2 ? src.node : -1;
    p.serve_lane = best_rank <= 2 ? src.lane : 0;
    bool on_node = false;
    for (const Copy& c : copies) {
      const OldSource& s = sources_[c.rank];
      on_node = on_node || ((s.kind == PieceSource::kShard || s.kind == PieceSource::kReplica) &&
                            s.node == node);
    }
    if (!on_node) plan_.minimum_bytes_per_node[node] += bytes;
    return p;
  }

  // Every old shard some piece reads decoded gets one host: the new rank that reads the
  // most of it (ties: the node hosting fewest decodes, then the lower node and lane).
  void ChooseDecodeHosts() {
    std::map<int, std::map<std::pair<int, int>, uint64_t>> need;  // old rank -> new rank -> bytes
    for (const ElasticTarget& t : plan_.targets) {
      for (const auto& pieces : t.pieces) {
        for (const ElasticPiece& p : pieces) {
          if (p.source != PieceSource::kDecoded) continue;
          need[p.old_node * in_.old_lanes + p.old_lane][{t.node, t.lane}] += p.bytes;
        }
      }
    }
    std::vector<int> hosted(in_.new_nodes, 0);
    for (const auto& [old_rank, by_new] : need) {
      std::pair<int, int> host{-1, -1};
      uint64_t most = 0;
      for (const auto& [who, bytes] : by_new) {
        if (host.first < 0 || bytes > most ||
            (bytes == most && hosted[who.first] < hosted[host.first])) {
          host = who;
          most = bytes;
        }
      }
      ++hosted[host.first];
      OldSource& src = sources_[old_rank];
      src.node = host.first;
      src.lane = host.second;
      plan_.decode_hosts.push_back(
          {old_rank / in_.old_lanes, old_rank % in_.old_lanes, host.first, host.second});
    }
    for (ElasticTarget& t : plan_.targets) {
      for (auto& pieces : t.pieces) {
        for (ElasticPiece& p : pieces) {
          if (p.source != PieceSource::kDecoded) continue;
          const OldSource& src = sources_[p.old_node * in_.old_lanes + p.old_lane];
          p.serve_node = src.node;
          p.serve_lane = src.lane;
          if (src.node != t.node) plan_.served_bytes_per_node[src.node] += p.bytes;
        }
      }
    }
  }

  void Account() {
    for (const ElasticTarget& t : plan_.targets) {
      for (const auto& pieces : t.pieces) {
        for (const ElasticPiece& p : pieces) {
          if (p.source == PieceSource::kRemote) {
            plan_.remote_bytes_per_node[t.node] += p.bytes;
          } else if (p.serve_node != t.node) {
            plan_.received_bytes_per_node[t.node] += p.bytes;
          }
        }
      }
    }
    plan_.max_served_bytes = 0;
    for (uint64_t b : plan_.served_bytes_per_node) {
      plan_.max_served_bytes = std::max(plan_.max_served_bytes, b);
    }
  }

  const ElasticInput& in_;
  std::vector<OldSource> sources_;  // per old rank (node-major)
  std::map<std::string, Tensor> old_;
  ElasticPlan plan_;
};

}  // namespace

const char* PieceSourceName(PieceSource source) {
  switch (source) {
    case PieceSource::kShard:
      return "shard";
    case PieceSource::kReplica:
      return "replica";
    case PieceSource::kDecoded:
      return "decoded";
    case PieceSource::kRemote:
      return "remote";
  }
  return "?";
}

Result<uint64_t> ElementBytes(const std::string& name, const TensorSlice& slice, uint64_t bytes) {
  const int64_t elements = Volume(slice.shape);
  if (elements == 0) {
    if (bytes != 0) {
      return Status::InvalidArgument(name + ": an empty slice of " + std::to_string(bytes) +
                                     " bytes");
    }
    return 0;  // any: an empty slice contributes nothing
  }
  if (bytes == 0 || bytes % static_cast<uint64_t>(elements) != 0) {
    return Status::InvalidArgument(name + ": " + std::to_string(bytes) + " bytes for a slice of " +
                                   std::to_string(elements) + " elements " + Dims(slice.shape));
  }
  return bytes / static_cast<uint64_t>(elements);
}

Result<ElasticPlan> PlanElastic(const ElasticInput& input) { return Planner(input).Run(); }

std::string ElasticPlan::Summary() const {
  size_t counts[4] = {0, 0, 0, 0};
  size_t pieces = 0;
  for (const ElasticTarget& t : targets) {
    for (const auto& ps : t.pieces) {
      for (const ElasticPiece& p : ps) {
        ++counts[static_cast<int>(p.source)];
        ++pieces;
      }
    }
  }
  return "version " + std::to_string(version) + " onto " + std::to_string(targets.size()) +
         " ranks: " + std::to_string(pieces) + " pieces (" + std::to_string(counts[0]) +
         " shard, " + std::to_string(counts[1]) + " replica, " + std::to_string(counts[2]) +
         " decoded, " + std::to_string(counts[3]) + " remote), " +
         std::to_string(decode_hosts.size()) + " decoded shards; busiest node serves " +
         std::to_string(max_served_bytes) + " B";
}

void ForEachRun(const TensorSlice& src, const TensorSlice& dst, const std::vector<int64_t>& box_offsets,
                const std::vector<int64_t>& box_shape, uint64_t elem, uint64_t opaque_bytes,
                const std::function<void(uint64_t, uint64_t, uint64_t)>& fn) {
  if (src.opaque() || box_shape.empty()) {
    if (opaque_bytes > 0) fn(0, 0, opaque_bytes);
    return;
  }
  const int rank = static_cast<int>(box_shape.size());
  for (int64_t x : box_shape) {
    if (x == 0) return;
  }
  // Trailing dimensions the box spans whole in both slices merge into one run.
  int k = rank - 1;
  uint64_t run = static_cast<uint64_t>(box_shape[k]);
  while (k > 0 && box_shape[k] == src.shape[k] && box_shape[k] == dst.shape[k]) {
    --k;
    run *= static_cast<uint64_t>(box_shape[k]);
  }
  std::vector<uint64_t> sstride(rank, 1), dstride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    sstride[d] = sstride[d + 1] * static_cast<uint64_t>(src.shape[d + 1]);
    dstride[d] = dstride[d + 1] * static_cast<uint64_t>(dst.shape[d + 1]);
  }
  std::vector<int64_t> idx(k, 0);  // odometer over the outer dimensions 0..k-1
  for (;;) {
    uint64_t so = 0, d_o = 0;
    for (int d = 0; d < rank; ++d) {
      const int64_t at = box_offsets[d] + (d < k ? idx[d] : 0);
      so += static_cast<uint64_t>(at - src.offsets[d]) * sstride[d];
      d_o += static_cast<uint64_t>(at - dst.offsets[d]) * dstride[d];
    }
    fn(so * elem, d_o * elem, run * elem);
    int d = k - 1;
    while (d >= 0 && ++idx[d] == box_shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace memento::placement
