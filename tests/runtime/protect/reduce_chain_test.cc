// RunReduceChains over the in-process transport, ranks as threads: the
// destination gets XOR_k coef_k * row_k, whatever the piece size; a term that
// cannot read its row fails the chain at the destination (no hang), and the
// byte counts add up. Every test runs both ways RunReduceChains drives its
// transfers: on one thread that polls them (the in-process transport's
// transfers can be tested) and on a thread per hop and destination (the
// same transport behind a ForwardingTransport, whose transfers cannot).
#include "protect/reduce_chain.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "memento/erasure/crc32c.h"
#include "memento/erasure/gf256.h"
#include "memento/runtime/inprocess_transport.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

// Whether this test runs on the one-thread path (set by the fixture).
bool g_one_thread = true;

// The ranks of a fresh in-process group, as the current path takes them.
std::vector<std::shared_ptr<Transport>> Group(int n) {
  auto group = InProcessGroup::Create(n, std::chrono::seconds(20));
  std::vector<std::shared_ptr<Transport>> transports;
  for (int r = 0; r < n; ++r) {
    std::shared_ptr<Transport> t = group->transport(r);
    if (!g_one_thread) t = std::make_shared<ForwardingTransport>(t);
    EXPECT_EQ(t->TestsTransfers(), g_one_thread);
    transports.push_back(t);
  }
  return transports;
}

class ReduceChains : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { g_one_thread = GetParam(); }
};

std::vector<uint8_t> Row(int rank, int row_id, uint64_t len) {
  std::vector<uint8_t> r(len);
  for (uint64_t i = 0; i < len; ++i) r[i] = static_cast<uint8_t>(rank * 37 + row_id * 11 + i * 7);
  return r;
}

struct Outcome {
  Status status;
  std::vector<std::vector<uint8_t>> results;
  ReduceBytes bytes;
  int in_place = 0;   // pieces the sink was told of as landed in place
  int crc_wrong = 0;  // of those, with a crc32c other than their bytes'
  int elsewhere = 0;  // reader and sink calls made on a thread other than the rank's
};

