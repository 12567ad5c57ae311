#include "protect/reduce_chain.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "memento/erasure/gf256.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

using PieceHeader = wire::PayloadHeader;

int ChainTag(int tag_base, size_t chain) {
  return wire::RecoverTag(static_cast<size_t>(tag_base) + chain);
}

// Receives one piece of `want` bytes from `src` into buf. Ok with *ok = false
// when the sender reported a failure upstream.
Status RecvPiece(Transport* t, int src, int tag, uint64_t want, uint8_t* buf, bool* ok) {
  PieceHeader h;
  MEMENTO_ASSIGN_OR_RETURN(size_t n, t->Recv(src, tag, &h, sizeof(h)));
  if (n != sizeof(h)) return Status::Corruption("reduce piece header of " + std::to_string(n));
  *ok = h.ok != 0;
  if (!*ok) return Status::Ok();
  if (h.length != want) {
    return Status::Corruption("reduce piece of " + std::to_string(h.length) + " bytes, expected " +
                              std::to_string(want));
  }
  MEMENTO_ASSIGN_OR_RETURN(size_t m, t->Recv(src, tag, buf, want));
  if (m != want || erasure::Crc32c(buf, want) != h.crc) {
    return Status::Corruption("reduce piece from rank " + std::to_string(src) +
                              " fails its crc32c");
  }
  return Status::Ok();
}

Status SendPiece(Transport* t, int dst, int tag, const uint8_t* buf, uint64_t len, bool ok) {
  PieceHeader h;
  h.ok = ok ? 1 : 0;
  h.length = ok ? len : 0;
  h.crc = ok ? erasure::Crc32c(buf, len) : 0;
  MEMENTO_RETURN_IF_ERROR(t->Send(dst, tag, &h, sizeof(h)));
  if (ok) MEMENTO_RETURN_IF_ERROR(t->Send(dst, tag, buf, len));
  return Status::Ok();
}

// One hop: term p of chain c on this rank. Receives the running sum from its
// predecessor (if any), folds in coef x its row and forwards the sum, piece
// by piece. (Receiving ahead on a thread of its own, 2-3 pieces deep, was
// slower on the 2-core machine the benchmarks run on: more threads polling
// and more buffers to fault in than the overlap saves.)
Status RunHop(Transport* transport, const ReduceChain& ch, int c, size_t p, int tag,
              uint64_t piece_bytes, const RowReader& reader, std::atomic<uint64_t>* sent,
              std::atomic<uint64_t>* received) {
  const int prev = p > 0 ? ch.terms[p - 1].rank : -1;
  const int next = p + 1 < ch.terms.size() ? ch.terms[p + 1].rank : ch.dst_rank;
  std::vector<uint8_t> acc(std::min(piece_bytes, ch.length));
  std::vector<uint8_t> mine(acc.size());
  Status s;             // first problem of this hop (reported once)
  bool good = true;     // still forwarding real data
  bool wire = true;     // the stream from `prev` is still in step
  bool sending = true;  // the stream to `next` still works
  for (uint64_t off = 0; off < ch.length; off += piece_bytes) {
    const uint64_t len = std::min(piece_bytes, ch.length - off);
    bool ok = true;
    if (prev >= 0 && wire) {
      Status r = RecvPiece(transport, prev, tag, len, acc.data(), &ok);
      if (!r.ok()) {
        wire = false;
        if (s.ok()) s = r;
        ok = false;
      }
    } else if (prev >= 0) {
      ok = false;
    } else {
      std::fill(acc.begin(), acc.begin() + len, 0);
    }
    if (prev >= 0 && ok) *received += len;
    good = good && ok;
    if (good) {
      Status r = reader(c, ch.terms[p], off, len, mine.data());
      if (r.ok()) {
        erasure::GfMultiplyAdd(ch.terms[p].coef, mine.data(), acc.data(), len);
      } else {
        good = false;
        if (s.ok()) s = r;
      }
    }
    if (!sending) continue;  // keep draining the predecessor
    Status w = SendPiece(transport, next, tag, acc.data(), len, good);
    if (!w.ok()) {
      sending = false;
      if (s.ok()) s = w;
    } else if (good) {
      *sent += len;
    }
  }
  return s;
}

