#include "recovery/elastic_restorer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/placement/topology.h"
#include "memento/runtime/log.h"
#include "protect/reduce_chain.h"
#include "recovery/inventory.h"
#include "recovery/partial_decode.h"
#include "recovery/report_text.h"
#include "recovery/shard_io.h"

namespace memento::runtime {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string ElasticRestorer::OldRankName(int node, int lane) {
  return "old rank (node " + std::to_string(node) + ", lane " + std::to_string(lane) + ")";
}

ElasticRestorer::ElasticRestorer(Parts parts) : parts_(std::move(parts)), pl_(*parts_.layout) {}

Status ElasticRestorer::RunHook(Stage stage, uint64_t version) const {
  if (!parts_.hook) return Status::Ok();
  return parts_.hook(stage, version);
}

Result<RestoreReport> ElasticRestorer::Run() {
  report_.elastic = true;
  auto t0 = Clock::now();
  MEMENTO_RETURN_IF_ERROR(OpenAside());
  MEMENTO_RETURN_IF_ERROR(TakeInventory());
  report_.stats.inventory_s = SecondsSince(t0);
  MEMENTO_ASSIGN_OR_RETURN(auto plans, PlanVerified());
  plan_ = std::move(plans.first);
  eplan_ = std::move(plans.second);
  report_.plan_json = plan_.ToJson();
  report_.elastic_plan = eplan_.Summary();
  MEMENTO_RETURN_IF_ERROR(RunHook(Stage::kRecover, plan_.version));
  t0 = Clock::now();
  Status local = GatherSeals();
  // Every rank takes part in every exchange, whatever failed before.
  Status decoded = RunDecodes();
  if (local.ok()) local = decoded.WithContext("elastic restore: decode");
  Status moved = MovePieces();
  if (local.ok()) local = moved;
  MEMENTO_RETURN_IF_ERROR(Finish(local));
  report_.stats.transfer_s = SecondsSince(t0);
  report_.version = plan_.version;
  *parts_.lineage = lineage_;
  Log(LogLevel::kInfo, "elastic restore: " + report_.elastic_plan + " [sent " +
                           std::to_string(sent_) + " B, received " + std::to_string(received_) +
                           " B]");
  return std::move(report_);
}

// ---- 1-3. inventory, plan, verify: elastic_inventory.cc -------------------------------------

// ---- 4. decode -----------------------------------------------------------------------------

Status ElasticRestorer::GatherSeals() {
  if (eplan_.decode_hosts.empty()) return Status::Ok();
  std::vector<uint8_t> mine;
  for (const auto& s : mine_) {
    auto slot = s->store.FindVersion(plan_.version, lineage_);
    if (!slot || !s->layout->protects()) continue;
    AppendHeldSeals(s->store, *slot, *s->layout, s->lane, &mine);
  }
  MEMENTO_ASSIGN_OR_RETURN(seals_of_, ExchangeSeals(parts_.transport, mine));
  return Status::Ok();
}

Status ElasticRestorer::RunDecodes() {
  if (eplan_.decode_hosts.empty()) return Status::Ok();
  const int me = parts_.transport->rank();
  std::vector<ReduceChain> all_chains, chains;
  std::vector<DecodeChainInfo> all_info, info;
  MEMENTO_RETURN_IF_ERROR(BuildDecodeChains(plan_, *old_pl_, &all_chains, &all_info));
  for (size_t c = 0; c < all_chains.size(); ++c) {
    const placement::StripeDecode& dec = plan_.decodes[all_info[c].decode];
    const placement::StripeRow& rb = dec.rebuilt[all_info[c].rebuilt];
    const placement::DecodeHost* host = nullptr;
    for (const auto& h : eplan_.decode_hosts) {
      if (h.old_node == rb.node && h.old_lane == dec.lane) host = &h;
    }
    if (host == nullptr) continue;  // no new slice needs this shard
    ReduceChain chain = all_chains[c];
    chain.dst_rank = NewRank(host->node, host->lane);
    for (ReduceTerm& t : chain.terms) {
      const int server = Old(t.rank / old_lanes_, t.rank % old_lanes_).server;
      if (server < 0) return Status::Internal("a decode input has no serving rank");
      t.rank = server;
    }
    // A host that holds an input folds it in last and hands the row to itself.
    auto at = std::find_if(chain.terms.begin(), chain.terms.end(),
                           [&](const ReduceTerm& t) { return t.rank == chain.dst_rank; });
    if (at != chain.terms.end()) std::rotate(at, at + 1, chain.terms.end());
    chains.push_back(std::move(chain));
    info.push_back(all_info[c]);
  }
  // The entry sizes of every old shard this rank reads data rows of.
  std::map<std::pair<int, int>, std::vector<uint64_t>> entry_bytes;
  for (const auto& s : mine_) {
    for (const auto& e : Old(s->node, s->lane).catalog.entries) {
      entry_bytes[{s->node, s->lane}].push_back(e.bytes);
    }
  }
  auto reader = [&](int c, const ReduceTerm& term, uint64_t off, uint64_t len,
                    uint8_t* dst) -> Status {
    const placement::StripeDecode& dec = plan_.decodes[info[c].decode];
    const placement::StripeRow& in = dec.inputs[term.row_id];
    OldStore* s = StoreOf(in.node, dec.lane);
    if (s == nullptr) return Status::Internal("decode input not on this rank");
    auto slot = s->store.FindVersion(plan_.version, lineage_);
    if (!slot) return Status::NotFound(VersionText(plan_.version) + " not in " + s->name);
    if (!in.parity) {
      return ReadShardRange(s->store, *slot, entry_bytes.at({in.node, dec.lane}),
                            static_cast<uint64_t>(in.row) * dec.piece_bytes + off, len, dst);
    }
    const int region = s->layout->ParityRegion(dec.stripe, in.row);
    if (region < 0) return Status::Internal("no parity region for the plan's row");
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, s->store.ReadRegion(*slot, region));
    if (off + len > view.length) return Status::Corruption("parity region too short");
    std::memcpy(dst, view.data + off, len);
    return Status::Ok();
  };
  std::vector<std::vector<uint8_t>> rows;
  ReduceBytes bytes;
  Status s =
      RunReduceChains(parts_.transport, chains, 0, parts_.chunk_bytes, reader, &rows, &bytes);
  sent_ += bytes.sent;
  received_ += bytes.received;
  MEMENTO_RETURN_IF_ERROR(s);
  for (size_t c = 0; c < chains.size(); ++c) {
    if (chains[c].dst_rank != me) continue;
    const placement::StripeDecode& dec = plan_.decodes[info[c].decode];
    const placement::StripeRow& rb = dec.rebuilt[info[c].rebuilt];
    std::vector<uint8_t>& shard = decoded_[{rb.node, dec.lane}];
    shard.resize(old_pl_->shard_bytes(rb.node, dec.lane));
    const uint64_t at = static_cast<uint64_t>(rb.row) * dec.piece_bytes;
    MEMENTO_CHECK_LE(at + rows[c].size(), shard.size());
    std::memcpy(shard.data() + at, rows[c].data(), rows[c].size());
  }
  // End to end: every decoded shard against its owner's entry seals.
  for (const auto& [key, shard] : decoded_) {
    auto it = seals_of_.find(key);
    if (it == seals_of_.end()) {
      return Status::Corruption("no entry seals of " + OldRankName(key.first, key.second) +
                                " survive: cannot check its decoded shard");
    }
    const placement::RankCatalog& rc = Old(key.first, key.second).catalog;
    std::vector<uint64_t> sizes;
    std::vector<std::string> names;
    for (const auto& e : rc.entries) {
      sizes.push_back(e.bytes);
      names.push_back(e.name);
    }
    MEMENTO_RETURN_IF_ERROR(VerifyShardAgainstSeals(shard, sizes, names, it->second)
                                .WithContext("decoded " + OldRankName(key.first, key.second)));
  }
  return Status::Ok();
}

