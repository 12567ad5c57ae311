#include "protect/reduce_chain.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/erasure/gf256.h"
#include "snapshot/device_copy.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

using PieceHeader = wire::PieceHeader;

int ChainTag(int tag_base, size_t chain) {
  return wire::RecoverTag(static_cast<size_t>(tag_base) + chain);
}

// Receives ahead on each incoming stream: a hop has this many pieces posted
// while it folds and forwards the current one, so its link receives piece
// k+1 while it sends piece k, on one thread.
constexpr uint64_t kPiecesAhead = 2;

using Pending = std::unique_ptr<Transport::PendingTransfer>;

// The piece buffers of one hop (or one destination), in one block. They are
// fresh memory in every restore (a relaunched process), and all of it is
// written at once by the hops' reads and receives: mapped with MAP_POPULATE,
// so that its pages come in one call instead of one page fault each. On the
// VM the benchmarks run on, those faults were 12 % of the CPU of an rs:4+2
// decode (36 hops x 2 MiB); populating cut its restore CPU by 8-17 % and its
// resume over a 0.1 GiB/s link from 1.52-1.60 to 1.32 x S / link.
// Not zeroed by us: every byte is received or written before it is read.
// With an arena, the block goes back to it instead of being unmapped.
struct Unmap {
  size_t bytes = 0;
  PieceArena* arena = nullptr;
  void operator()(uint8_t* p) const {
    if (p == nullptr) return;
    if (arena != nullptr) {
      arena->Put(p, bytes);
    } else {
      munmap(p, bytes);
    }
  }
};
using PieceMemory = std::unique_ptr<uint8_t, Unmap>;

