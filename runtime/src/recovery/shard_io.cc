#include "recovery/shard_io.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <system_error>
#include <thread>
#include <utility>

#include "memento/common/check.h"
#include "memento/erasure/crc32c.h"
#include "snapshot/crc32c_combine.h"
#include "snapshot/device_copy.h"
#include "snapshot/staged_copy.h"

namespace memento::runtime {
namespace {

// Bytes copied and hashed per step (a piece is still in the cache when it
// is hashed).
constexpr uint64_t kPiece = 256 << 10;

// Copies n bytes from src into entry `e`'s buffer at offset `at`, hashing
// them as they leave src into *crc (src that is the buffer itself is only
// hashed). Host buffers are written piece by piece
// with streaming stores (Crc32cStream::UpdateCopy): a restored shard is far
// larger than the cache. Device buffers: through a pinned buffer pair of
// `copiers`, since src (a landing in a fresh store's slot or in the heap) is
// not registered with the driver, which would stage each piece on this
// thread itself.
Status CopyIntoEntry(const RegisteredEntry& e, uint64_t at, const uint8_t* src, uint64_t n,
                     erasure::Crc32cStream* crc, StagedCopierPool* copiers) {
  if (e.device()) return copiers->ToDevice(e.data + at, src, n, e.gpu, crc);
  for (uint64_t done = 0; done < n; done += kPiece) {
    const uint64_t k = std::min(kPiece, n - done);
    uint8_t* dst = e.data + at + done;
    if (dst == src + done) {
      crc->Update(dst, k);  // landed in the buffer itself: only hashed
    } else {
      crc->UpdateCopy(dst, src + done, k);
    }
  }
  return Status::Ok();
}

}  // namespace

LandedCopy::LandedCopy(const std::vector<RegisteredEntry>* entries, const ShardLanding* landed,
                       StagedCopierPool* copiers)
    : entries_(entries), landed_(landed), copiers_(copiers), parts_(entries->size()) {
  uint64_t at = 0;
  for (const RegisteredEntry& e : *entries_) {
    base_.push_back(at);
    at += e.bytes;
  }
}

void LandedCopy::Piece(uint64_t off, uint64_t len) {
  const uint64_t end = off + len;
  std::vector<std::pair<size_t, Part>> done;
  bool ok = end <= landed_->size();
  for (size_t i = 0; ok && i < entries_->size(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    const uint64_t lo = std::max(base_[i], off), hi = std::min(base_[i] + e.bytes, end);
    if (lo >= hi) continue;
    erasure::Crc32cStream crc;
    const uint64_t at = lo - base_[i];
    ok = CopyIntoEntry(e, at, landed_->entries().at(i) + at, hi - lo, &crc, copiers_).ok();
    done.push_back({i, Part{at, hi - lo, crc.value()}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = failed_ || !ok;
  for (const auto& [i, part] : done) parts_[i].push_back(part);
}

bool LandedCopy::Finish(std::vector<uint32_t>* crcs, uint32_t* whole) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return false;
  crcs->assign(entries_->size(), 0);
  *whole = 0;
  for (size_t i = 0; i < entries_->size(); ++i) {
    std::vector<Part>& parts = parts_[i];
    std::sort(parts.begin(), parts.end(),
              [](const Part& a, const Part& b) { return a.offset < b.offset; });
    uint64_t end = 0;
    uint32_t crc = 0;
    for (const Part& p : parts) {
      if (p.offset != end) return false;  // a gap or an overlap
      crc = Crc32cCombine(crc, p.crc, p.length);
      end += p.length;
    }
    const uint64_t bytes = (*entries_)[i].bytes;
    if (end != bytes) return false;
    (*crcs)[i] = crc;
    *whole = Crc32cCombine(*whole, crc, bytes);
  }
  return true;
}

ShardIo::ShardIo(const std::vector<RegisteredEntry>* entries, const NodeStore* store,
                 const ProtectionLayout* layout, RemoteStore* remote, const Transport* transport,
                 StagedCopierPool* copiers, std::set<int> registered_slots)
    : entries_(entries),
      store_(store),
      layout_(layout),
      remote_(remote),
      transport_(transport),
      copiers_(copiers),
      registered_slots_(std::move(registered_slots)) {
  for (const RegisteredEntry& e : *entries_) entry_bytes_.push_back(e.bytes);
}

namespace {

// A restore from the slot hashes (and, for host buffers, copies) in pieces of
// this size, spread over up to kRestoreThreads threads: one core hashes a few
// GB/s out of memory, under what a node's memory or a GPU's copy engine moves.
constexpr uint64_t kRestorePiece = 4 << 20;
// A device entry is queued in copies of at most this size, spread over the
// side streams.
constexpr uint64_t kDeviceRestorePiece = 16 << 20;
constexpr unsigned kRestoreThreads = 8;

// Runs f(0) .. f(n - 1) on up to kRestoreThreads threads (the caller's
// among them), each taking the next index; returns when all returned.
template <typename F>
void ParallelFor(size_t n, const F& f) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min<size_t>(n, std::min(hw, kRestoreThreads));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back([&work] {
        MarkRuntimeThread();  // its device copies leave it on their device
        work();
      });
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running do the rest
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
}

}  // namespace

Status ShardIo::CopySlotToBuffers(int slot, uint64_t version, std::vector<uint32_t>* crcs,
                                  uint64_t* staged_bytes) const {
  if (staged_bytes != nullptr) *staged_bytes = 0;
  crcs->assign(entries_->size(), 0);
  std::vector<RegionView> views;
  views.reserve(entries_->size());
  for (size_t i = 0; i < entries_->size(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    MEMENTO_ASSIGN_OR_RETURN(RegionView view, store_->ReadRegion(slot, static_cast<int>(i)));
    if (view.version != version || view.length != e.bytes) {
      return Status::Corruption("entry '" + e.name + "' in slot " + std::to_string(slot) +
                                ": holds v" + std::to_string(view.version) + " with " +
                                std::to_string(view.length) + " bytes, expected v" +
                                std::to_string(version) + " with " + std::to_string(e.bytes));
    }
    views.push_back(view);
  }
  // Device buffers from a slot whose pages this process registered with the
  // driver: every entry queued at once, in pieces round-robin over this
  // thread's side streams (as the snapshot's copies are), so that the copy
  // engines move them back to back, several in flight, while the host hashes
  // the slot. From a slot it did not register (after a relaunch; staged
  // copies), the driver would stage every piece through its own buffers on
  // this one thread: the pieces go through the restore threads' own pinned
  // buffers instead (StagedCopier), copied and hashed there in one pass.
  const bool staged = registered_slots_.count(slot) == 0;
  Status queued;
  std::vector<int> gpus;
  size_t lane = 0;
  for (size_t i = 0; i < entries_->size() && queued.ok(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    if (!e.device()) continue;
    if (staged) {
      if (staged_bytes != nullptr) *staged_bytes += e.bytes;
      continue;
    }
    if (std::find(gpus.begin(), gpus.end(), e.gpu) == gpus.end()) gpus.push_back(e.gpu);
    for (uint64_t at = 0; at < e.bytes && queued.ok(); at += kDeviceRestorePiece) {
      queued = QueueDeviceBytes(e.data + at, views[i].data + at,
                                std::min(kDeviceRestorePiece, e.bytes - at), e.gpu, lane++);
    }
  }
  // Host buffers are copied and hashed in one pass (streaming stores); the
  // device entries' bytes are hashed where they lie in the slot.
  struct Piece {
    size_t entry;
    uint64_t at, n;
    uint32_t crc;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < entries_->size(); ++i) {
    for (uint64_t at = 0; at < views[i].length; at += kRestorePiece) {
      pieces.push_back({i, at, std::min(kRestorePiece, views[i].length - at), 0});
    }
  }
  std::mutex staged_mu;
  Status staged_status;  // the first failed staged piece's; guarded by staged_mu
  if (queued.ok()) {
    ParallelFor(pieces.size(), [&](size_t k) {
      Piece& p = pieces[k];
      const RegisteredEntry& e = (*entries_)[p.entry];
      const uint8_t* src = views[p.entry].data + p.at;
      uint8_t* dst = e.data + p.at;
      erasure::Crc32cStream crc;
      if (e.device() && staged) {
        Status s = copiers_->ToDevice(dst, src, p.n, e.gpu, &crc);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(staged_mu);
          if (staged_status.ok()) staged_status = s.WithContext("entry '" + e.name + "'");
        }
      } else if (e.device() || dst == src) {
        crc.Update(src, p.n);
      } else {
        crc.UpdateCopy(dst, src, p.n);
      }
      p.crc = crc.value();
    });
  }
  // Nothing queued may outlive this call, whatever failed.
  for (int gpu : gpus) {
    Status landed = WaitQueuedCopies(gpu);
    if (queued.ok()) queued = landed;
  }
  MEMENTO_RETURN_IF_ERROR(queued);
  MEMENTO_RETURN_IF_ERROR(staged_status);
  size_t k = 0;
  for (size_t i = 0; i < entries_->size(); ++i) {
    uint32_t crc = 0;
    for (; k < pieces.size() && pieces[k].entry == i; ++k) {
      crc = Crc32cCombine(crc, pieces[k].crc, pieces[k].n);
    }
    if (crc != views[i].crc) {
      const RegisteredEntry& e = (*entries_)[i];
      return Status::Corruption("entry '" + e.name + "' of v" + std::to_string(version) + " in " +
                                store_->segment_name() + " slot " + std::to_string(slot) +
                                ": crc32c " + std::to_string(crc) + " != sealed " +
                                std::to_string(views[i].crc));
    }
    (*crcs)[i] = views[i].crc;
  }
  if (!store_->StillSealed(slot, version)) {
    return Status::Corruption("slot " + std::to_string(slot) + " changed while restoring v" +
                              std::to_string(version));
  }
  return Status::Ok();
}

namespace {

// "float32 [2, 1000] at [2, 0] of [8, 1000]" for error messages.
std::string DescribeLayout(const EntryLayout& l) {
  auto dims = [](const std::vector<int64_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  };
  return (l.dtype.empty() ? std::string("bytes") : l.dtype) + " " + dims(l.shape) + " at " +
         dims(l.offsets) + " of " + dims(l.global_shape);
}

}  // namespace

Status ShardIo::ReadRemoteToBuffers(uint64_t version, std::vector<uint32_t>* crcs) const {
  if (remote_ == nullptr) return Status::NotFound("no remote tier");
  MEMENTO_ASSIGN_OR_RETURN(RemoteManifest manifest, remote_->ReadManifest(version));
  if (manifest.world_size != transport_->size()) {
    return Status::ElasticRestoreNeeded("remote v" + std::to_string(version) + " was written by " +
                                        std::to_string(manifest.world_size) +
                                        " ranks, the job now has " +
                                        std::to_string(transport_->size()));
  }
  // This rank's place in the layout names its file (Persister's file_of_rank).
  const int rank = layout_->place();
  MEMENTO_ASSIGN_OR_RETURN(auto infos, remote_->ListEntries(version, rank));
  std::map<std::string, uint32_t> crc_by_name;
  std::map<std::string, const RemoteEntryInfo*> info_by_name;
  for (const auto& info : infos) {
    crc_by_name[info.name] = info.crc;
    info_by_name[info.name] = &info;
  }
  // A tensor slice is read only into the slice it was written from: names
  // and sizes alone would take another rank's slice of the same size (a job
  // relaunched with its ranks in another order after every node's memory was
  // lost cuts its tensors by the new ranks).
  for (const RegisteredEntry& e : *entries_) {
    const auto it = info_by_name.find(e.name);
    if (it == info_by_name.end() || e.layout == EntryLayout() || it->second->layout == e.layout) {
      continue;  // missing: ReadRankFile names it; opaque bytes: sizes decide
    }
    return Status::FailedPrecondition("remote v" + std::to_string(version) + ": entry '" + e.name +
                                      "' of rank file " + std::to_string(rank) + " holds " +
                                      DescribeLayout(it->second->layout) +
                                      ", this rank registered " + DescribeLayout(e.layout) +
                                      " (are the ranks cut the same way as when it was written?)");
  }
  // Device entries stream from the file into device memory through one
  // pinned buffer pair, a read (at most 4 MiB) at a time: no copy of the
  // shard is ever whole in host memory. The read checks each entry's crc32c
  // on the bytes it hands over.
  std::unique_ptr<StagedCopier> copier;
  Status copied;
  std::vector<RemoteEntryTarget> targets;
  for (const RegisteredEntry& e : *entries_) {
    RemoteEntryTarget t{e.name, e.data, e.bytes, nullptr};
    if (e.device()) {
      if (copier == nullptr) copier = copiers_->Take();
      t.data = nullptr;
      t.sink = [&copier, &copied, &e](uint64_t at, const uint8_t* bytes, uint64_t len) {
        if (!copied.ok()) return;
        copied = copier->ToDevice(e.data + at, bytes, len, e.gpu, /*crc=*/nullptr)
                     .WithContext("entry '" + e.name + "'");
      };
    }
    targets.push_back(std::move(t));
  }
  Status read = remote_->ReadRankFile(version, rank, targets);
  copiers_->Give(std::move(copier));
  MEMENTO_RETURN_IF_ERROR(read);
  MEMENTO_RETURN_IF_ERROR(copied);
  crcs->assign(entries_->size(), 0);
  for (size_t i = 0; i < entries_->size(); ++i) (*crcs)[i] = crc_by_name[(*entries_)[i].name];
  return Status::Ok();
}

Status ShardIo::CopyLandedToBuffers(const ShardLanding& landed, std::vector<uint32_t>* crcs,
                                    uint32_t* whole) const {
  crcs->assign(entries_->size(), 0);
  *whole = 0;
  for (size_t i = 0; i < entries_->size(); ++i) {
    const RegisteredEntry& e = (*entries_)[i];
    erasure::Crc32cStream crc;
    MEMENTO_RETURN_IF_ERROR(CopyIntoEntry(e, 0, landed.entries().at(i), e.bytes, &crc, copiers_));
    (*crcs)[i] = crc.value();
    *whole = Crc32cCombine(*whole, crc.value(), e.bytes);  // no second pass over the shard
  }
  return Status::Ok();
}

Status ShardIo::CheckAgainstSeals(const std::vector<uint32_t>& crcs,
                                  const std::vector<EntrySeal>& seals) const {
  std::vector<std::string> names;
  for (const RegisteredEntry& e : *entries_) names.push_back(e.name);
  return CheckEntryCrcs(crcs, entry_bytes_, names, seals);
}

Status ShardIo::ReadRange(int slot, const ShardLanding* landed, uint64_t begin, uint64_t len,
                          uint8_t* dst) const {
  if (landed != nullptr) {
    landed->Read(begin, len, dst);
    return Status::Ok();
  }
  return ReadShardRange(*store_, slot, entry_bytes_, begin, len, dst);
}

const uint8_t* ShardIo::SpanOfRange(int slot, const ShardLanding* landed, uint64_t begin,
                                    uint64_t len) const {
  if (landed != nullptr) return landed->Span(begin, len);
  uint64_t eb = 0;
  for (size_t i = 0; i < entry_bytes_.size(); ++i) {
    const uint64_t ee = eb + entry_bytes_[i];
    if (begin < ee) {
      if (begin + len > ee) return nullptr;
      Result<RegionView> view = store_->ReadRegion(slot, static_cast<int>(i));
      if (!view.ok() || view->length != entry_bytes_[i]) return nullptr;
      return view->data + (begin - eb);
    }
    eb = ee;
  }
  return nullptr;
}

Behind::Behind(std::function<Status()> fn)
    : thread_([this, fn = std::move(fn)] {
        // A thread's nice value is its own; a failure only leaves the work
        // at the creator's priority.
        const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
        MarkRuntimeThread();
        errno = 0;
        const int nice = getpriority(PRIO_PROCESS, tid);
        if (errno == 0) (void)setpriority(PRIO_PROCESS, tid, std::min(19, nice + kBehindNice));
        status_ = fn();
      }) {}

Behind::~Behind() {
  if (thread_.joinable()) thread_.join();
}

Status Behind::Join() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

Status ReadShardRange(const NodeStore& store, int slot, const std::vector<uint64_t>& entry_bytes,
                      uint64_t begin, uint64_t len, uint8_t* dst) {
  const uint64_t end = begin + len;
  // The entries are contiguous from 0: only what lies past the last one
  // (stripe padding) is zero-filled, not the whole range before the copy.
  const uint64_t total =
      std::accumulate(entry_bytes.begin(), entry_bytes.end(), static_cast<uint64_t>(0));
  if (end > total) {
    const uint64_t from = std::max(begin, total);
    std::memset(dst + (from - begin), 0, end - from);
  }
  uint64_t eb = 0;
  for (size_t i = 0; i < entry_bytes.size(); ++i) {
    const uint64_t ee = eb + entry_bytes[i];
    const uint64_t lo = std::max(eb, begin), hi = std::min(ee, end);
    if (lo < hi) {
      MEMENTO_ASSIGN_OR_RETURN(RegionView view, store.ReadRegion(slot, static_cast<int>(i)));
      if (view.length != entry_bytes[i]) {
        return Status::Corruption("entry '" + store.layout().regions[i].name + "' holds " +
                                  std::to_string(view.length) + " bytes, expected " +
                                  std::to_string(entry_bytes[i]));
      }
      std::memcpy(dst + (lo - begin), view.data + (lo - eb), hi - lo);
    }
    eb = ee;
  }
  return Status::Ok();
}

std::vector<std::pair<uint64_t, uint64_t>> ShardIo::CompleteRemoteVersions(
    std::vector<std::string>* notes) const {
  if (remote_ == nullptr) return {};
  auto complete = remote_->ListComplete();
  if (!complete.ok()) {
    notes->push_back("remote: " + complete.status().ToString());
    return {};
  }
  std::vector<std::pair<uint64_t, uint64_t>> out;
  // By lineage: the newest version another rank count wrote (an elastic
  // restore's run). It cannot be read here, and it supersedes that run's
  // older versions of this count: restoring one would go back past it
  // without a word. Left out, the checkpointer reshards it (elastic) or says
  // that it needs MEMENTO_ELASTIC.
  std::map<uint64_t, uint64_t> other_count;
  for (uint64_t v : *complete) {
    auto manifest = remote_->ReadManifest(v);
    if (!manifest.ok()) continue;  // gone meanwhile
    if (manifest->world_size != transport_->size()) {
      uint64_t& newest = other_count[manifest->lineage];
      newest = std::max(newest, v);
      continue;
    }
    out.emplace_back(v, manifest->lineage);
  }
  for (const auto& [lineage, newest] : other_count) {
    const size_t before = out.size();
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&, l = lineage, n = newest](const std::pair<uint64_t, uint64_t>& vl) {
                               return vl.second == l && vl.first < n;
                             }),
              out.end());
    notes->push_back("remote v" + std::to_string(newest) + " was written by another rank count" +
                     (out.size() < before ? "; its run's older versions are not restored" : ""));
  }
  return out;
}

}  // namespace memento::runtime
