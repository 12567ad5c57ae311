#include "protect/protect_stage.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/erasure/gf256.h"
#include "memento/erasure/rs_codec.h"
#include "memento/erasure/xor_codec.h"
#include "protect/entry_seals.h"
#include "snapshot/crc32c_combine.h"
#include "store/shard_landing.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

using wire::kReplicaPart;
using wire::kSealsPart;
using wire::kTagProtect;
using wire::kTagProtectPayload;
using wire::ProtectHeader;

constexpr uint64_t kMaxSealsPart = 1ull << 26;
// Pieces of the parity chains: at most this many bytes (the chunk when it is
// smaller). A rank runs K' x M hops with up to 4 piece buffers each, kept
// across versions: a fixed K' x M MiB (rs:4+2: 8 MiB, 6 % over its memory
// formula at 64 MiB shards, 1.5 % at 256 MiB). Measured with xor:3 on 4
// ranks of 64 MiB (2 cores): 256 KiB chains took 30-35 ms a version,
// 512 KiB 35-45 ms, 1 MiB 35-50 ms; rs:4+2 on 8 ranks with 128 KiB pieces
// was slower (0.39 s against 0.26 s) and saved only half of the memory.
constexpr uint64_t kParityPieceBytes = 256 << 10;
// Replica parts (chunks) whose payloads move at once between an owner and a
// holder, where the transport's transfers can be tested: the sender keeps as
// many sends started and the holder as many receives posted, so the next
// chunk streams while the last one is still landing, as the MPI ring's
// messages do (all posted up front).
constexpr size_t kPartsInFlight = 4;
// Where every message costs a round trip whatever its size
// (Transport::PrefersFewerMessages: gloo, whose holder receives one part at
// a time, posting its payload's receive once its header is in), the sender
// gathers replica parts that are adjacent in the holder's region
// (consecutive entries, mostly) into one part of up to this many bytes: a
// copy on the sender instead of round trips.
// Measured under torchrun (4 ranks of 75 MiB in 512 tensors, 2 cores): one
// part of 400 KiB cost ~4 ms, one of 4 KiB ~1 ms.
constexpr uint64_t kGatherBytes = 1 << 20;

}  // namespace

ProtectStage::ProtectStage(const ProtectionLayout* layout, NodeStore* store, Transport* transport,
                           uint64_t chunk_bytes, const EntryCrcStage* crcs,
                           std::vector<uint64_t> entry_bytes)
    : layout_(layout),
      store_(store),
      transport_(transport),
      chunk_bytes_(chunk_bytes),
      crcs_(crcs),
      entry_bytes_(std::move(entry_bytes)),
      outboxes_(transport->size()),
      part_crcs_(store->region_count()) {
  if (layout_->scheme().is_erasure()) {
    const auto& g = layout_->groups().group(layout_->groups().group_of(layout_->node()));
    data_rows_ = g.data;
    if (layout_->scheme().kind() == placement::SchemeKind::kXor) {
      // Identity rows, then a row of ones (XorCodec's generator).
      generator_.assign(static_cast<size_t>(g.data + 1) * g.data, 0);
      for (int r = 0; r < g.data; ++r) generator_[r * g.data + r] = 1;
      for (int r = 0; r < g.data; ++r) generator_[g.data * g.data + r] = 1;
    } else {
      generator_ = erasure::RsCodec::Create(g.data, g.parity).value().generator();
    }
  }
}

ProtectStage::~ProtectStage() {
  WaitSent();
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    out_stop_ = true;
  }
  for (auto& box : outboxes_) {
    if (box) box->cv.notify_one();
  }
  for (auto& box : outboxes_) {
    if (box) box->thread.join();
  }
  WaitReceivers();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : receivers_) t.join();
}

void ProtectStage::Enqueue(int dest, const Part& part) {
  Outbox* box = nullptr;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    std::unique_ptr<Outbox>& slot = outboxes_.at(dest);
    if (!slot) {
      slot = std::make_unique<Outbox>();
      slot->thread = std::thread([this, dest] { SenderLoop(dest); });
    }
    box = slot.get();
    box->parts.push_back(part);
    ++out_pending_;
  }
  box->cv.notify_one();
}

