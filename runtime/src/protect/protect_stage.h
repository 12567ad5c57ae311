// ProtectStage: the protect step of docs/architecture.md §3, a ChunkStage.
//
// replica:M — as each chunk of this rank's shard lands in the slot, OnChunk
// (on the snapshot worker that copied it) queues it for every replica holder
// of this node (same lane) and returns at once; one sender thread per
// destination rank streams the queued chunks over the Transport straight
// from the slot (no copy). The holder receives each in place, at its offset
// in "replica/n<owner>", and seals the region with the chunk crcs the sender
// computed while copying (combined), so the seal is end to end. Where the
// transport's transfers can be tested (MPI, in-process), up to 4 chunks are
// in flight per (owner, holder) pair: the sender starts the next send before
// the last one has finished, the holder posts a chunk's receive as soon as
// its header is in and takes the next header while the chunk moves (replica
// protect 25-35 % faster than one chunk at a time, measured in
// experiments/runtime/README.md, "Replica chunks in flight").
//
// xor / rs — in End, once the whole shard is in the slot, the parity runs as
// reduce chains (reduce_chain.h), the pipelined ring reduce of LLNL's
// redset: one chain per (stripe j, parity row t) of this rank's group and
// lane, over the stripe's K' data rows (row r = piece r of its node's shard,
// P bytes, see placement/group_layout.h) times the generator coefficient
// (t, r), into "parity/s<j>/r<t>" of the row's holder. Each data node folds
// its piece into the running sum straight from its slot (the first one sends
// its piece from there) and forwards it; the holder receives the finished
// row in place, piece by piece, and seals the region with the pieces' crcs
// combined (no second pass). Under xor (M = 1) every node then sends only
// to its ring successor. Against the earlier placement, where every data
// node sent its pieces to the M holders and each holder folded K' of them
// into a zeroed region: the same bytes on the wire, K'-1 folds per row
// instead of K', no zeroing, no receive buffer per source, one thread per
// hop instead of blocking sender and receiver threads per peer (measured in
// experiments/runtime/README.md, "XOR protect on the reduce chains").
// Pieces are 256 KiB and travel without a
// crc32c (the region's seal is computed as they land); the hops' buffers are
// kept across versions (PieceArena). Chains are numbered the same on every
// rank of the group and use tags kTagProtectChain + c, apart from a
// background re-protect's. A rank whose snapshot failed forwards "failed"
// pieces, so its chains fail at their holders at once and every message
// count stays the same. A rank whose slot could not be begun (Begin with
// kNoSlot) takes part alike: it sends only its entry seals, forwards
// "failed" pieces, and drains what its peers send it into no slot.
//
// The snapshot (WaitSnapshot: the application may touch its buffers again)
// ends at memory speed either way; the network transfer goes on in the
// background until the commit, and the stall does not include it.
// In End, after the last chunk, every rank also queues its entry seals
// (per-entry size and crc32c, entry_seals.h) to every node that holds
// anything of its shard, which stores them in "seals/n<owner>" and seals that
// region too, and waits until every queue has drained.
// Each queued message is a 48-byte ProtectHeader (tag kTagProtect) and its
// payload (tag kTagProtectPayload); only the destination's sender thread
// sends to it and each (source, destination, tag) channel delivers in
// order, so the n-th payload belongs to the n-th header. A receiver that
// fails mid-version still receives the payloads it posted (unless the source
// stopped sending), so the next attempt finds the two channels in step.
// After a failed send to a destination, its remaining parts of the version
// are dropped (the version fails at the commit anyway).
//
// Receive side: one thread per source rank whose replica or entry seals this
// rank holds, started by the first Begin and kept across versions (each
// Begin wakes them for the new version, End waits until they are done); each
// knows how many bytes it must receive (the owner's shard for a replica,
// none for a parity source) plus the owner's entry seals, and stops there.
// End joins the receivers, seals each held region (and the topology marker);
// the engine then seals its own entries and the slot, and the all-true
// commit makes the version committed only when every rank has sealed its
// shard and everything it holds.
//
// Failure: a dead or silent peer ends a receiver or a chain with
// Unavailable / Timeout, which fails the version on this rank (and hence
// everywhere by the commit).
// A header of an older version, or of an earlier failed attempt at this one
// (ProtectHeader::attempt), left over on the channel is drained.
//
// Thread-safety: as ChunkStage. Memory: per hop of a parity chain 3-4
// pieces of 256 KiB, kept across versions (replicas land in place); the send
// queues hold pointers into the slot, a few words per part.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "memento/erasure/rs_codec.h"
#include "memento/runtime/chunk_stage.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/transport.h"
#include "protect/protection_layout.h"
#include "protect/reduce_chain.h"
#include "snapshot/entry_crc_stage.h"
#include "store/shard_landing.h"

