#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "fuzz_target.h"
#include "memento/runtime/log.h"
#include "scratch_remote_store.h"

namespace memento::fuzz {

void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

runtime::DirectoryRemoteStore& ScratchRemoteStore(const std::string& tag) {
  // Never destroyed: the exit handler still needs the folder's name.
  static const std::string* root = [&tag] {
    auto* dir = new std::string("/tmp/memento-fuzz-" + tag + "-" + std::to_string(getpid()));
    // A folder of an earlier process that had this pid and was killed before
    // its exit handler ran: its files are not this run's.
    std::filesystem::remove_all(*dir);
    mkdir(dir->c_str(), 0700);
    runtime::SetLogLevel(runtime::LogLevel::kError);
    std::atexit([] { std::filesystem::remove_all(*root); });
    return dir;
  }();
  runtime::DirectoryRemoteStore::Options options;
  options.fsync = false;
  static runtime::DirectoryRemoteStore store(*root, "job", options);
  return store;
}

}  // namespace memento::fuzz