void ProtectStage::SenderLoop(int dest) {
  Outbox& box = *outboxes_[dest];  // the slot is set before this thread starts, never reset
  // Parts whose payload is on the wire, oldest first. Where transfers can be
  // tested (MPI), up to kPartsInFlight of them move at once, as the holder
  // keeps as many receives posted; elsewhere each send finishes in StartSend.
  struct InFlight {
    Part part;
    size_t parts = 1;  // queued parts it stands for (gathered)
    std::unique_ptr<Transport::PendingTransfer> payload;
  };
  std::deque<InFlight> flight;
  auto account = [&](const Status& s, size_t parts) {  // under out_mu_
    if (!s.ok()) {
      box.failed = true;
      if (send_status_.ok()) send_status_ = s;
    }
    out_pending_ -= parts;
    if (out_pending_ == 0) sent_cv_.notify_all();
  };
  const bool gather = transport_->PrefersFewerMessages();
  std::vector<Part> run;
  std::unique_lock<std::mutex> lock(out_mu_);
  for (;;) {
    if (flight.empty()) box.cv.wait(lock, [&] { return out_stop_ || !box.parts.empty(); });
    if (box.parts.empty() || flight.size() >= kPartsInFlight) {
      if (flight.empty()) return;  // out_stop_ and nothing left
      InFlight f = std::move(flight.front());
      flight.pop_front();
      lock.unlock();
      Status s = FinishPart(dest, f.part, f.payload.get());
      f.payload.reset();
      lock.lock();
      account(s, f.parts);
      continue;
    }
    Part part = box.parts.front();
    box.parts.pop_front();
    const bool drop = box.failed;
    const size_t parts = gather && !drop ? TakeAdjacent(&box, &part, &run) : 1;
    lock.unlock();
    if (parts > 1) Gather(&box, run, &part);
    std::unique_ptr<Transport::PendingTransfer> payload;
    Status s = drop ? Status::Ok() : StartPart(dest, part, &payload);
    lock.lock();
    if (payload != nullptr) {
      flight.push_back({part, parts, std::move(payload)});
    } else {
      account(s, parts);
    }
  }
}

size_t ProtectStage::TakeAdjacent(Outbox* box, Part* part, std::vector<Part>* run) {
  run->clear();
  // Never longer than a chunk: a holder refuses longer parts.
  const uint64_t most = std::min(kGatherBytes, chunk_bytes_);
  if (part->kind != kReplicaPart || part->length >= most) return 1;
  run->push_back(*part);
  uint64_t end = part->offset + part->length;
  for (;;) {
    // Parts are queued in about the order the snapshot copies them, which
    // may interleave its threads': the next one is looked for anywhere
    // (never past the entry seals, which are queued after every part).
    auto next = std::find_if(box->parts.begin(), box->parts.end(), [&](const Part& p) {
      return p.kind == kReplicaPart && p.offset == end && p.length <= most - (end - part->offset);
    });
    if (next == box->parts.end()) break;
    run->push_back(*next);
    end += next->length;
    box->parts.erase(next);
  }
  if (run->size() == 1) return 1;
  part->length = end - part->offset;
  return run->size();
}

void ProtectStage::Gather(Outbox* box, const std::vector<Part>& run, Part* part) {
  // A buffer is reused kPartsInFlight gathers later: by then the part sent
  // from it has finished (at most kPartsInFlight parts are in flight).
  if (box->gathered.empty()) {
    box->gathered.assign(kPartsInFlight,
                         std::vector<uint8_t>(std::min(kGatherBytes, chunk_bytes_)));
  }
  uint8_t* to = box->gathered[box->gathers++ % kPartsInFlight].data();
  uint64_t at = 0;
  uint32_t crc = 0;
  for (const Part& p : run) {
    std::memcpy(to + at, p.data, p.length);
    crc = at == 0 ? p.crc : Crc32cCombine(crc, p.crc, p.length);
    at += p.length;
  }
  part->data = to;
  part->crc = crc;
}

