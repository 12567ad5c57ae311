// bench_cluster: protect bandwidth, recovery time and memory of a protecting
// scheme on a real MPI job with virtual nodes (docs/architecture.md §9).
// Launched by run_cluster_bench.sh (one mpirun per configuration):
//
//   mpirun -np N bench_cluster --scheme replica:2 --size 64M [--reps 3] [--lose 1[,2...]]
//                              [--remote /tmp/dir] [--job NAME] [--json]
//                              [--link-gibps X] [--remote-gibps X]
//
// Every rank registers one buffer of S bytes (its shard). One launch measures,
// in this order and in the same process (so MPI and memento share the same
// oversubscribed cores):
//
// 0. Two regimes. Without a link (--link-gibps 0, the default) the ranks talk
//    over raw MPI; on a machine with fewer cores than ranks the run is then
//    CPU-bound (protect spends per byte a snapshot copy, a crc32c, the MPI
//    copies and the holder's work, the ring only the MPI copies). With
//    --link-gibps X every node (process; needs MEMENTO_RANKS_PER_NODE=1) gets
//    an emulated full-duplex NIC of X GiB/s per direction (LinkTransport,
//    emulated_links.h): each point-to-point Send books its bytes on the node's egress
//    token bucket and returns no earlier than the booking's end, each
//    completed Recv books its bytes on the ingress bucket and sleeps until
//    the booking's end; buckets are shared by all threads of the process and
//    have a depth of link_burst_bytes (1 MiB, absorbs the completion latency
//    of the inner MPI transfer so a paced stream is not charged twice);
//    collectives are not throttled. Protect, the MPI baseline ring (3.) and
//    recovery (5.) all go through it, so with a link slower than the CPU can
//    feed, protect and baseline are compared on the same network, as on a
//    cluster whose network is the bottleneck. JSON: link_gibps (0 when off),
//    link_burst_bytes.
//
// 1. protect. Checkpointer with the scheme, no remote tier. Two warm-up
//    versions (first touch of both slots and the peers' regions), then `reps`
//    versions, each: Barrier; Save(v); WaitSnapshot(); Wait() (commit = every
//    holder sealed its replica / parity). protect_s = the slowest rank's
//    Save -> Wait time (max over ranks), median over reps. The transport is
//    wrapped to count every point-to-point payload byte, so
//      protect traffic per node = bytes the node's ranks sent + received
//                                 during one version (measured, not modelled)
//      protect_node_gibps       = protect traffic per node / protect_s
//    (mean over nodes; the min over nodes is reported too), and
//      shard_gibps              = S per node / protect_s (shard bytes protected
//                                 per second per node).
//    CPU: getrusage(RUSAGE_SELF) (user + system, every thread of the process)
//    just before Save and just after Wait of each timed version, summed over
//    versions and ranks, divided by the protect traffic of those versions
//    summed over ranks: protect_cpu_s_per_gib (CPU seconds per GiB moved).
//    protect_cpu_util = those CPU seconds / (cores x the summed protect_s),
//    cores = std::thread::hardware_concurrency(). Waiting threads count:
//    MpiTransport polls (MPI_Test, sched_yield, short sleeps) and Open MPI's
//    blocking calls spin, so util near 1 means the cores were busy, not that
//    they were all doing protect work.
//    shm_huge: the huge= option of the tmpfs under /dev/shm (never, always,
//    within_size, advise; tmpfs's default is never). With 4 KiB pages every
//    first access to a page of a freshly mapped store costs a fault, which
//    on the VM these numbers come from is 5-20x the cost on bare metal; the
//    stores are mapped whole when created or opened read-write
//    (docs/architecture.md §4), but a first access still pays for its page
//    table entry. experiments/runtime/README.md compares both.
// 2. peak memory. VmHWM (/proc/self/status) after the protect reps, summed over
//    a node's ranks; the node store segment size (/dev/shm); both against the
//    scheme's formula: replica:M -> M*S*slots, xor:K / rs:K+M ->
//    S*(1+M/K')*slots (xor: M = 1), K' the data rows of the node's group as
//    placement::GroupLayout forms it (K, except where the remainder of N mod
//    (K+M) is folded into a group: rs:4+2 on N=8 is one group of 6+2, K'=6);
//    the nominal S*(1+M/K)*slots is printed too. rss_ckpt = VmHWM - VmRSS just before the
//    Checkpointer was created (MPI initialised, training buffer touched), so the
//    training buffer itself is excluded; the rest over the formula is the
//    fixed overhead (MPI shared-memory FIFOs, slot control blocks, threads).
// 3. MPI baseline. Ring exchange: rank r sends S bytes to r+1 and receives S
//    from r-1 (mod N), in chunk_bytes messages (MEMENTO_CHUNK_BYTES, as the
//    protect stage streams), all posted at once with MPI_Isend / MPI_Irecv and
//    completed with MPI_Waitall (mpi_ring_chunked_s); also one S-byte message
//    per rank (mpi_ring_single_s). Both are raw MPI, never throttled, slowest
//    rank, median of reps; mpi_raw_node_gibps = 2*S / the faster of the two.
//    With a link, the ring is run again over the emulated link
//    (mpi_ring_link_s; 0 without a link): the same S bytes to r+1 and from
//    r-1 in chunk_bytes messages, one sender thread calling Transport::Send
//    and one receiver thread calling Transport::Recv concurrently (tag
//    kTagBenchRing, outside the engine's tags). The baseline ring is the link
//    ring when there is a link, else the faster raw ring: traffic per node
//    2*S; mpi_node_gibps = 2*S / its time. Ratio: protect_vs_mpi =
//    protect_node_gibps / mpi_node_gibps (target >= 0.8).
//    CPU of the baseline ring as for protect (window: from posting the
//    messages / starting the threads to completion, timed reps, all ranks;
//    traffic 2*S per rank per rep): mpi_cpu_s_per_gib, mpi_cpu_util; and
//      cpu_ratio = mpi_cpu_s_per_gib / protect_cpu_s_per_gib,
//    the protect/MPI bandwidth ratio a machine whose cores are the bottleneck
//    can reach at best. When both phases keep every core busy (util ~1, the
//    CPU-bound regime), cpu_ratio ~= protect_vs_mpi by construction: it then
//    says that the gap is CPU seconds per byte, not what it would be without
//    the polling. ranks = MPI ranks of the job.
//    XOR baseline (xor:K, no link, N a multiple of K+1, 1 rank per node):
//    XOR parity of the same S bytes per rank by a pipelined ring
//    reduce-scatter in sets of K+1 consecutive ranks (LLNL redset's XOR
//    algorithm; each rank ends with S/K of the parity, the same share and
//    the same bytes moved and folded as memento's xor groups; see
//    XorReduceScatter), raw MPI in chunk_bytes messages, no store copy, no
//    crc32c, checked against MPI_BXOR: xor_ring_s (slowest rank, median),
//    xor_ring_cpu_s_per_gib (traffic 2*S per rank per rep),
//    protect_vs_xor_ring = xor_ring_s / protect_s and protect_cpu_vs_xor_ring
//    = xor_ring_cpu_s_per_gib / protect_cpu_s_per_gib (>= 1: protect as fast
//    / as cheap); all 0 when not run. protect_s includes the snapshot (copy
//    into the store + crc32c), which the ring does not do; its parity part
//    is protect_after_snapshot_s (WaitSnapshot -> Wait, slowest rank,
//    median over reps), and parity_vs_xor_ring = xor_ring_s /
//    protect_after_snapshot_s compares the parity algorithms alone.
// 4. remote baseline. Every rank writes its shard as a rank file of version 1
//    to a DirectoryRemoteStore (untimed; rank 0 writes the manifest), then all
//    ranks read their rank file at once with ReadRankFile (crc32c verified, as
//    a remote restore does): remote_warm_s (page-cached: just written) and
//    remote_cold_s (after fdatasync + posix_fadvise(DONTNEED) on the file, which
//    evicts its pages without root; dropping the whole page cache is not
//    possible here). The slowest rank counts.
//    A local disk is no parallel file system: after a failure, a job that
//    restores from storage reloads every rank at once through the file
//    system's aggregate bandwidth, shared by the whole job. remote_link_s
//    emulates that (StorageLink, emulated_links.h): all ranks read their rank file at once
//    through one link of remote_gibps GiB/s for the whole job, booked in
//    kStorageChunk pieces on a counter shared by every rank (so the ranks'
//    reads interleave and the job's aggregate is the link's rate), then read
//    it (page-cached) and verify its crc32c as a restore does; slowest rank.
//    --remote-gibps X sets the aggregate; the default (auto) gives every node
//    1/kStorageShare (1/15) of its own network link: --link-gibps when set,
//    else the per-direction bandwidth of the baseline ring measured in 3.
//    That is the usual ratio on clusters (a node's NIC carries 10-20x its
//    fair share of the shared file system's bandwidth: e.g. 25 GB/s NICs on
//    1000 nodes against a 1-2.5 TB/s file system). JSON: remote_gibps,
//    remote_gibps_auto, remote_link_s; 0 disables it (remote_link_s 0).
// 5. recovery of the lost nodes (default 1 node; `--lose 1,2` loses M nodes).
//    Every rank destroys its Checkpointer; the ranks of the nodes in `--lose` unlink their
//    segment (NodeStore::Destroy: the node's memory is gone) and scribble over their
//    buffer; a new Checkpointer on every rank; Prepare() and Restore() back to back, as a
//    job's Restore() runs them, timed from one barrier: prepare_s (a lost node makes a fresh
//    store, pages reserved in the background; survivors attach theirs), recover_s (until
//    Restore returns: training resumes), resume_s (both); each the max over ranks. Wait():
//    protected_s, until the re-protect committed. Over a link,
//    resume_vs_link_bound / protected_vs_link_bound divide them by the time
//    a lost node needs to receive its shards over its link (link_bound_s).
//    recover_cpu_s: all ranks' CPU seconds inside Restore() (getrusage, every
//    thread); recover_cpu_s_per_gib divides it by the GiB restored into the
//    lost nodes, recover_cpu_util by cores x recover_s (near 1: the restore
//    is CPU-bound on this machine). The report's phase times (inventory, plan, transfer,
//    reprotect) are the max over ranks; lost_transfer_s is the transfer phase of the lost
//    nodes' ranks alone (until their buffers hold the shard), and transfer_vs_ring = (S /
//    lost_transfer_s) / (S / ring s), the bytes per second restored into a lost node against
//    the baseline ring's per-direction bandwidth (3.; the link ring over a link). The restored
//    buffers are checked against a checksum taken before the loss. Ratios: recover_s /
//    remote_warm_s, recover_s / remote_cold_s and recover_vs_remote_link = recover_s /
//    remote_link_s (the restore of the whole job through the emulated file system).
//    resume_incl_prepare_vs_transfer = resume_s / lost_transfer_s: the time to resume, the
//    replacement's new store included, against the transfer into it.
//
// Output: rank 0 prints one JSON object (--json) or a readable block. Every
// exit path unlinks this job's segments and removes its remote folder.
// MEMENTO_* variables apply (Config::FromEnv); --scheme, --job, slots from
// MEMENTO_SLOTS; persist is off.
#include <fcntl.h>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_cluster_report.h"
#include "bench_cluster_rings.h"
#include "emulated_links.h"
#include "memento/erasure/gf256.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/mpi_transport.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"

