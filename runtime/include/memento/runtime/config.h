// Config: every knob of the runtime, read from MEMENTO_* environment variables.
//
// One struct, filled once at start-up by Config::FromEnv() (or FromMap() in
// tests), then passed by value/const reference to whatever needs it. Nothing
// else in memento reads the environment. Each field below documents its
// variable, its meaning, its default and the trade-off it controls.
//
// Thread-safety: a Config is a plain value. FromEnv() reads the process
// environment and must not race with setenv() in another thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/log.h"

namespace memento::runtime {

// What to do when a node store segment of this job already exists in
// /dev/shm but cannot be attached (another format version, a different shard
// layout or slot count). A segment whose header or layout is damaged is
// neither refused nor unlinked, whatever the policy: the checkpointer sets it
// aside as <name>.corrupt.<pid> (its node counts as lost for the restore)
// and removes it after a successful restore.
enum class StalePolicy {
  // Refuse: the open fails with FailedPrecondition naming the segment and the
  // reason; `memento clean --job J` removes it. Safe: never destroys data that
  // might be the last copy of a checkpoint.
  kError,
  // Unlink the stale segment (logged at warn) and create a fresh one. For jobs
  // that change their model between launches under the same job id.
  kReplace,
};

struct Config {
  // MEMENTO_JOB. The job id: names the shared-memory segments
  // ("/memento.<job>.<node>-<crc of node>.r<lane>") and the remote
  // directory sub-folder, and
  // is stored in every header so that two jobs never read each other's data.
  // 1..48 characters from [A-Za-z0-9_-] (no '.' and no '/', which delimit
  // segment names). Default "memento": fine for one job per machine; set a
  // distinct id for concurrent jobs on shared nodes, and the same id again
  // when relaunching a job that should restore. FromEnv() without
  // MEMENTO_JOB takes it from a launcher whose id is stable across relaunches
  // of the same job: torchrun's TORCHELASTIC_RUN_ID (its --rdzv-id; the
  // default "none" and --standalone's random UUID, drawn anew by every
  // torchrun, are ignored), else Slurm's SLURM_JOB_ID (kept across a
  // requeue); characters outside the set become '_', and an id longer than
  // 48 keeps its first 39 characters, '-' and 8 hex digits of its crc32c
  // (JobIdFromLauncher). mpirun gives no such id: "memento" there, and a
  // rerun of a job that finished starts fresh (resume_finished).
  std::string job = "memento";

  // MEMENTO_NODE. This process's node identity (its failure domain). Empty
  // (default) = the host name. Set it when one machine should pose as a named
  // node, e.g. in containers whose host names change across restarts.
  // At most 200 bytes, no NUL. See node_identity.h.
  std::string node;

  // MEMENTO_RANKS_PER_NODE. 0 (default) = ranks are grouped by real node
  // identity and the local rank comes from the launcher or an allgather of
  // identities. R > 0 = virtual nodes for tests on one machine: world rank r
  // lives on node "<host>/<r / R>" with local rank r % R.
  int ranks_per_node = 0;

  // MEMENTO_SCHEME. How a group protects shards: "none", "replica:M",
  // "replica:M:group", "replica:M:ring", "xor:K", "rs:K+M" (M, K >= 1;
  // replica M >= 2). Checked here only for syntax and kept as a string; the
  // placement module parses it. Default "none": node-local copy only (a
  // process crash is survived, a node loss is not). More redundancy costs
  // memory per node (replica: M x shard; xor/rs: shard x (1 + M/K)) and
  // network traffic per checkpoint.
  std::string scheme = "none";

  // MEMENTO_SLOTS. Slots (versions) preallocated per node store, >= 2.
  // Default 2: the newest committed version stays intact while the next one
  // is written. More slots keep older versions in memory at the cost of one
  // shard-sized (plus redundancy) allocation each.
  int slots = 2;

  // MEMENTO_REMOTE. Directory of the remote tier (a shared file system in
  // production). Empty (default) = no remote tier: a loss that memory cannot
  // serve is unrecoverable.
  std::string remote_dir;

