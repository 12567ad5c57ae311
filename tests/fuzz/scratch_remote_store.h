// A remote tier in a private temporary folder for the fuzz targets that feed
// it files: created on first use, removed at exit, fsync off (durability is
// not what is fuzzed), warnings off (rejected inputs are the normal case).
#pragma once

#include <string>

#include "memento/runtime/directory_remote_store.h"

namespace memento::fuzz {

// One store per process; `tag` names its folder (/tmp/memento-fuzz-TAG-PID).
runtime::DirectoryRemoteStore& ScratchRemoteStore(const std::string& tag);

}  // namespace memento::fuzz
