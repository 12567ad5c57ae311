// Fuzz target: placement's scheme grammar ("replica:2:ring", "rs:4+2", ...).
// A parsed scheme must print back to text that parses to the same scheme.
#include <string>

#include "fuzz_target.h"
#include "memento/placement/scheme.h"

namespace memento::fuzz {

std::vector<std::string> Seeds() {
  return {"none", "replica:2", "replica:3:group", "replica:2:ring", "xor:3", "rs:4+2", "rs:12+4",
          "rs:255+1", "replica:1"};
}

}  // namespace memento::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto s = memento::placement::Scheme::Parse(text);
  if (!s.ok()) return 0;
  const std::string back = s->ToString();
  auto again = memento::placement::Scheme::Parse(back);
  if (!again.ok() || again->ToString() != back) {
    memento::fuzz::Fail("'" + text + "' parsed, but its text '" + back + "' does not round-trip");
  }
  return 0;
}
