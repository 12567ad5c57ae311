// Transport: how the ranks of one job talk to each other.
//
// The engine needs a handful of collectives (commit is one all-true, restore
// one allgather of inventories) and tagged point-to-point byte transfers (part
// 2 streams snapshot chunks to replica and parity holders). Transport is the
// polymorphic seam between the engine and the wire, in the style of gloo's
// transport::Device / Pair: the engine is written once, and runs over
//   - InProcessTransport (inprocess_transport.h): threads of one process act
//     as ranks; used by the fast multi-rank tests, and able to simulate a dead
//     rank (its peers get Unavailable instead of hanging);
//   - MpiTransport (mpi_transport.h): a duplicated MPI communicator.
//
// Failure model. Every operation returns a Status: a peer that is gone is
// Unavailable, an operation that did not finish within the transport's
// timeout is Timeout. After a collective fails the transport may be left
// unusable (a collective cannot be cancelled on every rank); implementations
// then answer every later call with Unavailable. Nothing here throws for an
// expected failure.
//
// Thread-safety contract (shared by every implementation):
//   - Collectives (Barrier, AllTrue, AllReduce*, Allgather) must be entered by
//     every rank in the same order, and by at most one thread of a rank at a
//     time. The Checkpointer guarantees this by issuing all of its collectives
//     from one thread at a time (see checkpointer.h).
//   - Send and Recv may be called concurrently from any number of threads,
//     also while a collective is running on another thread. Messages between
//     one (source, destination, tag) triple arrive in the order sent.
//
// Cost: collectives move O(size * payload) bytes; Send/Recv move the payload
// once (in-process: one copy into a mailbox and one out of it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "memento/common/status.h"

namespace memento::runtime {

// Tags of point-to-point messages: 0 .. kMaxTag (the smallest MPI_TAG_UB the
// MPI standard allows is 32767).
inline constexpr int kMaxTag = 32767;
// Tags from here to kMaxTag are never used by the engine: bindings and
// applications may use them for their own point-to-point messages on the
// engine's transport, also while a version is in flight (Send and Recv may
// run beside the engine's collectives; the application's own collectives may not).
inline constexpr int kFirstApplicationTag = 16384;

class Transport {
 public:
  virtual ~Transport() = default;

  // This rank's number in 0 .. size()-1 and the number of ranks. Constant for
  // the lifetime of the transport; cheap.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Returns once every rank has entered Barrier.
  virtual Status Barrier() = 0;

  // Logical AND of `mine` over all ranks ("every rank reports success"). The
  // commit decision of a version is one AllTrue. Every rank gets the same
  // answer, or an error.
  virtual Result<bool> AllTrue(bool mine) = 0;

  // Maximum / minimum of `mine` over all ranks.
  virtual Result<int64_t> AllReduceMax(int64_t mine) = 0;
  virtual Result<int64_t> AllReduceMin(int64_t mine) = 0;

  // Every rank contributes a byte string of any length (0 allowed, lengths
  // may differ per rank); every rank gets all of them, indexed by rank.
  // Used for the restore inventory. Allocates the result.
  virtual Result<std::vector<std::vector<uint8_t>>> Allgather(const void* data, size_t bytes) = 0;

  // Sends `bytes` bytes to rank `peer` with `tag` (0..kMaxTag). Returns once
  // `data` may be reused (the message may still be in flight). Sending to
  // oneself is allowed.
  virtual Status Send(int peer, int tag, const void* data, size_t bytes) = 0;

  // Receives the next message from rank `peer` with `tag` into `data`
  // (capacity `capacity` bytes). Returns the number of bytes received; a
  // message larger than `capacity` is an InvalidArgument error (the message
  // is consumed). Blocks until the message arrives, the peer is known to be
  // gone (Unavailable) or the timeout passes (Timeout).
  virtual Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) = 0;