namespace memento::runtime {
namespace wire {
struct ProtectHeader;
}  // namespace wire

class ProtectStage final : public ChunkStage {
 public:
  // All pointers are borrowed and must outlive the stage.
  // `crcs` gives this rank's per-entry crc32c once its End ran (the engine
  // ends it before this stage); `entry_bytes` are this rank's entry sizes.
  ProtectStage(const ProtectionLayout* layout, NodeStore* store, Transport* transport,
               uint64_t chunk_bytes, const EntryCrcStage* crcs, std::vector<uint64_t> entry_bytes);
  ~ProtectStage() override;

  Status Begin(uint64_t version, int slot, int chunks) override;
  Status OnChunk(const Chunk& chunk) override;
  Status End(uint64_t version, const Status& snapshot) override;

  // Bytes sent / received by this rank for the last version (payload only).
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

  // Coefficient of data row `data_row` in parity row `row` of this rank's group.
  uint8_t Coefficient(int row, int data_row) const;

 private:
  // One message pair for a holder (fields as in the wire header).
  struct Part {
    uint32_t kind = 0;
    uint64_t offset = 0;
    const uint8_t* data = nullptr;
    uint64_t length = 0;
    uint32_t crc = 0;
  };
  // Queues `part` for destination rank `dest` (starts its sender thread on
  // first use).
  void Enqueue(int dest, const Part& part);
  // Sender thread of one destination rank: sends its queued parts in order.
  void SenderLoop(int dest);
  // Until every queued part has been sent (or dropped after a failure).
  void WaitSent();
  // Sends `part`'s header and starts its payload (set in *payload on success).
  Status StartPart(int dest_rank, const Part& part,
                   std::unique_ptr<Transport::PendingTransfer>* payload);
  // Waits for a started payload; counts its bytes.
  Status FinishPart(int dest_rank, const Part& part, Transport::PendingTransfer* payload);
  Status PartError(int dest_rank, const Part& part, const Status& s) const;
  // `buf`: the receiver thread's part buffer, kept across versions.
  Status ReceiveFrom(int source_rank, uint64_t expected, int seals_region,
                     std::vector<uint8_t>* buf);
  // Where a part of this version from `source_rank` lands in the slot:
  // `*dst`, and for a replica part its region (`*region`; -1 for the entry
  // seals). Corruption naming the part when this node cannot take it (seals
  // of the wrong size, an unknown kind, a source whose replica it does not
  // hold, beyond the region).
  Status PartLanding(int source_rank, int seals_region, const wire::ProtectHeader& h, uint8_t** dst,
                     int* region);
  struct Source {
    int rank = -1;
    uint64_t bytes = 0;  // payload bytes per version
    int seals_region = -1;
  };
  // Receiver thread of one source: one ReceiveFrom per Begin, until stop_.
  void ReceiverLoop(Source source);
  // Until every receiver finished the current version.
  void WaitReceivers();

