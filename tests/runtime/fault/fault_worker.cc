// fault_worker: one rank of a real job under mpirun, for the mpi and fault
// tests (driven by fault_test.sh).
//
//   fault_worker train STEPS          save versions 1..STEPS, then wait for
//                                     commit and persist
//   fault_worker restore MIN MAX SRC  Restore(); require MIN <= version <= MAX,
//                                     every entry from SRC (memory|remote|any)
//                                     and bytes bit-exact for that version
//   fault_worker clean                unlink this job's segments (node loss)
//   fault_worker lose N[,N...]        the ranks of virtual nodes N (rank / R)
//                                     unlink their own segments (node loss)
//   fault_worker flip N               the ranks of virtual node N flip one byte
//                                     in the first replica / parity region of
//                                     their newest sealed slot (corruption)
//
// Configuration comes from MEMENTO_* (Config::FromEnv). Buffer contents are a
// function of (rank, step, entry, index), so a restore can be checked without
// the failure-free run's files. MEMENTO_TEST_KILL="stage:step:rank" makes
// `rank` SIGKILL itself at `stage` of version `step`; MEMENTO_TEST_REPLACE_NODE=N
// runs virtual node N under a new identity (a replacement node). Kill stages are the engine's
// (snapshot, seal, commit, committed, persist, manifest) plus remote-write:
// killed while its rank file is being written (its temporary file exists,
// its header written, none of its entries).
#include <mpi.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memento/runtime/checkpointer.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/mpi_transport.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "test_pattern.h"

namespace memento::runtime {
namespace {

using testing::Pattern;

struct KillPoint {
  std::string stage;
  uint64_t step = 0;
  int rank = -1;
};

KillPoint ParseKill() {
  KillPoint k;
  const char* env = std::getenv("MEMENTO_TEST_KILL");
  if (env == nullptr || *env == 0) return k;
  std::string s(env);
  size_t a = s.find(':'), b = s.rfind(':');
  if (a == std::string::npos || a == b) {
    std::fprintf(stderr, "MEMENTO_TEST_KILL must be stage:step:rank, got '%s'\n", env);
    std::exit(2);
  }
  k.stage = s.substr(0, a);
  k.step = std::stoull(s.substr(a + 1, b - a - 1));
  k.rank = std::stoi(s.substr(b + 1));
  return k;
}

[[noreturn]] void Die(const char* where, int rank, uint64_t step) {
  std::fprintf(stderr, "fault_worker rank %d: SIGKILL at %s of v%llu\n", rank, where,
               static_cast<unsigned long long>(step));
  std::fflush(stderr);
  raise(SIGKILL);
  std::abort();
}

// Kills the process while its rank file of `version` is being written, at
// a fixed point: the first entry's bytes are handed to the store from a
// mapping of an empty file, so the store's first read of them (after it has
// created its temporary file and written the header) raises SIGBUS, whose
// handler SIGKILLs the process. A watcher thread looking for the temporary
// file raced the write: a small file could be written before it looked,
// and another rank's temporary file then killed this rank after its own
// file was complete.
void DieOnBus(int) {
  static const char kMsg[] = "fault_worker: SIGKILL at remote-write (first entry byte read)\n";
  (void)!write(2, kMsg, sizeof(kMsg) - 1);
  raise(SIGKILL);
}

class KillingRemoteStore : public DirectoryRemoteStore {
 public:
  KillingRemoteStore(std::string root, std::string job, KillPoint kill, int rank)
      : DirectoryRemoteStore(std::move(root), std::move(job)), kill_(kill), rank_(rank) {}

