// Small string helpers shared by the command-line parsers.
#pragma once

#include <string>
#include <vector>

namespace memento {

// The fields of `s` between separators `sep`, empty fields kept:
// Split("a,,b", ',') == {"a", "", "b"}; Split("", ',') == {""}.
inline std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

}  // namespace memento