// Null when the memory cannot be had: the chains run on the commit thread
// and in the restore, where a thrown bad_alloc would end the process
// instead of failing the version.
uint8_t* MapPieces(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

// Empty (get() null) when the block cannot be had.
PieceMemory NewPieceMemory(size_t bytes, PieceArena* arena) {
  uint8_t* p = nullptr;
  if (bytes != 0) p = arena != nullptr ? arena->Take(bytes) : MapPieces(bytes);
  return PieceMemory(p, Unmap{p != nullptr ? bytes : 0, arena});
}

Status NoPieceMemory(size_t bytes) {
  return Status::ResourceExhausted("cannot map " + std::to_string(bytes) +
                                   " bytes of reduce-chain piece buffers");
}

// One piece's buffer and the transfers in flight on it. A piece is two
// messages with the chain's tag: its header, then its payload (0 bytes when
// the header says it failed), so that the number of messages never depends
// on what failed and receives can be posted before anything is known.
struct PieceBuffer {
  PieceHeader header;
  uint8_t* data = nullptr;  // piece_bytes, in its hop's PieceMemory
  Pending recv_header, recv_data, send_header, send_data;
};

Status PostRecv(Transport* t, int src, int tag, uint64_t want, uint8_t* into, PieceBuffer* b) {
  MEMENTO_ASSIGN_OR_RETURN(b->recv_header, t->StartRecv(src, tag, &b->header, sizeof(b->header)));
  MEMENTO_ASSIGN_OR_RETURN(b->recv_data, t->StartRecv(src, tag, into, want));
  return Status::Ok();
}

// Finishes the piece posted on `b` (`want` bytes into `into`, sent by the
// call stamped `stamp`). *ok says whether it holds good data: Ok with
// *ok = false when the sender reported a failure upstream. On an error,
// *in_step says whether both messages were still taken (a piece that fails
// its crc32c or has the wrong length: the next piece can be received) or the
// stream is broken (a transport error).
Status FinishRecv(int src, uint64_t want, const uint8_t* into, PieceBuffer* b, bool check,
                  uint64_t stamp, bool* ok, bool* in_step) {
  Result<size_t> n = b->recv_header->Wait();
  Result<size_t> m = b->recv_data->Wait();
  b->recv_header.reset();
  b->recv_data.reset();
  *ok = false;
  *in_step = n.ok() && *n == sizeof(b->header) &&
             (m.ok() || m.status().code() == StatusCode::kInvalidArgument);  // oversized, taken
  if (!n.ok()) return n.status();
  if (*n != sizeof(b->header)) {
    return Status::Corruption("reduce piece header of " + std::to_string(*n));
  }
  if (!m.ok()) return m.status();
  if (b->header.stamp != stamp) {
    // Left on the stream by an earlier call that broke off (a transport
    // error): every later piece is out of step too, so none is taken.
    *in_step = false;
    return Status::Corruption("reduce piece from rank " + std::to_string(src) + " of call " +
                              std::to_string(b->header.stamp) + " in call " +
                              std::to_string(stamp) +
                              ": the stream is out of step since an earlier call failed");
  }
  if (b->header.ok == 0) return Status::Ok();
  if (b->header.length != want || *m != want) {
    return Status::Corruption("reduce piece of " + std::to_string(*m) + " bytes (its header says " +
                              std::to_string(b->header.length) + "), expected " +
                              std::to_string(want));
  }
  if (check && erasure::Crc32c(into, want) != b->header.crc) {
    return Status::Corruption("reduce piece from rank " + std::to_string(src) +
                              " fails its crc32c");
  }
  *ok = true;
  return Status::Ok();
}

// Drops the receives posted on `b` (cancelled: the stream is out of step).
void DropRecv(PieceBuffer* b) {
  b->recv_header.reset();
  b->recv_data.reset();
}

// Sends `len` bytes from `from` (the piece's buffer, or a row span that stays
// unchanged until the send is finished) behind their header.
Status PostSend(Transport* t, int dst, int tag, const uint8_t* from, uint64_t len, bool ok,
                bool check, uint64_t stamp, PieceBuffer* b) {
  b->header.ok = ok ? 1 : 0;
  b->header.stamp = stamp;
  b->header.length = ok ? len : 0;
  b->header.crc = ok && check ? erasure::Crc32c(from, len) : 0;
  MEMENTO_ASSIGN_OR_RETURN(b->send_header, t->StartSend(dst, tag, &b->header, sizeof(b->header)));
  MEMENTO_ASSIGN_OR_RETURN(b->send_data, t->StartSend(dst, tag, from, ok ? len : 0));
  return Status::Ok();
}

// Waits for the sends posted on `b`, so that its buffers may be reused.
Status FinishSend(PieceBuffer* b) {
  Status s;
  for (Pending* p : {&b->send_header, &b->send_data}) {
    if (*p == nullptr) continue;
    Result<size_t> r = (*p)->Wait();
    p->reset();
    if (!r.ok() && s.ok()) s = r.status();
  }
  return s;
}

// This rank's share of one piece [off, off + len) of chain c: `term` x its
// row, into the piece (`piece()`: the buffer that is forwarded), scaled
// there as the chain's first term, folded in (GfMultiplyAdd) after a
// predecessor's sum. A row in memory (options->span) is used straight from
// there; a first term with coefficient 1 then forwards the span itself
// (*from) and touches no buffer. Else the reader copies the row: straight
// into the piece for a first term with coefficient 1, else aside
// (`aside()`) and folded from there.
Status AddOwnRow(const ReduceTerm& term, int c, bool first, uint64_t off, uint64_t len,
                 const RowReader& reader, const ReduceOptions* options,
                 const std::function<uint8_t*()>& piece, const std::function<uint8_t*()>& aside,
                 const uint8_t** from) {
  const bool direct = first && term.coef == 1;
  const uint8_t* row =
      options != nullptr && options->span != nullptr ? options->span(c, term, off, len) : nullptr;
  if (row != nullptr && direct) {
    *from = row;
    return Status::Ok();
  }
  if (row == nullptr) {
    uint8_t* into = direct ? piece() : aside();
    if (into == nullptr) return Status::ResourceExhausted("no buffer to read the row into");
    MEMENTO_RETURN_IF_ERROR(reader(c, term, off, len, into));
    if (direct) return Status::Ok();
    row = into;
  }
  uint8_t* sum = piece();
  if (sum == nullptr) return Status::ResourceExhausted("no buffer to fold the row into");
  if (first) {
    erasure::GfScale(term.coef, row, sum, len);
  } else {
    erasure::GfMultiplyAdd(term.coef, row, sum, len);
  }
  return Status::Ok();
}

// ---- Hops and destinations as tasks ----
//
// Every hop and every destination of this rank is a task whose Step never
// waits for a transfer that has not finished (PendingTransfer::Test): it
// posts the receives it has buffers for and processes (folds, forwards,
// lands) every piece whose transfers have finished. Where the transport's
// transfers can be tested (Transport::TestsTransfers: MPI, in-process), one
// thread runs all of them in one loop. Threads per hop each polling their
// own transfers cost more: with K' x M hops and M destinations a rank ran
// up to ~20 threads, each spinning in MPI_Test and yielding to the others
// (12 % of an xor:3 protect's samples were in sched_yield), and the
// pieces' folds waited for those threads to be scheduled; one thread also
// runs Open MPI's progress engine for every transfer at once, as the ring
// does. Elsewhere Test says true and the task blocks in Wait instead, so
// each task runs on a thread of its own, as a chain of blocking hops.

// Finishes the sends posted on `b` if they have finished: false while one is
// still in flight (the buffer cannot be reused yet). An error is kept in *s
// (first one) and clears *sending.
bool SendsFinished(PieceBuffer* b, Status* s, bool* sending) {
  for (Pending* p : {&b->send_header, &b->send_data}) {
    if (*p != nullptr && !(*p)->Test()) return false;
  }
  Status w = FinishSend(b);
  if (!w.ok()) {
    if (s->ok()) *s = w;
    *sending = false;
  }
  return true;
}

// Whether the receives posted on `b` have both finished (in order: a
// transport may take a message of one stream only when it is tested).
bool RecvFinished(PieceBuffer* b) { return b->recv_header->Test() && b->recv_data->Test(); }

class LoopTask {
 public:
  virtual ~LoopTask() = default;
  // Moves the task as far as it can go without blocking; true if anything
  // happened (a receive posted, a piece processed, a send finished).
  virtual bool Step() = 0;
  virtual bool finished() const = 0;
  // Stops the task where it is (its transfers are dropped with it).
  virtual void Abandon(const Status& why) = 0;
  virtual Status status() const = 0;
  uint64_t sent = 0, received = 0;
};

// Term p of chain c on this rank: receives the running sum from its
// predecessor (if any), folds in coef x its row and forwards the sum, piece
// by piece, with kPiecesAhead receives posted ahead and the forwarded piece
// still in flight while the next one arrives (kPiecesAhead + 1 buffers).
class HopTask final : public LoopTask {
 public:
  HopTask(Transport* transport, const ReduceChain& ch, int c, size_t p, int tag,
          uint64_t piece_bytes, const RowReader& reader, const ReduceOptions* options)
      : t_(transport),
        ch_(ch),
        c_(c),
        p_(p),
        tag_(tag),
        piece_bytes_(piece_bytes),
        reader_(reader),
        options_(options),
        check_(options == nullptr || options->check_pieces),
        stamp_(options != nullptr ? options->stamp : 0),
        prev_(p > 0 ? ch.terms[p - 1].rank : -1),
        next_(p + 1 < ch.terms.size() ? ch.terms[p + 1].rank : ch.dst_rank),
        pieces_((ch.length + piece_bytes - 1) / piece_bytes),
        piece_(std::min(piece_bytes, ch.length)),
        ring_memory_(nullptr, Unmap{0, nullptr}),
        mine_memory_(nullptr, Unmap{0, nullptr}),
        ring_(static_cast<size_t>(std::min(pieces_, kPiecesAhead + 1))) {}

  bool Step() override {
    if (done_) return false;
    bool progress = Post();
    if (next_proc_ < pieces_ && Process()) {
      progress = true;
      progress = Post() || progress;
    }
    if (next_proc_ == pieces_) {
      // Done once every forwarded piece has left.
      bool all = true;
      for (PieceBuffer& b : ring_) all = SendsFinished(&b, &s_, &sending_) && all;
      if (all) {
        done_ = true;
        progress = true;
      }
    }
    return progress;
  }
  bool finished() const override { return done_; }
  void Abandon(const Status& why) override {
    if (s_.ok()) s_ = why;
    for (PieceBuffer& b : ring_) DropRecv(&b);
    done_ = true;
  }
  Status status() const override {
    if (s_.ok()) return s_;
    return s_.WithContext("reduce chain " + std::to_string(c_) + " hop " + std::to_string(p_) +
                          " on rank " + std::to_string(t_->rank()));
  }

 private:
  uint64_t PieceLen(uint64_t k) const {
    return std::min(piece_bytes_, ch_.length - k * piece_bytes_);
  }
  // Null when the ring's memory cannot be had (noted once; no later try).
  uint8_t* DataOf(PieceBuffer& b) {
    if (ring_memory_ == nullptr && !ring_failed_) {
      ring_memory_ = NewPieceMemory(ring_.size() * piece_, Arena());
      if (ring_memory_ == nullptr) {
        ring_failed_ = true;
        Note(NoPieceMemory(ring_.size() * piece_));
        return nullptr;
      }
      for (size_t i = 0; i < ring_.size(); ++i) ring_[i].data = ring_memory_.get() + i * piece_;
    }
    return b.data;
  }
  uint8_t* Mine() {
    if (mine_memory_ == nullptr && !mine_failed_) {
      mine_memory_ = NewPieceMemory(piece_, Arena());
      if (mine_memory_ == nullptr) {
        mine_failed_ = true;
        Note(NoPieceMemory(piece_));
      }
    }
    return mine_memory_.get();
  }
  PieceArena* Arena() const { return options_ != nullptr ? options_->arena : nullptr; }
  void Note(const Status& st) {
    if (!st.ok() && s_.ok()) s_ = st;
  }
  void LoseWire() {
    wire_ = false;
    for (PieceBuffer& b : ring_) DropRecv(&b);
  }

  // Posts the receives of the pieces up to kPiecesAhead past the one being
  // processed, each once its buffer's last send has left.
  bool Post() {
    bool progress = false;
    while (prev_ >= 0 && wire_ && next_post_ < pieces_ && next_post_ < next_proc_ + kPiecesAhead) {
      PieceBuffer& b = ring_[next_post_ % ring_.size()];
      if (!SendsFinished(&b, &s_, &sending_)) break;
      // Without memory the piece is taken into no buffer (too long for it:
      // the transport fails the receive but takes the message) and the
      // failure is forwarded, so that the stream stays in step.
      uint8_t* into = DataOf(b);
      Status r = PostRecv(t_, prev_, tag_, into != nullptr ? PieceLen(next_post_) : 0, into, &b);
      if (!r.ok()) {
        Note(r);
        LoseWire();
        break;
      }
      ++next_post_;
      progress = true;
    }
    return progress;
  }

  // Processes piece next_proc_ if its receive has finished and its buffer
  // is free: folds this rank's row in and forwards the sum.
  bool Process() {
    const uint64_t k = next_proc_;
    PieceBuffer& b = ring_[k % ring_.size()];
    const bool receiving = prev_ >= 0 && wire_;
    if (receiving) {
      if (next_post_ <= k || !RecvFinished(&b)) return false;
    } else if (!SendsFinished(&b, &s_, &sending_)) {
      return false;
    }
    const uint64_t off = k * piece_bytes_;
    const uint64_t len = PieceLen(k);
    bool ok = true;
    if (receiving) {
      bool in_step = true;
      Note(FinishRecv(prev_, len, b.data, &b, check_, stamp_, &ok, &in_step));
      if (!in_step) LoseWire();
      ok = ok && b.data != nullptr;
    } else if (prev_ >= 0) {
      ok = false;
    }
    if (prev_ >= 0 && ok) received += len;
    good_ = good_ && ok;
    const uint8_t* from = nullptr;
    if (good_) {
      Status r = AddOwnRow(
          ch_.terms[p_], c_, prev_ < 0, off, len, reader_, options_, [&] { return DataOf(b); },
          [&] { return Mine(); }, &from);
      if (!r.ok()) {
        good_ = false;
        Note(r);
      }
    }
    if (from == nullptr) from = DataOf(b);
    if (sending_) {
      Status w = PostSend(t_, next_, tag_, from, len, good_, check_, stamp_, &b);
      if (!w.ok()) {
        sending_ = false;
        Note(w);
      } else if (good_) {
        sent += len;
      }
    }
    next_proc_ = prev_ < 0 && !sending_ ? pieces_ : k + 1;  // nothing to drain, nowhere to send
    return true;
  }

  Transport* const t_;
  const ReduceChain& ch_;
  const int c_;
  const size_t p_;
  const int tag_;
  const uint64_t piece_bytes_;
  const RowReader& reader_;
  const ReduceOptions* const options_;
  const bool check_;
  const uint64_t stamp_;
  const int prev_, next_;
  const uint64_t pieces_, piece_;
  // Before ring_: members are destroyed in reverse, and a transfer still
  // pending when a hop is given up (a timeout) finishes in its destructor,
  // reading or writing this memory until then.
  PieceMemory ring_memory_, mine_memory_;
  std::vector<PieceBuffer> ring_;
  uint64_t next_post_ = 0, next_proc_ = 0;
  Status s_;
  bool good_ = true, wire_ = true, sending_ = true, done_ = false;
  bool ring_failed_ = false, mine_failed_ = false;
};

// The destination of chain c: every piece, in order, into its result row,
// or in place where the sink gives a span, else through a buffer to the
// sink's writer; kPiecesAhead receives posted. Drains the whole stream
// whatever fails, so that the last hop's sends all complete.
class ResultTask final : public LoopTask {
 public:
  ResultTask(Transport* transport, const ReduceChain& ch, int c, int tag, uint64_t piece_bytes,
             const RowSink* sink, const ReduceOptions* options, std::vector<uint8_t>* out)
      : t_(transport),
        ch_(ch),
        c_(c),
        tag_(tag),
        piece_bytes_(piece_bytes),
        sink_(sink),
        options_(options),
        out_(out),
        check_(options == nullptr || options->check_pieces),
        stamp_(options != nullptr ? options->stamp : 0),
        last_(ch.terms.back().rank),
        pieces_((ch.length + piece_bytes - 1) / piece_bytes),
        memory_(nullptr, Unmap{0, nullptr}),
        ring_(static_cast<size_t>(std::min(pieces_, kPiecesAhead))),
        into_(ring_.size(), nullptr),
        in_place_(ring_.size(), false) {
    if (sink == nullptr) out->resize(ch.length);
  }

  bool Step() override {
    bool progress = Post();
    while (next_proc_ < pieces_ && Process()) {
      progress = true;
      Post();
    }
    return progress;
  }
  bool finished() const override { return next_proc_ == pieces_; }
  void Abandon(const Status& why) override {
    Fail(why, /*in_step=*/false);
    next_proc_ = pieces_;
  }
  Status status() const override { return got_; }

 private:
  uint64_t PieceLen(uint64_t k) const {
    return std::min(piece_bytes_, ch_.length - k * piece_bytes_);
  }
  void Fail(const Status& r, bool in_step) {
    if (!r.ok() && got_.ok()) {
      got_ = r.WithContext("reduce chain " + std::to_string(c_) + " from rank " +
                           std::to_string(last_));
    }
    if (in_step) return;
    wire_ = false;
    for (PieceBuffer& b : ring_) DropRecv(&b);
  }

  bool Post() {
    bool progress = false;
    while (wire_ && next_post_ < pieces_ && next_post_ < next_proc_ + kPiecesAhead) {
      const uint64_t k = next_post_++;
      const size_t i = k % ring_.size();
      const uint64_t len = PieceLen(k);
      uint8_t* dst = sink_ == nullptr         ? out_->data() + k * piece_bytes_
                     : sink_->span != nullptr ? sink_->span(c_, k * piece_bytes_, len)
                                              : nullptr;
      in_place_[i] = dst != nullptr;
      if (sink_ != nullptr && dst != nullptr) TouchForReceive(dst, len);
      if (dst == nullptr) {
        const uint64_t piece = std::min(piece_bytes_, ch_.length);
        if (memory_ == nullptr && !memory_failed_) {
          memory_ =
              NewPieceMemory(ring_.size() * piece, options_ != nullptr ? options_->arena : nullptr);
          if (memory_ == nullptr) {
            memory_failed_ = true;
            Fail(NoPieceMemory(ring_.size() * piece), /*in_step=*/true);
          } else {
            for (size_t j = 0; j < ring_.size(); ++j) ring_[j].data = memory_.get() + j * piece;
          }
        }
        dst = ring_[i].data;
      }
      into_[i] = dst;
      progress = true;
      // Without memory, taken into no buffer, as a hop does.
      Status r = PostRecv(t_, last_, tag_, dst != nullptr ? len : 0, dst, &ring_[i]);
      if (!r.ok()) Fail(r, /*in_step=*/false);
    }
    return progress;
  }

  bool Process() {
    const uint64_t k = next_proc_;
    const size_t i = k % ring_.size();
    if (wire_ && !RecvFinished(&ring_[i])) return false;
    const uint64_t off = k * piece_bytes_;
    const uint64_t len = PieceLen(k);
    bool ok = false;
    if (wire_) {
      bool in_step = true;
      Status r = FinishRecv(last_, len, into_[i], &ring_[i], check_, stamp_, &ok, &in_step);
      Fail(r, in_step);
      ok = ok && into_[i] != nullptr;
    }
    if (ok) {
      received += len;
      if (sink_ != nullptr && in_place_[i] && sink_->landed != nullptr) {
        const uint32_t crc = check_              ? ring_[i].header.crc
                             : sink_->landed_crc ? erasure::Crc32c(into_[i], len)
                                                 : 0;
        sink_->landed(c_, off, len, crc);
      }
      if (sink_ != nullptr && !in_place_[i] && got_.ok()) {
        Status w = sink_->write != nullptr
                       ? sink_->write(c_, off, into_[i], len)
                       : Status::Internal("a reduce sink with neither span nor writer");
        if (!w.ok()) got_ = w.WithContext("reduce chain " + std::to_string(c_));
      }
    } else if (got_.ok()) {
      got_ = Status::Unavailable("reduce chain " + std::to_string(c_) +
                                 ": a contributing rank could not serve its row");
    }
    ++next_proc_;
    return true;
  }

  Transport* const t_;
  const ReduceChain& ch_;
  const int c_;
  const int tag_;
  const uint64_t piece_bytes_;
  const RowSink* const sink_;
  const ReduceOptions* const options_;
  std::vector<uint8_t>* const out_;
  const bool check_;
  const uint64_t stamp_;
  const int last_;
  const uint64_t pieces_;
  PieceMemory memory_;  // before ring_, as in HopTask
  std::vector<PieceBuffer> ring_;
  std::vector<uint8_t*> into_;
  std::vector<bool> in_place_;
  uint64_t next_post_ = 0, next_proc_ = 0;
  Status got_;
  bool wire_ = true, memory_failed_ = false;
};

// Runs `tasks` to completion on the calling thread. A pass that finds
// nothing to do is followed by another at once for a short while (a piece
// of a few hundred KiB completes within that at memory speed, and Open MPI
// moves a message only while someone polls), then by a yield, then by
// sleeps doubling up to kLoopMaxPause, as MpiTransport's own waits do.
// When nothing has moved for the transport's timeout, every unfinished task
// is abandoned with Timeout.
constexpr auto kLoopSpinFor = std::chrono::milliseconds(2);
constexpr auto kLoopMaxPause = std::chrono::microseconds(500);

void RunLoop(Transport* transport, const std::vector<LoopTask*>& tasks) {
  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds timeout = transport->timeout();
  auto last_progress = Clock::now();
  auto pause = std::chrono::microseconds(0);
  for (uint64_t idle = 0;;) {
    bool progress = false, open = false;
    for (LoopTask* task : tasks) {
      if (task->finished()) continue;
      progress = task->Step() || progress;
      open = open || !task->finished();
    }
    if (!open) return;
    if (progress) {
      idle = 0;
      pause = std::chrono::microseconds(0);
      continue;
    }
    if (++idle % 16 != 0) continue;  // back-to-back passes; the clock is read every 16
    const auto now = Clock::now();
    if (idle == 16) last_progress = now;
    if (timeout.count() > 0 && now - last_progress > timeout) {
      const Status why =
          Status::Timeout("no reduce-chain transfer finished within " +
                          std::to_string(timeout.count()) + " ms; a peer is hung or unreachable");
      for (LoopTask* task : tasks) {
        if (!task->finished()) task->Abandon(why);
      }
      return;
    }
    if (now - last_progress < kLoopSpinFor) {
      std::this_thread::yield();
      continue;
    }
    pause = std::min<std::chrono::microseconds>(kLoopMaxPause,
                                                pause * 2 + std::chrono::microseconds(5));
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace

PieceArena::~PieceArena() {
  for (const auto& [bytes, p] : free_) munmap(p, bytes);
}

uint8_t* PieceArena::Take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (limit_ != 0 && (bytes > limit_ || out_ > limit_ - bytes)) return nullptr;
    out_ += bytes;
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].first != bytes) continue;
      uint8_t* p = free_[i].second;
      free_[i] = free_.back();
      free_.pop_back();
      return p;
    }
  }
  uint8_t* p = MapPieces(bytes);
  if (p == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    out_ -= bytes;
  }
  return p;
}