  using DirectoryRemoteStore::WriteRankFile;
  Result<RankFileInfo> WriteRankFile(uint64_t version, int rank,
                                     const std::vector<RemoteEntrySource>& entries,
                                     uint64_t lineage) override {
    if (kill_.stage != "remote-write" || kill_.step != version || kill_.rank != rank_ ||
        entries.empty() || entries[0].bytes == 0) {
      return DirectoryRemoteStore::WriteRankFile(version, rank, entries, lineage);
    }
    char path[] = "/tmp/memento-fault-trap-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) Die("remote-write (no trap file)", rank, version);
    unlink(path);
    void* trap = mmap(nullptr, entries[0].bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (trap == MAP_FAILED) Die("remote-write (no trap mapping)", rank, version);
    struct sigaction sa {};
    sa.sa_handler = DieOnBus;
    sigaction(SIGBUS, &sa, nullptr);
    std::fprintf(stderr, "fault_worker rank %d: dies in the remote write of v%llu\n", rank,
                 static_cast<unsigned long long>(version));
    std::fflush(stderr);
    std::vector<RemoteEntrySource> trapped = entries;
    trapped[0].data = trap;
    return DirectoryRemoteStore::WriteRankFile(version, rank, trapped, lineage);
  }

 private:
  KillPoint kill_;
  int rank_;
};

// MEMENTO_TEST_REPLACE_NODE=N: the ranks of virtual node N run under a new
// identity ("replacement/N"), as a replacement machine would.
void ApplyReplacement(Config* config, int rank) {
  const char* env = std::getenv("MEMENTO_TEST_REPLACE_NODE");
  if (env == nullptr || *env == '\0') return;
  const int per_node = config->ranks_per_node > 0 ? config->ranks_per_node : 1;
  if (rank / per_node == std::atoi(env)) config->node = "replacement";
}

// `clean`: one rank removes the job's segments; the others wait so that
// mpirun exits cleanly.
int RunClean(const Config& config) {
  auto t = CreateMpiTransport();
  if (!t.ok()) return 1;
  if ((*t)->rank() == 0) {
    auto removed = CleanJob(config.job);
    if (!removed.ok()) return 1;
    std::printf("removed %zu segments\n", removed->size());
  }
  return (*t)->Barrier().ok() ? 0 : 1;
}

// Flips one byte of a protection region (replica or parity) of the newest
// sealed slot of `id`'s store; 0 if one was flipped.
int FlipProtectionByte(const StoreId& id, int rank) {
  auto store = NodeStore::Attach(id);
  if (!store.ok()) return 1;
  const int slot = store->Inventory().NewestSealed();
  for (int r = 0; slot >= 0 && r < store->region_count(); ++r) {
    const auto& spec = store->layout().regions[r];
    if (spec.kind == RegionKind::kShard || spec.capacity == 0) continue;
    auto view = store->ReadRegion(slot, r);
    if (!view.ok() || view->length == 0) continue;
    const_cast<uint8_t*>(view->data)[view->length / 2] ^= 0x10;  // the shm mapping
    std::printf("rank %d: flipped a byte of %s in slot %d\n", rank, spec.name.c_str(), slot);
    return 0;
  }
  return 1;
}

// `lose NODES` / `flip NODES` (comma-separated virtual node indices): the
// ranks of those nodes unlink their store, or damage a protection region.
int RunLoseOrFlip(Config config, const std::string& mode, const std::string& nodes) {
  auto t = CreateMpiTransport();
  if (!t.ok()) return 1;
  const int rank = (*t)->rank();
  const int per_node = config.ranks_per_node > 0 ? config.ranks_per_node : 1;
  const std::string list = "," + nodes + ",";
  const bool mine = list.find("," + std::to_string(rank / per_node) + ",") != std::string::npos;
  ApplyReplacement(&config, rank);
  int rc = 0;
  if (mine) {
    StoreId id{config.job, NodeIdentity(config, rank),
               static_cast<uint32_t>(LocalRank(config, rank))};
    if (mode == "lose") {
      rc = NodeStore::Destroy(id).ok() ? 0 : 1;
      std::printf("rank %d: node %d lost (segment unlinked)\n", rank, rank / per_node);
    } else {
      rc = FlipProtectionByte(id, rank);
    }
  }
  return (*t)->Barrier().ok() ? rc : 1;
}

// A training rank: its transport, its checkpointer (with the kill point of
// MEMENTO_TEST_KILL) and two registered entries of rank-dependent sizes.
struct Worker {
  int rank = 0;
  std::shared_ptr<Transport> transport;
  std::vector<std::vector<uint8_t>> bufs;  // outlives ck, whose background work reads it
  std::unique_ptr<Checkpointer> ck;