  // MEMENTO_REMOTE_FORMAT. How persisted versions are written: "memento"
  // (default: memento's rank files) or "dcp" (torch.distributed.checkpoint's
  // layout, readable by dcp.load without memento; needs the torch adapter,
  // which supplies the format: runtime/include/memento/runtime/remote_format.h).
  std::string remote_format = "memento";

  // MEMENTO_RESTORE_FROM. A torch.distributed.checkpoint directory to start
  // from when neither memory nor the remote tier holds a version of the job
  // (the Python package's restore(); the C++ runtime only carries it).
  std::string restore_from;

  // MEMENTO_SHM_DIR. The directory of the node stores: empty (default)
  // /dev/shm, else an absolute path of a directory on a tmpfs (e.g. one
  // mounted with huge=within_size: 2 MiB pages for the stores, without
  // changing /dev/shm for everything else). ShmSegment reads the variable
  // from the environment itself (so that a job, `memento inspect` and
  // `memento clean` agree); CheckShmDir() checks this field against it.
  std::string shm_dir;

  // MEMENTO_TRANSPORT_DEVICE. off (default) | auto | nccl: whether protect
  // and recovery messages of at least 256 KiB go between the ranks' GPUs over
  // NCCL (device_link.h), the rest staying on the job's transport. auto and
  // nccl use it when this build has NCCL and every rank has tensors on a GPU
  // (its first such GPU hosts the link's staging); otherwise the job runs on
  // its transport alone (nccl logs a warning saying why). Every rank must
  // give the same value.
  std::string device_transport = "off";

  // MEMENTO_DEVICE_COPY. direct (default) | staged: how GPU tensors move
  // between the device and the node store. direct: the copy engine writes
  // into (and a restore reads from) the store's pages, which the driver
  // registered (cudaHostRegister), and the snapshot workers hash them there.
  // staged: the copy engine writes into two 1 MiB pinned buffers per
  // snapshot worker that the driver allocated (cudaHostAlloc), and the worker
  // copies each into the store while hashing it; a restore copies the store's
  // bytes into the restore threads' buffer pairs on the host and the copy
  // engine reads them there: for hosts whose GPU moves data to and from
  // registered pages more slowly than the driver's own, at the price of a
  // copy on the host. staged registers none of the store's pages (unless
  // MEMENTO_TRANSPORT_DEVICE is on: the NCCL link's copies reach the store,
  // and restores then read it directly). A restore from pages this process
  // never registered (after a relaunch) is staged either way. A rank's own
  // choice; without GPU tensors it changes nothing.
  std::string device_copy = "direct";

  // MEMENTO_PERSIST_EVERY. Every P-th committed version (counted by Save
  // calls that commit) is streamed to the remote tier in the background.
  // Default 10; 0 = never. Smaller P bounds the work lost when memory cannot
  // serve, at the cost of remote bandwidth (never training stall).
  int persist_every = 10;

  // MEMENTO_PERSIST_KEEP. Complete remote versions kept; older ones are
  // pruned after each persist. Default 2, >= 1.
  int persist_keep = 2;

  // MEMENTO_LOG. Log threshold: error | warn | info | debug. Default warn.
  // info logs the configuration and one line per checkpoint stage.
  LogLevel log_level = LogLevel::kWarn;

  // MEMENTO_CHUNK_BYTES. Snapshot / protect chunk size in bytes; accepts a
  // K, M or G suffix (powers of 1024), e.g. "4M". Default 4 MiB, range
  // 4 KiB..1 GiB. Smaller chunks pipeline snapshot and protect more finely;
  // larger ones cut per-chunk overhead.
  uint64_t chunk_bytes = 4ull << 20;

  // MEMENTO_THREADS. Background threads copying chunks into the slot: "auto"
  // (0, the default; SnapshotThreads) or 1..64. More threads raise snapshot
  // bandwidth until memory bandwidth saturates, and take cores from training.
  int threads = 0;