void ProtectStage::WaitSent() {
  std::unique_lock<std::mutex> lock(out_mu_);
  sent_cv_.wait(lock, [this] { return out_pending_ == 0; });
}

uint8_t ProtectStage::Coefficient(int row, int data_row) const {
  return generator_.at(static_cast<size_t>(data_rows_ + row) * data_rows_ + data_row);
}

void ProtectStage::WaitReceivers() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return busy_ == 0; });
}

void ProtectStage::ReceiverLoop(Source source) {
  uint64_t seen = 0;
  std::vector<uint8_t> buf;  // parity parts land here, one allocation per thread
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Status s = ReceiveFrom(source.rank, source.bytes, source.seals_region, &buf);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() && receive_status_.ok()) {
      receive_status_ = s.WithContext("protect of v" + std::to_string(version_) +
                                      ": receiving from rank " + std::to_string(source.rank));
    }
    if (--busy_ == 0) cv_.notify_all();
  }
}

Status ProtectStage::Begin(uint64_t version, int slot, int /*chunks*/) {
  WaitSent();
  WaitReceivers();
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    send_status_ = Status::Ok();
    for (auto& box : outboxes_) {
      if (box) box->failed = false;
    }
  }
  attempt_ = begun_ && version == version_ ? attempt_ + 1 : 0;
  begun_ = true;
  version_ = version;
  slot_ = slot;
  if (layout_->scheme().is_replica() && replica_holders_.empty()) {
    replica_holders_ = layout_->groups().ReplicaHolders(layout_->node());  // once, not per chunk
  }
  bytes_sent_ = 0;
  bytes_received_ = 0;
  for (auto& parts : part_crcs_) parts.clear();
  if (receivers_.empty()) {
    // Bytes to expect from every source node: the same for every version, so
    // one receiver thread per source serves them all (started once).
    const int lane = layout_->lane();
    std::map<int, uint64_t> expected;
    for (const HeldRegion& h : layout_->held()) {
      if (h.item.kind == placement::ItemKind::kReplica) {
        expected[h.item.owner] += layout_->shard_bytes(h.item.owner, lane);
      }  // a parity region's data owners send only their entry seals here (below)
    }
    for (const SealsRegion& r : layout_->seals()) expected.emplace(r.owner, 0);
    for (const auto& [node, bytes] : expected) {
      Source source{layout_->rank_of(node, lane), bytes, layout_->SealsRegionOf(node)};
      MEMENTO_CHECK_GE(source.seals_region, 0);
      sources_.push_back(source);
    }
    for (const Source& source : sources_) {
      receivers_.emplace_back([this, source] { ReceiverLoop(source); });
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    receive_status_ = Status::Ok();
    busy_ = static_cast<int>(sources_.size());
    ++generation_;
  }
  cv_.notify_all();
  return Status::Ok();
}

Status ProtectStage::StartPart(int dest_rank, const Part& part,
                               std::unique_ptr<Transport::PendingTransfer>* payload) {
  ProtectHeader h;
  h.version = version_;
  h.attempt = attempt_;
  h.kind = part.kind;
  h.offset = part.offset;
  h.length = part.length;
  h.crc = part.crc;
  Status s = transport_->Send(dest_rank, kTagProtect, &h, sizeof(h));
  if (s.ok()) {
    auto started = transport_->StartSend(dest_rank, kTagProtectPayload, part.data, part.length);
    if (started.ok()) {
      *payload = std::move(started).value();
    } else {
      s = started.status();
    }
  }
  return s.ok() ? Status::Ok() : PartError(dest_rank, part, s);
}

Status ProtectStage::FinishPart(int dest_rank, const Part& part,
                                Transport::PendingTransfer* payload) {
  Status s = payload->Wait().status();
  if (!s.ok()) return PartError(dest_rank, part, s);
  bytes_sent_ += part.length;
  return Status::Ok();
}

Status ProtectStage::PartError(int dest_rank, const Part& part, const Status& s) const {
  const char* what = part.kind == kReplicaPart ? "replica" : "entry seals";
  return s.WithContext("protect of v" + std::to_string(version_) + ": " + what + " to rank " +
                       std::to_string(dest_rank));
}

