// Fuzz target: Config parsing. The input is "NAME=value" lines; every
// accepted Config must validate, and byte sizes must parse consistently.
#include <string>
#include <map>

#include "fuzz_target.h"
#include "memento/runtime/config.h"

namespace memento::fuzz {

std::vector<std::string> Seeds() {
  return {"MEMENTO_SLOTS=3\nMEMENTO_SCHEME=rs:4+2\nMEMENTO_TIMEOUT_S=0.5",
          "MEMENTO_CHUNK_BYTES=4M\nMEMENTO_THREADS=4\nMEMENTO_LOG=debug",
          "MEMENTO_JOB=a-b_c\nMEMENTO_NODE=n1\nMEMENTO_RANKS_PER_NODE=2\nMEMENTO_STALE=replace",
          "MEMENTO_PERSIST_EVERY=0\nMEMENTO_PERSIST_KEEP=5\nMEMENTO_REMOTE=/tmp/x"};
}

}  // namespace memento::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> vars;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
  auto c = memento::runtime::Config::FromMap(vars);
  if (c.ok()) {
    if (!c->Validate().ok()) memento::fuzz::Fail("FromMap accepted an invalid Config");
    if (c->timeout().count() < 1) memento::fuzz::Fail("timeout rounds to 0 (wait forever)");
    (void)c->ToString();
  }
  auto bytes = memento::runtime::ParseByteSize(text);
  (void)bytes;
  (void)memento::runtime::ValidateJobId(text);
  return 0;
}
