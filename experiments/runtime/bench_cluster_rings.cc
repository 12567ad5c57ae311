// bench_cluster's baselines and timing helpers (bench_cluster_rings.h).
#include "bench_cluster_rings.h"

#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "memento/erasure/gf256.h"

namespace memento::runtime::bench_cluster {

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double MaxOverRanks(double x) {
  double out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double CpuSeconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) { return tv.tv_sec + 1e-6 * tv.tv_usec; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

Result<RingResult> TimedReps(int reps, double bytes, const std::function<Status()>& once) {
  std::vector<double> times;
  RingResult out;
  for (int r = 0; r <= reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double cpu0 = CpuSeconds();
    auto t0 = Clock::now();
    Status s = once();
    const double own = Since(t0), cpu = CpuSeconds() - cpu0;
    const double t = MaxOverRanks(own);
    int ok = s.ok() ? 1 : 0, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MEMENTO_RETURN_IF_ERROR(s);
    if (!all) return Status::Unavailable("the ring failed on another rank");
    if (r == 0) continue;  // warm-up
    times.push_back(t);
    out.cpu_s += cpu;
    out.bytes += bytes;
    out.wall_s += t;
  }
  out.s = Median(times);
  return out;
}

Result<RingResult> RingExchange(const std::vector<uint8_t>& send, std::vector<uint8_t>& recv,
                                uint64_t msg, int reps) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int to = (rank + 1) % n, from = (rank + n - 1) % n;
  const uint64_t bytes = send.size();
  msg = std::min<uint64_t>(msg, 1ull << 30);  // an MPI count is an int
  return TimedReps(reps, 2.0 * bytes, [&] {
    std::vector<MPI_Request> reqs;
    int tag = 0;
    for (uint64_t off = 0; off < bytes; off += msg, ++tag) {
      const int len = static_cast<int>(std::min(msg, bytes - off));
      reqs.emplace_back();
      MPI_Irecv(recv.data() + off, len, MPI_BYTE, from, tag, MPI_COMM_WORLD, &reqs.back());
      reqs.emplace_back();
      MPI_Isend(send.data() + off, len, MPI_BYTE, to, tag, MPI_COMM_WORLD, &reqs.back());
    }
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    return Status::Ok();
  });
}

Result<RingResult> XorReduceScatter(const std::vector<uint8_t>& data, int g, uint64_t msg,
                                    int reps) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const uint64_t seg = (data.size() + g - 2) / (g - 1);
  if (seg * g > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return Status::InvalidArgument("bench_cluster: the XOR ring's check needs " +
                                   std::to_string(seg * g) + " bytes in one MPI count");
  }
  MPI_Comm set;
  MPI_Comm_split(MPI_COMM_WORLD, rank / g, rank, &set);
  const int r = rank % g;
  const uint64_t chunks = (seg + msg - 1) / msg;
  std::vector<uint8_t> mine(seg * (g - 1), 0);  // the padded segments
  std::copy(data.begin(), data.end(), mine.begin());
  auto segment = [&](int piece) { return mine.data() + ((piece - r - 1 + 2 * g) % g) * seg; };
  std::vector<uint8_t> partial(seg * (g - 1));  // step t's received partial at (t - 1) * seg
  auto chunk_len = [&](uint64_t c) { return static_cast<int>(std::min(msg, seg - c * msg)); };
  const int to = (r + 1) % g, from = (r + g - 1) % g;
  Result<RingResult> out = TimedReps(reps, 2.0 * seg * (g - 1), [&] {
    std::vector<MPI_Request> recvs((g - 1) * chunks), sends;
    for (int t = 1; t < g; ++t) {
      for (uint64_t c = 0; c < chunks; ++c) {
        MPI_Irecv(partial.data() + (t - 1) * seg + c * msg, chunk_len(c), MPI_BYTE, from,
                  static_cast<int>(t * chunks + c), set, &recvs[(t - 1) * chunks + c]);
      }
    }
    const uint8_t* first = segment((r + g - 1) % g);  // step 1: its own segment of piece r - 1
    for (uint64_t c = 0; c < chunks; ++c) {
      sends.emplace_back();
      MPI_Isend(first + c * msg, chunk_len(c), MPI_BYTE, to, static_cast<int>(chunks + c), set,
                &sends.back());
    }
    for (int t = 2; t < g; ++t) {
      const uint8_t* own = segment((r - t + 2 * g) % g);
      uint8_t* got = partial.data() + (t - 2) * seg;  // piece r - t, received at step t - 1
      for (uint64_t c = 0; c < chunks; ++c) {
        MPI_Wait(&recvs[(t - 2) * chunks + c], MPI_STATUS_IGNORE);
        erasure::GfMultiplyAdd(1, own + c * msg, got + c * msg, chunk_len(c));
        sends.emplace_back();
        MPI_Isend(got + c * msg, chunk_len(c), MPI_BYTE, to, static_cast<int>(t * chunks + c), set,
                  &sends.back());
      }
    }
    MPI_Waitall(static_cast<int>(chunks), recvs.data() + (g - 2) * chunks, MPI_STATUSES_IGNORE);
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    return Status::Ok();
  });
  if (!out.ok()) {
    MPI_Comm_free(&set);
    return out;
  }
  // Check: piece p of the XOR over the set of every rank's segments laid out
  // by piece (its own piece zero) is rank p's parity.
  std::vector<uint8_t> laid(seg * g, 0), xored(seg * g);
  for (int p = 0; p < g; ++p) {
    if (p != r) std::memcpy(laid.data() + p * seg, segment(p), seg);
  }
  MPI_Allreduce(laid.data(), xored.data(), static_cast<int>(seg * g), MPI_BYTE, MPI_BXOR, set);
  const int good = std::memcmp(xored.data() + r * seg, partial.data() + (g - 2) * seg, seg) == 0;
  int all = 0;
  MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  MPI_Comm_free(&set);
  if (!all) return Status::Internal("bench_cluster: the XOR ring's parity differs from MPI_BXOR");
  return out;
}

Result<RingResult> TransportRing(Transport& t, const std::vector<uint8_t>& send,
                                 std::vector<uint8_t>& recv, uint64_t msg, int reps) {
  const int rank = t.rank(), n = t.size();
  const int to = (rank + 1) % n, from = (rank + n - 1) % n;
  const uint64_t bytes = send.size();
  return TimedReps(reps, 2.0 * bytes, [&] {
    Status sent, received;
    {
      JoiningThread receiver([&] {
        for (uint64_t off = 0; off < bytes && received.ok(); off += msg) {
          const size_t len = std::min(msg, bytes - off);
          Result<size_t> got = t.Recv(from, kTagBenchRing, recv.data() + off, len);
          if (!got.ok()) {
            received = got.status();
          } else if (*got != len) {
            received = Status::Internal("ring: got " + std::to_string(*got) + " bytes, expected " +
                                        std::to_string(len));
          }
        }
      });
      JoiningThread sender([&] {
        for (uint64_t off = 0; off < bytes && sent.ok(); off += msg) {
          sent = t.Send(to, kTagBenchRing, send.data() + off, std::min(msg, bytes - off));
        }
      });
    }  // joins both threads
    MEMENTO_RETURN_IF_ERROR(sent.WithContext("ring send to rank " + std::to_string(to)));
    return received.WithContext("ring receive from rank " + std::to_string(from));
  });
}

}  // namespace memento::runtime::bench_cluster