namespace memento::runtime {
namespace {

using bench::Clock;
using bench::CountingTransport;
using bench::kLinkBurstBytes;
using bench::LinkTransport;
using bench::StorageLink;
using bench_cluster::CpuSeconds;
using bench_cluster::JoiningThread;
using bench_cluster::JsonHead;
using bench_cluster::kTagBenchRing;
using bench_cluster::LostNodesText;
using bench_cluster::MaxOverRanks;
using bench_cluster::Median;
using bench_cluster::Options;
using bench_cluster::Print;
using bench_cluster::RankStats;
using bench_cluster::Report;
using bench_cluster::RingExchange;
using bench_cluster::RingResult;
using bench_cluster::Since;
using bench_cluster::TimedReps;
using bench_cluster::TransportRing;
using bench_cluster::XorReduceScatter;

// A field of /proc/self/status ("VmHWM", "VmRSS") in bytes; 0 if absent.
uint64_t ProcStatusBytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0) return std::stoull(line.substr(key.size())) * 1024;
  }
  return 0;
}

// MemAvailable from /proc/meminfo, bytes.
uint64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoull(line.substr(13)) * 1024;
  }
  return 0;
}

// "[1, 2]" / "1,2" for the JSON record and the readable block.
// A node's network link carries this many times its fair share of the shared
// file system's bandwidth (the --remote-gibps default; see the header).
constexpr double kStorageShare = 15;
// Pieces in which a rank books its remote read on the storage link.
constexpr uint64_t kStorageChunk = 4ull << 20;