// ---- 5. pieces -----------------------------------------------------------------------------

uint64_t ElasticRestorer::EntryOffset(int node, int lane, int entry) const {
  uint64_t at = 0;
  const auto& entries = Old(node, lane).catalog.entries;
  for (int i = 0; i < entry; ++i) at += entries.at(i).bytes;
  return at;
}

Result<const uint8_t*> ElasticRestorer::SourceOf(const placement::ElasticPiece& p) {
  const std::string who = OldRankName(p.old_node, p.old_lane);
  switch (p.source) {
    case placement::PieceSource::kShard:
    case placement::PieceSource::kReplica: {
      const bool shard = p.source == placement::PieceSource::kShard;
      const int holder = shard ? p.old_node : old_node_of_new_.at(p.serve_node);
      OldStore* s = StoreOf(holder, p.old_lane);
      if (s == nullptr) return Status::Internal("the store holding " + who + " is not here");
      auto slot = s->store.FindVersion(plan_.version, lineage_);
      if (!slot) return Status::NotFound(VersionText(plan_.version) + " vanished from " + s->name);
      const int region = shard ? p.old_entry : s->layout->ReplicaRegion(p.old_node);
      if (region < 0) return Status::Internal("no replica region of " + who + " in " + s->name);
      MEMENTO_ASSIGN_OR_RETURN(RegionView view, s->store.ReadRegion(*slot, region));
      const uint64_t at = shard ? 0 : EntryOffset(p.old_node, p.old_lane, p.old_entry);
      const uint64_t need = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry).bytes;
      if (at + need > view.length) return Status::Corruption(s->name + ": region too short");
      return view.data + at;
    }
    case placement::PieceSource::kDecoded: {
      auto it = decoded_.find({p.old_node, p.old_lane});
      if (it == decoded_.end()) return Status::Internal(who + " was not decoded here");
      return it->second.data() + EntryOffset(p.old_node, p.old_lane, p.old_entry);
    }
    case placement::PieceSource::kRemote:
      break;
  }
  return Status::Internal("remote pieces are read by their target");
}