  void Fill(uint64_t step) {
    for (size_t e = 0; e < bufs.size(); ++e) {
      for (size_t i = 0; i < bufs[e].size(); ++i) bufs[e][i] = Pattern(rank, step, e, i);
    }
  }
};

Result<Worker> OpenWorker(Config config) {
  MpiTransportOptions mpi_options;
  mpi_options.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(config.timeout_s * 1000));  // MEMENTO_TIMEOUT_S
  MEMENTO_ASSIGN_OR_RETURN(auto transport, CreateMpiTransport(mpi_options));
  Worker w;
  w.transport = std::move(transport);
  w.rank = w.transport->rank();
  ApplyReplacement(&config, w.rank);
  const KillPoint kill = ParseKill();
  FaultHooks hooks;
  hooks.at_stage = [kill, rank = w.rank](Stage stage, uint64_t version) {
    if (kill.rank == rank && kill.step == version && kill.stage == StageName(stage)) {
      Die(StageName(stage), rank, version);
    }
    return Status::Ok();
  };
  std::shared_ptr<RemoteStore> remote;
  if (!config.remote_dir.empty()) {
    remote = std::make_shared<KillingRemoteStore>(config.remote_dir, config.job, kill, w.rank);
  }
  MEMENTO_ASSIGN_OR_RETURN(w.ck, Checkpointer::Create(config, w.transport, remote, hooks));
  // Many chunks each.
  w.bufs = {std::vector<uint8_t>((6 << 20) + 1001 * w.rank), std::vector<uint8_t>(77777 + w.rank)};
  for (size_t e = 0; e < w.bufs.size(); ++e) {
    MEMENTO_RETURN_IF_ERROR(
        w.ck->RegisterBuffer("entry" + std::to_string(e), w.bufs[e].data(), w.bufs[e].size()));
  }
  return w;
}

// `train STEPS`: saves versions 1..STEPS (a kill point may end it early).
int RunTrain(Worker& w, uint64_t steps) {
  for (uint64_t step = 1; step <= steps; ++step) {
    if (!w.ck->WaitSnapshot().ok()) return 1;
    w.Fill(step);  // the "optimizer step"
    Status s = w.ck->Save(step);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d Save(%llu): %s\n", w.rank, (unsigned long long)step,
                   s.ToString().c_str());
      return 1;
    }
  }
  Status wait = w.ck->Wait();
  Status persist = w.ck->WaitPersist();
  if (!wait.ok() || !persist.ok()) {
    std::fprintf(stderr, "rank %d: wait %s persist %s\n", w.rank, wait.ToString().c_str(),
                 persist.ToString().c_str());
    return 1;
  }
  if (w.rank == 0) {
    std::printf("trained: latest committed v%llu\n",
                (unsigned long long)w.ck->LatestCommitted().value_or(0));
  }
  return 0;
}

// Problems of a restore: version outside [min, max], an entry from another
// source than `want` (memory | remote | any), a byte that differs.
int CountRestoreProblems(const Worker& w, const RestoreReport& report, uint64_t min, uint64_t max,
                         const std::string& want) {
  int bad = 0;
  if (report.version < min || report.version > max) {
    std::fprintf(stderr, "rank %d: restored v%llu outside [%llu, %llu]\n", w.rank,
                 (unsigned long long)report.version, (unsigned long long)min,
                 (unsigned long long)max);
    ++bad;
  }
  for (const auto& e : report.entries) {
    const char* got = e.source == RestoreSource::kRemote ? "remote" : "memory";
    if (want != "any" && want != got) {
      std::fprintf(stderr, "rank %d: entry %s from %s, expected %s\n", w.rank, e.name.c_str(), got,
                   want.c_str());
      ++bad;
    }
  }
  for (size_t e = 0; e < w.bufs.size(); ++e) {
    for (size_t i = 0; i < w.bufs[e].size(); ++i) {
      if (w.bufs[e][i] != Pattern(w.rank, report.version, e, i)) {
        std::fprintf(stderr, "rank %d: entry %zu byte %zu differs\n", w.rank, e, i);
        ++bad;
        break;
      }
    }
  }
  return bad;
}