  const ProtectionLayout* layout_;
  NodeStore* store_;
  Transport* transport_;
  const uint64_t chunk_bytes_;
  const EntryCrcStage* crcs_;
  const std::vector<uint64_t> entry_bytes_;
  int data_rows_ = 0;               // K' of this rank's group (erasure)
  std::vector<uint8_t> generator_;  // (K'+M) x K' of this rank's group (erasure)
  struct Outbox {
    std::deque<Part> parts;
    std::condition_variable cv;  // a part was queued, or out_stop_ (guarded by out_mu_)
    std::thread thread;
    bool failed = false;  // a send to it failed in this version: drop the rest
    // Where adjacent replica parts are gathered into one (transports that
    // prefer fewer messages): kPartsInFlight buffers, made on first use and
    // kept; the sender thread's alone.
    std::vector<std::vector<uint8_t>> gathered;
    uint64_t gathers = 0;
  };
  // Takes from `box` (under out_mu_) the queued replica parts that continue
  // `*part` in its holder's region, up to kGatherBytes in all; returns how
  // many parts *part now stands for. Their bytes are copied together later
  // (Gather), outside the lock.
  size_t TakeAdjacent(Outbox* box, Part* part, std::vector<Part>* run);
  // Copies `run` into one of `box`'s buffers and makes *part point there.
  void Gather(Outbox* box, const std::vector<Part>& run, Part* part);
  std::vector<std::unique_ptr<Outbox>> outboxes_;  // per destination rank, made on first use
  std::mutex out_mu_;
  std::condition_variable sent_cv_;  // out_pending_ reached 0
  uint64_t out_pending_ = 0;         // parts queued and not yet sent or dropped
  bool out_stop_ = false;
  Status send_status_;                 // first failed send of the version
  std::vector<uint8_t> seals_record_;  // this rank's entry seals, sent from End
  // Replica and parity regions: crc32c of every part or chain piece as it
  // landed (one receiver thread or chain per region, so no lock), combined
  // at End instead of a second pass.
  struct PartCrc {
    uint64_t offset = 0;
    uint64_t length = 0;
    uint32_t crc = 0;
  };
  std::vector<std::vector<PartCrc>> part_crcs_;  // per store region; capacity kept across versions
  // crc32c of held region `region` from the crcs of the parts that filled it,
  // std::nullopt where they do not reach its end (it is hashed instead).
  // Parts that overlap or leave a gap are Corruption: the seal would vouch
  // for bytes no part of this version wrote.
  Result<std::optional<uint32_t>> CombinedCrc(int region, uint64_t capacity);

  // Erasure schemes: the parity of the version through reduce chains, one
  // per (stripe, parity row) of this rank's group and lane, from the shards
  // in the slots into the parity holders' regions. `snapshot` failed: this
  // rank's hops forward failures (every message count stays the same).
  Status RunParityChains(const Status& snapshot);
  // This rank's shard in the current slot (spans of it, and copies across
  // its entries, zero past its end).
  ShardLanding* Landing();
  std::vector<ShardLanding> landings_;      // per slot, made on first use
  std::vector<ReduceChain> parity_chains_;  // this group's and lane's, built once
  std::vector<int> chain_region_;           // per chain: the region it fills here, or -1
  PieceArena arena_;                        // the chains' piece buffers, kept across versions

  uint64_t version_ = 0;
  uint32_t attempt_ = 0;  // Begins of version_ before this one (ProtectHeader::attempt)
  bool begun_ = false;    // a version was begun (with a slot or without)
  int slot_ = -1;
  std::vector<Source> sources_;
  std::vector<int> replica_holders_;    // nodes that hold this node's replicas (replica schemes)
  std::vector<int> seal_holders_;       // nodes that keep this node's entry seals (computed once)
  std::vector<std::thread> receivers_;  // one per source, started by the first Begin
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // bumped by Begin: receivers start the version
  int busy_ = 0;             // receivers still in the current version
  bool stop_ = false;
  Status receive_status_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace memento::runtime