Status ProtectStage::OnChunk(const Chunk& chunk) {
  // Erasure schemes send nothing per chunk: their parity runs in End.
  if (chunk.length == 0 || !layout_->scheme().is_replica()) return Status::Ok();
  Part part;
  part.kind = kReplicaPart;
  part.offset = layout_->entry_base(chunk.entry) + chunk.offset;
  part.data = chunk.data;
  part.length = chunk.length;
  part.crc = chunk.crc;
  for (int holder : replica_holders_) Enqueue(layout_->rank_of(holder, layout_->lane()), part);
  return Status::Ok();
}

Status ProtectStage::ReceiveFrom(int source_rank, uint64_t expected, int seals_region,
                                 std::vector<uint8_t>* part_buf) {
  std::vector<uint8_t>& buf = *part_buf;  // drains what an older attempt left
  uint64_t got = 0;
  bool seals = false;
  // Payload receives posted, oldest first, with the length each must bring.
  // A payload lands in place, so its receive is posted as soon as its header
  // is in; the next header is then received while it moves. Where transfers
  // cannot be tested (their receives happen inside Wait), each payload is
  // received before the next header, as the sender's Send of a payload may
  // block until it is.
  const size_t ahead = transport_->TestsTransfers() ? kPartsInFlight : 1;
  std::deque<std::pair<std::unique_ptr<Transport::PendingTransfer>, uint64_t>> landing;
  auto land_oldest = [&]() -> Status {
    auto [t, length] = std::move(landing.front());
    landing.pop_front();
    MEMENTO_ASSIGN_OR_RETURN(size_t m, t->Wait());
    if (m != length) return Status::Corruption("protect payload length mismatch");
    return Status::Ok();
  };
  auto post = [&](uint8_t* dst, uint64_t length) -> Status {
    MEMENTO_ASSIGN_OR_RETURN(auto t, transport_->StartRecv(source_rank, kTagProtectPayload, dst,
                                                           std::max<uint64_t>(length, 1)));
    landing.emplace_back(std::move(t), length);
    return landing.size() >= ahead ? land_oldest() : Status::Ok();
  };
  // The entry seals are the last message of a version on this channel (one
  // sender thread per destination queues them after every part), so they end
  // the version: a source whose snapshot failed stops early, and that is
  // known at once instead of after a timeout.
  //
  // A part of this version that cannot be taken (a region this node does not
  // hold of the source, beyond its region, of an unknown kind, seals of the
  // wrong size) fails the version, but the rest of it is still received, up
  // to its seals, into a scratch buffer: the source's sends then finish at
  // once instead of waiting for the timeout (under MPI a large payload's send
  // waits for its receive), and the channel stays in step for the next
  // version. Only a header or payload that does not fit stops the reading.
  Status refused;
  auto drain = [&](uint64_t length) -> Status {
    while (!landing.empty()) MEMENTO_RETURN_IF_ERROR(land_oldest());
    buf.resize(std::max<uint64_t>(length, 1));
    return transport_->Recv(source_rank, kTagProtectPayload, buf.data(), buf.size()).status();
  };
  auto refuse = [&](const ProtectHeader& h, Status why) -> Status {
    if (refused.ok()) refused = std::move(why);
    seals = h.kind == kSealsPart;
    return drain(h.length);
  };
  auto receive = [&]() -> Status {
    while (!seals) {
      ProtectHeader h;
      MEMENTO_ASSIGN_OR_RETURN(size_t n, transport_->Recv(source_rank, kTagProtect, &h, sizeof(h)));
      if (n != sizeof(h))
        return Status::Corruption("protect header of " + std::to_string(n) + " bytes");
      if (h.length > (h.kind == kSealsPart ? kMaxSealsPart : chunk_bytes_)) {
        return Status::Corruption("protect part of " + std::to_string(h.length) + " bytes");
      }
      // Anything else is left over from an older or failed attempt: drained.
      const bool current = h.version == version_ && h.attempt == attempt_;
      if (!current) {
        MEMENTO_RETURN_IF_ERROR(drain(h.length));
        continue;
      }
      if (!refused.ok()) {
        MEMENTO_RETURN_IF_ERROR(refuse(h, refused));
        continue;
      }
      uint8_t* dst = nullptr;
      int region = -1;
      if (Status why = PartLanding(source_rank, seals_region, h, &dst, &region); !why.ok()) {
        MEMENTO_RETURN_IF_ERROR(refuse(h, std::move(why)));
        continue;
      }
      MEMENTO_RETURN_IF_ERROR(post(dst, h.length));
      if (h.kind == kSealsPart) {
        seals = true;
        continue;
      }
      part_crcs_[region].push_back({h.offset, h.length, h.crc});
      got += h.length;
    }
    while (!landing.empty()) MEMENTO_RETURN_IF_ERROR(land_oldest());
    return refused;
  };
  if (Status s = receive(); !s.ok()) {
    // Keeps the payloads in step with the headers for the next attempt: what
    // was posted is received (into this failed version's slot) unless the
    // source stopped sending, rather than cancelled with its payload left
    // queued, where the next attempt's first receive would take it.
    while (!landing.empty() && land_oldest().ok()) {
    }
    return s;
  }
  bytes_received_ += got;
  if (got < expected) {
    return Status::Unavailable("rank " + std::to_string(source_rank) + " sent " +
                               std::to_string(got) + " of " + std::to_string(expected) +
                               " bytes before its entry seals (its snapshot failed)");
  }
  if (got > expected) {
    return Status::Corruption("rank " + std::to_string(source_rank) + " sent " +
                              std::to_string(got) + " bytes, more than the " +
                              std::to_string(expected) + " this node holds of it");
  }
  return Status::Ok();
}

