// Fuzz target: a remote rank file (header, entry records, payloads, trailer),
// read with a manifest that matches its size and crc, so that the reader gets
// past the file-level checks and parses every record.
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "memento/erasure/crc32c.h"
#include "memento/runtime/directory_remote_store.h"
#include "scratch_remote_store.h"

using namespace memento::runtime;

namespace {

DirectoryRemoteStore& Store() { return memento::fuzz::ScratchRemoteStore("rank"); }

}  // namespace

namespace memento::fuzz {

std::vector<std::string> Seeds() {
  DirectoryRemoteStore& s = Store();
  std::vector<std::string> seeds;
  std::vector<uint8_t> w(40, 3), b(5, 9);
  auto info = s.WriteRankFile(
      1, 0,
      {{"w", w.data(), w.size(), {"float32", {20}, {10}, {10}}}, {"e", nullptr, 0, {}},
       {"b", b.data(), b.size(), {"uint8", {}, {}, {}}}});
  if (!info.ok()) Fail("seed: " + info.status().ToString());
  std::ifstream in(s.RankFilePath(1, 0), std::ios::binary);
  seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return seeds;
}

}  // namespace memento::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DirectoryRemoteStore& s = Store();
  static const bool dir = [&s] {
    (void)memento::fuzz::Seeds();  // creates the version folder
    return true;
  }();
  (void)dir;
  {
    std::ofstream out(s.RankFilePath(1, 0), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  RankFileInfo info;
  info.rank = 0;
  info.file = s.RankFilePath(1, 0).substr(s.VersionDir(1).size() + 1);
  info.bytes = size;
  info.crc = memento::erasure::Crc32c(data, size);
  if (!s.WriteManifest(1, 1, {info}).ok()) memento::fuzz::Fail("manifest write");
  auto entries = s.ListEntries(1, 0);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<RemoteEntryTarget> targets;
  if (entries.ok()) {
    buffers.reserve(entries->size());
    for (const auto& e : *entries) {
      if (e.bytes > (1 << 20)) continue;
      buffers.emplace_back(e.bytes);
      targets.push_back({e.name, buffers.back().data(), buffers.back().size()});
    }
  }
  (void)s.ReadRankFile(1, 0, targets);
  std::vector<uint8_t> small(4);
  (void)s.ReadRankFile(1, 0, {{"w", small.data(), small.size()}});
  return 0;
}
