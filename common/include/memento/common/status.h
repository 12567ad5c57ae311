// Status and Result<T>: how every memento module reports expected failures.
//
// In a checkpointing runtime failure is a normal path: a peer that is gone, a
// CRC mismatch, a shard that cannot be rebuilt, a bad argument, an I/O error.
// Such outcomes are returned as values, never thrown. Bugs (violated
// invariants) throw through MEMENTO_CHECK (see check.h).
//
// Thread-safety: Status and Result are plain values; distinct objects may be
// used from distinct threads freely.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace memento {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed or out of range
  kNotFound,            // the thing asked for does not exist (e.g. no version to restore)
  kAlreadyExists,       // creating something that is already there (O_EXCL clash)
  kCorruption,          // a checksum, magic or length did not match
  kUnrecoverable,       // lost data that the scheme cannot rebuild
  kUnavailable,         // a peer or a resource is gone (failed rank, closed transport)
  kTimeout,             // an operation did not complete in time
  kIoError,             // the OS refused a read, write, mmap, rename ...
  kResourceExhausted,   // not enough memory, /dev/shm space, slots
  kFailedPrecondition,  // the call is valid but not in the current state
  kElasticRestoreNeeded,  // the job now runs on a different node set size
  kInternal,            // an invariant failed inside a dependency (e.g. MPI)
};

// Returns the name of a code, e.g. "Corruption".
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status Unrecoverable(std::string m) { return {StatusCode::kUnrecoverable, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status ElasticRestoreNeeded(std::string m) {
    return {StatusCode::kElasticRestoreNeeded, std::move(m)};
  }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Corruption: entry 'w' crc mismatch"; "OK" when ok().
  std::string ToString() const {
    if (ok()) return "OK";
    return std::string(StatusCodeName(code_)) + ": " + message_;
  }

  // Returns a copy whose message is prefixed by `context` (words for the
  // user: what was being done when the error happened).
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

  bool operator==(const Status& o) const { return code_ == o.code_ && message_ == o.message_; }
  bool operator!=(const Status& o) const { return !(*this == o); }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kUnrecoverable: return "Unrecoverable";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kElasticRestoreNeeded: return "ElasticRestoreNeeded";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

// Result<T>: a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) {
      v_ = Status::Internal("Result constructed from an OK Status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; Status::Ok() when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // Accessors; calling them on an error is a bug and throws std::bad_variant_access.
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace memento

#define MEMENTO_STATUS_CONCAT_INNER_(a, b) a##b
#define MEMENTO_STATUS_CONCAT_(a, b) MEMENTO_STATUS_CONCAT_INNER_(a, b)

// Returns the error of `expr` (a Status or Result) from the enclosing function,
// unchanged. Messages reach users, so no source text is added to them: a
// caller that has context worth giving says it in words with
// `MEMENTO_RETURN_IF_ERROR(f().WithContext("reading the manifest"))`.
#define MEMENTO_RETURN_IF_ERROR(expr)                                          \
  do {                                                                         \
    ::memento::Status memento_status_ = ::memento::internal::ToStatus((expr)); \
    if (!memento_status_.ok()) return memento_status_;                         \
  } while (0)

// MEMENTO_ASSIGN_OR_RETURN(auto x, ComputeX()); binds the value or returns the error.
#define MEMENTO_ASSIGN_OR_RETURN(lhs, expr) \
  MEMENTO_ASSIGN_OR_RETURN_IMPL_(MEMENTO_STATUS_CONCAT_(memento_result_, __LINE__), lhs, expr)
#define MEMENTO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

namespace memento::internal {
inline Status ToStatus(Status s) { return s; }
template <typename T>
Status ToStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace memento::internal