namespace {

// Calls fn(src_offset, dst_offset, length) for each run of piece `p` between
// its old slice `src` and the new slice `dst` of `bytes` bytes.
void RunsOf(const placement::ElasticPiece& p, const placement::CatalogEntry& src,
            const placement::CatalogEntry& dst,
            const std::function<void(uint64_t, uint64_t, uint64_t)>& fn) {
  uint64_t elem = 0;
  if (!dst.slice.opaque()) {
    auto e = placement::ElementBytes(dst.name, dst.slice, dst.bytes);
    elem = e.ok() ? *e : 0;
  }
  placement::ForEachRun(src.slice, dst.slice, p.offsets, p.shape, elem, dst.bytes, fn);
}

}  // namespace

Status ElasticRestorer::MovePieces() {
  const int me = parts_.transport->rank();
  const std::vector<RegisteredEntry>& entries = *parts_.entries;
  staging_.assign(entries.size(), {});
  dst_.assign(entries.size(), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].device()) {
      staging_[i].resize(entries[i].bytes);
      dst_[i] = staging_[i].data();
    } else {
      dst_[i] = entries[i].data;
    }
  }
  // Who serves each piece.
  std::map<std::pair<int, int>, int> host_rank;
  for (const auto& h : eplan_.decode_hosts)
    host_rank[{h.old_node, h.old_lane}] = NewRank(h.node, h.lane);
  pieces_.clear();
  for (const placement::ElasticTarget& t : eplan_.targets) {
    const int target = NewRank(t.node, t.lane);
    for (size_t e = 0; e < t.pieces.size(); ++e) {
      for (const placement::ElasticPiece& p : t.pieces[e]) {
        PieceRef ref{target, static_cast<int>(e), &p, target,
                     static_cast<size_t>(t.node) * pl_.lanes() + t.lane};
        if (p.source == placement::PieceSource::kDecoded) {
          ref.server = host_rank.at({p.old_node, p.old_lane});
        } else if (p.source != placement::PieceSource::kRemote && p.serve_node != t.node) {
          ref.server = NewRank(p.serve_node, p.serve_lane);
        }
        pieces_.push_back(ref);
      }
    }
  }
  std::map<int, std::vector<int>> outgoing, incoming;  // peer -> piece indices, in plan order
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const PieceRef& r = pieces_[i];
    if (r.server == r.target) continue;
    if (r.server == me) outgoing[r.target].push_back(static_cast<int>(i));
    if (r.target == me) incoming[r.server].push_back(static_cast<int>(i));
  }
  std::vector<std::thread> senders;
  std::vector<Status> send_status(outgoing.size());
  size_t k = 0;
  for (const auto& [to, list] : outgoing) {
    senders.emplace_back(
        [this, &send_status, k, to = to, &list = list] { send_status[k] = SendStream(to, list); });
    ++k;
  }
  Status got = CopyLocalAndRemote();
  for (const auto& [from, list] : incoming) {
    Status s = ReceiveStream(from, list);
    if (got.ok() && !s.ok()) got = s;
  }
  for (auto& th : senders) th.join();
  for (const Status& s : send_status) {
    if (got.ok() && !s.ok()) got = s.WithContext("elastic restore: sending");
  }
  return got;
}

