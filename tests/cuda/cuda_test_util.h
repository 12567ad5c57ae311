// Shared by the CUDA tests: a CUDA call that must succeed, and the skip (with
// the reason) on a machine without a GPU.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#define CUDA_OK(expr)                                                          \
  do {                                                                         \
    cudaError_t err_ = (expr);                                                 \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// In a fixture's SetUp: skips the test where no CUDA device is visible;
// otherwise sets *devices to their number.
#define SKIP_WITHOUT_GPU(devices)                                        \
  do {                                                                   \
    if (cudaGetDeviceCount(devices) != cudaSuccess || *(devices) == 0) { \
      cudaGetLastError();                                                \
      GTEST_SKIP() << "no CUDA device on this machine";                  \
    }                                                                    \
  } while (0)
