// Shared plumbing of the `memento` subcommands: exit codes, usage errors and strict number
// parsing (digits only: " 5", "+5", "0x10" and "1e3" are refused, naming the flag).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace memento::cli {

// The most nodes `rate` and `advise` take (their layouts and tables are O(N)).
inline constexpr int kMaxNodes = 1 << 24;

// Bad usage found by a callback (a value out of range, flags that conflict). Printed as
// "memento <subcommand>: <message>" with a pointer to --help; exit code 2.
class UsageError : public CLI::ParseError {
 public:
  explicit UsageError(const std::string& message) : CLI::ParseError("UsageError", message, 2) {}
};

// The command ran and failed (its callback printed why): the process exits with `code`.
class CommandFailed : public CLI::RuntimeError {
 public:
  explicit CommandFailed(int code) : CLI::RuntimeError(code) {}
};

// Parses argv with `app` (whose subcommands were added by Add*Command) and runs the chosen
// subcommand. Returns the process exit code: 0 success, 1 the command failed, 2 bad usage.
int RunApp(CLI::App& app, int argc, char** argv);

// A decimal integer (digits only) in [lo, hi]; otherwise UsageError
// "<flag> '<value>': expected <expected>".
int64_t ParseInteger(const std::string& flag, const std::string& value, int64_t lo, int64_t hi,
                     const std::string& expected);

// CLI11 checks for options read by CLI11's own conversion (which takes "0x10", "010" as
// octal, "+5", " 5", "nan", "inf"): a decimal integer (digits only), and a finite decimal
// number (digits with at most one '.', an optional exponent such as "1e-3").
const CLI::Validator& DecimalInteger();
const CLI::Validator& DecimalNumber();
// A value that is not empty (`--flag ""` given is refused, not taken as the flag left out).
const CLI::Validator& NotEmpty();
// A finite number >= lo (checked after DecimalInteger / DecimalNumber): "'<value>':
// expected <what> >= <lo>" (CLI11's own range checks print the double range, 300 digits
// long, and take 1e400 as infinity).
CLI::Validator AtLeast(double lo, const std::string& what);
// A decimal integer in [0, 2^64 - 1], digits only (CLI11's conversion takes "-1" and
// out-of-range values as 2^64 - 1).
const CLI::Validator& Uint64();

// "F", "A-B" or "a,b,c" (and mixes: "1-4,8") with every value in [0, max], in the order
// given; otherwise UsageError naming the flag, the value and the accepted forms.
std::vector<int> ParseCounts(const std::string& flag, const std::string& value, int max,
                             const std::string& max_name);

}  // namespace memento::cli