  // MEMENTO_TIMEOUT_S. Seconds a collective or a peer transfer may take before
  // the peer is declared gone (Status Timeout). Default 300, range
  // [0.001, 86400]; fractions are rounded up to whole milliseconds (timeout()).
  // It governs every wait of the transports, CreateMpiTransport() included.
  // Too small turns a slow peer into a failure; too large delays recovery
  // from a dead one.
  double timeout_s = 300.0;

  // timeout_s as a wait bound, rounded up to whole milliseconds (never 0,
  // which would mean "wait forever").
  std::chrono::milliseconds timeout() const;

  // MEMENTO_STALE. error | replace: what to do with an existing segment of
  // this job that cannot be attached; see StalePolicy. Default error.
  StalePolicy stale_policy = StalePolicy::kError;

  // MEMENTO_ELASTIC. 0 (default) | 1: whether a relaunch on another number of
  // nodes or ranks per node than the surviving node stores were written for
  // restores elastically (Checkpointer::Restore: every rank assembles the
  // slices it registered from the old slices that survive) instead of
  // failing with ElasticRestoreNeeded. Opt-in because the caller must have
  // registered its new slices (EntryLayout) for the new topology.
  bool elastic = false;

  // MEMENTO_BACKGROUND_REPROTECT. 1 (default) | 0: whether Restore returns
  // as soon as every rank's buffers hold the restored version, with what the
  // lost nodes held rebuilt in the background on the commit thread
  // (Checkpointer::ProtectionState), or only once it is protected again.
  bool background_reprotect = true;

  // MEMENTO_RESUME_FINISHED. 0 (default) | 1: whether Restore continues a
  // run that finished (closed normally after its last version committed:
  // Checkpointer::Finish). By default a finished run, and any run older
  // than it, is not restored: Restore reports NotFound (a fresh start) and
  // logs the finished run's step once, so that rerunning a finished command
  // under the same job id trains from step 0 instead of one more step from
  // the end. 1 restores its last version (from memory when kept, else the
  // remote tier's newest of that run) and removes the finished marks, so
  // that the continued run is relaunched like any other.
  bool resume_finished = false;

  // MEMENTO_KEEP_FINISHED. 0 (default) | 1: what Checkpointer::Finish does
  // with this rank's node store once every rank agreed the run finished.
  // 0 unlinks it (the node's memory is freed at once; the remote tier keeps
  // what was persisted); 1 keeps it, marked finished, for a later
  // resume_finished restore from memory, at the cost of its memory until
  // `memento clean --job J` or the next run under the job id reuses it.
  bool keep_finished = false;

  // MEMENTO_INTERVAL. Which Save(step) calls take a checkpoint. 1 (default):
  // every call. N > 1: the steps that are multiples of N; the other calls
  // return OK at once. "auto" (interval == kAutoInterval): the engine picks
  // the interval that maximises goodput from the measured step time (between
  // Save calls), stall and protect time and the failure rate of
  // MEMENTO_NODE_MTBF_H (required), re-tunes it as they drift and logs each
  // change at info; every rank makes the same decision (docs/goodput.md).
  // Longer intervals cut the stall; shorter ones the work lost per failure.
  static constexpr int kAutoInterval = 0;
  int interval = 1;

  // MEMENTO_NODE_MTBF_H. Mean hours between failures of one node (any
  // failure that rolls the job back), for MEMENTO_INTERVAL=auto: the job
  // fails nodes / MTBF times per hour. A positive decimal, e.g. 8760 or
  // 0.5; 0 (default) = not set.
  double node_mtbf_h = 0;