void PieceArena::Put(uint8_t* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  out_ -= bytes;
  free_.emplace_back(bytes, p);
}

size_t PieceArena::kept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

Status RunReduceChains(Transport* transport, const std::vector<ReduceChain>& chains, int tag_base,
                       uint64_t piece_bytes, const RowReader& reader,
                       std::vector<std::vector<uint8_t>>* results, ReduceBytes* bytes,
                       const RowSink* sink, const ReduceOptions* options) {
  MEMENTO_CHECK_GT(piece_bytes, 0u);
  piece_bytes = std::min(piece_bytes, kMaxReducePieceBytes);
  const int me = transport->rank();
  auto tag_of = [&](size_t c) {
    return options != nullptr && options->tag != nullptr ? options->tag(c) : ChainTag(tag_base, c);
  };
  std::vector<std::unique_ptr<LoopTask>> tasks;  // the hops, then the destinations
  for (size_t c = 0; c < chains.size(); ++c) {
    const ReduceChain& chain = chains[c];
    MEMENTO_CHECK(!chain.terms.empty());
    MEMENTO_CHECK_GT(chain.length, 0u);
    for (size_t p = 0; p < chain.terms.size(); ++p) {
      if (chain.terms[p].rank != me) continue;
      tasks.push_back(std::make_unique<HopTask>(transport, chain, static_cast<int>(c), p, tag_of(c),
                                                piece_bytes, reader, options));
    }
  }
  const size_t hops = tasks.size();
  results->assign(chains.size(), {});
  for (size_t c = 0; c < chains.size(); ++c) {
    if (chains[c].dst_rank != me) continue;
    tasks.push_back(std::make_unique<ResultTask>(transport, chains[c], static_cast<int>(c),
                                                 tag_of(c), piece_bytes, sink, options,
                                                 &(*results)[c]));
  }
  if (transport->TestsTransfers()) {
    std::vector<LoopTask*> all;
    for (auto& task : tasks) all.push_back(task.get());
    RunLoop(transport, all);
  } else {
    std::vector<std::thread> threads;
    for (auto& task : tasks) {
      threads.emplace_back([transport, one = task.get()] {
        MarkRuntimeThread();  // a sink may copy into device buffers here
        RunLoop(transport, {one});
      });
    }
    for (auto& t : threads) t.join();
  }
  Status first_result, first_hop;
  for (size_t i = 0; i < tasks.size(); ++i) {
    bytes->sent += tasks[i]->sent;
    bytes->received += tasks[i]->received;
    Status s = tasks[i]->status();
    Status& first = i < hops ? first_hop : first_result;
    if (!s.ok() && first.ok()) first = s;
  }
  return first_result.ok() ? first_hop : first_result;
}

}  // namespace memento::runtime