// `restore MIN MAX SRC`: restores; the version, the sources and every byte are checked.
int RunRestore(Worker& w, uint64_t min, uint64_t max, const std::string& want) {
  for (auto& b : w.bufs) std::fill(b.begin(), b.end(), 0xEE);
  auto report = w.ck->Restore();
  if (!report.ok()) {
    std::fprintf(stderr, "rank %d: Restore: %s\n", w.rank, report.status().ToString().c_str());
    return 1;
  }
  if (w.rank == 0) {
    std::printf("%s; re-protect %s\n", report->ToString().c_str(),
                report->stats.reprotect_mode.c_str());
  }
  if (!report->source_detail.empty()) {
    std::printf("rank %d: %s; recovery report %s\n", w.rank, report->source_detail.c_str(),
                report->ToJson().substr(0, 400).c_str());
  }
  int bad = CountRestoreProblems(w, *report, min, max, want);
  // The re-protect of what the lost nodes held runs in the background (a
  // kill at Stage::kReprotect lands here, after Restore returned); its
  // collectives run on the commit thread, so wait before our own.
  const char* at_return = ProtectionName(w.ck->ProtectionState());
  Status waited = w.ck->Wait();
  if (!waited.ok() || w.ck->ProtectionState() != Protection::kProtected) {
    std::fprintf(stderr, "rank %d: not protected again after the restore (%s): %s\n", w.rank,
                 ProtectionName(w.ck->ProtectionState()), waited.ToString().c_str());
    ++bad;
  }
  if (w.rank == 0) {
    std::printf("protection when Restore returned: %s (report: %s); after Wait(): %s\n",
                at_return, report->protection.c_str(), ProtectionName(w.ck->ProtectionState()));
  }
  // Every rank restored the same version.
  auto lo = w.transport->AllReduceMin(static_cast<int64_t>(report->version));
  auto hi = w.transport->AllReduceMax(static_cast<int64_t>(report->version));
  if (!lo.ok() || !hi.ok() || *lo != *hi) {
    std::fprintf(stderr, "rank %d: ranks restored different versions\n", w.rank);
    ++bad;
  }
  if (bad == 0 && w.rank == 0) {
    std::printf("restore OK: v%llu bit-exact on every rank\n",
                (unsigned long long)report->version);
  }
  return bad == 0 ? 0 : 1;
}

int Main(int argc, char** argv) {
  const std::string mode = argc >= 2 ? argv[1] : "";
  const int need = mode == "restore" ? 5 : mode == "clean" ? 2 : 3;
  if (argc < need || (mode != "train" && mode != "restore" && mode != "clean" &&
                      mode != "lose" && mode != "flip")) {
    std::fprintf(stderr,
                 "usage: fault_worker train STEPS | restore MIN MAX SRC | lose NODES | "
                 "flip NODES | clean\n");
    return 2;
  }
  auto config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  if (mode == "clean") return RunClean(*config);
  if (mode == "lose" || mode == "flip") return RunLoseOrFlip(*config, mode, argv[2]);
  auto worker = OpenWorker(*config);
  if (!worker.ok()) {
    std::fprintf(stderr, "%s\n", worker.status().ToString().c_str());
    return 1;
  }
  if (mode == "train") return RunTrain(*worker, std::stoull(argv[2]));
  return RunRestore(*worker, std::stoull(argv[2]), std::stoull(argv[3]), argv[4]);
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