  // Reads every MEMENTO_* variable of the process environment once, logs the
  // ones that are set (info) and sets the process log threshold to
  // log_level. A malformed value is InvalidArgument naming the variable, the
  // value and the accepted forms. An unknown MEMENTO_* name (a misspelt
  // variable) is InvalidArgument naming it and the closest known name, unless
  // MEMENTO_ALLOW_UNKNOWN=1 (then a warning); names of the build scripts and
  // test harness (MEMENTO_BUILD_DIR, MEMENTO_TEST_*) are not Config's and are
  // ignored. Numbers are strict decimals: no blanks, '+' or hex.
  // MEMENTO_REMOTE is resolved here, once, against the working directory if
  // relative (remote_dir is then absolute) and checked: it must be a
  // directory where this user can create files (created if missing, its
  // parent must exist); otherwise InvalidArgument naming it and the reason.
  // `overrides` (e.g. a Python Checkpointer's keywords, by variable name)
  // replace the environment's values; a name that is not a variable is
  // InvalidArgument.
  static Result<Config> FromEnv(const std::map<std::string, std::string>& overrides = {});

  // As FromEnv() but from an explicit map {"MEMENTO_SLOTS": "3", ...}; keys
  // that are not Config variables are InvalidArgument. No logging, no global
  // side effects: for tests.
  static Result<Config> FromMap(const std::map<std::string, std::string>& vars);

  // Checks every field's range (what FromMap checks after parsing); for
  // Configs built in code.
  Status Validate() const;

  // When shm_dir is set: Ok when it is the directory the node stores go to
  // (ShmSegment::Directory(): the environment's MEMENTO_SHM_DIR, else
  // /dev/shm) and that is a directory on a tmpfs; else InvalidArgument naming
  // MEMENTO_SHM_DIR. A value given only in the configuration (a keyword of
  // the Python Checkpointer, a Config built in code) would be ignored by the
  // stores, so it is refused. FromEnv and the checkpointers' Create call it.
  Status CheckShmDir() const;

  // "MEMENTO_JOB=memento MEMENTO_SLOTS=2 ..." for logs and reports.
  std::string ToString() const;

  // The snapshot worker threads to run: `threads` when set. "auto" is 2 when
  // every registered buffer is host memory. When some lie on a GPU it is half
  // this rank's share of the CPUs, between 2 and 8: the copy engine moves a
  // device chunk without the CPU, but every byte of it is then hashed
  // (crc32c) on the host where it landed, one core hashes about 20 GB/s out
  // of memory, and a GPU's host link moves about 50 GB/s; the other half of
  // the share is left to the training's own threads. `cpus`: the CPUs this
  // process may run on (affinity); `machine_cpus`: the CPUs online;
  // `ranks_on_node`: the ranks sharing the node. A process bound to fewer
  // CPUs than the machine has takes those as its share; an unbound one
  // shares them all with its node's ranks.
  int SnapshotThreads(bool device_state, int cpus, int machine_cpus, int ranks_on_node) const;

  // Names of all variables, in documentation order.
  static const std::vector<std::string>& VariableNames();
};

// The job id a launcher gives this process when MEMENTO_JOB is unset (see
// Config::job): from TORCHELASTIC_RUN_ID (unless "none", empty or a random
// UUID, as `torchrun --standalone` draws per invocation), else
// SLURM_JOB_ID, mapped to ValidateJobId's rules; `source` (optional) names
// the variable. Empty when neither is set.
std::string JobIdFromLauncher(std::string* source = nullptr);

// Syntax checks shared with other modules; OK or InvalidArgument naming `what`.
Status ValidateJobId(const std::string& job);
Status ValidateSchemeSyntax(const std::string& scheme);

// MEMENTO_TIMEOUT_S of the environment as Config reads it (rounded up to whole
// milliseconds), or the default 300 s when unset; InvalidArgument when malformed.
Result<std::chrono::milliseconds> TimeoutFromEnv();

// Parses "4096", "64K", "4M", "1G" (also "4MiB"/"4MB" read as powers of 1024, and
// "64k", "4m", "1g").
Result<uint64_t> ParseByteSize(const std::string& text);
// `bytes` as a user writes it: "2G", "48K", "5000" (the largest exact suffix).
std::string ByteSizeText(uint64_t bytes);

}  // namespace memento::runtime
