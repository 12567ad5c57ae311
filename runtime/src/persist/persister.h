// Persister: the last stage of a version. Streams committed versions from their
// sealed slots to the RemoteStore on its own thread, so that training never
// waits for the remote tier.
//
// Protocol of one version v (no collective: the commit thread owns those):
//   every rank  writes its rank file from the slot (RemoteStore::WriteRankFile:
//               temp name, fsync, rename), re-checks the slot is still sealed
//               with v, then sends {v, ok, file, bytes, crc} to rank 0 with
//               kTagPersistDone;
//   rank 0      receives every rank's record (its own directly), and only if
//               all are ok and CheckRankFiles passes writes the manifest last,
//               then prunes to `keep` complete versions.
// A rank that fails sends ok = false; a rank that dies makes rank 0's Recv
// fail (Unavailable / Timeout): either way no manifest, so the version is
// never visible. While a rank writes its file it sends "still writing"
// records every quarter of the transport's timeout, which rank 0 skips: a
// slow write (a large shard, a loaded file system) is waited for, however
// long it takes, and only a rank that stops answering times out. Versions are persisted in commit
// order, the same on every rank, so the records pair up.
//
// Slot pinning: from Enqueue until its rank file is written, a version's slot
// is pinned in the SlotAllocator, which never hands a pinned slot to a writer.
// The Persister calls nothing of its owner: its only outward calls are the
// allocator's Pin / Unpin (a leaf lock), the store, the remote tier and the
// transport, never while holding its own lock.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memento/runtime/stage.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/remote_store.h"
#include "memento/runtime/transport.h"
#include "store/slot_allocator.h"

namespace memento::runtime {

class Persister {
 public:
  // `store` and `slots` must outlive the Persister. `hook` may be empty.
  // `file_of_rank[r]`: the number of rank r's rank file (its place in the
  // protection layout, node * lanes + lane, which follows the node across
  // relaunches, where the world rank may not); empty: the world rank.
  Persister(std::shared_ptr<RemoteStore> remote, std::shared_ptr<Transport> transport,
            const NodeStore* store, SlotAllocator* slots, std::vector<std::string> names,
            std::vector<EntryLayout> layouts, int keep, StageHook hook,
            std::vector<int> file_of_rank = {});
  ~Persister();  // finishes queued work, joins

  // Queues version `version` held sealed in `slot`; pins the slot until its
  // rank file is written.
  void Enqueue(uint64_t version, int slot);

  // Blocks until the queue is empty and nothing runs; the last version's status.
  Status WaitIdle();

 private:
  struct Job {
    uint64_t version;
    int slot;
  };
  void Loop();
  Status PersistOne(const Job& job, Status* local);
  Status WriteLocal(const Job& job, uint64_t lineage, RankFileInfo* info);
  Status CollectAndPublish(uint64_t version, uint64_t lineage, RankFileInfo own,
                           const Status& own_status);

  int FileOf(int rank) const { return file_of_rank_.empty() ? rank : file_of_rank_.at(rank); }

  std::shared_ptr<RemoteStore> remote_;
  std::shared_ptr<Transport> transport_;
  const NodeStore* store_;
  SlotAllocator* slots_;
  const std::vector<std::string> names_;
  const std::vector<EntryLayout> layouts_;
  const int keep_;
  const StageHook hook_;
  const std::vector<int> file_of_rank_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  Status last_;
  std::thread thread_;
};

}  // namespace memento::runtime
