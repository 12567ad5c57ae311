// TorchCheckpointer: memento for libtorch tensors, modules and optimizers.
//
//   auto ck = memento::torch_adapter::TorchCheckpointer::Create(config, transport).value();
//   ck->RegisterModule(model);                 // entries "model.<parameter or buffer name>"
//   ck->RegisterOptimizer(optimizer);          // entries "optimizer.state.<i>.<key>"
//   auto restored = ck->Restore().value();     // std::nullopt on a fresh start
//   for (uint64_t step = restored ? restored->step : 0; step < steps; ++step) {
//     ...forward, backward...
//     ck->WaitSnapshot();                      // before the optimizer writes the tensors
//     optimizer.step();
//     ck->Save(step + 1);
//   }
//   ck->Finish();                              // the end: the next run starts fresh
//
// Entry names (stable, documented; they name the regions of the node store):
//   RegisterModule(m, "model.")   "model." + the name of Module::named_parameters()
//                                 followed by Module::named_buffers(), e.g. "model.fc.weight"
//                                 (the same keys as Python's state_dict()).
//   RegisterOptimizer(o, "optimizer.")
//                                 "optimizer.state.<i>.<key>", i = the index of the parameter
//                                 counted over all param groups in order (the numbering of
//                                 Python's optimizer.state_dict()), key = "exp_avg",
//                                 "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", ...;
//                                 integer state (libtorch Adam's step) travels in the extra
//                                 state under the same name.
//   Register(name, tensor)        `name` as given.
//   replicated tensors            "<name>", holding the byte range of the tensor this rank
//                                 keeps (below); ranks without a piece have no such entry.
//                                 Its dtype field also gives the tensor's shape
//                                 ("float32 shape=[3,4] bytes"), so another shape is refused.
//   "__memento__"                 the extra state (below).
//
// What an entry keeps. dtype and shape are the entry's EntryLayout; strides of a
// non-contiguous tensor and a non-CPU device type are appended to the dtype field
// ("float32 strides=1,3 device=cuda") so that a relaunch registering a tensor
// with another dtype, shape, strides or device type is refused before any byte
// is restored, with an error naming the tensor and what differs. Slices of
// global tensors (ShardSpec) keep only the dtype: their bytes are row-major
// wherever the tensor lives.
//
// Memory. A tensor whose elements are dense in its storage (contiguous, or a
// permutation such as a transpose) is registered in place: the snapshot copies
// from it and Restore writes into it, no staging copy. Other tensors (a
// strided slice) get a contiguous staging tensor that Save fills (this copy is
// on the training thread) and Restore copies back. A tensor whose elements
// share memory (an expanded view) is refused: register the tensor it views.
//
// Replicated tensors (data parallel). A tensor registered with replicated=true
// holds the same bytes on every rank. The replicated tensors of a rank are laid
// end to end and cut into size() equal byte ranges; rank r registers only the
// pieces in range r, each as a byte slice (global shape = the tensor's bytes,
// offset = the piece's first byte) of the entry named after the tensor, so the
// job snapshots, protects and stores each replicated byte once. Restore brings
// back every rank's range and then every rank sends its range to every other
// (point to point over the transport, tag runtime::kFirstApplicationTag), so
// every rank ends with the whole tensors.
//
// Sharded tensors (tensor / pipeline / ZeRO parallel). A tensor registered with
// a ShardSpec is this rank's slice of a global tensor: global_shape, and the
// offsets of the slice's first element along each dimension. Its entry keeps
// the slice row-major (a non-contiguous tensor goes through a staging copy) and
// its dtype without strides or device, so that a job relaunched on another
// number of ranks or nodes with Config::elastic (MEMENTO_ELASTIC=1) can
// register other slices of the same global tensor: Restore then assembles each
// new slice from the old slices that survive (Checkpointer::Restore, elastic).
// Entries of modules and optimizers are sharded with SetShard(entry name, spec)
// before the first Save or Restore; optimizer state of a sharded parameter
// with the parameter's shape is sharded like the parameter, unless SetShard
// names it too. Tensors that are neither sharded nor replicated (module
// buffers) are whole on every rank: an elastic restore gives each new rank the
// copy of one old rank, one of its own node's when its node survived.
// Buffers of a module (e.g. running statistics) are never replicated: ranks of
// a data-parallel job may update them differently.
//
// Extra state. One fixed-capacity entry "__memento__" carries the step, the
// state of the torch CPU generator (and of every CUDA generator when CUDA is
// available), integer optimizer state and user bytes (SetUserState). Its
// capacity is Options::extra_capacity; Save fails with ResourceExhausted,
// naming the size needed, when the state does not fit. After an elastic
// restore each new rank gets the extra state of one old rank (one of its own
// node's when its node survived; RestoreResult::report.source_detail says
// which node served it): the step, which every old rank saved alike, and that
// rank's generator states, integer optimizer state and user bytes. State that
// must differ per rank (a data loader's position over this rank's part of the
// data, per-rank seeds) should be derived again from the step and the new
// rank after an elastic restore.
//
// Changed tensors (re-registration). Registered sources (modules, optimizers)
// are enumerated again at every Save, and every tensor's data pointer, size,
// dtype, shape and strides are compared with what was registered. Any change
// (a tensor whose storage was reallocated, e.g. by set_() or `.data =`,
// optimizer state that appeared) makes that Save re-register: it waits for the
// version in flight, closes the engine and opens a new one over the new set,
// so that the snapshot never reads freed memory. When only data pointers
// moved the node store layout is unchanged and is re-attached (nothing is
// lost), and the new engine continues the run (runtime::Checkpointer::
// ContinueRun): its committed versions stay the newest run's. When the set
// or a size changed, the node store is re-laid out once: the previous
// versions, which describe another set of tensors, are dropped. Restore
// never re-lays it out: with a changed set it fails (FailedPrecondition)
// and the stored versions stay. A failure of the version in flight that the
// re-registration waited for is returned by the next Wait().
// Re-registration is collective: every rank must see the change at the same
// Save (true for data-parallel ranks running the same optimizer).
// A tensor copied at Save (copy_at_save, or staged because it is not dense)
// that only moved, same shape and strides, is followed where it is instead:
// the engine reads its staging copy, never its memory.
// Adam and AdamW state, and SGD's momentum buffers (momentum > 0, dampening
// 0), are created at RegisterOptimizer so that their first step computes what
// it would have (zeros, step 0): their set never changes and a relaunch,
// whose fresh optimizer has no state yet, restores into it.
//
// CUDA. Device tensors are registered in place like host tensors; the engine
// copies them into the node store (pinned) with cudaMemcpyAsync on its own
// side streams. When built with CUDA, Save first makes those copies wait for
// the work already queued on the device's current stream (the producing
// stream), so a snapshot never reads a tensor that an optimizer kernel is
// still writing.
//
// Threading: one application thread makes every call, but for the getters
// LatestCommitted, ProtectionState, BlockedSeconds, Interval, EntryNames,
// reregistrations, relayouts and node, which any thread may call at any time
// (a watchdog), also while a Save re-registers and replaces the engine.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/config.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/transport.h"