// The scheme's memory factor: bytes a node holds per shard byte per slot.
Result<double> SchemeFactor(const std::string& scheme) {
  int m = 0, k = 0;
  if (std::sscanf(scheme.c_str(), "replica:%d", &m) == 1 && m >= 1) return static_cast<double>(m);
  if (std::sscanf(scheme.c_str(), "rs:%d+%d", &k, &m) == 2 && k >= 1) return 1.0 + double(m) / k;
  if (std::sscanf(scheme.c_str(), "xor:%d", &k) == 1 && k >= 1) return 1.0 + 1.0 / k;
  return Status::InvalidArgument("bench_cluster: no memory formula for scheme '" + scheme + "'");
}

// Per-node memory factor of the groups the runtime really forms
// (placement::GroupLayout): replica -> copies; erasure -> 1 + M / K', where K'
// is the node's group's data rows (a remainder of N mod (K+M) nodes may be
// folded into the previous group, e.g. rs:4+2 on N=8 is one group of 6+2).
Result<std::vector<double>> NodeFactors(const std::string& scheme, int nodes) {
  MEMENTO_ASSIGN_OR_RETURN(placement::Scheme sc, placement::Scheme::Parse(scheme));
  MEMENTO_ASSIGN_OR_RETURN(placement::Topology topo, placement::Topology::Uniform(nodes));
  MEMENTO_ASSIGN_OR_RETURN(placement::GroupLayout groups, placement::GroupLayout::Build(topo, sc));
  std::vector<double> f(nodes, 1.0);
  for (int n = 0; n < nodes; ++n) {
    const placement::ProtectionGroup& g = groups.group(groups.group_of(n));
    if (g.kind == placement::GroupKind::kReplica) f[n] = g.copies;
    if (g.kind == placement::GroupKind::kErasure) f[n] = 1.0 + double(g.parity) / g.data;
  }
  return f;
}

