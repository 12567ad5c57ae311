#include "memento/runtime/stage.h"

namespace memento::runtime {

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kSlot:
      return "slot";
    case Stage::kSnapshot:
      return "snapshot";
    case Stage::kSeal:
      return "seal";
    case Stage::kCommit:
      return "commit";
    case Stage::kCommitted:
      return "committed";
    case Stage::kPersist:
      return "persist";
    case Stage::kManifest:
      return "manifest";
    case Stage::kRecover:
      return "recover";
    case Stage::kReprotect:
      return "reprotect";
  }
  return "unknown";
}

}  // namespace memento::runtime
