#include "memento/runtime/device_link.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "transport/wire.h"

namespace memento::runtime {

namespace {

using Frame = wire::DeviceFrame;
constexpr uint32_t kInline = wire::kDeviceInline, kDevice = wire::kDeviceBytes,
                   kReady = wire::kDeviceReady, kGo = wire::kDeviceGo;

const char* KindName(uint32_t kind) {
  switch (kind) {
    case kInline:
      return "inline";
    case kDevice:
      return "device";
    case kReady:
      return "ready";
    case kGo:
      return "go";
    default:
      return "unknown";
  }
}

// Room for a frame and `payload` bytes: the thread's own buffer for messages
// under 256 KiB (kept for the next one), one of its own (freed with it) for a
// large message to oneself.
class FrameBuffer {
 public:
  explicit FrameBuffer(size_t payload) : buffer_(payload < (size_t{256} << 10) ? &Small() : &own_) {
    buffer_->resize(sizeof(Frame) + payload);
  }
  uint8_t* data() { return buffer_->data(); }
  size_t size() const { return buffer_->size(); }

 private:
  static std::vector<uint8_t>& Small() {
    thread_local std::vector<uint8_t> small;
    return small;
  }
  std::vector<uint8_t> own_;
  std::vector<uint8_t>* buffer_;
};

std::string Where(int peer, int tag) {
  return "rank " + std::to_string(peer) + ", tag " + std::to_string(tag);
}

}  // namespace

DeviceRoutedTransport::DeviceRoutedTransport(std::shared_ptr<Transport> inner,
                                             std::shared_ptr<DeviceLink> link, size_t min_bytes)
    : ForwardingTransport(inner),
      link_(std::move(link)),
      min_bytes_(std::max<size_t>(min_bytes, 1)) {
  // The job's transport is what in-job recovery aborts: its abort (or its
  // end) ends the link's transfers too.
  std::weak_ptr<Transport> weak = inner;
  link_->SetCancelled([weak] {
    std::shared_ptr<Transport> t = weak.lock();
    return t == nullptr || t->Aborted();
  });
  boxes_.resize(static_cast<size_t>(size()));
  for (auto& b : boxes_) b = std::make_unique<ControlBox>();
}

DeviceRoutedTransport::ControlBox& DeviceRoutedTransport::Box(int peer) {
  return *boxes_.at(static_cast<size_t>(peer));
}

DeviceRoutedTransport::Counters DeviceRoutedTransport::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

Status DeviceRoutedTransport::CheckTag(int peer, int tag) const {
  if (peer < 0 || peer >= size()) {
    return Status::InvalidArgument("peer " + std::to_string(peer) + " out of range 0.." +
                                   std::to_string(size() - 1));
  }
  if (tag == kDeviceControlTag) {
    return Status::InvalidArgument("tag " + std::to_string(tag) +
                                   " is reserved by the device-routed transport");
  }
  return Status::Ok();
}

Status DeviceRoutedTransport::Send(int peer, int tag, const void* data, size_t bytes) {
  MEMENTO_RETURN_IF_ERROR(CheckTag(peer, tag));
  if (bytes < min_bytes_ || peer == rank()) {
    FrameBuffer buffer(bytes);
    Frame f;
    f.kind = kInline;
    f.tag = tag;
    f.bytes = bytes;
    std::memcpy(buffer.data(), &f, sizeof(f));
    if (bytes > 0) std::memcpy(buffer.data() + sizeof(f), data, bytes);
    return ForwardingTransport::Send(peer, tag, buffer.data(), buffer.size());
  }
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = next_seq_[{peer, tag}]++;
  }
  Frame f;
  f.kind = kDevice;
  f.tag = tag;
  f.seq = seq;
  f.bytes = bytes;
  MEMENTO_RETURN_IF_ERROR(ForwardingTransport::Send(peer, tag, &f, sizeof(f)));
  return LinkSend(peer, tag, seq, data, bytes);
}

Result<size_t> DeviceRoutedTransport::Recv(int peer, int tag, void* data, size_t capacity) {
  MEMENTO_RETURN_IF_ERROR(CheckTag(peer, tag));
  // Inline messages from a peer are shorter than min_bytes (from oneself, any length).
  const size_t most = peer == rank() ? capacity : std::min(capacity, min_bytes_ - 1);
  FrameBuffer buffer(most);
  MEMENTO_ASSIGN_OR_RETURN(size_t got,
                           ForwardingTransport::Recv(peer, tag, buffer.data(), buffer.size()));
  Frame f;
  if (got < sizeof(f)) {
    return Status::Corruption("device-routed transport: a message of " + std::to_string(got) +
                              " bytes from " + Where(peer, tag) + " has no frame");
  }
  std::memcpy(&f, buffer.data(), sizeof(f));
  if (f.kind == kInline) {
    const size_t n = got - sizeof(f);
    if (n != f.bytes) {
      return Status::Corruption("device-routed transport: an inline message from " +
                                Where(peer, tag) + " has " + std::to_string(n) +
                                " bytes, its frame says " + std::to_string(f.bytes));
    }
    if (n > 0) std::memcpy(data, buffer.data() + sizeof(f), n);
    return n;
  }
  if (f.kind != kDevice || got != sizeof(f) || f.tag != tag) {
    return Status::Corruption("device-routed transport: a " + std::string(KindName(f.kind)) +
                              " frame of " + std::to_string(got) + " bytes from " +
                              Where(peer, tag));
  }
  if (f.bytes > capacity) {
    // The transfer still runs (the sender is waiting in it), into a scratch
    // buffer, so that both sides' link stays in step; the message is consumed.
    // Not zeroed, and an announced size no allocation can hold (a damaged
    // frame: more than the machine's memory) is an error, not an exception
    // out of Recv.
    static const uint64_t kMemory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                                    static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    std::unique_ptr<uint8_t, decltype(&std::free)> scratch(
        f.bytes <= kMemory ? static_cast<uint8_t*>(std::malloc(f.bytes)) : nullptr, &std::free);
    if (scratch == nullptr) {
      return Status::Corruption("device-routed transport: a frame from " + Where(peer, tag) +
                                " announces " + std::to_string(f.bytes) +
                                " bytes, more than this process can allocate");
    }
    MEMENTO_RETURN_IF_ERROR(LinkRecv(peer, tag, f.seq, scratch.get(), f.bytes));
    return Status::InvalidArgument("message of " + std::to_string(f.bytes) + " bytes from " +
                                   Where(peer, tag) + " does not fit the " +
                                   std::to_string(capacity) + "-byte buffer");
  }
  MEMENTO_RETURN_IF_ERROR(LinkRecv(peer, tag, f.seq, data, f.bytes));
  return static_cast<size_t>(f.bytes);
}