// Runs `chains` on `n` ranks; `unreadable` is a rank whose reader fails.
// With `landed` (one row per chain, sized by the caller), the destinations
// land their pieces there through a RowSink: the even pieces (by offset /
// piece_bytes) are received in place (its span), the odd ones come to its
// writer, which copies them and checks that they come in order, odd only;
// `written` (when given) counts the writer's pieces per chain.
// `transports`, when given, are the ranks' transports (a wrapper, or a group
// used before); `options`, when given, every rank's ReduceOptions.
// `absent`: a rank that never calls RunReduceChains.
std::vector<Outcome> RunOnThreads(int n, const std::vector<ReduceChain>& chains,
                                  uint64_t piece_bytes, int unreadable = -1,
                                  std::vector<std::vector<uint8_t>>* landed = nullptr,
                                  std::vector<std::shared_ptr<Transport>> transports = {},
                                  std::vector<int>* written = nullptr,
                                  const ReduceOptions* options = nullptr, int absent = -1) {
  if (transports.empty()) transports = Group(n);
  std::vector<Outcome> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    if (r == absent) continue;
    threads.emplace_back([&, r] {
      const std::thread::id rank_thread = std::this_thread::get_id();
      std::mutex mu;  // the threaded path calls back from several threads
      auto where = [&] {
        std::lock_guard<std::mutex> lock(mu);
        if (std::this_thread::get_id() != rank_thread) ++out[r].elsewhere;
      };
      auto reader = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len,
                        uint8_t* dst) -> Status {
        where();
        if (r == unreadable) return Status::NotFound("row gone");
        auto row = Row(r, term.row_id, off + len);
        std::copy(row.begin() + off, row.end(), dst);
        return Status::Ok();
      };
      const uint64_t piece = std::min(piece_bytes, kMaxReducePieceBytes);
      std::vector<uint64_t> next(chains.size(), 0);
      RowSink sink;
      sink.span = [&](int c, uint64_t off, uint64_t) -> uint8_t* {
        where();
        return (off / piece) % 2 == 0 ? (*landed)[c].data() + off : nullptr;
      };
      sink.landed = [&](int c, uint64_t off, uint64_t len, uint32_t crc) {
        ++out[r].in_place;
        if (crc != erasure::Crc32c((*landed)[c].data() + off, len)) ++out[r].crc_wrong;
      };
      sink.write = [&](int c, uint64_t off, const uint8_t* data, uint64_t len) -> Status {
        if (off < next[c] || (off / piece) % 2 == 0) {
          return Status::Internal("piece at " + std::to_string(off) + " out of order or in place");
        }
        next[c] = off + len;
        if (written != nullptr) ++(*written)[c];
        std::copy(data, data + len, (*landed)[c].begin() + off);
        return Status::Ok();
      };
      out[r].status = RunReduceChains(transports[r].get(), chains, /*tag_base=*/0, piece_bytes,
                                      reader, &out[r].results, &out[r].bytes,
                                      landed != nullptr ? &sink : nullptr, options);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<uint8_t> Expected(const ReduceChain& chain) {
  std::vector<uint8_t> want(chain.length, 0);
  for (const ReduceTerm& t : chain.terms) {
    auto row = Row(t.rank, t.row_id, chain.length);
    erasure::GfMultiplyAdd(t.coef, row.data(), want.data(), want.size());
  }
  return want;
}

// Appends a chain of `terms` into `dst`, `length` bytes.
void AddChain(std::vector<ReduceChain>* chains, std::vector<ReduceTerm> terms, int dst,
              uint64_t length) {
  ReduceChain& chain = chains->emplace_back();
  chain.terms = std::move(terms);
  chain.dst_rank = dst;
  chain.length = length;
}

// One chain of `terms` into `dst`, `length` bytes.
std::vector<ReduceChain> OneChain(std::vector<ReduceTerm> terms, int dst, uint64_t length) {
  std::vector<ReduceChain> chains;
  AddChain(&chains, std::move(terms), dst, length);
  return chains;
}

// A failure whose message contains `text`.
void ExpectFailsWith(const Status& s, const std::string& text) {
  ASSERT_FALSE(s.ok()) << "expected a failure with \"" << text << "\"";
  EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
}

TEST_P(ReduceChains, DestinationGetsTheLinearCombination) {
  for (uint64_t piece : {uint64_t{7}, uint64_t{1000}, uint64_t{1} << 20}) {
    std::vector<ReduceChain> chains(2);
    chains[0].terms = {{0, 0, 3}, {1, 2, 1}, {2, 1, 0x8e}};
    chains[0].dst_rank = 3;
    chains[0].length = 12345;
    chains[1].terms = {{3, 5, 1}};  // a one-term chain is a copy
    chains[1].dst_rank = 0;
    chains[1].length = 999;
    auto out = RunOnThreads(4, chains, piece);
    for (int r = 0; r < 4; ++r) ASSERT_TRUE(out[r].status.ok()) << out[r].status.ToString();
    ASSERT_EQ(out[3].results.size(), 2u);
    EXPECT_EQ(out[3].results[0], Expected(chains[0])) << "piece " << piece;
    EXPECT_EQ(out[0].results[1], Expected(chains[1])) << "piece " << piece;
    // Into the destination: the row once; into the middle terms: one row each.
    EXPECT_EQ(out[3].bytes.received, chains[0].length);
    EXPECT_EQ(out[1].bytes.received, chains[0].length);
    EXPECT_EQ(out[2].bytes.received, chains[0].length);
    EXPECT_EQ(out[0].bytes.received, chains[1].length);
    // One thread drives every hop and destination of a rank: the caller's.
    for (int r = 0; r < 4 && g_one_thread; ++r) EXPECT_EQ(out[r].elsewhere, 0) << "rank " << r;
  }
}

// Several chains into one destination at once (received concurrently), long
// chains of many pieces, landed through a sink, half in place and half
// through its writer: no row-sized result.
TEST_P(ReduceChains, SinkLandsEveryChainIntoOneDestination) {
  for (uint64_t piece : {uint64_t{64}, uint64_t{4096}}) {
    std::vector<ReduceChain> chains(3);
    chains[0].terms = {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}};
    chains[1].terms = {{1, 3, 0x1d}, {2, 4, 7}, {0, 5, 0xff}};
    chains[2].terms = {{2, 6, 1}};
    for (auto& ch : chains) ch.dst_rank = 3;
    chains[0].length = 100000;
    chains[1].length = 33333;
    chains[2].length = 10;
    std::vector<std::vector<uint8_t>> landed;
    for (const auto& ch : chains) landed.emplace_back(ch.length, 0);
    std::vector<int> written(chains.size(), 0);
    int in_place = 0;
    auto out = RunOnThreads(4, chains, piece, -1, &landed, {}, &written);
    for (int r = 0; r < 4; ++r) ASSERT_TRUE(out[r].status.ok()) << out[r].status.ToString();
    for (size_t c = 0; c < chains.size(); ++c) {
      EXPECT_EQ(landed[c], Expected(chains[c])) << "chain " << c << " piece " << piece;
      EXPECT_TRUE(out[3].results[c].empty());
      const uint64_t pieces = (chains[c].length + piece - 1) / piece;
      EXPECT_EQ(written[c], static_cast<int>(pieces / 2)) << "chain " << c;  // the odd ones
      in_place += static_cast<int>(pieces - pieces / 2);                     // the even ones
    }
    EXPECT_EQ(out[3].in_place, in_place);
    EXPECT_EQ(out[3].crc_wrong, 0);
    EXPECT_EQ(out[3].bytes.received, 100000u + 33333u + 10u);
  }
}

// A rank that never takes part: the others give up after the transport's
// timeout, with Timeout, instead of waiting for ever (on the one-thread
// path: once no transfer has finished for that long).
TEST_P(ReduceChains, AnAbsentRankTimesTheOthersOut) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 1}}, 2, 5000);
  auto group = InProcessGroup::Create(3, std::chrono::milliseconds(300));
  std::vector<std::shared_ptr<Transport>> transports;
  for (int r = 0; r < 3; ++r) {
    std::shared_ptr<Transport> t = group->transport(r);
    transports.push_back(g_one_thread ? t : std::make_shared<ForwardingTransport>(t));
  }
  auto out = RunOnThreads(3, chains, 1000, -1, nullptr, transports, nullptr, nullptr,
                          /*absent=*/0);
  for (int r : {1, 2}) {
    EXPECT_EQ(out[r].status.code(), StatusCode::kTimeout) << out[r].status.ToString();
  }
}

