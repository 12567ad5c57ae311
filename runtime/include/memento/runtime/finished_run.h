// FinishedRun: the mark a run leaves when it ends normally
// (Checkpointer::Finish), in its node stores (NodeStore::MarkFinished) and on
// the remote tier (RemoteStore::WriteFinished). A later run under the same
// job id does not restore that run, nor any older one, unless asked to
// (Config::resume_finished): README, "Reusing a job id".
#pragma once

#include <cstdint>

namespace memento::runtime {

struct FinishedRun {
  uint64_t lineage = 0;  // the run (Checkpointer lineage) that finished
  uint64_t version = 0;  // its last committed version
  uint64_t unix_ns = 0;  // when it finished (wall clock; informational)
};

}  // namespace memento::runtime
