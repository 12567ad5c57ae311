// main() of the test binaries whose bodies run under both harnesses
// (spawn.h): --memento-harness=threads|processes picks one.
#include <gtest/gtest.h>

#include "harness/spawn.h"

int main(int argc, char** argv) {
  memento::runtime::testing::InitHarness(&argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
