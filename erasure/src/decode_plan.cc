#include "decode_plan.h"

#include <isa-l/erasure_code.h>

#include <string>

namespace memento::erasure::internal {

namespace {

std::string ToString(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s + "}";
}

Status CheckErasedCount(const std::vector<int>& erased, int m) {
  if (static_cast<int>(erased.size()) > m) {
    return Status::Unrecoverable(std::to_string(erased.size()) + " rows erased " +
                                 ToString(erased) +
                                 " but the code rebuilds at most m=" + std::to_string(m));
  }
  return Status::Ok();
}

}  // namespace

Status CheckRowList(const std::vector<int>& rows, int n, const char* what) {
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int r : rows) {
    if (r < 0 || r >= n) {
      return Status::InvalidArgument(std::string(what) + " row " + std::to_string(r) +
                                     " is outside 0.." + std::to_string(n - 1));
    }
    if (seen[static_cast<size_t>(r)]) {
      return Status::InvalidArgument(std::string(what) + " row " + std::to_string(r) +
                                     " is listed twice in " + ToString(rows));
    }
    seen[static_cast<size_t>(r)] = true;
  }
  return Status::Ok();
}

Status CheckRowPointers(const void* const* ptrs, int count, const char* what) {
  if (ptrs == nullptr) {
    return Status::InvalidArgument(std::string("the array of ") + what + " rows is null");
  }
  for (int i = 0; i < count; ++i) {
    if (ptrs[i] == nullptr) {
      return Status::InvalidArgument(std::string(what) + " row " + std::to_string(i) + " is null");
    }
  }
  return Status::Ok();
}

Result<std::vector<int>> PlanSurvivors(const uint8_t* const* rows, int k, int m,
                                       const std::vector<int>& erased) {
  const int n = k + m;
  if (Status s = CheckRowList(erased, n, "erased"); !s.ok()) return s;
  if (Status s = CheckErasedCount(erased, m); !s.ok()) return s;
  if (rows == nullptr) return Status::InvalidArgument("the array of rows is null");
  std::vector<bool> is_erased(static_cast<size_t>(n), false);
  for (int e : erased) {
    if (rows[e] == nullptr) {
      return Status::InvalidArgument("erased row " + std::to_string(e) +
                                     " is null: there is nowhere to rebuild it");
    }
    is_erased[static_cast<size_t>(e)] = true;
  }
  std::vector<int> survivors;
  int missing = 0;
  for (int r = 0; r < n; ++r) {
    if (is_erased[static_cast<size_t>(r)]) continue;
    if (rows[r] == nullptr) {
      ++missing;
      continue;
    }
    if (static_cast<int>(survivors.size()) < k) survivors.push_back(r);
  }
  if (static_cast<int>(survivors.size()) < k) {
    return Status::Unrecoverable(
        "only " + std::to_string(survivors.size()) + " of " + std::to_string(n) +
        " rows survive (" + std::to_string(erased.size()) + " erased " + ToString(erased) + ", " +
        std::to_string(missing) + " null); k=" + std::to_string(k) + " are needed");
  }
  return survivors;
}

Result<std::vector<uint8_t>> SolveDecodeCoefficients(const std::vector<uint8_t>& generator, int k,
                                                     int m, const std::vector<int>& erased,
                                                     const std::vector<int>& survivors) {
  const int n = k + m;
  if (Status s = CheckRowList(erased, n, "erased"); !s.ok()) return s;
  if (Status s = CheckRowList(survivors, n, "survivor"); !s.ok()) return s;
  if (Status s = CheckErasedCount(erased, m); !s.ok()) return s;
  if (static_cast<int>(survivors.size()) != k) {
    return Status::InvalidArgument("exactly k=" + std::to_string(k) +
                                   " survivors are needed, got " +
                                   std::to_string(survivors.size()) + " " + ToString(survivors));
  }
  for (int e : erased) {
    for (int s : survivors) {
      if (e == s) {
        return Status::InvalidArgument("row " + std::to_string(e) +
                                       " is listed both as erased and as a survivor");
      }
    }
  }
  const size_t ku = static_cast<size_t>(k);
  std::vector<uint8_t> b(ku * ku), b_inv(ku * ku);
  for (size_t i = 0; i < ku; ++i) {
    for (size_t j = 0; j < ku; ++j) {
      b[i * ku + j] = generator[static_cast<size_t>(survivors[i]) * ku + j];
    }
  }
  // gf_invert_matrix destroys its input and returns non-zero when singular.
  if (gf_invert_matrix(b.data(), b_inv.data(), k) != 0) {
    return Status::Unrecoverable("the generator rows of survivors " + ToString(survivors) +
                                 " are singular; they cannot rebuild " + ToString(erased));
  }
  // survivors = B * data, so data = B^-1 * survivors and
  // row_e = G[e] * data = (G[e] * B^-1) * survivors.
  std::vector<uint8_t> coefficients(erased.size() * ku, 0);
  for (size_t e = 0; e < erased.size(); ++e) {
    const uint8_t* g = &generator[static_cast<size_t>(erased[e]) * ku];
    for (size_t s = 0; s < ku; ++s) {
      uint8_t c = 0;
      for (size_t i = 0; i < ku; ++i) c ^= gf_mul(g[i], b_inv[i * ku + s]);
      coefficients[e * ku + s] = c;
    }
  }
  return coefficients;
}

}  // namespace memento::erasure::internal