TEST_P(ReduceChains, AnUnreadableRowFailsTheChainAtItsDestination) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 0, 1}}, 2, 5000);
  auto out = RunOnThreads(3, chains, 1024, /*unreadable=*/0);
  EXPECT_FALSE(out[2].status.ok());
  EXPECT_FALSE(out[0].status.ok());
}

// Counts the receives a rank has started and not yet waited for, and keeps
// the most seen at once. Counts the sends started from memory that a send
// not yet waited for still reads (a buffer reused while in flight: over MPI,
// the bytes on the wire would change). Optionally flips a byte of the
// `flip_at`-th payload of more than a piece header this rank sends (from a
// copy: its buffer is left alone), or fails `count` receives from its
// `fail_at`-th started on without taking their messages (the stream is out
// of step). On the one-thread path its transfers are the inner transport's
// (tested through it); else the ForwardingTransport defaults (blocking).
class WatchTransport : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  int most_outstanding() const { return most_; }
  int reused_in_flight() const { return reused_; }
  void FlipPayload(int flip_at) { flip_at_ = flip_at; }
  void FailRecv(int fail_at, int count = 1) {
    fail_at_ = fail_at;
    fail_count_ = count;
  }
  bool TestsTransfers() const override { return g_one_thread && inner()->TestsTransfers(); }

  Result<std::unique_ptr<PendingTransfer>> StartSend(int peer, int tag, const void* data,
                                                     size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!in_flight_.insert(data).second) ++reused_;
    }
    std::shared_ptr<std::vector<uint8_t>> copy;
    const void* from = data;
    if (bytes > sizeof(wire::PieceHeader) && flip_at_ >= 0 && payloads_++ == flip_at_) {
      copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(data),
                                                    static_cast<const uint8_t*>(data) + bytes);
      (*copy)[bytes / 2] ^= 0x40;
      from = copy->data();
    }
    MEMENTO_ASSIGN_OR_RETURN(std::unique_ptr<PendingTransfer> inner,
                             g_one_thread ? this->inner()->StartSend(peer, tag, from, bytes)
                                          : ForwardingTransport::StartSend(peer, tag, from, bytes));
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<Counted>(std::move(inner), [this, data, copy] {
          std::lock_guard<std::mutex> lock(mu_);
          in_flight_.erase(data);
        }));
  }

  Result<std::unique_ptr<PendingTransfer>> StartRecv(int peer, int tag, void* data,
                                                     size_t capacity) override {
    const int at = recvs_++;
    std::unique_ptr<PendingTransfer> inner;
    if (fail_at_ >= 0 && at >= fail_at_ && at < fail_at_ + fail_count_) {
      inner = std::make_unique<Failed>();
    } else {
      MEMENTO_ASSIGN_OR_RETURN(
          inner, g_one_thread ? this->inner()->StartRecv(peer, tag, data, capacity)
                              : ForwardingTransport::StartRecv(peer, tag, data, capacity));
    }
    const int now = ++outstanding_;
    int seen = most_.load();
    while (now > seen && !most_.compare_exchange_weak(seen, now)) {
    }
    return std::unique_ptr<PendingTransfer>(
        std::make_unique<Counted>(std::move(inner), [this] { --outstanding_; }));
  }

 private:
  // A transfer that calls `done` once, when it is waited for or dropped.
  struct Counted final : PendingTransfer {
    Counted(std::unique_ptr<PendingTransfer> inner, std::function<void()> done)
        : inner(std::move(inner)), done(std::move(done)) {}
    ~Counted() override {
      if (done) done();
    }
    Result<size_t> Wait() override {
      if (done) std::exchange(done, nullptr)();
      return inner->Wait();
    }
    bool Test() override { return inner->Test(); }
    std::unique_ptr<PendingTransfer> inner;
    std::function<void()> done;
  };
  // A receive that fails without taking a message.
  struct Failed final : PendingTransfer {
    Result<size_t> Wait() override { return Status::Unavailable("test: receive fails"); }
  };
  std::atomic<int> outstanding_{0};
  std::atomic<int> most_{0};
  std::mutex mu_;
  std::set<const void*> in_flight_;  // guarded by mu_
  int reused_ = 0;                   // guarded by mu_
  int flip_at_ = -1;
  int payloads_ = 0;
  int fail_at_ = -1;
  int fail_count_ = 1;
  int recvs_ = 0;
};

