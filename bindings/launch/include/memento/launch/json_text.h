// JSON text of records that carry outside bytes (a job's output tail, paths,
// command lines, host names): bytes that are not UTF-8 become U+FFFD instead
// of making nlohmann-json throw (which ended the launcher, its job still
// running, on the first job that printed such a byte).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace memento::launch {

inline std::string JsonText(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace memento::launch
