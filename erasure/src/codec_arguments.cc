#include "codec_arguments.h"

#include <string>

#include "decode_plan.h"

namespace memento::erasure::internal {

namespace {
Status Rows(const char* what, const void* const* rows, int count, const char* name) {
  return CheckRowPointers(rows, count, name).WithContext(what);
}
}  // namespace

Status CheckEncodeArgs(const char* what, const uint8_t* const* data, int k, uint8_t* const* parity,
                       int m) {
  if (Status s = Rows(what, reinterpret_cast<const void* const*>(data), k, "data"); !s.ok()) {
    return s;
  }
  return Rows(what, reinterpret_cast<const void* const*>(parity), m, "parity");
}

Status CheckUpdateArgs(const char* what, int data_row, int k, const uint8_t* data,
                       const uint8_t* new_data, bool delta, uint8_t* const* parity, int m,
                       size_t len) {
  if (data_row < 0 || data_row >= k) {
    return Status::InvalidArgument(std::string(what) + ": data row " + std::to_string(data_row) +
                                   " is outside 0.." + std::to_string(k - 1));
  }
  if (len == 0) return Status::Ok();
  if (data == nullptr) {
    return Status::InvalidArgument(std::string(what) + (delta ? ": old" : ":") + " data is null");
  }
  if (delta && new_data == nullptr) {
    return Status::InvalidArgument(std::string(what) + ": new data is null");
  }
  return Rows(what, reinterpret_cast<const void* const*>(parity), m, "parity");
}

}  // namespace memento::erasure::internal
