// Fuzz target: the remote tier's MANIFEST reader (text with a crc line) and
// the listing of complete versions that uses it.
#include <fstream>
#include <string>

#include "fuzz_target.h"
#include "memento/runtime/directory_remote_store.h"
#include "scratch_remote_store.h"

using namespace memento::runtime;

namespace {

DirectoryRemoteStore& Store() { return memento::fuzz::ScratchRemoteStore("manifest"); }

}  // namespace

namespace memento::fuzz {

std::vector<std::string> Seeds() {
  DirectoryRemoteStore& s = Store();
  std::vector<std::string> seeds;
  std::string payload = "abcdefgh";
  std::vector<RankFileInfo> ranks;
  for (int r = 0; r < 2; ++r) {
    auto info = s.WriteRankFile(3, r, {{"x", payload.data(), payload.size(), {}}});
    if (!info.ok()) Fail("seed: " + info.status().ToString());
    ranks.push_back(*info);
  }
  if (!s.WriteManifest(3, 2, ranks).ok()) Fail("seed: manifest");
  std::ifstream in(s.ManifestPath(3));
  seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return seeds;
}

}  // namespace memento::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DirectoryRemoteStore& s = Store();
  static const bool seeded = [] {
    (void)memento::fuzz::Seeds();  // rank files of v3 for the manifest to point at
    return true;
  }();
  (void)seeded;
  {
    std::ofstream out(s.ManifestPath(3), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto m = s.ReadManifest(3);
  if (m.ok()) {
    if (m->world_size < 1 || m->ranks.size() != static_cast<size_t>(m->world_size)) {
      memento::fuzz::Fail("manifest accepted with an inconsistent rank list");
    }
    for (const auto& r : m->ranks) {
      if (r.file.empty() || r.file.find('/') != std::string::npos) {
        (void)s.CheckRankFiles(3, m->ranks);  // must refuse, not escape the folder
      }
    }
  }
  (void)s.ListComplete();
  (void)s.NewestComplete();
  return 0;
}
