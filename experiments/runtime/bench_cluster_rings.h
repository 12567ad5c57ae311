// bench_cluster's baselines (bench_cluster.cc's header, 3.): the MPI ring
// exchange, the XOR ring reduce-scatter and the same ring over a Transport, each
// timed over reps between barriers; and the timing helpers the benchmark shares.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::runtime::bench_cluster {

using Clock = std::chrono::steady_clock;

// Seconds since `t0`.
double Since(Clock::time_point t0);
// The median of `v`; 0 when empty.
double Median(std::vector<double> v);
// The largest `x` of all ranks (MPI_COMM_WORLD).
double MaxOverRanks(double x);
// CPU seconds (user + system) of every thread of this process so far.
double CpuSeconds();

// Tag of the bench's own ring over the Transport. The engine's tags
// (runtime/src/message_tags.h): persist 100, protect 1000, recovery
// 2000 .. 2000 + 2 * 14000 + 1; kMaxTag is 32767.
constexpr int kTagBenchRing = 32000;

// A thread that is joined when it goes out of scope (every exit path).
class JoiningThread {
 public:
  template <typename F>
  explicit JoiningThread(F&& f) : thread_(std::forward<F>(f)) {}
  ~JoiningThread() {
    if (thread_.joinable()) thread_.join();
  }
  JoiningThread(const JoiningThread&) = delete;
  JoiningThread& operator=(const JoiningThread&) = delete;

 private:
  std::thread thread_;
};

// A ring's slowest-rank time (median of the timed reps: s; summed over them:
// wall_s), and this rank's CPU seconds and bytes sent + received summed over
// the timed reps.
struct RingResult {
  double s = 0, cpu_s = 0, bytes = 0, wall_s = 0;
};

// Runs `once` reps + 1 times between barriers, the first as a warm-up, and
// times the others (this rank's CPU seconds, the slowest rank's wall time);
// each rep moves `bytes` (sent + received) on this rank. Every rank leaves
// at the same rep, so no rank waits in a later barrier: a failure on any
// rank ends them all (this rank's own error, else Unavailable).
Result<RingResult> TimedReps(int reps, double bytes, const std::function<Status()>& once);

// MPI ring: S bytes to rank+1, S from rank-1, in messages of `msg` bytes, all
// posted at once. Median of `reps` after one warm-up.
Result<RingResult> RingExchange(const std::vector<uint8_t>& send, std::vector<uint8_t>& recv,
                                uint64_t msg, int reps);

// XOR parity by a pipelined ring reduce-scatter (LLNL redset's XOR
// algorithm), the baseline memento's xor protect is compared with: in a set
// of g consecutive ranks, each rank's S bytes are g - 1 segments of
// seg = ceil(S / (g - 1)) bytes (zero-padded), segment (p - r - 1) mod g of
// rank r belonging to the parity piece of rank p != r. Piece p's partial sum
// starts at rank p + 1 and travels p + 1 -> p + 2 -> ... -> p, each hop
// folding in its own segment, so at step t rank r sends the partial of piece
// r - t and after g - 1 steps holds its parity piece (the XOR of the other
// ranks' segments for it): seg bytes, 1 / (g - 1) of the parity, as memento
// places it. Pipelined in `msg`-byte messages: every receive is posted at
// once and each message is forwarded as soon as it is folded. Raw MPI, no
// copy into any store and no crc32c. The parity is checked once (untimed)
// against an MPI_Allreduce(MPI_BXOR) of the segments. Median of `reps` after
// one warm-up; an error when the parity differs.
Result<RingResult> XorReduceScatter(const std::vector<uint8_t>& data, int g, uint64_t msg,
                                    int reps);

// The same ring over a Transport (the emulated link): one sender thread
// sends S bytes to rank+1 in `msg`-byte messages with Transport::Send while
// one receiver thread receives S bytes from rank-1 with Transport::Recv (tag
// kTagBenchRing). Both threads are joined before it returns, also on error.
Result<RingResult> TransportRing(Transport& t, const std::vector<uint8_t>& send,
                                 std::vector<uint8_t>& recv, uint64_t msg, int reps);

}  // namespace memento::runtime::bench_cluster