// The destination of chain c: every piece, in order, into results (or to
// the writer). Drains the whole stream whatever fails, so that the last
// hop's sends all complete.
Status ReceiveResult(Transport* transport, const ReduceChain& ch, int c, int tag,
                     uint64_t piece_bytes, const RowWriter* writer, std::vector<uint8_t>* out,
                     std::atomic<uint64_t>* received) {
  const int last = ch.terms.back().rank;
  std::vector<uint8_t> bounce;
  if (writer != nullptr) {
    bounce.resize(std::min(piece_bytes, ch.length));
  } else {
    out->assign(ch.length, 0);
  }
  Status got;
  bool wire = true;
  for (uint64_t off = 0; off < ch.length; off += piece_bytes) {
    const uint64_t len = std::min(piece_bytes, ch.length - off);
    uint8_t* dst = writer != nullptr ? bounce.data() : out->data() + off;
    bool ok = true;
    Status r = wire ? RecvPiece(transport, last, tag, len, dst, &ok) : Status::Ok();
    if (!r.ok()) {
      wire = false;  // the stream with this peer is out of step
      ok = false;
    }
    if (ok && wire) {
      received->fetch_add(len);
      if (writer != nullptr && got.ok()) {
        Status w = (*writer)(c, off, dst, len);
        if (!w.ok()) got = w.WithContext("reduce chain " + std::to_string(c));
      }
    } else if (got.ok()) {
      got = r.ok() ? Status::Unavailable("reduce chain " + std::to_string(c) +
                                         ": a contributing rank could not serve its row")
                   : r.WithContext("reduce chain " + std::to_string(c) + " from rank " +
                                   std::to_string(last));
    }
  }
  return got;
}

}  // namespace

Status RunReduceChains(Transport* transport, const std::vector<ReduceChain>& chains, int tag_base,
                       uint64_t piece_bytes, const RowReader& reader,
                       std::vector<std::vector<uint8_t>>* results, ReduceBytes* bytes,
                       const RowWriter* writer) {
  MEMENTO_CHECK_GT(piece_bytes, 0u);
  const int me = transport->rank();
  std::atomic<uint64_t> sent{0}, received{0};
  std::mutex mu;
  Status hop_status;
  std::vector<std::thread> threads;
  for (size_t c = 0; c < chains.size(); ++c) {
    const ReduceChain& chain = chains[c];
    MEMENTO_CHECK(!chain.terms.empty());
    MEMENTO_CHECK_GT(chain.length, 0u);
    for (size_t p = 0; p < chain.terms.size(); ++p) {
      if (chain.terms[p].rank != me) continue;
      threads.emplace_back([&, c, p] {
        Status s = RunHop(transport, chains[c], static_cast<int>(c), p, ChainTag(tag_base, c),
                          piece_bytes, reader, &sent, &received);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (hop_status.ok()) {
            hop_status = s.WithContext("reduce chain " + std::to_string(c) + " hop " +
                                       std::to_string(p) + " on rank " + std::to_string(me));
          }
        }
      });
    }
  }
  // Results: every chain ending here at once, each on its own thread.
  results->assign(chains.size(), {});
  std::vector<Status> result_status(chains.size());
  for (size_t c = 0; c < chains.size(); ++c) {
    if (chains[c].dst_rank != me) continue;
    threads.emplace_back([&, c] {
      result_status[c] = ReceiveResult(transport, chains[c], static_cast<int>(c),
                                       ChainTag(tag_base, c), piece_bytes, writer,
                                       &(*results)[c], &received);
    });
  }
  for (auto& t : threads) t.join();
  bytes->sent += sent.load();
  bytes->received += received.load();
  for (const Status& s : result_status) {
    if (!s.ok()) return s;
  }
  return hop_status;
}

}  // namespace memento::runtime
