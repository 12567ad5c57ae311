// The emulated network of bench_cluster (its header, 0. and 4.): a
// transport that counts the payload bytes, a node's full-duplex NIC of a
// given rate (LinkTransport), and the job's shared file system link
// (StorageLink). Included by bench_cluster.cc alone.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::runtime::bench {

using Clock = std::chrono::steady_clock;

// A transfer of an inner transport with `then` applied to its result when
// it is waited for (a counter, the emulated link's wire time).
class ThenTransfer final : public Transport::PendingTransfer {
 public:
  using Then = std::function<Result<size_t>(Result<size_t>)>;
  ThenTransfer(std::unique_ptr<Transport::PendingTransfer> inner, Then then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  Result<size_t> Wait() override { return then_(inner_->Wait()); }
  bool Test() override { return inner_->Test(); }

  static Result<std::unique_ptr<Transport::PendingTransfer>> Wrap(
      Result<std::unique_ptr<Transport::PendingTransfer>> started, Then then) {
    if (!started.ok()) return started.status();
    return std::unique_ptr<Transport::PendingTransfer>(
        std::make_unique<ThenTransfer>(std::move(*started), std::move(then)));
  }

 private:
  std::unique_ptr<Transport::PendingTransfer> inner_;
  Then then_;
};

// Counts point-to-point payload bytes (the protect and recovery traffic;
// collectives are a few bytes and not counted).
class CountingTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  bool TestsTransfers() const override { return inner()->TestsTransfers(); }
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    return ThenTransfer::Wrap(inner()->StartSend(peer, tag, data, bytes), [this](Result<size_t> r) {
      if (r.ok()) sent_ += *r;
      return r;
    });
  }
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    return ThenTransfer::Wrap(inner()->StartRecv(peer, tag, data, capacity),
                              [this](Result<size_t> r) {
                                if (r.ok()) received_ += *r;
                                return r;
                              });
  }
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    Status s = ForwardingTransport::Send(peer, tag, data, bytes);
    if (s.ok()) sent_ += bytes;
    return s;
  }
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    Result<size_t> r = ForwardingTransport::Recv(peer, tag, data, capacity);
    if (r.ok()) received_ += *r;
    return r;
  }
  void Reset() { sent_ = received_ = 0; }
  uint64_t sent() const { return sent_; }
  uint64_t received() const { return received_; }

 private:
  std::atomic<uint64_t> sent_{0}, received_{0};
};

// One direction of a node's emulated NIC: a token bucket of `bytes_per_s`
// with a depth of `burst_bytes`, kept as the time the link is next free.
// Reserve(n) books n / rate seconds starting at max(next free, now - depth)
// and returns the end of the booking; the caller sleeps until then. Shared
// by every thread of the process (one rank per node), so concurrent messages
// queue behind each other as on one wire.
class LinkBucket {
 public:
  LinkBucket(double bytes_per_s, double burst_bytes)
      : bytes_per_s_(bytes_per_s),
        burst_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(burst_bytes / bytes_per_s))) {}

  Clock::time_point Reserve(size_t bytes) {
    const auto length = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_s_));
    std::lock_guard<std::mutex> lock(mu_);
    next_free_ = std::max(next_free_, Clock::now() - burst_) + length;
    return next_free_;
  }

 private:
  const double bytes_per_s_;
  const Clock::duration burst_;
  std::mutex mu_;
  Clock::time_point next_free_{};  // guarded by mu_
};

// Sleeps until `end` the way a NIC would leave the host: transfers in flight
// on `t` keep moving (Open MPI copies a large message over shared memory only
// while both sides poll; a plain sleep here would stall every transfer this
// rank has in flight, which a real NIC moves on its own).
inline void SleepProgressing(Transport* t, Clock::time_point end) {
  constexpr auto kSlice = std::chrono::microseconds(200);
  for (auto now = Clock::now(); now < end; now = Clock::now()) {
    t->Progress();
    std::this_thread::sleep_until(std::min(end, now + kSlice));
  }
}

// A transfer of an inner transport that finishes on the emulated link no
// earlier than a time booked once the inner transfer is done: `book` gets
// the bytes moved and returns the end of their booking (the egress booking
// made at the start, or an ingress booking made now). Wait sleeps until
// then, moving `t`'s other transfers along; Test says true only once it has
// passed, so a caller polling many transfers sees the link's pace without
// sleeping in any of them.
class PacedTransfer final : public Transport::PendingTransfer {
 public:
  using Book = std::function<Clock::time_point(size_t bytes)>;
  PacedTransfer(Transport* t, std::unique_ptr<Transport::PendingTransfer> inner, Book book)
      : t_(t), inner_(std::move(inner)), book_(std::move(book)) {}
  bool Test() override {
    if (!result_.has_value()) {
      if (!inner_->Test()) return false;
      Finish();
    }
    return !result_->ok() || Clock::now() >= end_;
  }
  Result<size_t> Wait() override {
    if (!result_.has_value()) Finish();
    if (result_->ok()) SleepProgressing(t_, end_);
    return *result_;
  }

  static Result<std::unique_ptr<Transport::PendingTransfer>> Wrap(
      Transport* t, Result<std::unique_ptr<Transport::PendingTransfer>> started, Book book) {
    if (!started.ok()) return started.status();
    return std::unique_ptr<Transport::PendingTransfer>(
        std::make_unique<PacedTransfer>(t, std::move(*started), std::move(book)));
  }