// Word-wise checksum of a buffer (fast; detects a wrong restore).
uint64_t Checksum(const std::vector<uint8_t>& b) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull + (h >> 29);
  }
  for (; i < b.size(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

void Fill(std::vector<uint8_t>& b, int rank, uint64_t step) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ (step << 8) ^ 0x2545F4914F6CDD1Dull;
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(b.data() + i, &x, 8);
  }
}

// Reads this rank's rank file of version 1; slowest rank's time.
Result<double> TimedRemoteRead(DirectoryRemoteStore& store, int rank, std::vector<uint8_t>& dst) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = Clock::now();
  Status s = store.ReadRankFile(1, rank, {RemoteEntryTarget{"model", dst.data(), dst.size()}});
  const double t = MaxOverRanks(Since(t0));
  MEMENTO_RETURN_IF_ERROR(s);
  return t;
}

// Writes back and evicts the page cache of `path` (posix_fadvise DONTNEED).
Status EvictFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::IoError("open " + path + ": " + std::strerror(errno));
  fdatasync(fd);
  int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  if (rc != 0) return Status::IoError("posix_fadvise " + path + ": " + std::strerror(rc));
  return Status::Ok();
}

class Bench {
 public:
  Bench(Options opt, Config config, int rank, int size)
      : opt_(std::move(opt)), config_(std::move(config)), rank_(rank), size_(size) {}

  ~Bench() { Cleanup(); }

