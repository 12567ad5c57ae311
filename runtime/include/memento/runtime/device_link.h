// Device links: large point-to-point messages between ranks over the GPUs'
// fabric (NCCL), the rest over the job's transport.
//
// A DeviceLink moves one message's bytes between two ranks, read from and
// written to memory the host can address (the node store is pinned host
// memory), through a bounded staging buffer on the rank's GPU: host -> GPU,
// GPU -> peer GPU over the fabric (NVLink, InfiniBand with GPUDirect), peer
// GPU -> host. The sending and the receiving rank must be inside the same
// transfer at the same time, and each rank runs one transfer at a time (NCCL's
// point-to-point calls on one communicator and stream); DeviceRoutedTransport
// below keeps both rules.
//
// DeviceRoutedTransport wraps the job's transport (MPI, gloo): collectives,
// messages under `min_bytes` and the handshakes that order the link's
// transfers stay on it; larger messages go over the link. The engine runs over
// it unchanged (its protect and recovery traffic are such messages).
//
// Why a handshake, and why it cannot deadlock. Two ranks that each wait inside
// a link transfer whose other side is busy in a transfer with a third rank,
// which waits for the first, never finish. So of the two ranks of a transfer
// the lower-numbered one opens it, once both sides have asked for it (the
// sender by announcing the message on its own tag, the receiver by calling
// Recv): it takes its link (one transfer at a time), tells the other "go" and
// waits inside; the higher-numbered rank takes its link when told. A rank
// waits inside a transfer only for a higher-numbered rank, so such waits
// cannot form a cycle. A receiver numbered above its sender says "ready" first,
// so that the sender opens the transfer only when the receiver is there.
//
// Wire. Every message on an application's tag starts with a 24-byte frame
// (kind, tag, the sender's sequence number on (peer, tag), bytes): "inline"
// carries the payload after it (one copy on each side), "device" announces
// `bytes` that will come over the link. Handshakes travel on kDeviceControlTag,
// which this transport reserves (it is kMaxTag: the engine never uses it, and
// an application must not on a routed transport).
//
// Cost per large message: three small messages on the inner transport (the
// announcement, ready or not, go) and the link's transfer. Messages to oneself
// go inline.
//
// Thread-safety: as Transport (transport.h). A rank's link transfers run one
// at a time whatever the number of threads sending and receiving.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/transport.h"

namespace memento::runtime {

inline constexpr int kDeviceControlTag = kMaxTag;

class DeviceLink {
 public:
  virtual ~DeviceLink() = default;

  // Moves `bytes` bytes from `data` here to the peer's Recv of the same
  // transfer (Send), or from the peer into `data` (Recv). Both ranks call at
  // the same time with the same byte count; one call at a time per rank.
  // Returns once the bytes have left `data` (Send) or are in it (Recv); an
  // error (the peer is gone: Unavailable; no progress within the timeout:
  // Timeout) leaves the link unusable, and every later call fails at once.
  virtual Status Send(int peer, const void* data, size_t bytes) = 0;
  virtual Status Recv(int peer, void* data, size_t bytes) = 0;

  // Ends every transfer in flight with Unavailable, and every later one (any
  // thread, during calls of others). Default: nothing.
  virtual void Abort() {}

  // "nccl" or a test link's name, for logs and reports.
  virtual std::string name() const = 0;
  // Device memory the link holds for staging (reported; bounded).
  virtual size_t staging_bytes() const { return 0; }

  // Set once, before the first transfer, by the transport that routes over
  // the link: true once that transport is aborted (in-job recovery's
  // watcher aborts the job's transport, which never sees the link). A
  // transfer waiting then ends as after Abort().
  void SetCancelled(std::function<bool()> cancelled) { cancelled_ = std::move(cancelled); }

 protected:
  bool Cancelled() const { return cancelled_ && cancelled_(); }

 private:
  std::function<bool()> cancelled_;
};

class DeviceRoutedTransport : public ForwardingTransport {
 public:
  // Messages of at least `min_bytes` bytes to another rank go over `link`.
  DeviceRoutedTransport(std::shared_ptr<Transport> inner, std::shared_ptr<DeviceLink> link,
                        size_t min_bytes = kDefaultMinBytes);

  static constexpr size_t kDefaultMinBytes = size_t{256} << 10;

  Status Send(int peer, int tag, const void* data, size_t bytes) override;
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override;
  void Abort() override;

  const DeviceLink& link() const { return *link_; }
  size_t min_bytes() const { return min_bytes_; }
  // Messages and bytes that went over the link from this rank (sent) and to it
  // (received), since creation.
  struct Counters {
    uint64_t sent_messages = 0, sent_bytes = 0, received_messages = 0, received_bytes = 0;
  };
  Counters counters() const;

 private:
  // The handshakes from one peer: whichever waiting thread finds nobody
  // reading reads the next one and files it; the others wait for theirs.
  struct ControlBox {
    std::mutex mu;
    std::condition_variable cv;
    bool reading = false;
    // (kind, tag, seq, the transfer's sender) of each handshake not yet taken
    std::multimap<std::tuple<uint32_t, int32_t, uint64_t, int>, int> arrived;
  };
  Status CheckTag(int peer, int tag) const;
  Status SendControl(int peer, uint32_t kind, int tag, uint64_t seq, int sender);
  Status AwaitControl(int peer, uint32_t kind, int tag, uint64_t seq, int sender);
  Status LinkSend(int peer, int tag, uint64_t seq, const void* data, size_t bytes);
  Status LinkRecv(int peer, int tag, uint64_t seq, void* data, size_t bytes);
  ControlBox& Box(int peer);

  std::shared_ptr<DeviceLink> link_;
  const size_t min_bytes_;
  std::mutex link_mu_;  // one link transfer at a time
  mutable std::mutex mu_;
  std::map<std::pair<int, int>, uint64_t> next_seq_;  // (peer, tag) -> next sequence number
  std::vector<std::unique_ptr<ControlBox>> boxes_;    // by peer
  Counters counters_;
};

}  // namespace memento::runtime