std::vector<std::shared_ptr<WatchTransport>> Watched(int n) {
  auto group = InProcessGroup::Create(n, std::chrono::seconds(20));
  std::vector<std::shared_ptr<WatchTransport>> w;
  for (int r = 0; r < n; ++r) w.push_back(std::make_shared<WatchTransport>(group->transport(r)));
  return w;
}

std::vector<std::shared_ptr<Transport>> AsTransports(
    const std::vector<std::shared_ptr<WatchTransport>>& w) {
  return {w.begin(), w.end()};
}

// Every receiver keeps pieces posted ahead of the one it folds: a middle hop
// and the destination each have 2 pieces (a header and a payload each)
// started before they wait for the first.
TEST_P(ReduceChains, ReceiversKeepTwoPiecesPosted) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 1}}, 2, 10 * 1000);
  auto w = Watched(3);
  auto out = RunOnThreads(3, chains, 1000, -1, nullptr, AsTransports(w));
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(out[r].status.ok()) << out[r].status.ToString();
  EXPECT_EQ(out[2].results[0], Expected(chains[0]));
  EXPECT_EQ(w[0]->most_outstanding(), 0);  // the first term only sends
  EXPECT_EQ(w[1]->most_outstanding(), 4);
  EXPECT_EQ(w[2]->most_outstanding(), 4);
}

// A piece damaged between two hops fails its crc32c at the next hop, which
// forwards "failed" for the rest of the row: the destination learns the chain
// failed without a timeout. The stream stays in step (every message of the
// damaged run is taken), so the same chains on the same transports and tags
// then succeed.
TEST_P(ReduceChains, ADamagedPieceFailsTheChainAndLeavesTheStreamInStep) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 0x53}, {2, 2, 1}}, 3, 9000);
  auto w = Watched(4);
  w[1]->FlipPayload(/*flip_at=*/2);
  auto out = RunOnThreads(4, chains, 1000, -1, nullptr, AsTransports(w));
  EXPECT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  EXPECT_TRUE(out[1].status.ok()) << out[1].status.ToString();
  ExpectFailsWith(out[2].status, "fails its crc32c");
  ExpectFailsWith(out[3].status, "could not serve its row");
  // Pieces 0 and 1 were good; none from the damaged one on counts.
  EXPECT_EQ(out[3].bytes.received, 2000u);
  auto again = RunOnThreads(4, chains, 1000, -1, nullptr, AsTransports(w));
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(again[r].status.ok()) << again[r].status.ToString();
  EXPECT_EQ(again[3].results[0], Expected(chains[0]));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w[r]->reused_in_flight(), 0) << "rank " << r;
}