namespace memento::torch_adapter {

// The place of a tensor in a global tensor: its slice starts at `offsets` of
// a tensor of `global_shape` (one value per dimension of the tensor).
struct ShardSpec {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
  bool replicated = false;
  std::optional<ShardSpec> shard;  // a slice of a global tensor (exclusive with replicated)
  at::Tensor state_of;             // optimizer state: the parameter it belongs to
  // Copied inside Save instead of snapshotted where it lives behind training:
  // for tensors that change before the next WaitSnapshot, as a module's
  // buffers do in the forward pass (BatchNorm's running statistics). Costs a
  // copy of the tensor per saved step, on the calling thread.
  bool copy_at_save = false;
};

struct Options {
  // Capacity of the extra-state entry (generator states, user bytes); fixed
  // for the life of the node store. Default 256 KiB.
  uint64_t extra_capacity = 256ull << 10;
  // Save and restore the torch generators (CPU, and CUDA when available).
  bool save_rng = true;
  // Fault injection at the engine's stages (runtime/stage.h), passed to every
  // engine this checkpointer opens; empty in production. Under `memento
  // launch` with a stage injection for this rank, empty hooks are replaced by
  // the launcher's (see report_to_launcher).
  runtime::FaultHooks hooks;
  // Under `memento launch` (MEMENTO_LAUNCH_DIR set): report the job's progress
  // to the launcher on its own (a start event at creation, a step event at
  // every Save, each Restore's outcome and timing, ReportDone) and take part
  // in its stage fault injection. Outside the launcher it does nothing. A job
  // that writes the launcher's records itself (the demo) turns it off.
  bool report_to_launcher = true;
  // The step the job runs to, shown in the launcher's progress line (0 = not known).
  uint64_t total_steps = 0;
};

struct RestoreResult {
  uint64_t step = 0;
  runtime::RestoreReport report;
};

// Hooks for extra state: `save` returns the bytes to keep under a key at every
// Save, `restore` gets them back after a Restore.
struct ExtraHooks {
  std::function<std::string()> save;
  std::function<Status(const std::string&)> restore;
};

class LaunchProgress;

class TorchCheckpointer {
 public:
  using Source = std::function<std::vector<NamedTensor>()>;