  // Unlinks this rank's segment and (rank 0) the job's remote folder and any
  // segment of the job left behind. Idempotent.
  void Cleanup() {
    ck_.reset();
    if (cleaned_) return;
    cleaned_ = true;
    (void)NodeStore::Destroy(Id());
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) {
      (void)CleanJob(config_.job);
      std::error_code ec;
      if (remote_) std::filesystem::remove_all(remote_->job_dir(), ec);
    }
  }

  StoreId Id() const {
    return StoreId{config_.job, NodeIdentity(config_, rank_),
                   static_cast<uint32_t>(LocalRank(config_, rank_))};
  }
  int node() const { return rank_ / config_.ranks_per_node; }

  Status Run(Report* out) {
    RankStats me;
    MEMENTO_RETURN_IF_ERROR(CheckLostNodes());
    buf_.assign(opt_.size, 0);
    Fill(buf_, rank_, 0);
    me.rss_before = static_cast<double>(ProcStatusBytes("VmRSS"));
    MEMENTO_ASSIGN_OR_RETURN(const uint64_t last, MeasureProtect(out, &me));
    MEMENTO_RETURN_IF_ERROR(MeasurePeakMemory(&me));
    MEMENTO_RETURN_IF_ERROR(MeasureMpiBaseline(out, &me));
    const uint64_t expect_sum = Checksum(buf_);  // contents of version `last`
    MEMENTO_RETURN_IF_ERROR(MeasureRemoteRead(out, expect_sum));
    MEMENTO_RETURN_IF_ERROR(MeasureRecovery(out, &me, last, expect_sum));
    GatherRankStats(me, out);
    out->ranks = size_;
    out->ranks_per_node = config_.ranks_per_node;
    out->nodes = size_ / config_.ranks_per_node;
    out->slots = config_.slots;
    out->threads = config_.SnapshotThreads(/*device_state=*/false, 0, 0, 1);  // host buffers
    out->chunk = config_.chunk_bytes;
    out->cores = static_cast<int>(std::thread::hardware_concurrency());
    return Status::Ok();
  }

 private:
  Status CheckLostNodes() const {
    const int nodes = size_ / config_.ranks_per_node;
    for (int n : opt_.lose) {
      if (n >= nodes) {
        return Status::InvalidArgument("bench_cluster: --lose " + std::to_string(n) +
                                       " is not a node of this job (0.." +
                                       std::to_string(nodes - 1) + ")");
      }
    }
    return Status::Ok();
  }

  // 1. Protect: two warm-up versions, then opt_.reps timed ones. Returns the
  // last version saved.
  Result<uint64_t> MeasureProtect(Report* out, RankStats* me) {
    MEMENTO_ASSIGN_OR_RETURN(
        auto mpi, CreateMpiTransport(MpiTransportOptions{
                      MPI_COMM_WORLD,
                      std::chrono::milliseconds(static_cast<int64_t>(config_.timeout_s * 1000))}));
    link_ = mpi;
    if (opt_.link_gibps > 0) {
      link_ = std::make_shared<LinkTransport>(mpi, opt_.link_gibps * (1 << 30), kLinkBurstBytes);
    }
    transport_ = std::make_shared<CountingTransport>(link_);
    MEMENTO_ASSIGN_OR_RETURN(ck_, Checkpointer::Create(config_, transport_));
    MEMENTO_RETURN_IF_ERROR(ck_->RegisterBuffer("model", buf_.data(), buf_.size()));
    MEMENTO_RETURN_IF_ERROR(ck_->Prepare());
    uint64_t step = 1;
    std::vector<double> protect, snapshot, after_snapshot, traffic;
    for (int r = 0; r < 2 + opt_.reps; ++r, ++step) {
      Fill(buf_, rank_, step);  // the optimizer step: new contents every version
      MPI_Barrier(MPI_COMM_WORLD);
      transport_->Reset();
      const double cpu0 = CpuSeconds();
      auto t0 = Clock::now();
      MEMENTO_RETURN_IF_ERROR(ck_->Save(step));
      MEMENTO_RETURN_IF_ERROR(ck_->WaitSnapshot());
      const double snap = Since(t0);
      MEMENTO_RETURN_IF_ERROR(ck_->Wait());
      const double own = Since(t0), cpu = CpuSeconds() - cpu0;
      const double t = MaxOverRanks(own);
      const double snap_max = MaxOverRanks(snap);
      const double after_max = MaxOverRanks(own - snap);
      if (r < 2) continue;  // warm-up
      protect.push_back(t);
      snapshot.push_back(snap_max);
      after_snapshot.push_back(after_max);
      traffic.push_back(static_cast<double>(transport_->sent() + transport_->received()));
      me->protect_cpu_s += cpu;
      me->protect_bytes_total += traffic.back();
    }
    out->protect_s = Median(protect);
    for (double t : protect) out->protect_wall_s += t;
    out->snapshot_s = Median(snapshot);
    out->after_snapshot_s = Median(after_snapshot);
    me->protect_bytes = Median(traffic);
    return step - 1;
  }

  // 2. Peak memory (before any baseline buffer exists) and the segment's size.
  Status MeasurePeakMemory(RankStats* me) {
    me->hwm = static_cast<double>(ProcStatusBytes("VmHWM"));
    MEMENTO_ASSIGN_OR_RETURN(std::string name, NodeStore::SegmentName(Id()));
    struct stat st {};
    if (stat((ShmSegment::Directory() + name).c_str(), &st) == 0)
      me->shm_bytes = static_cast<double>(st.st_size);
    return Status::Ok();
  }

  // 3. The MPI baseline: the ring over the emulated link when it is on, else
  // the faster raw ring (decided on every rank alike: the times are maxima).
  Status MeasureMpiBaseline(Report* out, RankStats* me) {
    std::vector<uint8_t> recv(opt_.size, 1);
    MEMENTO_ASSIGN_OR_RETURN(const RingResult chunked,
                             RingExchange(buf_, recv, config_.chunk_bytes, opt_.reps));
    MEMENTO_ASSIGN_OR_RETURN(const RingResult single,
                             RingExchange(buf_, recv, opt_.size, opt_.reps));
    out->ring_chunked_s = chunked.s;
    out->ring_single_s = single.s;
    RingResult base = chunked.s <= single.s ? chunked : single;
    if (opt_.link_gibps > 0) {
      MEMENTO_ASSIGN_OR_RETURN(base,
                               TransportRing(*link_, buf_, recv, config_.chunk_bytes, opt_.reps));
      out->ring_link_s = base.s;
    }
    me->ring_cpu_s = base.cpu_s;
    out->ring_wall_s = base.wall_s;
    me->ring_bytes_total = base.bytes;
    return MeasureXorRing(out, me);
  }

  // The XOR ring reduce-scatter over sets of K + 1 consecutive ranks, for
  // xor:K without a link when the ranks divide into such sets (memento's xor
  // groups then hold the same nodes).
  Status MeasureXorRing(Report* out, RankStats* me) {
    int k = 0;
    if (opt_.link_gibps > 0 || std::sscanf(opt_.scheme.c_str(), "xor:%d", &k) != 1 || k < 2 ||
        size_ % (k + 1) != 0 || config_.ranks_per_node != 1) {
      return Status::Ok();
    }
    MEMENTO_ASSIGN_OR_RETURN(RingResult x,
                             XorReduceScatter(buf_, k + 1, config_.chunk_bytes, opt_.reps));
    out->xor_ring_s = x.s;
    me->xor_ring_cpu_s = x.cpu_s;
    me->xor_ring_bytes_total = x.bytes;
    return Status::Ok();
  }

  // Writes every rank's file of version 1 and (rank 0) the manifest.
  Status WriteRemoteVersion() {
    MEMENTO_ASSIGN_OR_RETURN(
        RankFileInfo info,
        remote_->WriteRankFile(1, rank_, {{"model", buf_.data(), opt_.size, {}, std::nullopt}}));
    // Gather every rank's file record to rank 0 for the manifest.
    char name[256] = {};
    std::snprintf(name, sizeof(name), "%s", info.file.c_str());
    std::vector<char> names(rank_ == 0 ? 256 * size_ : 0);
    uint64_t mine[2] = {info.bytes, info.crc};
    std::vector<uint64_t> all(2 * size_);
    MPI_Gather(name, 256, MPI_CHAR, names.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Gather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int ok = 1;
    if (rank_ == 0) {
      std::vector<RankFileInfo> files(size_);
      for (int r = 0; r < size_; ++r) {
        files[r] = RankFileInfo{r, std::string(&names[256 * r]), all[2 * r],
                                static_cast<uint32_t>(all[2 * r + 1])};
      }
      ok = remote_->WriteManifest(1, size_, files).ok();
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) return Status::IoError("bench_cluster: writing the remote manifest failed");
    return Status::Ok();
  }

  // 4. The remote baseline: reading this rank's file warm and cold.
  Status MeasureRemoteRead(Report* out, uint64_t expect_sum) {
    remote_ = std::make_unique<DirectoryRemoteStore>(opt_.remote, config_.job);
    MEMENTO_RETURN_IF_ERROR(WriteRemoteVersion());
    std::vector<uint8_t> dst(opt_.size);
    MEMENTO_ASSIGN_OR_RETURN(double warm0, TimedRemoteRead(*remote_, rank_, dst));
    MEMENTO_ASSIGN_OR_RETURN(double warm1, TimedRemoteRead(*remote_, rank_, dst));
    out->remote_warm_s = std::min(warm0, warm1);
    MEMENTO_RETURN_IF_ERROR(EvictFile(remote_->RankFilePath(1, rank_)));
    MEMENTO_ASSIGN_OR_RETURN(out->remote_cold_s, TimedRemoteRead(*remote_, rank_, dst));
    if (Checksum(dst) != expect_sum) return Status::Corruption("remote read differs");
    return MeasureRemoteLink(out, dst, expect_sum);
  }

  // The same read of every rank at once through the emulated file system.
  Status MeasureRemoteLink(Report* out, std::vector<uint8_t>& dst, uint64_t expect_sum) {
    constexpr double gib = 1024.0 * 1024 * 1024;
    double gibps = opt_.remote_gibps;
    if (gibps < 0) {
      // Per-direction bandwidth of a node's link: the emulated one, else the
      // baseline ring measured in 3.
      const double ring_s = std::min(out->ring_chunked_s, out->ring_single_s);
      const double node_link = opt_.link_gibps > 0 ? opt_.link_gibps
                                                   : static_cast<double>(opt_.size) *
                                                         config_.ranks_per_node / ring_s / gib;
      gibps = (size_ / config_.ranks_per_node) * node_link / kStorageShare;
    }
    out->remote_gibps = gibps;
    if (gibps <= 0) return Status::Ok();
    MEMENTO_ASSIGN_OR_RETURN(auto link, StorageLink::Create(gibps * gib));
    link->Start();
    auto t0 = Clock::now();
    for (uint64_t off = 0; off < opt_.size; off += kStorageChunk) {
      link->Carry(std::min(kStorageChunk, opt_.size - off));
    }
    Status s =
        remote_->ReadRankFile(1, rank_, {RemoteEntryTarget{"model", dst.data(), dst.size()}});
    out->remote_link_s = MaxOverRanks(Since(t0));
    MEMENTO_RETURN_IF_ERROR(s);
    if (Checksum(dst) != expect_sum) return Status::Corruption("remote read differs");
    return Status::Ok();
  }

  // 5. Recovery of the nodes in opt_.lose: their segments are unlinked and
  // their buffers poisoned, then every rank restores.
  Status MeasureRecovery(Report* out, RankStats* me, uint64_t last, uint64_t expect_sum) {
    ck_.reset();
    MPI_Barrier(MPI_COMM_WORLD);
    const bool lost = std::count(opt_.lose.begin(), opt_.lose.end(), node()) > 0;
    if (lost) {
      MEMENTO_RETURN_IF_ERROR(NodeStore::Destroy(Id()));
      std::fill(buf_.begin(), buf_.end(), 0xEE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    transport_->Reset();
    MEMENTO_ASSIGN_OR_RETURN(ck_, Checkpointer::Create(config_, transport_));
    MEMENTO_RETURN_IF_ERROR(ck_->RegisterBuffer("model", buf_.data(), buf_.size()));
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t_prepare = Clock::now();
    MEMENTO_RETURN_IF_ERROR(ck_->Prepare());
    const auto t0 = Clock::now();
    const double prepared = std::chrono::duration<double>(t0 - t_prepare).count();
    const double cpu0 = CpuSeconds();
    MEMENTO_ASSIGN_OR_RETURN(RestoreReport rep, ck_->Restore());
    const double resumed = Since(t0);
    me->recover_cpu_s = CpuSeconds() - cpu0;
    // The re-protect may go on in the background (its collectives on the
    // engine's own communicator): protected again once Wait() returns.
    MEMENTO_RETURN_IF_ERROR(ck_->Wait());
    if (ck_->ProtectionState() != Protection::kProtected) {
      return Status::Internal("not protected again after the restore");
    }
    const double protected_again = Since(t0);
    out->prepare_s = MaxOverRanks(prepared);
    out->recover_s = MaxOverRanks(resumed);
    out->resume_s = MaxOverRanks(prepared + resumed);
    out->protected_s = MaxOverRanks(protected_again);
    out->reprotect_mode = rep.stats.reprotect_mode;
    out->inventory_s = MaxOverRanks(rep.stats.inventory_s);
    out->plan_s = MaxOverRanks(rep.stats.plan_s);
    out->transfer_s = MaxOverRanks(rep.stats.transfer_s);
    out->lost_transfer_s = MaxOverRanks(lost ? rep.stats.transfer_s : 0.0);
    out->reprotect_s = MaxOverRanks(std::max(rep.stats.reprotect_s, protected_again - resumed));
    out->restored_version = rep.version;
    if (rank_ == 0) out->source_detail = rep.source_detail;
    me->recover_sent = static_cast<double>(rep.stats.bytes_sent);
    me->recover_received = static_cast<double>(rep.stats.bytes_received);
    me->restored_ok = rep.version == last && Checksum(buf_) == expect_sum ? 1 : 0;
    PassLostNodeDetail(rep.source_detail, out);
    return Status::Ok();
  }

  // The first lost node's restore detail is the interesting one: its first
  // rank passes it to rank 0.
  void PassLostNodeDetail(const std::string& detail, Report* out) {
    const int lost_rank = opt_.lose[0] * config_.ranks_per_node;
    if (rank_ == lost_rank && rank_ != 0) {
      int len = static_cast<int>(detail.size());
      MPI_Send(&len, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
      MPI_Send(detail.data(), len, MPI_CHAR, 0, 8, MPI_COMM_WORLD);
    }
    if (rank_ == 0 && lost_rank != 0) {
      int len = 0;
      MPI_Recv(&len, 1, MPI_INT, lost_rank, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      std::string d(len, ' ');
      MPI_Recv(d.data(), len, MPI_CHAR, lost_rank, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      out->source_detail = d;
    }
  }

  // Every rank's stats to rank 0 (out->per_rank, in rank order).
  void GatherRankStats(const RankStats& me, Report* out) const {
    double mine[RankStats::kFields] = {
        me.protect_bytes,
        me.rss_before,
        me.hwm,
        me.shm_bytes,
        me.recover_sent,
        me.recover_received,
        me.restored_ok,
        me.protect_cpu_s,
        me.protect_bytes_total,
        me.ring_cpu_s,
        me.ring_bytes_total,
        me.xor_ring_cpu_s,
        me.xor_ring_bytes_total,
        me.recover_cpu_s,
    };
    std::vector<double> all(rank_ == 0 ? RankStats::kFields * size_ : 0);
    MPI_Gather(mine, RankStats::kFields, MPI_DOUBLE, all.data(), RankStats::kFields, MPI_DOUBLE, 0,
               MPI_COMM_WORLD);
    if (rank_ != 0) return;
    for (int r = 0; r < size_; ++r) {
      const double* f = &all[RankStats::kFields * r];
      out->per_rank.push_back(RankStats{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9],
                                        f[10], f[11], f[12], f[13]});
    }
  }

  Options opt_;
  Config config_;
  int rank_, size_;
  std::vector<uint8_t> buf_;
  std::shared_ptr<Transport> link_;  // MpiTransport, behind a LinkTransport when --link-gibps
  std::shared_ptr<CountingTransport> transport_;
  std::unique_ptr<Checkpointer> ck_;
  std::unique_ptr<DirectoryRemoteStore> remote_;
  bool cleaned_ = false;
};

// Memory check (rank 0 decides for all): per rank, shm = factor x S x slots
// plus the training buffer, the ring's receive buffer and a read buffer. When
// it does not fit, prints a "skipped" record and returns false.
bool FitsInMemory(const Options& opt, const Config& config, double factor, int size) {
  const double need_shm = factor * opt.size * config.slots * size;
  const double need_mem = need_shm + 3.0 * opt.size * size;
  struct statvfs vfs {};
  const double shm_free = statvfs(ShmSegment::Directory().c_str(), &vfs) == 0
                              ? static_cast<double>(vfs.f_bavail) * vfs.f_frsize
                              : 0;
  const double avail = static_cast<double>(MemAvailableBytes());
  if (need_shm <= 0.9 * shm_free && need_mem <= 0.85 * avail) return true;
  char reason[512];
  std::snprintf(reason, sizeof(reason),
                "needs %.1f GiB shm / %.1f GiB memory, %s has %.1f GiB free, "
                "MemAvailable %.1f GiB",
                need_shm / (1 << 30), need_mem / (1 << 30), ShmSegment::Directory().c_str(),
                shm_free / (1 << 30), avail / (1 << 30));
  nlohmann::ordered_json j = JsonHead(opt.scheme, size / config.ranks_per_node);
  j["shard_bytes"] = opt.size;
  j["skipped"] = true;
  j["reason"] = reason;
  std::printf("%s%s\n", opt.json ? "" : "SKIPPED ", j.dump().c_str());
  return false;
}

int Main(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "bench_cluster: protect bandwidth vs MPI, recovery vs a remote read, memory vs "
      "the scheme's formula; one rank per process under mpirun -np N"};
  app.add_flag("--json", opt.json, "one JSON object per run on stdout");
  app.add_option("--scheme", opt.scheme, "replica:M[:ring], xor:K or rs:K+M");
  app.add_option("--size", opt.size, "shard bytes per rank (K/M/G suffixes)")
      ->transform(CLI::Validator(
          [](std::string& text) {
            auto v = ParseByteSize(text);
            if (!v.ok()) return v.status().message();
            text = std::to_string(*v);
            return std::string();
          },
          "BYTES"));
  app.add_option("--reps", opt.reps, "repetitions of the protect measurement")
      ->check(CLI::Range(1, 1000));
  app.add_option("--lose", opt.lose, "node indices lost before the recovery, e.g. 1,2")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--remote", opt.remote, "remote tier folder (the read compared against)");
  app.add_option("--job", opt.job, "job id of the segments");
  app.add_option("--link-gibps", opt.link_gibps,
                 "emulated per-node link bandwidth in GiB/s; 0 = no emulation")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--remote-gibps", opt.remote_gibps,
                 "emulated parallel file system for the whole job, GiB/s (default: each node "
                 "gets 1/15 of its link; 0 = off)")
      ->check(CLI::Range(0.0, 1e6));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (opt.lose.empty()) {
    std::fprintf(stderr, "bench_cluster: --lose needs at least one node\n");
    return 2;
  }
  auto config = Config::FromEnv();
  auto factor = SchemeFactor(opt.scheme);
  if (!config.ok() || !factor.ok()) {
    std::fprintf(stderr, "bench_cluster: %s\n",
                 (config.ok() ? factor.status() : config.status()).ToString().c_str());
    return 2;
  }
  if (opt.link_gibps > 0 && config->ranks_per_node > 1) {
    std::fprintf(stderr,
                 "bench_cluster: --link-gibps models one NIC per process; it needs "
                 "MEMENTO_RANKS_PER_NODE=1 (got %d)\n",
                 config->ranks_per_node);
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  config->scheme = opt.scheme;
  config->persist_every = 0;
  config->remote_dir.clear();
  if (config->ranks_per_node <= 0) config->ranks_per_node = 1;
  if (opt.job.empty()) {
    long pid = rank == 0 ? static_cast<long>(getpid()) : 0;
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    opt.job = "benchc-" + std::to_string(pid);
  }
  config->job = opt.job;

  int skip = rank == 0 && !FitsInMemory(opt, *config, *factor, size) ? 1 : 0;
  MPI_Bcast(&skip, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int rc = 0;
  if (!skip) {
    Report report;
    Status s;
    {
      Bench bench(opt, *config, rank, size);
      s = bench.Run(&report);
      int ok = s.ok() ? 1 : 0, all = 0;
      MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (!s.ok()) std::fprintf(stderr, "bench_cluster rank %d: %s\n", rank, s.ToString().c_str());
      if (all == 0) {
        rc = 1;
      } else if (rank == 0) {
        auto node_factor = NodeFactors(opt.scheme, report.nodes);
        if (node_factor.ok()) {
          Print(opt, report, *factor, *node_factor);
        } else {
          std::fprintf(stderr, "bench_cluster: %s\n", node_factor.status().ToString().c_str());
          rc = 1;
        }
      }
    }  // Bench's destructor unlinks segments and the remote folder
  }
  MPI_Finalize();
  return rc;
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