// A piece received in place at the destination (the sink's span) is
// checked there: a damaged one fails the chain with its crc32c, before the
// sink's writer or anything after it sees the rest of the row.
TEST_P(ReduceChains, APieceLandedInPlaceIsCheckedThere) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 0x53}, {2, 2, 1}}, 3, 9000);
  auto w = Watched(4);
  w[2]->FlipPayload(/*flip_at=*/2);  // piece 2: an even piece, received in place
  std::vector<std::vector<uint8_t>> landed(1, std::vector<uint8_t>(chains[0].length, 0));
  std::vector<int> written(1, 0);
  auto out = RunOnThreads(4, chains, 1000, -1, &landed, AsTransports(w), &written);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(out[r].status.ok()) << out[r].status.ToString();
  ExpectFailsWith(out[3].status, "fails its crc32c");
  EXPECT_EQ(out[3].bytes.received, 2000u + 6000u);  // every piece but the damaged one
  EXPECT_EQ(written[0], 1);  // piece 1 only: the writer stops at the first failure
  const std::vector<uint8_t> want = Expected(chains[0]);
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + 2000, landed[0].begin()));
}

// A receive that fails at a middle hop puts its stream out of step: the hop
// drops what it posted, forwards "failed" for every remaining piece, and
// never refills a buffer whose send is still in flight while it does.
TEST_P(ReduceChains, ABrokenStreamIsReportedAndNoBufferIsReusedInFlight) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 1}}, 2, 12 * 1000);
  auto w = Watched(3);
  w[1]->FailRecv(/*fail_at=*/6);  // the header of piece 3
  auto out = RunOnThreads(3, chains, 1000, -1, nullptr, AsTransports(w));
  ExpectFailsWith(out[1].status, "test: receive fails");
  ExpectFailsWith(out[2].status, "could not serve its row");
  EXPECT_EQ(out[2].bytes.received, 3000u);  // pieces 0-2
  for (int r = 0; r < 3; ++r) EXPECT_EQ(w[r]->reused_in_flight(), 0) << "rank " << r;
}

// Pieces carry their call's stamp. A piece's two receives fail without
// taking their messages, so the rest of that call's pieces stay queued on
// the stream; the
// next call on the same tags finds them first and fails "out of step"
// instead of folding them into its row (unstamped, it took them for its own
// and returned a wrong row as a good one).
TEST_P(ReduceChains, PiecesLeftByABrokenCallFailTheNextOneOutOfStep) {
  const std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 1}}, 2, 12 * 1000);
  auto w = Watched(3);
  w[1]->FailRecv(/*fail_at=*/6, /*count=*/2);  // piece 3, header and payload
  ReduceOptions first;
  first.stamp = 7;
  auto out = RunOnThreads(3, chains, 1000, -1, nullptr, AsTransports(w), nullptr, &first);
  ExpectFailsWith(out[1].status, "test: receive fails");
  ExpectFailsWith(out[2].status, "could not serve its row");
  ReduceOptions second;
  second.stamp = 8;
  out = RunOnThreads(3, chains, 1000, -1, nullptr, AsTransports(w), nullptr, &second);
  EXPECT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  ExpectFailsWith(out[1].status, "out of step");
  ExpectFailsWith(out[2].status, "could not serve its row");
  EXPECT_EQ(out[2].bytes.received, 0u);
}