  // Non-blocking point-to-point: StartSend / StartRecv begin a transfer and
  // return at once with a PendingTransfer; its Wait() finishes it (the
  // bytes sent / received, or the error Send / Recv would have returned).
  // Several transfers in flight let one thread keep a link busy in both
  // directions (a reduce-chain hop receives piece k+1 while it forwards
  // piece k) without a thread per stream polling the wire.
  //
  // Rules for the caller: `data` stays valid and untouched until Wait()
  // returns; Wait() each transfer once (a second Wait is
  // FailedPrecondition), those of one (peer, tag) in the order they were
  // started; destroying a transfer that was not waited for finishes a send
  // (as Wait) and cancels a receive (a message it already took is gone), so
  // a caller may drop what it posted after an error. Order and matching are
  // those of Send / Recv.
  //
  // Default, for transports without a non-blocking path of their own: the
  // send happens inside StartSend (as Send), the receive inside Wait (as
  // Recv). That is correct for any pattern whose waits do not form a cycle
  // (a chain or a tree), but overlaps nothing on the calling thread.
  // MpiTransport overrides both with MPI_Isend / MPI_Irecv; the in-process
  // transport's receives take their message when tested or waited for.
  //
  // Test() says, without blocking, whether the transfer has finished (well
  // or not): once it returns true, Wait() returns at once, with the bytes or
  // the error. It never consumes the result and may be called any number of
  // times before Wait. Receives of one (peer, tag) are tested in the order
  // they were started, each only once those before it were found finished
  // (a transport may match a message to a receive when it is tested). Only
  // meaningful where TestsTransfers() is true (MPI, in-process): then one
  // thread can drive many transfers whose completions depend on each other,
  // polling each with Test, where Wait on any one of them could block the
  // others. The default says true, leaving the blocking to Wait.
  class PendingTransfer {
   public:
    virtual ~PendingTransfer() = default;
    virtual Result<size_t> Wait() = 0;
    virtual bool Test() { return true; }
  };
  virtual Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                             size_t bytes);
  virtual Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                             size_t capacity);

  // Whether the transfers StartSend / StartRecv return can be tested without
  // blocking (PendingTransfer::Test). Default: no (the receive happens
  // inside Wait).
  virtual bool TestsTransfers() const { return false; }

  // Whether every message costs about a round trip between the ranks
  // whatever its size (gloo: a receive into the caller's memory is posted
  // only once the message's length is in, and the sender writes only then),
  // so that callers should send fewer, larger messages where they can: the
  // protect stage then gathers replica parts that are adjacent in their
  // holder's region into one. Default: no.
  virtual bool PrefersFewerMessages() const { return false; }

  // How long a blocking call waits for a peer before it gives up with
  // Timeout; zero for no limit. A caller that polls transfers with Test
  // gives up after the same time without progress.
  virtual std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(0); }

  // Moves transfers in flight along without waiting for any. A transport
  // whose transfers advance only inside its calls (Open MPI's shared-memory
  // and TCP paths copy a large message fragment by fragment, only while some
  // thread of each side polls) needs a thread that blocks for another
  // reason, with transfers of its own in flight, to call this now and then.
  // Default: nothing (the transfers need no help).
  virtual void Progress() {}

  // The group this transport spans is gone (in-job recovery re-forms it
  // without the lost ranks): every call waiting for a peer returns
  // Unavailable now, and every later call at once. Any thread may call it,
  // during calls of others. Default: nothing (such a transport's calls end
  // on their own, by the peer's failure or the timeout).
  virtual void Abort() {}
  // Whether Abort() was called, or a failure broke the transport for good.
  // What waits beside the transport's own calls (a device link's transfers)
  // ends then. Default: false (such a transport is never aborted).
  virtual bool Aborted() const { return false; }
};

// Forwards every call to an inner Transport. Base of transports that wrap
// another to observe or shape its traffic (byte counters, an emulated link,
// fault injection in tests): a subclass overrides only what it changes and
// calls ForwardingTransport::Send / Recv for the rest.
class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status Barrier() override { return inner_->Barrier(); }
  Result<bool> AllTrue(bool mine) override { return inner_->AllTrue(mine); }
  Result<int64_t> AllReduceMax(int64_t mine) override { return inner_->AllReduceMax(mine); }
  Result<int64_t> AllReduceMin(int64_t mine) override { return inner_->AllReduceMin(mine); }
  Result<std::vector<std::vector<uint8_t>>> Allgather(const void* data, size_t bytes) override {
    return inner_->Allgather(data, bytes);
  }
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    return inner_->Send(peer, tag, data, bytes);
  }
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    return inner_->Recv(peer, tag, data, capacity);
  }
  void Progress() override { inner_->Progress(); }
  void Abort() override { inner_->Abort(); }
  bool Aborted() const override { return inner_->Aborted(); }
  bool PrefersFewerMessages() const override { return inner_->PrefersFewerMessages(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  // StartSend / StartRecv are not forwarded: the defaults go through this
  // object's Send / Recv, so a subclass that changes those (a fault, a
  // counter) changes the non-blocking path too, and its transfers cannot be
  // tested (TestsTransfers is false). A subclass that wants the inner
  // transport's own non-blocking path overrides them, calls
  // inner()->StartSend / StartRecv, forwards Test in whatever it wraps their
  // transfers in, and answers TestsTransfers with inner()->TestsTransfers().

 protected:
  Transport* inner() const { return inner_.get(); }

 private:
  std::shared_ptr<Transport> inner_;
};

// A step every rank takes (opening its store, reading the remote tier),
// agreed on with one AllTrue so that no rank goes on into a collective the
// others have left: the collective's error, else this rank's `local` error,
// else `elsewhere` when the step failed on another rank, else OK.
Status AllOk(Transport& transport, const Status& local, const Status& elsewhere);

// Writes one byte in every page of [data, data + bytes): memory a receive is
// about to fill, touched first on the calling thread. A page's first touch
// is a page fault (5-13 us each under the paravirtualized VMs the
// benchmarks run on, plus the zeroing of a fresh shared-memory page); taken
// inside a transport's progress engine instead (Open MPI's shared-memory
// path copies a message into the receive buffer there), it stalls every
// transfer that engine moves, on every thread. The bytes' values are not
// kept.
void TouchForReceive(void* data, size_t bytes);

}  // namespace memento::runtime