Status ElasticRestorer::SendStream(int to, const std::vector<int>& list) {
  // The runs, as source pointers; a source that cannot be read fails the stream.
  struct Run {
    const uint8_t* src;
    uint64_t len;
  };
  std::vector<Run> runs;
  uint64_t total = 0;
  Status bad;
  for (int i : list) {
    const PieceRef& r = pieces_[i];
    const placement::ElasticPiece& p = *r.piece;
    Result<const uint8_t*> base = SourceOf(p);
    if (!base.ok() && bad.ok()) bad = base.status();
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    const auto& dst = parts_.new_catalogs->at(r.catalog).entries.at(r.entry);
    RunsOf(p, src, dst, [&](uint64_t s_off, uint64_t, uint64_t len) {
      runs.push_back({base.ok() ? *base + s_off : nullptr, len});
      total += len;
    });
  }
  const uint64_t chunk = parts_.chunk_bytes;
  std::vector<uint8_t> buf(std::min(chunk, total));
  size_t run = 0;
  uint64_t in_run = 0;
  for (uint64_t off = 0; off < total; off += chunk) {
    const uint64_t len = std::min(chunk, total - off);
    wire::PayloadHeader h;
    h.ok = bad.ok() ? 1 : 0;
    h.length = len;
    if (h.ok) {
      uint64_t filled = 0;
      while (filled < len) {
        const uint64_t n = std::min(len - filled, runs[run].len - in_run);
        std::memcpy(buf.data() + filled, runs[run].src + in_run, n);
        filled += n;
        in_run += n;
        if (in_run == runs[run].len) {
          ++run;
          in_run = 0;
        }
      }
      h.crc = erasure::Crc32c(buf.data(), len);
    }
    MEMENTO_RETURN_IF_ERROR(parts_.transport->Send(to, wire::kTagElastic, &h, sizeof(h)));
    if (h.ok) {
      MEMENTO_RETURN_IF_ERROR(parts_.transport->Send(to, wire::kTagElastic, buf.data(), len));
      sent_ += len;
    }
  }
  return bad;
}

Status ElasticRestorer::ReceiveStream(int from, const std::vector<int>& list) {
  const int me = parts_.transport->rank();
  const placement::RankCatalog& mine =
      (*parts_.new_catalogs).at(static_cast<size_t>(pl_.node()) * pl_.lanes() + pl_.lane());
  struct Run {
    uint8_t* dst;
    uint64_t len;
  };
  std::vector<Run> runs;
  uint64_t total = 0;
  for (int i : list) {
    const PieceRef& r = pieces_[i];
    MEMENTO_CHECK_EQ(r.target, me);
    const placement::ElasticPiece& p = *r.piece;
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    const auto& dst = mine.entries.at(r.entry);
    uint8_t* base = dst_[r.entry];
    RunsOf(p, src, dst, [&](uint64_t, uint64_t d_off, uint64_t len) {
      runs.push_back({base + d_off, len});
      total += len;
    });
  }
  const std::string who = "rank " + std::to_string(from);
  const uint64_t chunk = parts_.chunk_bytes;
  std::vector<uint8_t> buf(std::min(chunk, total));
  size_t run = 0;
  uint64_t in_run = 0;
  Status got;
  for (uint64_t off = 0; off < total; off += chunk) {
    const uint64_t len = std::min(chunk, total - off);
    wire::PayloadHeader h;
    auto n = parts_.transport->Recv(from, wire::kTagElastic, &h, sizeof(h));
    if (!n.ok()) return n.status().WithContext("elastic restore: from " + who);
    if (!h.ok || h.length != len) {
      if (got.ok())
        got = Status::Unavailable("elastic restore: " + who + " cannot serve its pieces");
      if (!h.ok) continue;
    }
    MEMENTO_ASSIGN_OR_RETURN(
        size_t m, parts_.transport->Recv(from, wire::kTagElastic, buf.data(), buf.size()));
    received_ += m;
    if (m != len || erasure::Crc32c(buf.data(), len) != h.crc) {
      if (got.ok())
        got = Status::Corruption("elastic restore: a chunk from " + who + " fails its crc32c");
      continue;
    }
    uint64_t used = 0;
    while (used < len) {
      const uint64_t k = std::min(len - used, runs[run].len - in_run);
      std::memcpy(runs[run].dst + in_run, buf.data() + used, k);
      used += k;
      in_run += k;
      if (in_run == runs[run].len) {
        ++run;
        in_run = 0;
      }
    }
  }
  return got;
}

