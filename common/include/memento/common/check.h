// MEMENTO_CHECK: invariants whose violation is a bug in memento itself.
//
// A failed check throws memento::CheckError (a std::logic_error) carrying the
// condition, the values compared, file and line. It never aborts: a training
// job embedding memento can catch it, log it and fall back.
// Expected failures (bad input, lost peers, corruption) are Status values,
// never checks (see status.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace memento {

class CheckError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const std::string& what) {
  std::ostringstream os;
  os << file << ":" << line << ": check failed: " << what;
  throw CheckError(os.str());
}

template <typename A, typename B>
std::string CheckOpMessage(const char* expr, const A& a, const B& b) {
  std::ostringstream os;
  os << expr << " (" << a << " vs " << b << ")";
  return os.str();
}
}  // namespace internal
}  // namespace memento

#define MEMENTO_CHECK(cond)                                                          \
  do {                                                                               \
    if (!(cond)) ::memento::internal::CheckFailed(__FILE__, __LINE__, #cond);        \
  } while (0)

#define MEMENTO_CHECK_OP_(a, b, op)                                                   \
  do {                                                                                \
    const auto& memento_a_ = (a);                                                     \
    const auto& memento_b_ = (b);                                                     \
    if (!(memento_a_ op memento_b_))                                                  \
      ::memento::internal::CheckFailed(                                               \
          __FILE__, __LINE__,                                                         \
          ::memento::internal::CheckOpMessage(#a " " #op " " #b, memento_a_, memento_b_)); \
  } while (0)

#define MEMENTO_CHECK_EQ(a, b) MEMENTO_CHECK_OP_(a, b, ==)
#define MEMENTO_CHECK_NE(a, b) MEMENTO_CHECK_OP_(a, b, !=)
#define MEMENTO_CHECK_LT(a, b) MEMENTO_CHECK_OP_(a, b, <)
#define MEMENTO_CHECK_LE(a, b) MEMENTO_CHECK_OP_(a, b, <=)
#define MEMENTO_CHECK_GT(a, b) MEMENTO_CHECK_OP_(a, b, >)
#define MEMENTO_CHECK_GE(a, b) MEMENTO_CHECK_OP_(a, b, >=)
