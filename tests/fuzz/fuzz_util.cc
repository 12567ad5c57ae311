#include <cstdio>
#include <cstdlib>

#include "fuzz_target.h"

namespace memento::fuzz {

void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace memento::fuzz
