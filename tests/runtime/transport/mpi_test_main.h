// The main() of a GoogleTest binary run by mpirun: the MPI transport its
// tests share (*transport), `before` with this rank's number (settings a rank
// needs before its tests), then the tests; only rank 0 prints, every rank's
// failures fail its exit code. MPI is finalized with the transport.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <memory>

#include "memento/runtime/mpi_transport.h"

namespace memento::runtime {

inline int RunMpiTests(int argc, char** argv, std::shared_ptr<Transport>* transport,
                       const std::function<void(int rank)>& before = {}) {
  ::testing::InitGoogleTest(&argc, argv);
  auto t = CreateMpiTransport();
  if (!t.ok()) {
    std::fprintf(stderr, "CreateMpiTransport: %s\n", t.status().ToString().c_str());
    return 1;
  }
  *transport = *t;
  if (before) before((*t)->rank());
  if ((*t)->rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  transport->reset();  // finalizes MPI (the transport initialized it)
  return rc;
}

}  // namespace memento::runtime
