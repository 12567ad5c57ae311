#include "flags.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "memento/common/strings.h"

namespace memento::cli {
namespace {

bool IsDecimal(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The value of decimal digits `s`, or nullopt past INT64_MAX.
std::optional<int64_t> DecimalValue(const std::string& s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// "memento" or "memento <subcommand>" for the subcommand that was being parsed.
std::string CommandName(const CLI::App& app) {
  const auto subs = app.get_subcommands();
  return subs.empty() ? app.get_name() : app.get_name() + " " + subs.back()->get_name();
}

}  // namespace

const CLI::Validator& DecimalInteger() {
  static const CLI::Validator v(
      [](std::string& s) {
        const size_t sign = !s.empty() && s[0] == '-' ? 1 : 0;  // the range is the flag's to check
        if (!IsDecimal(s.substr(sign))) return "'" + s + "': expected decimal digits only";
        // Leading zeros are decimal here, not octal as in CLI11's conversion.
        const size_t first = s.find_first_not_of('0', sign);
        s = s.substr(0, sign) + (first == std::string::npos ? "0" : s.substr(first));
        return std::string();
      },
      "INT");
  return v;
}

const CLI::Validator& DecimalNumber() {
  static const CLI::Validator v(
      [](std::string& s) {
        // an optional '-' (the range is the flag's to check); digits, at most one '.', at
        // least one digit; then e/E, an optional sign, digits
        size_t i = !s.empty() && s[0] == '-' ? 1 : 0, digits = 0, dots = 0;
        for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.');
             ++i) {
          if (s[i] == '.') {
            ++dots;
          } else {
            ++digits;
          }
        }
        bool ok = digits > 0 && dots <= 1;
        if (ok && i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
          ++i;
          if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
          const size_t start = i;
          while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
          ok = i > start;
        }
        ok = ok && i == s.size();
        return ok ? std::string() : "'" + s + "': expected a decimal number such as 1.5 or 2e-3";
      },
      "NUMBER");
  return v;
}

const CLI::Validator& NotEmpty() {
  static const CLI::Validator v(
      [](std::string& s) {
        return s.empty() ? std::string("'': expected a value") : std::string();
      },
      "");
  return v;
}

CLI::Validator AtLeast(double lo, const std::string& what) {
  return CLI::Validator(
      [lo, what](std::string& s) {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end != s.c_str() + s.size() || !std::isfinite(v) || !(v >= lo)) {
          std::ostringstream bound;
          bound << lo;
          return "'" + s + "': expected " + what + " >= " + bound.str();
        }
        return std::string();
      },
      "");
}

const CLI::Validator& Uint64() {
  static const CLI::Validator v(
      [](std::string& s) {
        static const std::string kMax = "18446744073709551615";
        const size_t first = s.find_first_not_of('0');
        const std::string digits = first == std::string::npos ? "0" : s.substr(first);
        if (!IsDecimal(s) || digits.size() > kMax.size() ||
            (digits.size() == kMax.size() && digits > kMax)) {
          return "'" + s + "': expected an integer 0.." + kMax + " (decimal digits only)";
        }
        s = digits;
        return std::string();
      },
      "UINT");
  return v;
}

int64_t ParseInteger(const std::string& flag, const std::string& value, int64_t lo, int64_t hi,
                     const std::string& expected) {
  if (!IsDecimal(value)) {
    throw UsageError(flag + " '" + value + "': expected " + expected + " (decimal digits only)");
  }
  const std::optional<int64_t> v = DecimalValue(value);
  if (!v || *v < lo || *v > hi) throw UsageError(flag + " '" + value + "': expected " + expected);
  return *v;
}

std::vector<int> ParseCounts(const std::string& flag, const std::string& value, int max,
                             const std::string& max_name) {
  const std::string forms = flag + " '" + value + "': accepted forms are F, A-B or a,b,c with " +
                            "0 <= values <= " + max_name + " (" + std::to_string(max) + ")";
  std::vector<int> out;
  for (const std::string& part : Split(value, ',')) {
    const size_t dash = part.find('-');
    const std::string first = part.substr(0, dash);
    const std::string last = dash == std::string::npos ? first : part.substr(dash + 1);
    if (!IsDecimal(first) || !IsDecimal(last)) throw UsageError(forms);
    const std::optional<int64_t> a = DecimalValue(first);
    const std::optional<int64_t> b = DecimalValue(last);
    if (!a || !b || *a > max || *b > max || *b < *a) throw UsageError(forms);
    for (int64_t v = *a; v <= *b; ++v) out.push_back(static_cast<int>(v));
  }
  return out;
}

int RunApp(CLI::App& app, int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "help") == 0)) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  bool known = argc < 2 || argv[1][0] == '-';
  try {
    if (!known) known = app.get_subcommand(argv[1]) != nullptr;
  } catch (const CLI::OptionNotFound&) {
  }
  if (!known) {
    std::fprintf(stderr, "%s: unknown subcommand '%s'\n\n%s", app.get_name().c_str(), argv[1],
                 app.help().c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
    return 0;
  } catch (const CommandFailed& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    const std::string name = CommandName(app);
    std::string message = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // CLI11 lists the extras in reverse; name them in the order given.
      const auto subs = app.get_subcommands();
      const std::vector<std::string> extras =
          subs.empty() ? app.remaining() : subs.back()->remaining();
      if (!extras.empty()) {
        message = "unknown flag or unexpected argument:";
        for (const std::string& a : extras) message += " '" + a + "'";
      }
    }
    if (name == app.get_name()) {  // no subcommand given
      std::fprintf(stderr, "%s: %s\n\n%s", name.c_str(), message.c_str(), app.help().c_str());
    } else {
      std::fprintf(stderr, "%s: %s\n(see %s --help)\n", name.c_str(), message.c_str(),
                   name.c_str());
    }
    return 2;
  }
}

}  // namespace memento::cli