Status ElasticRestorer::CopyLocalAndRemote() {
  const int me = parts_.transport->rank();
  const placement::RankCatalog& mine =
      (*parts_.new_catalogs).at(static_cast<size_t>(pl_.node()) * pl_.lanes() + pl_.lane());
  // The remote entries this rank reads, (old node, lane, entry) -> where
  // their bytes go, each old rank's file read once for all of its entries (a
  // read passes over the whole file to check it). The entries stream through
  // a few MiB at a time, each run of bytes copied where it goes as it passes:
  // a rank that takes a slice of an old entry never holds the entry whole.
  struct Run {
    uint64_t from, len;  // in the old entry
    uint8_t* to;
  };
  struct Streamed {
    std::vector<Run> runs;  // sorted by `from`
    size_t next = 0;        // the first run not wholly behind the stream
  };
  std::map<std::tuple<int, int, int>, Streamed> remote;
  std::map<int, std::vector<RemoteEntryTarget>> by_file;  // old world rank -> its entries
  for (const PieceRef& r : pieces_) {
    const placement::ElasticPiece& p = *r.piece;
    if (r.target != me || r.server != me || p.source != placement::PieceSource::kRemote) continue;
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    if (parts_.remote == nullptr) return Status::NotFound("no remote tier for " + src.name);
    auto [it, added] = remote.try_emplace(std::make_tuple(p.old_node, p.old_lane, p.old_entry));
    Streamed* streamed = &it->second;
    uint8_t* out = dst_[r.entry];
    RunsOf(p, src, mine.entries.at(r.entry), [&](uint64_t s_off, uint64_t d_off, uint64_t len) {
      streamed->runs.push_back({s_off, len, out + d_off});
    });
    if (added) {
      RemoteEntryTarget target{src.name, nullptr, src.bytes, nullptr};
      target.sink = [streamed](uint64_t at, const uint8_t* bytes, uint64_t len) {
        std::vector<Run>& runs = streamed->runs;
        while (streamed->next < runs.size() &&
               runs[streamed->next].from + runs[streamed->next].len <= at) {
          ++streamed->next;
        }
        for (size_t i = streamed->next; i < runs.size() && runs[i].from < at + len; ++i) {
          const uint64_t lo = std::max(runs[i].from, at);
          const uint64_t hi = std::min(runs[i].from + runs[i].len, at + len);
          if (lo < hi) std::memcpy(runs[i].to + (lo - runs[i].from), bytes + (lo - at), hi - lo);
        }
      };
      by_file[p.old_node * old_lanes_ + p.old_lane].push_back(std::move(target));
    }
  }
  for (auto& [key, streamed] : remote) {
    std::sort(streamed.runs.begin(), streamed.runs.end(),
              [](const Run& a, const Run& b) { return a.from < b.from; });
  }
  for (const auto& [rank, targets] : by_file) {
    MEMENTO_RETURN_IF_ERROR(parts_.remote->ReadRankFile(plan_.version, rank, targets));
  }
  for (const PieceRef& r : pieces_) {
    if (r.target != me || r.server != me) continue;
    const placement::ElasticPiece& p = *r.piece;
    if (p.source == placement::PieceSource::kRemote) continue;  // streamed in place above
    const auto& src = Old(p.old_node, p.old_lane).catalog.entries.at(p.old_entry);
    const auto& dst = mine.entries.at(r.entry);
    const uint8_t* base = nullptr;
    MEMENTO_ASSIGN_OR_RETURN(base, SourceOf(p));
    uint8_t* out = dst_[r.entry];
    RunsOf(p, src, dst, [&](uint64_t s_off, uint64_t d_off, uint64_t len) {
      std::memcpy(out + d_off, base + s_off, len);
    });
  }
  return Status::Ok();
}

