#include "memento/runtime/restore_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace memento::runtime {

const char* RestoreSourceName(RestoreSource source) {
  switch (source) {
    case RestoreSource::kLocalMemory:
      return "local-memory";
    case RestoreSource::kRemote:
      return "remote";
    case RestoreSource::kReplica:
      return "replica";
    case RestoreSource::kDecode:
      return "decode";
  }
  return "unknown";
}

std::string RestoreReport::Summary() const {
  // Counted in a fixed order of sources, so that equal restores read alike.
  constexpr RestoreSource kOrder[] = {RestoreSource::kDecode, RestoreSource::kLocalMemory,
                                      RestoreSource::kRemote, RestoreSource::kReplica};
  std::ostringstream os;
  os << "restored v" << version << ": ";
  bool any = false;
  for (RestoreSource source : kOrder) {
    size_t n = 0;
    for (const RestoredEntry& e : entries) n += e.source == source ? 1 : 0;
    if (n == 0) continue;
    os << (any ? ", " : "") << n << " " << RestoreSourceName(source);
    any = true;
  }
  if (!any) os << "no entries";
  if (!lost_nodes.empty()) {
    os << "; lost nodes [";
    for (size_t i = 0; i < lost_nodes.size(); ++i) os << (i ? "," : "") << lost_nodes[i];
    os << "]";
  }
  if (elastic) os << "; elastic";
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f s",
                stats.inventory_s + stats.plan_s + stats.transfer_s + stats.reprotect_s);
  os << "; " << seconds;
  return os.str();
}

std::string RestoreReport::ToString() const {
  std::string out = Summary();
  for (const auto& n : notes) out += "; " + n;
  return out;
}

std::string RestoreReport::ToJson() const {
  using json = nlohmann::ordered_json;
  json j;
  j["version"] = version;
  j["entries"] = json::array();
  for (const RestoredEntry& e : entries) {
    j["entries"].push_back({{"name", e.name},
                            {"bytes", e.bytes},
                            {"crc", e.crc},
                            {"source", RestoreSourceName(e.source)}});
  }
  j["lost_nodes"] = lost_nodes;
  j["source_detail"] = source_detail;
  j["bytes_sent"] = stats.bytes_sent;
  j["bytes_received"] = stats.bytes_received;
  j["plan_read_bytes_per_node"] = stats.plan_read_bytes_per_node;
  j["bytes_received_per_node"] = stats.bytes_received_per_node;
  j["reprotect"] = {{"mode", stats.reprotect_mode},
                    {"bytes_sent", stats.reprotect_bytes_sent},
                    {"bytes_received", stats.reprotect_bytes_received},
                    {"bytes_received_per_node", stats.reprotect_bytes_received_per_node}};
  j["protection"] = protection;
  j["seals_exchanges"] = stats.seals_exchanges;
  j["seconds"] = {{"inventory", stats.inventory_s},
                  {"plan", stats.plan_s},
                  {"transfer", stats.transfer_s},
                  {"reprotect", stats.reprotect_s}};
  j["notes"] = notes;
  if (elastic) {
    j["elastic"] = {{"plan", elastic_plan},
                    {"received_bytes_per_node", elastic_received_per_node},
                    {"remote_bytes_per_node", elastic_remote_per_node},
                    {"minimum_bytes_per_node", elastic_minimum_per_node},
                    {"served_bytes_per_node", elastic_served_per_node}};
  }
  if (!plan_json.empty()) {
    // The plan is JSON already; a text that does not parse is kept as a string.
    json plan = json::parse(plan_json, nullptr, /*allow_exceptions=*/false);
    j["plan"] = plan.is_discarded() ? json(plan_json) : plan;
  }
  // Names are the application's: replace invalid UTF-8 instead of throwing.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace memento::runtime