  static Result<std::unique_ptr<TorchCheckpointer>> Create(
      runtime::Config config, std::shared_ptr<runtime::Transport> transport,
      Options options = Options());
  // Config::FromEnv() and the transport of the launcher that started this
  // process (launcher.h: mpirun -> MPI, torchrun -> gloo, else one rank).
  static Result<std::unique_ptr<TorchCheckpointer>> CreateFromEnvironment(
      Options options = Options());
  ~TorchCheckpointer();
  TorchCheckpointer(const TorchCheckpointer&) = delete;
  TorchCheckpointer& operator=(const TorchCheckpointer&) = delete;

  // One tensor under `name`.
  Status Register(const std::string& name, const at::Tensor& tensor, bool replicated = false);
  // One tensor under `name`: this rank's slice of a global tensor (see "Sharded tensors").
  Status Register(const std::string& name, const at::Tensor& tensor, ShardSpec shard);
  // The entry `name` (of a module, an optimizer or a source) is this rank's
  // slice of a global tensor. Checked when the tensors are enumerated (Save,
  // Restore): InvalidArgument naming the entry when no entry has that name,
  // the spec does not fit the tensor, or the tensor is replicated.
  Status SetShard(const std::string& name, ShardSpec shard);
  // Every parameter and buffer of `module` (see "Entry names"); parameters are
  // replicated when `replicated`. `module` must outlive the checkpointer.
  Status RegisterModule(torch::nn::Module& module, const std::string& prefix = "model.",
                        bool replicated = false);
  // The state of `optimizer` (see "Entry names"); Adam / AdamW state and
  // SGD's momentum buffers (dampening 0) are created now if absent
  // (PrimeOptimizerState). `optimizer` must outlive the checkpointer.
  Status RegisterOptimizer(torch::optim::Optimizer& optimizer,
                           const std::string& prefix = "optimizer.", bool replicated = false);
  // A source enumerated at every Save (names must be unique over all sources).
  Status RegisterSource(Source source);
  // Extra state under `key` (unique; keys starting with "memento." are reserved).
  Status RegisterExtra(const std::string& key, ExtraHooks hooks);

  // User bytes kept under `key` from the next Save on; UserState returns what
  // the last Restore brought back (or what was set).
  void SetUserState(const std::string& key, std::string bytes);
  std::optional<std::string> UserState(const std::string& key) const;

  // Collective. Restores the newest complete version into the registered
  // tensors in place; std::nullopt when the job never committed one (a fresh
  // start: runtime::Checkpointer::Restore's NotFound). Unrecoverable when it
  // did but none can be rebuilt.
  Result<std::optional<RestoreResult>> Restore();