 private:
  void Finish() {
    result_ = inner_->Wait();
    if (result_->ok()) end_ = book_(**result_);
  }
  Transport* const t_;
  std::unique_ptr<Transport::PendingTransfer> inner_;
  Book book_;
  std::optional<Result<size_t>> result_;
  Clock::time_point end_{};
};

// Emulated full-duplex link per node (1 rank per node): every Send to
// another rank books its bytes on the node's egress bucket before it is
// handed to the inner transport and returns no earlier than the booking's
// end (the inner copy overlaps the booked wire time, as a NIC's DMA would);
// every Recv from another rank, once complete, books the received bytes on
// the ingress bucket and sleeps until the booking's end. The bucket depth
// absorbs the completion latency of the inner transport, so a stream that
// is paced by its sender is not charged twice by its receiver, while
// several senders into one node (incast) share its ingress rate.
// Collectives are not throttled.
class LinkTransport : public ForwardingTransport {
 public:
  LinkTransport(std::shared_ptr<Transport> inner, double bytes_per_s, double burst_bytes)
      : ForwardingTransport(std::move(inner)),
        egress_(bytes_per_s, burst_bytes),
        ingress_(bytes_per_s, burst_bytes) {}
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    if (peer == rank()) return ForwardingTransport::Send(peer, tag, data, bytes);
    const Clock::time_point end = egress_.Reserve(bytes);
    Status s = ForwardingTransport::Send(peer, tag, data, bytes);
    if (s.ok()) std::this_thread::sleep_until(end);
    return s;
  }
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    Result<size_t> r = ForwardingTransport::Recv(peer, tag, data, capacity);
    if (r.ok() && peer != rank()) std::this_thread::sleep_until(ingress_.Reserve(*r));
    return r;
  }
  // Non-blocking: the egress booking is made when the send starts and slept
  // off when it is waited for; a receive books its bytes when it is waited
  // for, as Recv does once it completes.
  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    if (peer == rank()) return inner()->StartSend(peer, tag, data, bytes);
    const Clock::time_point end = egress_.Reserve(bytes);
    return PacedTransfer::Wrap(inner(), inner()->StartSend(peer, tag, data, bytes),
                               [end](size_t) { return end; });
  }
  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    if (peer == rank()) return inner()->StartRecv(peer, tag, data, capacity);
    return PacedTransfer::Wrap(inner(), inner()->StartRecv(peer, tag, data, capacity),
                               [this](size_t n) { return ingress_.Reserve(n); });
  }
  bool TestsTransfers() const override { return inner()->TestsTransfers(); }

 private:
  LinkBucket egress_, ingress_;
};

// Depth of the emulated link's token buckets (see LinkTransport).
constexpr double kLinkBurstBytes = 1 << 20;

// The emulated parallel file system's link: one rate for the whole job. A
// counter of the bytes booked since a common start lives in memory shared by
// every rank (MPI_Win_allocate_shared, so all ranks must share one host, as
// virtual nodes do); a rank's piece ends at start + (bytes booked up to and
// including it) / rate, and the rank sleeps until then. While every rank
// reads at once (the case measured) the link is never idle, so the counter is
// its schedule.
class StorageLink {
 public:
  static Result<std::unique_ptr<StorageLink>> Create(double bytes_per_s) {
    std::unique_ptr<StorageLink> link(new StorageLink(bytes_per_s));
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &link->host_);
    int host_size = 0, world = 0, rank = 0;
    MPI_Comm_size(link->host_, &host_size);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(link->host_, &rank);
    if (host_size != world) {
      return Status::InvalidArgument(
          "bench_cluster: the emulated storage link (--remote-gibps) needs every rank on one "
          "host; " +
          std::to_string(host_size) + " of " + std::to_string(world) +
          " share this one (pass --remote-gibps 0)");
    }
    void* base = nullptr;
    MPI_Win_allocate_shared(rank == 0 ? sizeof(std::atomic<uint64_t>) : 0, 1, MPI_INFO_NULL,
                            link->host_, &base, &link->win_);
    MPI_Aint bytes = 0;
    int disp = 0;
    MPI_Win_shared_query(link->win_, 0, &bytes, &disp, &base);
    link->booked_ = static_cast<std::atomic<uint64_t>*>(base);
    if (rank == 0) new (base) std::atomic<uint64_t>(0);
    MPI_Barrier(link->host_);
    return link;
  }
  ~StorageLink() {
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
    if (host_ != MPI_COMM_NULL) MPI_Comm_free(&host_);
  }
  StorageLink(const StorageLink&) = delete;
  StorageLink& operator=(const StorageLink&) = delete;

  // Collective: empties the link and starts its clock.
  void Start() {
    MPI_Barrier(host_);
    int rank = 0;
    MPI_Comm_rank(host_, &rank);
    if (rank == 0) booked_->store(0);
    MPI_Barrier(host_);
    start_ = Clock::now();
  }
  // Carries `bytes` of this rank's read: books them and sleeps until done.
  void Carry(uint64_t bytes) {
    const uint64_t end = booked_->fetch_add(bytes) + bytes;
    std::this_thread::sleep_until(
        start_ + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(static_cast<double>(end) / bytes_per_s_)));
  }

 private:
  explicit StorageLink(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}
  const double bytes_per_s_;
  MPI_Comm host_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  std::atomic<uint64_t>* booked_ = nullptr;
  Clock::time_point start_;
};

}  // namespace memento::runtime::bench