Status ProtectStage::PartLanding(int source_rank, int seals_region, const ProtectHeader& h,
                                 uint8_t** dst, int* region) {
  // Only on a refusal: a part taken costs no string.
  auto from = [&] { return " from rank " + std::to_string(source_rank); };
  if (slot_ == kNoSlot) {
    return Status::Unavailable("v" + std::to_string(version_) +
                               " has no slot on this rank to take the parts" + from());
  }
  if (h.kind == kSealsPart) {
    if (h.length != store_->layout().regions[seals_region].capacity) {
      return Status::Corruption("entry seals of " + std::to_string(h.length) + " bytes" + from());
    }
    *dst = store_->MutableRegion(slot_, seals_region);
    *region = -1;
    return Status::Ok();
  }
  if (h.kind != kReplicaPart) {
    return Status::Corruption("protect part of kind " + std::to_string(h.kind) + from());
  }
  // Replica parts land in place.
  *region = -1;
  for (int node = 0; node < layout_->num_nodes(); ++node) {
    if (layout_->rank_of(node, layout_->lane()) == source_rank) {
      *region = layout_->ReplicaRegion(node);
    }
  }
  if (*region < 0) {
    return Status::Corruption("replica part" + from() + ", whose replica this node does not hold");
  }
  const uint64_t capacity = store_->layout().regions[*region].capacity;
  if (h.offset > capacity || h.length > capacity - h.offset) {
    return Status::Corruption("replica part [" + std::to_string(h.offset) + ", +" +
                              std::to_string(h.length) + ")" + from() + " beyond its region of " +
                              std::to_string(capacity) + " bytes");
  }
  *dst = store_->MutableRegion(slot_, *region) + h.offset;
  return Status::Ok();
}

Result<std::optional<uint32_t>> ProtectStage::CombinedCrc(int region, uint64_t capacity) {
  std::vector<PartCrc>& parts = part_crcs_[region];
  if (capacity == 0 || parts.empty()) return std::optional<uint32_t>();
  std::sort(parts.begin(), parts.end(),
            [](const PartCrc& a, const PartCrc& b) { return a.offset < b.offset; });
  uint64_t end = 0;
  uint32_t crc = 0;
  for (const PartCrc& p : parts) {
    if (p.offset != end) {
      const RegionSpec& spec = store_->layout().regions[region];
      return Status::Corruption("protect of v" + std::to_string(version_) + ": the parts of " +
                                RegionKindName(spec.kind) + " region '" + spec.name + "' " +
                                (p.offset < end ? "overlap" : "leave a gap") + " at byte " +
                                std::to_string(std::min(p.offset, end)));
    }
    crc = end == 0 ? p.crc : Crc32cCombine(crc, p.crc, p.length);
    end += p.length;
  }
  if (end != capacity) return std::optional<uint32_t>();
  return std::optional<uint32_t>(crc);
}

