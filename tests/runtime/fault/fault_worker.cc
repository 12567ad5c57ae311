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
// killed while its rank file is being written (its temporary file exists).
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
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

// Kills the process while its rank file of `version` is being written: a
// watcher thread SIGKILLs as soon as a temporary file appears in the folder.
class KillingRemoteStore : public DirectoryRemoteStore {
 public:
  KillingRemoteStore(std::string root, std::string job, KillPoint kill, int rank)
      : DirectoryRemoteStore(std::move(root), std::move(job)), kill_(kill), rank_(rank) {}

  Result<RankFileInfo> WriteRankFile(uint64_t version, int rank,
                                     const std::vector<RemoteEntrySource>& entries) override {
    if (kill_.stage == "remote-write" && kill_.step == version && kill_.rank == rank_) {
      std::string dir = VersionDir(version);
      std::thread([dir, version, rank] {
        while (true) {
          std::error_code ec;
          for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
            if (f.path().filename().string().find(".tmp") != std::string::npos) {
              Die("remote-write", rank, version);
            }
          }
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }).detach();
    }
    return DirectoryRemoteStore::WriteRankFile(version, rank, entries);
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

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_worker train STEPS | restore MIN MAX SRC | clean\n");
    return 2;
  }
  const std::string mode = argv[1];
  auto config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  if (mode == "clean") {
    // One rank is enough; the others wait so that mpirun exits cleanly.
    auto t = CreateMpiTransport();
    if (!t.ok()) return 1;
    if ((*t)->rank() == 0) {
      auto removed = CleanJob(config->job);
      if (!removed.ok()) return 1;
      std::printf("removed %zu segments\n", removed->size());
    }
    return (*t)->Barrier().ok() ? 0 : 1;
  }
  if (mode == "lose" || mode == "flip") {
    auto t = CreateMpiTransport();
    if (!t.ok() || argc < 3) return 1;
    const int rank = (*t)->rank();
    const int per_node = config->ranks_per_node > 0 ? config->ranks_per_node : 1;
    const std::string list = std::string(",") + argv[2] + ",";
    const bool mine = list.find("," + std::to_string(rank / per_node) + ",") != std::string::npos;
    ApplyReplacement(&*config, rank);
    int rc = 0;
    if (mine) {
      StoreId id{config->job, NodeIdentity(*config, rank),
                 static_cast<uint32_t>(LocalRank(*config, rank))};
      if (mode == "lose") {
        rc = NodeStore::Destroy(id).ok() ? 0 : 1;
        std::printf("rank %d: node %d lost (segment unlinked)\n", rank, rank / per_node);
      } else {
        rc = 1;
        auto store = NodeStore::Attach(id);
        if (store.ok()) {
          const int slot = store->Inventory().NewestSealed();
          for (int r = 0; slot >= 0 && r < store->region_count(); ++r) {
            const auto& spec = store->layout().regions[r];
            if (spec.kind == RegionKind::kShard || spec.capacity == 0) continue;
            auto view = store->ReadRegion(slot, r);
            if (!view.ok() || view->length == 0) continue;
            const_cast<uint8_t*>(view->data)[view->length / 2] ^= 0x10;  // the shm mapping
            std::printf("rank %d: flipped a byte of %s in slot %d\n", rank, spec.name.c_str(),
                        slot);
            rc = 0;
            break;
          }
        }
      }
    }
    return (*t)->Barrier().ok() ? rc : 1;
  }
  MpiTransportOptions mpi_options;
  mpi_options.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(config->timeout_s * 1000));  // MEMENTO_TIMEOUT_S
  auto transport = CreateMpiTransport(mpi_options);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  const int rank = (*transport)->rank();
  ApplyReplacement(&*config, rank);
  const KillPoint kill = ParseKill();
  FaultHooks hooks;
  hooks.at_stage = [kill, rank](Stage stage, uint64_t version) {
    if (kill.rank == rank && kill.step == version && kill.stage == StageName(stage)) {
      Die(StageName(stage), rank, version);
    }
    return Status::Ok();
  };
  std::shared_ptr<RemoteStore> remote;
  if (!config->remote_dir.empty()) {
    remote = std::make_shared<KillingRemoteStore>(config->remote_dir, config->job, kill, rank);
  }
  auto created = Checkpointer::Create(*config, *transport, remote, hooks);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  auto ck = std::move(created).value();

  // Two entries of rank-dependent sizes, many chunks each.
  std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>((6 << 20) + 1001 * rank),
                                            std::vector<uint8_t>(77777 + rank)};
  for (size_t e = 0; e < bufs.size(); ++e) {
    Status s = ck->RegisterBuffer("entry" + std::to_string(e), bufs[e].data(), bufs[e].size());
    if (!s.ok()) return 1;
  }
  auto fill = [&](uint64_t step) {
    for (size_t e = 0; e < bufs.size(); ++e) {
      for (size_t i = 0; i < bufs[e].size(); ++i) bufs[e][i] = Pattern(rank, step, e, i);
    }
  };

  if (mode == "train") {
    const uint64_t steps = std::stoull(argv[2]);
    for (uint64_t step = 1; step <= steps; ++step) {
      if (!ck->WaitSnapshot().ok()) return 1;
      fill(step);  // the "optimizer step"
      Status s = ck->Save(step);
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d Save(%llu): %s\n", rank, (unsigned long long)step,
                     s.ToString().c_str());
        return 1;
      }
    }
    Status w = ck->Wait();
    Status p = ck->WaitPersist();
    if (!w.ok() || !p.ok()) {
      std::fprintf(stderr, "rank %d: wait %s persist %s\n", rank, w.ToString().c_str(),
                   p.ToString().c_str());
      return 1;
    }
    if (rank == 0)
      std::printf("trained: latest committed v%llu\n",
                  (unsigned long long)ck->LatestCommitted().value_or(0));
    return 0;
  }
  if (mode == "restore") {
    if (argc < 5) return 2;
    const uint64_t min = std::stoull(argv[2]);
    const uint64_t max = std::stoull(argv[3]);
    const std::string want = argv[4];
    for (auto& b : bufs) std::fill(b.begin(), b.end(), 0xEE);
    auto report = ck->Restore();
    if (!report.ok()) {
      std::fprintf(stderr, "rank %d: Restore: %s\n", rank, report.status().ToString().c_str());
      return 1;
    }
    if (rank == 0) {
      std::printf("%s; re-protect %s\n", report->ToString().c_str(),
                  report->stats.reprotect_mode.c_str());
    }
    if (!report->source_detail.empty()) {
      std::printf("rank %d: %s; recovery report %s\n", rank, report->source_detail.c_str(),
                  report->ToJson().substr(0, 400).c_str());
    }
    int bad = 0;
    if (report->version < min || report->version > max) {
      std::fprintf(stderr, "rank %d: restored v%llu outside [%llu, %llu]\n", rank,
                   (unsigned long long)report->version, (unsigned long long)min,
                   (unsigned long long)max);
      ++bad;
    }
    for (const auto& e : report->entries) {
      const char* got = e.source == RestoreSource::kRemote ? "remote" : "memory";
      if (want != "any" && want != got) {
        std::fprintf(stderr, "rank %d: entry %s from %s, expected %s\n", rank, e.name.c_str(), got,
                     want.c_str());
        ++bad;
      }
    }
    for (size_t e = 0; e < bufs.size(); ++e) {
      for (size_t i = 0; i < bufs[e].size(); ++i) {
        if (bufs[e][i] != Pattern(rank, report->version, e, i)) {
          std::fprintf(stderr, "rank %d: entry %zu byte %zu differs\n", rank, e, i);
          ++bad;
          break;
        }
      }
    }
    // Every rank restored the same version.
    auto lo = (*transport)->AllReduceMin(static_cast<int64_t>(report->version));
    auto hi = (*transport)->AllReduceMax(static_cast<int64_t>(report->version));
    if (!lo.ok() || !hi.ok() || *lo != *hi) {
      std::fprintf(stderr, "rank %d: ranks restored different versions\n", rank);
      ++bad;
    }
    if (bad == 0 && rank == 0)
      std::printf("restore OK: v%llu bit-exact on every rank\n",
                  (unsigned long long)report->version);
    return bad == 0 ? 0 : 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}

}  // namespace
}  // namespace memento::runtime

int main(int argc, char** argv) { return memento::runtime::Main(argc, argv); }