// ReduceOptions, as protect uses them: rows folded (and, as a first term
// with coefficient 1, sent) straight from spans where the caller has them
// in memory, the reader only where it has not; pieces without a crc32c on
// the wire, the destination's `landed` still told each piece's (told 0 in
// the second call, whose sink asks for none: RowSink::landed_crc); chains on
// tags of the caller's own, so that a second run on the default tags goes on
// at the same time on the same ranks; and piece buffers kept in an arena
// from one call to the next.
TEST_P(ReduceChains, SpansUncheckedPiecesOwnTagsAndAKeptArena) {
  const int n = 4;
  const uint64_t piece = 1000;
  std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 0x53}, {2, 2, 1}}, 3, 9500);
  AddChain(&chains, {{3, 3, 2}, {0, 4, 1}}, 1, 4321);  // first term scaled from its span
  const std::vector<std::shared_ptr<Transport>> group = Group(n);
  // Every rank's rows, where its spans point: Row(rank, row_id).
  std::vector<std::map<int, std::vector<uint8_t>>> rows(n);
  for (const ReduceChain& ch : chains) {
    for (const ReduceTerm& t : ch.terms) rows[t.rank][t.row_id] = Row(t.rank, t.row_id, ch.length);
  }
  std::vector<PieceArena> arenas(n);
  std::vector<size_t> kept_after_first(n, 0);
  for (int call = 0; call < 2; ++call) {
    std::vector<std::vector<std::vector<uint8_t>>> landed(n);
    std::vector<int> reads(n, 0), crc_wrong(n, 0);
    std::vector<Status> status(n), plain(n);
    std::vector<std::vector<std::vector<uint8_t>>> plain_rows(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        Transport* t = group[r].get();
        for (const ReduceChain& ch : chains) landed[r].emplace_back(ch.length, 0);
        auto reader = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len,
                          uint8_t* dst) -> Status {
          ++reads[r];
          const std::vector<uint8_t>& row = rows[r].at(term.row_id);
          std::copy(row.begin() + off, row.begin() + off + len, dst);
          return Status::Ok();
        };
        ReduceOptions options;
        options.tag = [](size_t c) { return 700 + static_cast<int>(c); };
        options.check_pieces = false;
        options.arena = &arenas[r];
        // Odd pieces have no span: the reader serves them.
        options.span = [&](int, const ReduceTerm& term, uint64_t off, uint64_t) -> const uint8_t* {
          return (off / piece) % 2 == 0 ? rows[r].at(term.row_id).data() + off : nullptr;
        };
        RowSink sink;
        sink.span = [&](int c, uint64_t off, uint64_t) { return landed[r][c].data() + off; };
        // The second call's sink hashes its pieces itself: told 0, no crc32c computed.
        sink.landed_crc = call == 0;
        sink.landed = [&](int c, uint64_t off, uint64_t len, uint32_t crc) {
          const uint32_t want = call == 0 ? erasure::Crc32c(landed[r][c].data() + off, len) : 0;
          if (crc != want) ++crc_wrong[r];
        };
        // The same chains on the default tags, on a thread of their own.
        std::thread beside([&] {
          ReduceBytes bytes;
          auto plain_reader = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len,
                                  uint8_t* dst) -> Status {
            auto row = Row(r, term.row_id, off + len);
            std::copy(row.begin() + off, row.end(), dst);
            return Status::Ok();
          };
          plain[r] = RunReduceChains(t, chains, 0, piece, plain_reader, &plain_rows[r], &bytes);
        });
        std::vector<std::vector<uint8_t>> unused;
        ReduceBytes bytes;
        status[r] = RunReduceChains(t, chains, 0, piece, reader, &unused, &bytes, &sink, &options);
        beside.join();
      });
    }
    for (auto& t : threads) t.join();
    int odd_pieces_read = 0;
    for (const ReduceChain& ch : chains) {
      const uint64_t pieces = (ch.length + piece - 1) / piece;
      odd_pieces_read += static_cast<int>(pieces / 2 * ch.terms.size());
    }
    int total_reads = 0;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
      ASSERT_TRUE(plain[r].ok()) << "rank " << r << ": " << plain[r].ToString();
      EXPECT_EQ(crc_wrong[r], 0) << "rank " << r;
      total_reads += reads[r];
    }
    EXPECT_EQ(total_reads, odd_pieces_read);  // the even pieces came from spans
    for (size_t c = 0; c < chains.size(); ++c) {
      const int dst = chains[c].dst_rank;
      EXPECT_EQ(landed[dst][c], Expected(chains[c])) << "chain " << c << " call " << call;
      EXPECT_EQ(plain_rows[dst][c], Expected(chains[c])) << "chain " << c << " call " << call;
    }
    for (int r = 0; r < n; ++r) {
      if (call == 0) {
        kept_after_first[r] = arenas[r].kept();
        EXPECT_GT(kept_after_first[r], 0u) << "rank " << r;
      } else {
        // The second call took the first one's blocks again, and no more:
        // every hop and destination of a rank holds its blocks until the
        // call returns, so both calls hold the same blocks at once.
        EXPECT_EQ(arenas[r].kept(), kept_after_first[r]) << "rank " << r;
      }
    }
  }
}