  // Collective. Checkpoint `step` (see runtime::Checkpointer::Save).
  Status Save(uint64_t step);
  Status WaitSnapshot();
  Status Wait();
  Status WaitPersist();
  // Collective. Ends the run normally, after its last Save
  // (runtime::Checkpointer::Finish): when every rank's last version
  // committed, the run is marked finished and its node stores are unlinked
  // (kept, marked, with Config::keep_finished), so that the same job started
  // again begins fresh (Restore returns std::nullopt) unless
  // Config::resume_finished. Not for a run that is failing. OK at once before
  // the first Save or Restore; afterwards Save and Restore fail.
  Status Finish();
  // A save that failed before Save was called (the caller's own part of it:
  // a Python binding pickling its extra state) counts as this rank's last
  // save failing: Finish then marks nothing (Save notes its own failures).
  void NoteFailedSave();

  // For `memento launch`'s progress line and timeline (no-ops outside it):
  // the loss of the step whose Save comes next; time the caller was blocked
  // preparing a save outside these calls (counted into the step's stall, as
  // the time inside Save and WaitSnapshot is); and the end of the run, after
  // its last Save committed (Wait), with a hash that identifies the final
  // state (may be empty).
  void SetLoss(double loss);
  void AddCallerStall(double seconds);
  void ReportDone(const std::string& state_hash);

  std::optional<uint64_t> LatestCommitted() const;
  // runtime::Checkpointer::ProtectionState(): kReprotecting while a restore's
  // re-protect runs in the background (kProtected before the engine exists).
  runtime::Protection ProtectionState() const;
  double BlockedSeconds() const;
  // Which Save calls took a checkpoint (Config::interval; runtime::IntervalStats).
  // Counts restart when a re-registration makes a new engine.
  runtime::IntervalStats Interval() const;
  // Entry names registered with the engine, in order (after a Save or Restore).
  std::vector<std::string> EntryNames() const;
  // Times the engine was re-opened over a changed set of tensors, and of those
  // how many re-laid out the node store.
  int reregistrations() const;
  int relayouts() const;
  int rank() const;
  int size() const;
  // This rank's node identity (empty before the first Save or Restore).
  std::string node() const;
  // The engine (after a Save or Restore), for reports; may change at a re-registration.
  runtime::Checkpointer* engine();

  class Impl;

 private:
  TorchCheckpointer(std::unique_ptr<Impl> impl, std::unique_ptr<LaunchProgress> progress);
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<LaunchProgress> progress_;  // null when report_to_launcher is off
};

// Stable flattened names (see "Entry names"), exposed for tools and tests.
std::vector<NamedTensor> ModuleTensors(const torch::nn::Module& module, const std::string& prefix,
                                       bool replicated);
std::vector<NamedTensor> OptimizerTensors(torch::optim::Optimizer& optimizer,
                                          const std::string& prefix, bool replicated);
// Creates absent Adam / AdamW state as their first step would, and SGD's
// momentum buffers (momentum > 0, dampening 0) as zeros, which its first step
// turns into what it would have made; returns the number of parameters whose
// state was created.
int PrimeOptimizerState(torch::optim::Optimizer& optimizer);

// "float32", "float16", "bfloat16", "int64", "bool", ...
std::string DTypeName(at::ScalarType type);

// Checks every entry's crc32c in a rank file of a version persisted with
// MEMENTO_REMOTE_FORMAT=dcp (a `.distcp` file carrying memento's index):
// Corruption naming the file and the entry on a mismatch. A file without
// memento's index (written by dcp.save) is left alone: *memento = false, OK.
Status CheckDcpFile(const std::string& path, bool* memento);

// For programs that prefer exceptions (examples, scripts): the value, or a
// std::runtime_error carrying the status text.
template <typename T>
T OrThrow(Result<T> result) {
  if (!result.ok()) throw std::runtime_error("memento: " + result.status().ToString());
  return std::move(result).value();
}
inline void OrThrow(const Status& status) {
  if (!status.ok()) throw std::runtime_error("memento: " + status.ToString());
}

}  // namespace memento::torch_adapter
