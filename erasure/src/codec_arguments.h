// Argument checks shared by XorCodec and RsCodec: both expose the same method
// shapes, so they validate their rows the same way and name the same problems.
// Each returns OK or InvalidArgument prefixed with `what` (e.g. "rs encode").
#pragma once

#include <cstddef>
#include <cstdint>

#include "memento/common/status.h"

namespace memento::erasure::internal {

// Encode: k non-null data rows and m non-null parity rows.
Status CheckEncodeArgs(const char* what, const uint8_t* const* data, int k, uint8_t* const* parity,
                       int m);

// EncodeUpdate / DeltaUpdate: data_row in 0..k-1 (checked even for len 0);
// for len > 0 the given data rows and the m parity rows are non-null.
// `new_data` is null for EncodeUpdate (one data row).
Status CheckUpdateArgs(const char* what, int data_row, int k, const uint8_t* data,
                       const uint8_t* new_data, bool delta, uint8_t* const* parity, int m,
                       size_t len);

}  // namespace memento::erasure::internal