// A rank whose piece buffers cannot be had (its arena's limit stands in for
// a failed mmap) fails its call with ResourceExhausted instead of ending the
// process; it still takes every piece of its streams and forwards failed
// ones, so the others return at once (no timeout: the group's is 20 s), the
// destination with Unavailable. The same ranks and arenas then run the
// chains again without the limit, and the streams are in step.
TEST_P(ReduceChains, APieceBufferThatCannotBeMappedFailsTheCallNotTheProcess) {
  const int n = 4;
  const uint64_t piece = 1000;
  std::vector<ReduceChain> chains = OneChain({{0, 0, 1}, {1, 1, 0x53}, {3, 2, 1}}, 2, 9500);
  AddChain(&chains, {{2, 3, 7}, {0, 4, 1}}, 3, 4321);
  const std::vector<std::shared_ptr<Transport>> group = Group(n);
  // Every rank's chains, with the starved rank's arena limited to 1 byte
  // (none when -1); the destinations land through a writer only, from
  // buffers of their own.
  auto run = [&](int starved, uint64_t stamp, std::vector<Status>* status,
                 std::vector<std::vector<std::vector<uint8_t>>>* landed) {
    status->assign(n, Status::Ok());
    landed->assign(n, {});
    std::vector<std::unique_ptr<PieceArena>> arenas;
    for (int r = 0; r < n; ++r)
      arenas.push_back(std::make_unique<PieceArena>(r == starved ? 1 : 0));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        for (const ReduceChain& ch : chains) (*landed)[r].emplace_back(ch.length, 0);
        auto reader = [&](int, const ReduceTerm& term, uint64_t off, uint64_t len,
                          uint8_t* dst) -> Status {
          auto row = Row(r, term.row_id, off + len);
          std::copy(row.begin() + off, row.end(), dst);
          return Status::Ok();
        };
        RowSink sink;
        sink.write = [&](int c, uint64_t off, const uint8_t* data, uint64_t len) {
          std::copy(data, data + len, (*landed)[r][c].begin() + off);
          return Status::Ok();
        };
        ReduceOptions options;
        options.arena = arenas[r].get();
        options.stamp = stamp;
        ReduceBytes bytes;
        std::vector<std::vector<uint8_t>> unused;
        (*status)[r] = RunReduceChains(group[r].get(), chains, 0, piece, reader, &unused, &bytes,
                                       &sink, &options);
      });
    }
    for (auto& t : threads) t.join();
  };
  std::vector<Status> status;
  std::vector<std::vector<std::vector<uint8_t>>> landed;
  // Rank 1: a middle hop of chain 0 without its ring of buffers. Rank 2: the
  // first term of chain 1 without the buffer its row is read into, and the
  // destination of chain 0 without the buffers its pieces land in.
  for (int starved : {1, 2}) {
    SCOPED_TRACE("starved rank " + std::to_string(starved));
    const auto start = std::chrono::steady_clock::now();
    run(starved, static_cast<uint64_t>(starved), &status, &landed);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
        << "a rank waited for a piece that never came";
    ASSERT_EQ(status[starved].code(), StatusCode::kResourceExhausted) << status[starved].ToString();
    EXPECT_NE(status[starved].message().find("piece buffers"), std::string::npos)
        << status[starved].ToString();
    EXPECT_TRUE(status[0].ok()) << status[0].ToString();
    if (starved == 1) {
      EXPECT_EQ(status[2].code(), StatusCode::kUnavailable) << status[2].ToString();
      ASSERT_TRUE(status[3].ok()) << status[3].ToString();
      EXPECT_EQ(landed[3][1], Expected(chains[1]));
    } else {
      EXPECT_TRUE(status[1].ok()) << status[1].ToString();
      EXPECT_EQ(status[3].code(), StatusCode::kUnavailable) << status[3].ToString();
    }
  }
  // The streams are in step afterwards: the same chains succeed.
  run(-1, 3, &status, &landed);
  for (int r = 0; r < n; ++r)
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  EXPECT_EQ(landed[2][0], Expected(chains[0]));
  EXPECT_EQ(landed[3][1], Expected(chains[1]));
}

INSTANTIATE_TEST_SUITE_P(Paths, ReduceChains, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("one_thread") : std::string("threads");
                         });

}  // namespace
}  // namespace memento::runtime
