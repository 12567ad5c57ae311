// A downstream project: links the installed memento package and calls one
// function of each module.
#include <cstdio>

#include "memento/erasure/crc32c.h"
#include "memento/placement/scheme.h"
#include "memento/runtime/config.h"

int main() {
  auto scheme = memento::placement::Scheme::Parse("rs:4+2");
  auto config = memento::runtime::Config::FromMap({});
  const unsigned crc = memento::erasure::Crc32c("123456789", 9);
  std::printf("crc=%08x scheme=%d config=%d\n", crc, scheme.ok(), config.ok());
  return (crc == 0xE3069283u && scheme.ok() && config.ok()) ? 0 : 1;
}