ShardLanding* ProtectStage::Landing() {
  // One view per slot, made on its first version (no allocation per version).
  if (landings_.empty()) landings_.resize(static_cast<size_t>(store_->slot_count()));
  ShardLanding& l = landings_.at(static_cast<size_t>(slot_));
  if (l.empty() && !entry_bytes_.empty()) l = ShardLanding::InSlot(store_, slot_, entry_bytes_);
  return &l;
}

Status ProtectStage::RunParityChains(const Status& snapshot) {
  const int lane = layout_->lane();
  const int me = transport_->rank();
  const auto& groups = layout_->groups();
  const int g = groups.group_of(layout_->node());
  const placement::ProtectionGroup& group = groups.group(g);
  const uint64_t piece_bytes = layout_->map(lane).piece_bytes(g);
  if (piece_bytes == 0) return Status::Ok();  // every shard of the group is empty
  if (parity_chains_.empty()) {
    // Every rank of the group (this lane) builds the same list, in the same
    // order: stripe by stripe, parity row by row. Data row r of stripe j is
    // piece r of its node's shard, times the generator coefficient (t, r).
    for (int j = 0; j < group.size(); ++j) {
      for (int t = 0; t < group.parity; ++t) {
        ReduceChain chain;
        const int holder = groups.ParityHolder(g, j, t);
        chain.dst_rank = layout_->rank_of(holder, lane);
        chain.length = piece_bytes;
        for (int r = 0; r < group.data; ++r) {
          chain.terms.push_back(
              {layout_->rank_of(groups.DataRowNode(g, j, r), lane), r, Coefficient(t, r)});
        }
        int region = -1;
        if (chain.dst_rank == me) {
          region = layout_->ParityRegion(j, t);
          MEMENTO_CHECK_GE(region, 0);
          MEMENTO_CHECK_EQ(store_->layout().regions[region].capacity, piece_bytes);
        }
        parity_chains_.push_back(std::move(chain));
        chain_region_.push_back(region);
      }
    }
  }
  const bool can_read = snapshot.ok();
  ShardLanding* const shard = can_read ? Landing() : nullptr;
  size_t first = 0;  // of the current batch
  auto reader = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len,
                    uint8_t* dst) -> Status {
    if (!can_read) {
      return Status::Unavailable("this rank's snapshot of v" + std::to_string(version_) +
                                 " failed");
    }
    shard->Read(static_cast<uint64_t>(term.row_id) * piece_bytes + off, len, dst);
    return Status::Ok();
  };
  ReduceOptions options;
  options.tag = [](size_t c) { return wire::kTagProtectChain + static_cast<int>(c); };
  options.check_pieces = false;
  options.arena = &arena_;
  // Every rank of the group stamps this version's attempt (and batch,
  // below) alike; a stream left out of step by an earlier attempt's or
  // batch's transport error then fails this version instead of folding
  // stale pieces into its parity.
  const uint64_t stamp = (version_ << 24) ^ attempt_;
  options.span = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len) -> const uint8_t* {
    return can_read ? shard->Span(static_cast<uint64_t>(term.row_id) * piece_bytes + off, len)
                    : nullptr;
  };
  RowSink sink;
  sink.span = [&](int c, uint64_t off, uint64_t) -> uint8_t* {
    const int region = chain_region_[first + c];
    return region >= 0 && slot_ != kNoSlot ? store_->MutableRegion(slot_, region) + off : nullptr;
  };
  // Each parity region is the destination of one chain, so its pieces'
  // crcs go where a replica region's parts' do, and End seals both alike.
  sink.landed = [&](int c, uint64_t off, uint64_t len, uint32_t crc) {
    part_crcs_[chain_region_[first + c]].push_back({off, len, crc});
  };
  sink.write = [&](int c, uint64_t, const uint8_t*, uint64_t) {
    if (slot_ == kNoSlot) {
      return Status::Unavailable("v" + std::to_string(version_) + " has no slot on this rank");
    }
    return Status::Internal("protect chain " + std::to_string(first + c) +
                            " ends on a rank without its parity region");
  };
  Status result;
  ReduceBytes bytes;
  // In batches of at most kProtectChainTags chains, so that no two chains of
  // a batch share a tag.
  for (; first < parity_chains_.size(); first += wire::kProtectChainTags) {
    const size_t n = std::min<size_t>(wire::kProtectChainTags, parity_chains_.size() - first);
    // A single batch (G x M <= 499 chains, any usual group) runs on the list
    // itself, not a copy per version.
    std::vector<ReduceChain> copy;
    if (n < parity_chains_.size()) {
      copy.assign(parity_chains_.begin() + first, parity_chains_.begin() + first + n);
    }
    const std::vector<ReduceChain>& batch = copy.empty() ? parity_chains_ : copy;
    options.stamp = stamp ^ (static_cast<uint64_t>(first / wire::kProtectChainTags) << 12);
    std::vector<std::vector<uint8_t>> unused;
    Status s = RunReduceChains(transport_, batch, 0, std::min(kParityPieceBytes, chunk_bytes_),
                               reader, &unused, &bytes, &sink, &options);
    if (result.ok() && !s.ok()) result = s.WithContext("protect of v" + std::to_string(version_));
  }
  bytes_sent_ += bytes.sent;
  bytes_received_ += bytes.received;
  return result;
}

