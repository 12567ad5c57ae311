// Replay driver for builds without libFuzzer (the normal gcc build, ctest
// label unit): runs every file of the corpus folders given, the target's
// built-in seeds, and a bounded number of deterministic random mutations of
// them (bit flips, byte changes, insertions, deletions, truncations, splices).
//   fuzz_X [--runs N] [--seed S] [--write-seeds DIR] [CORPUS_DIR_OR_FILE...]
// --write-seeds writes the built-in seeds into DIR (to refresh tests/fuzz/corpus).
#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void Collect(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "replay: %s does not exist\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    out->push_back(ReadFile(path));
    return;
  }
  DIR* d = opendir(path.c_str());
  while (struct dirent* e = d != nullptr ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    Collect(path + "/" + e->d_name, out);
  }
  if (d != nullptr) closedir(d);
}

std::string Mutate(const std::vector<std::string>& pool, std::mt19937_64& rng) {
  std::string s = pool[rng() % pool.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits; ++i) {
    const size_t pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[pos] = static_cast<char>(s[pos] ^ (1u << (rng() % 8)));
        break;
      case 1:
        if (!s.empty()) s[pos] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(s.begin() + static_cast<long>(pos), static_cast<char>(rng()));
        break;
      case 3:
        if (!s.empty()) s.erase(pos, 1 + rng() % 8);
        break;
      case 4:
        s.resize(pos);
        break;
      case 5: {  // an interesting number over 1, 2, 4 or 8 bytes
        static const uint64_t kValues[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0xffffffff,
                                           ~0ull, 1ull << 32, 1ull << 62};
        const uint64_t v = kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
        const size_t width = size_t{1} << (rng() % 4);
        if (s.size() >= width) {
          const size_t at = rng() % (s.size() - width + 1);
          std::memcpy(&s[at], &v, width);
        }
        break;
      }
      default: {  // splice with another input
        const std::string& other = pool[rng() % pool.size()];
        if (!other.empty()) s = s.substr(0, pos) + other.substr(rng() % other.size());
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 2000;
  uint64_t seed = 1;
  std::vector<std::string> pool;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::strtol(argv[++i], nullptr, 10);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--write-seeds" && i + 1 < argc) {
      const std::string dir = argv[++i];
      int n = 0;
      for (const std::string& s : memento::fuzz::Seeds()) {
        std::ofstream(dir + "/seed-" + std::to_string(n++), std::ios::binary) << s;
      }
      std::printf("wrote %d seeds to %s\n", n, dir.c_str());
      return 0;
    } else {
      Collect(arg, &pool);
    }
  }
  for (const std::string& s : memento::fuzz::Seeds()) pool.push_back(s);
  if (pool.empty()) pool.push_back("");
  for (const std::string& s : pool) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::mt19937_64 rng(seed);
  for (long i = 0; i < runs; ++i) {
    const std::string s = Mutate(pool, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::printf("replayed %zu corpus inputs and %ld mutations (seed %llu): no crash\n", pool.size(),
              runs, static_cast<unsigned long long>(seed));
  return 0;
}