Status DeviceRoutedTransport::LinkSend(int peer, int tag, uint64_t seq, const void* data,
                                       size_t bytes) {
  Status s;
  if (rank() < peer) {
    // This rank opens the transfer, once the receiver is there.
    MEMENTO_RETURN_IF_ERROR(AwaitControl(peer, kReady, tag, seq, rank()));
    std::lock_guard<std::mutex> lock(link_mu_);
    MEMENTO_RETURN_IF_ERROR(SendControl(peer, kGo, tag, seq, rank()));
    s = link_->Send(peer, data, bytes);
  } else {
    MEMENTO_RETURN_IF_ERROR(AwaitControl(peer, kGo, tag, seq, rank()));
    std::lock_guard<std::mutex> lock(link_mu_);
    s = link_->Send(peer, data, bytes);
  }
  if (!s.ok()) return s.WithContext("device link (" + link_->name() + ") to " + Where(peer, tag));
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.sent_messages;
  counters_.sent_bytes += bytes;
  return Status::Ok();
}

Status DeviceRoutedTransport::LinkRecv(int peer, int tag, uint64_t seq, void* data, size_t bytes) {
  Status s;
  if (rank() < peer) {
    // The sender announced the message and waits for "go".
    std::lock_guard<std::mutex> lock(link_mu_);
    MEMENTO_RETURN_IF_ERROR(SendControl(peer, kGo, tag, seq, peer));
    s = link_->Recv(peer, data, bytes);
  } else {
    MEMENTO_RETURN_IF_ERROR(SendControl(peer, kReady, tag, seq, peer));
    MEMENTO_RETURN_IF_ERROR(AwaitControl(peer, kGo, tag, seq, peer));
    std::lock_guard<std::mutex> lock(link_mu_);
    s = link_->Recv(peer, data, bytes);
  }
  if (!s.ok()) {
    return s.WithContext("device link (" + link_->name() + ") from " + Where(peer, tag));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.received_messages;
  counters_.received_bytes += bytes;
  return Status::Ok();
}

Status DeviceRoutedTransport::SendControl(int peer, uint32_t kind, int tag, uint64_t seq,
                                          int sender) {
  Frame f;
  f.kind = kind;
  f.tag = tag;
  f.seq = seq;
  f.bytes = static_cast<uint64_t>(sender);
  return ForwardingTransport::Send(peer, kDeviceControlTag, &f, sizeof(f));
}

Status DeviceRoutedTransport::AwaitControl(int peer, uint32_t kind, int tag, uint64_t seq,
                                           int sender) {
  ControlBox& box = Box(peer);
  const auto key = std::make_tuple(kind, static_cast<int32_t>(tag), seq, sender);
  std::unique_lock<std::mutex> lock(box.mu);
  for (;;) {
    if (auto it = box.arrived.find(key); it != box.arrived.end()) {
      box.arrived.erase(it);
      return Status::Ok();
    }
    if (box.reading) {
      box.cv.wait(lock);
      continue;
    }
    box.reading = true;
    lock.unlock();
    Frame f;
    Result<size_t> got = ForwardingTransport::Recv(peer, kDeviceControlTag, &f, sizeof(f));
    lock.lock();
    box.reading = false;
    box.cv.notify_all();
    if (!got.ok()) {
      return got.status().WithContext("device-routed transport: waiting for '" +
                                      std::string(KindName(kind)) + "' from " + Where(peer, tag));
    }
    if (*got != sizeof(f) || (f.kind != kReady && f.kind != kGo)) {
      return Status::Corruption("device-routed transport: a handshake of " + std::to_string(*got) +
                                " bytes, kind " + KindName(f.kind) + ", from rank " +
                                std::to_string(peer));
    }
    box.arrived.emplace(std::make_tuple(f.kind, f.tag, f.seq, static_cast<int>(f.bytes)), 0);
  }
}

void DeviceRoutedTransport::Abort() {
  ForwardingTransport::Abort();
  link_->Abort();
}

}  // namespace memento::runtime
