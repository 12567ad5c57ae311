// Planning a decode, shared by RsCodec and XorCodec: validating row lists,
// choosing survivors, and solving for the GF(2^8) coefficients that rebuild
// erased rows from surviving ones, given the code's generator matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memento/common/status.h"

namespace memento::erasure::internal {

// Each index in [0, n) and no duplicates; `what` names the list ("erased").
Status CheckRowList(const std::vector<int>& rows, int n, const char* what);

// ptrs non-null and ptrs[0..count-1] non-null; `what` names the rows ("data").
Status CheckRowPointers(const void* const* ptrs, int count, const char* what);

// For Decode: validates `erased` for a code with k data and m parity rows and
// returns the survivors: the first k rows (lowest index first) that are
// neither erased nor null. Unrecoverable when fewer than k rows survive,
// InvalidArgument for bad indices or a null erased row. `rows` holds k + m
// pointers (checked non-null as an array).
Result<std::vector<int>> PlanSurvivors(const uint8_t* const* rows, int k, int m,
                                       const std::vector<int>& erased);

// For a (k + m) x k generator matrix G (row-major), returns the
// erased.size() x k matrix C with row_e = sum_s C[e][s] * row_s over
// GF(2^8): C = G[erased] * inverse(G[survivors]). Validates both lists
// (disjoint, exactly k survivors, at most m erased). Unrecoverable when the
// survivors' submatrix is singular.
Result<std::vector<uint8_t>> SolveDecodeCoefficients(const std::vector<uint8_t>& generator, int k,
                                                     int m, const std::vector<int>& erased,
                                                     const std::vector<int>& survivors);

}  // namespace memento::erasure::internal