Status ProtectStage::End(uint64_t version, const Status& snapshot) {
  MEMENTO_CHECK_EQ(version, version_);
  // Entry seals to every node that holds anything of this shard (sent even
  // when the snapshot failed, so that no receiver waits for its timeout; the
  // version then fails at the commit anyway), behind the shard's parts.
  {
    std::vector<EntrySeal> mine(entry_bytes_.size());
    for (size_t i = 0; i < entry_bytes_.size(); ++i) {
      mine[i] = {entry_bytes_[i], crcs_->entry_crc(static_cast<int>(i))};
    }
    seals_record_ = EncodeEntrySeals(mine);  // stays put until WaitSent returns
    Part part;
    part.kind = kSealsPart;
    part.data = seals_record_.data();
    part.length = seals_record_.size();
    if (seal_holders_.empty()) seal_holders_ = layout_->SealHolders();  // once, not per version
    for (int holder : seal_holders_) {
      Enqueue(layout_->rank_of(holder, layout_->lane()), part);
    }
  }
  // The parity, on this thread, while the sender threads send the seals.
  const Status chained = layout_->scheme().is_erasure() ? RunParityChains(snapshot) : Status::Ok();
  WaitSent();
  Status sent;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    sent = send_status_;
  }
  WaitReceivers();
  Status s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = receive_status_;
  }
  if (!snapshot.ok()) return snapshot;
  if (!s.ok()) return s;  // already names the source rank and version
  if (!chained.ok()) return chained;
  if (!sent.ok()) return sent;
  for (const SealsRegion& r : layout_->seals()) {
    const uint8_t* data = store_->MutableRegion(slot_, r.region);
    MEMENTO_RETURN_IF_ERROR(
        store_->SealRegion(slot_, r.region, r.capacity, erasure::Crc32c(data, r.capacity)));
  }
  for (const HeldRegion& h : layout_->held()) {
    MEMENTO_ASSIGN_OR_RETURN(std::optional<uint32_t> crc, CombinedCrc(h.region, h.capacity));
    if (!crc) crc = erasure::Crc32c(store_->MutableRegion(slot_, h.region), h.capacity);
    MEMENTO_RETURN_IF_ERROR(store_->SealRegion(slot_, h.region, h.capacity, *crc));
  }
  return store_->SealRegion(slot_, layout_->topology_region(), 0, 0);
}

}  // namespace memento::runtime