// ---- 6. agree ------------------------------------------------------------------------------

Status ElasticRestorer::Finish(const Status& local) {
  const std::vector<RegisteredEntry>& entries = *parts_.entries;
  Status mine = local;
  std::vector<uint32_t> crcs(entries.size(), 0);
  if (mine.ok()) {
    for (size_t i = 0; i < entries.size() && mine.ok(); ++i) {
      const RegisteredEntry& e = entries[i];
      if (!e.device() || e.bytes == 0) {
        crcs[i] = erasure::Crc32c(dst_[i], e.bytes);
        continue;
      }
      // Assembled in host memory not registered with the driver: through a
      // pinned buffer pair, hashed on the way.
      erasure::Crc32cStream crc;
      mine = parts_.copiers->ToDevice(e.data, dst_[i], e.bytes, e.gpu, &crc);
      crcs[i] = crc.value();
    }
  }
  const uint8_t outcome = mine.ok() ? 0 : 1;
  MEMENTO_ASSIGN_OR_RETURN(auto all, parts_.transport->Allgather(&outcome, 1));
  std::vector<int> failed;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != 1 || all[r][0] != 0) failed.push_back(static_cast<int>(r));
  }
  if (!mine.ok()) return mine.WithContext("elastic restore of " + VersionText(plan_.version));
  if (!failed.empty()) {
    return Status::Unavailable("elastic restore of " + VersionText(plan_.version) +
                               " failed on rank " + std::to_string(failed[0]) + " (of " +
                               std::to_string(failed.size()) + "); the old stores are kept");
  }
  // Where each entry came from: the farthest source among its pieces.
  const placement::ElasticTarget* target = nullptr;
  for (const auto& t : eplan_.targets) {
    if (t.node == pl_.node() && t.lane == pl_.lane()) target = &t;
  }
  MEMENTO_CHECK(target != nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    RestoreSource src = RestoreSource::kLocalMemory;
    for (const placement::ElasticPiece& p : target->pieces.at(i)) {
      RestoreSource s = RestoreSource::kLocalMemory;
      if (p.source == placement::PieceSource::kRemote) {
        s = RestoreSource::kRemote;
      } else if (p.source == placement::PieceSource::kDecoded) {
        s = RestoreSource::kDecode;
      } else if (p.serve_node != pl_.node()) {
        s = RestoreSource::kReplica;
      }
      auto rank = [](RestoreSource x) {
        switch (x) {
          case RestoreSource::kLocalMemory:
            return 0;
          case RestoreSource::kReplica:
            return 1;
          case RestoreSource::kDecode:
            return 2;
          case RestoreSource::kRemote:
            return 3;
        }
        return 0;
      };
      if (rank(s) > rank(src)) src = s;
    }
    report_.entries.push_back({entries[i].name, entries[i].bytes, crcs[i], src});
  }
  report_.source_detail = "elastic: " + report_.elastic_plan;
  report_.stats.bytes_sent = sent_;
  report_.stats.bytes_received = received_;
  report_.elastic_received_per_node = eplan_.received_bytes_per_node;
  report_.elastic_remote_per_node = eplan_.remote_bytes_per_node;
  report_.elastic_minimum_per_node = eplan_.minimum_bytes_per_node;
  report_.elastic_served_per_node = eplan_.served_bytes_per_node;
  return Status::Ok();
}

}  // namespace memento::runtime
