// TorchCheckpointer's implementation, in two files: torch_checkpointer.cc runs
// the engine's life (Save, Restore, a re-registration, the extra state, the
// exchange of replicated tensors after a restore); tensor_entries.cc finds the
// registered tensors, checks them and maps them onto the engine's entries.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "memento/runtime/checkpointer.h"
#include "memento/torch/torch_checkpointer.h"
#include "producer_fence.h"
#include "replicated_ranges.h"

namespace memento::torch_adapter {

// One registered tensor and what it looked like at registration.
struct Tracked {
  NamedTensor entry;
  void* data = nullptr;
  int64_t nbytes = 0;
  at::ScalarType dtype = at::kByte;
  std::vector<int64_t> sizes, strides;
  at::Device device = at::kCPU;
  std::optional<ShardSpec> shard;
  // Dense in its storage (contiguous when sharded) and not copied at Save:
  // registered where it lives.
  bool in_place = true;
  at::Tensor staging;  // a contiguous copy otherwise

  // Start of the bytes the engine reads and writes.
  void* source() const { return in_place ? data : staging.data_ptr(); }
};

// A byte range of a replicated tensor held by this rank.
struct Piece {
  size_t tracked = 0;
  uint64_t begin = 0;
  uint64_t bytes = 0;
};

// One entry as registered with the engine.
struct PlannedEntry {
  std::string name;
  void* data = nullptr;
  uint64_t bytes = 0;
  runtime::EntryLayout layout;
};

class TorchCheckpointer::Impl {
 public:
  // The entry of the extra state (step, generators, extra hooks, user state).
  static constexpr const char* kExtraEntry = "__memento__";

  Impl(runtime::Config config, std::shared_ptr<runtime::Transport> transport, Options options)
      : config_(std::move(config)), transport_(std::move(transport)), options_(options) {}

  ~Impl();

  Status AddSource(Source source);

  Status AddShard(const std::string& name, ShardSpec spec);

  Status AddExtra(const std::string& key, ExtraHooks hooks);

  void SetUser(const std::string& key, std::string bytes) { user_[key] = std::move(bytes); }
  std::optional<std::string> User(const std::string& key) const;

  Status Save(uint64_t step);

  Result<std::optional<RestoreResult>> Restore();

  // The engine's Wait / WaitPersist, after a failure a re-registration's
  // wait took from the engine it closed (reported once, first).
  Status Wait() { return WithUnreported(engine_ ? engine_->Wait() : Status::Ok()); }
  Status WaitPersist() { return WithUnreported(engine_ ? engine_->WaitPersist() : Status::Ok()); }
  Status Finish() { return WithUnreported(engine_ ? engine_->Finish() : Status::Ok()); }

  runtime::Checkpointer* engine() { return engine_.get(); }
  // f(the engine, or null before the first Save / Restore) under the engine
  // lock, for the getters that another thread may call while the
  // application thread's Save re-registers (replaces the engine).
  template <typename F>
  auto WithEngine(F&& f) const {
    std::shared_lock<std::shared_mutex> lock(engine_mu_);
    return f(static_cast<const runtime::Checkpointer*>(engine_.get()));
  }
  std::vector<std::string> EntryNames() const {
    std::shared_lock<std::shared_mutex> lock(engine_mu_);
    return entry_names_;
  }
  // The engine's node identity, as of the application thread's last Save or
  // Restore (the engine learns it in its Prepare, on that thread). Only that
  // thread writes node_, so it reads it unlocked; no lock or copy per Save
  // once it is known.
  void NoteNode();
  std::string node() const {
    std::shared_lock<std::shared_mutex> lock(engine_mu_);
    return node_;
  }
  int reregistrations() const { return reregistrations_.load(); }
  int relayouts() const { return relayouts_.load(); }
  runtime::Transport& transport() { return *transport_; }

 private:
  Result<std::vector<NamedTensor>> Enumerate() const;

  // Shard specs: SetShard's by name, then optimizer state like its parameter.
  Status ApplyShards(std::vector<NamedTensor>* all) const;

  static bool SameShape(const Tracked& t, const NamedTensor& n);

  // Matches, once staged tensors that moved are followed to where they are
  // now: the engine reads and writes their staging copies, never their
  // memory, so a module that assigns a buffer a new tensor every step (a
  // counter, `self.count = self.count + 1`) needs no new registration.
  bool FollowMovedStaged(const std::vector<NamedTensor>& current);

  // Same names, layouts and data pointers as registered.
  bool Matches(const std::vector<NamedTensor>& current) const;

  // Why `current` differs from the registration, for the log.
  std::string Difference(const std::vector<NamedTensor>& current, bool* layout_changed) const;

  // Opens an engine over `current` (closing the previous one).
  Status Reopen(const std::vector<NamedTensor>& current);

  // The replicated tracked tensors, in order (replicated_ranges.h).
  std::vector<ReplicatedBytes> Replicated() const;

  // The engine's entries for tracked_ (and pieces_): whole tensors, slices of
  // global tensors, this rank's byte pieces of the replicated tensors, and the
  // extra state.
  std::vector<PlannedEntry> PlanEntries();

  Status WriteExtra(uint64_t step);

  Status ReadExtra(uint64_t* step);

  // Every rank restored its own range of the replicated bytes and sends it to
  // every other rank, point to point: after an elastic restore the engine's
  // commit thread may still be running the collectives of the version it
  // protects in the background, which a collective here would interleave with.
  Status GatherReplicated();

  Status WithUnreported(Status now);

  // The devices of the registered CUDA tensors.
  std::set<c10::DeviceIndex> CudaDevices() const;

  // Compares this rank's stored shard layout (the segment named in the
  // engine's `error`) with the registration; names the differing tensors, or
  // "" when it cannot tell.
  std::string DiagnoseLayout(const std::string& error) const;

  runtime::Config config_;
  std::shared_ptr<runtime::Transport> transport_;
  Options options_;
  std::vector<Source> sources_;
  std::map<std::string, ExtraHooks> extras_;
  std::map<std::string, std::string> user_;
  std::vector<Tracked> tracked_;
  std::map<std::string, ShardSpec> shards_;  // SetShard's, by entry name
  std::vector<Piece> pieces_;
  std::vector<PlannedEntry> planned_;  // what the engine was given
  uint64_t range_begin_ = 0, range_end_ = 0;
  std::vector<uint8_t> extra_buf_;
  ProducerFence fence_;  // before engine_: the engine's copies wait for its event
  // Written by the application thread (Reopen) under engine_mu_, held
  // exclusively; read by it without the lock, and by the getters of other
  // threads under it, shared.
  std::unique_ptr<runtime::Checkpointer> engine_;
  std::vector<std::string> entry_names_;
  std::string node_;
  mutable std::shared_mutex engine_mu_;
  Status unreported_;  // a closed engine's failure, not yet returned by Wait
  std::atomic<int> reregistrations_{0};
  std::atomic<int> relayouts_{0};
};

}  // namespace memento::torch_adapter
