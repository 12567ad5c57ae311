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

}  // namespace

Status RunReduceChains(Transport* transport, const std::vector<ReduceChain>& chains, int tag_base,
                       uint64_t piece_bytes, const RowReader& reader,
                       std::vector<std::vector<uint8_t>>* results, ReduceBytes* bytes) {
  MEMENTO_CHECK_GT(piece_bytes, 0u);
  const int me = transport->rank();
  std::atomic<uint64_t> sent{0}, received{0};
  std::mutex mu;
  Status hop_status;
  std::vector<std::thread> hops;
  for (size_t c = 0; c < chains.size(); ++c) {
    const ReduceChain& chain = chains[c];
    MEMENTO_CHECK(!chain.terms.empty());
    MEMENTO_CHECK_GT(chain.length, 0u);
    for (size_t p = 0; p < chain.terms.size(); ++p) {
      if (chain.terms[p].rank != me) continue;
      hops.emplace_back([&, c, p] {
        const ReduceChain& ch = chains[c];
        const int tag = ChainTag(tag_base, c);
        const int prev = p > 0 ? ch.terms[p - 1].rank : -1;
        const int next = p + 1 < ch.terms.size() ? ch.terms[p + 1].rank : ch.dst_rank;
        std::vector<uint8_t> acc(std::min(piece_bytes, ch.length));
        std::vector<uint8_t> mine(acc.size());
        Status s;          // first problem of this hop (reported once)
        bool good = true;  // still forwarding real data
        bool wire = true;  // the transport still works
        for (uint64_t off = 0; off < ch.length; off += piece_bytes) {
          const uint64_t len = std::min(piece_bytes, ch.length - off);
          bool ok = true;
          if (prev >= 0 && wire) {
            Status r = RecvPiece(transport, prev, tag, len, acc.data(), &ok);
            if (!r.ok()) {
              wire = false;  // the stream with this peer is out of step
              if (s.ok()) s = r;
              ok = false;
            }
          } else {
            std::fill(acc.begin(), acc.begin() + len, 0);
          }
          good = good && ok;
          if (good) {
            Status r = reader(static_cast<int>(c), ch.terms[p], off, len, mine.data());
            if (r.ok()) {
              erasure::GfMultiplyAdd(ch.terms[p].coef, mine.data(), acc.data(), len);
            } else {
              good = false;
              if (s.ok()) s = r;
            }
          }
          if (prev >= 0 && ok) received += len;
          Status w = SendPiece(transport, next, tag, acc.data(), len, good);
          if (!w.ok()) {
            if (s.ok()) s = w;
            break;
          }
          if (good) sent += len;
        }
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
  // Results, in chain order, on this thread.
  results->assign(chains.size(), {});
  Status got;
  for (size_t c = 0; c < chains.size(); ++c) {
    const ReduceChain& ch = chains[c];
    if (ch.dst_rank != me) continue;
    const int tag = ChainTag(tag_base, c);
    const int last = ch.terms.back().rank;
    std::vector<uint8_t>& out = (*results)[c];
    out.assign(ch.length, 0);
    bool wire = true;
    for (uint64_t off = 0; off < ch.length; off += piece_bytes) {
      const uint64_t len = std::min(piece_bytes, ch.length - off);
      bool ok = true;
      Status r = wire ? RecvPiece(transport, last, tag, len, out.data() + off, &ok) : Status::Ok();
      if (!r.ok()) {
        wire = false;  // the stream with this peer is out of step
        ok = false;
      }
      if (ok && wire) {
        received += len;
      } else if (got.ok()) {
        got = r.ok() ? Status::Unavailable("reduce chain " + std::to_string(c) +
                                           ": a contributing rank could not serve its row")
                     : r.WithContext("reduce chain " + std::to_string(c) + " from rank " +
                                     std::to_string(last));
      }
    }
  }
  for (auto& t : hops) t.join();
  bytes->sent += sent.load();
  bytes->received += received.load();
  if (!got.ok()) return got;
  return hop_status;
}

}  // namespace memento::runtime
