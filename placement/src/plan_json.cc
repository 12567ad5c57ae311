// RecoveryPlan::ToJson and Summary: the plan as text for logs (JSON by nlohmann-json).
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "memento/placement/recovery_plan.h"

namespace memento::placement {
namespace {

using Json = nlohmann::ordered_json;  // keys in insertion order: a stable, readable layout

template <typename T>
std::string JsonArray(const std::vector<T>& v) {
  return Json(v).dump();
}

Json RowJson(const StripeRow& r) {
  return Json{
      {"node", r.node}, {"kind", r.parity ? "parity" : "data"}, {"row", r.row}, {"bytes", r.bytes}};
}

}  // namespace

const char* SourceKindName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kLocal:
      return "local";
    case SourceKind::kReplica:
      return "replica";
    case SourceKind::kDecode:
      return "decode";
    case SourceKind::kRemote:
      return "remote";
  }
  return "?";
}

std::string RecoveryPlan::Summary() const {
  int counts[4] = {0, 0, 0, 0};
  for (const ShardSource& s : shards) ++counts[static_cast<int>(s.kind)];
  std::ostringstream os;
  if (memory_cannot_serve) {
    os << "memory cannot serve: newest remote version " << version;
  } else {
    os << "version " << version << " from memory";
  }
  os << ": " << counts[0] << " local, " << counts[1] << " replica, " << counts[2] << " decode, "
     << counts[3] << " remote; " << decodes.size() << " stripe decodes; " << reprotect.size()
     << " items to re-protect; busiest node serves " << max_read_bytes << " bytes";
  if (!skipped_versions.empty()) os << "; skipped newer versions " << JsonArray(skipped_versions);
  return os.str();
}

std::string RecoveryPlan::ToJson() const {
  Json out;
  out["version"] = version;
  out["memory_cannot_serve"] = memory_cannot_serve;
  out["scheme"] = scheme;
  out["nodes"] = num_nodes;
  out["lanes"] = lanes;
  out["failed_nodes"] = failed_nodes;
  out["skipped_versions"] = skipped_versions;
  Json& shards_json = out["shards"] = Json::array();
  for (const ShardSource& s : shards) {
    Json j = {{"node", s.node}, {"lane", s.lane}, {"source", SourceKindName(s.kind)}};
    if (s.kind == SourceKind::kReplica) j["from_node"] = s.from_node;
    if (s.kind == SourceKind::kDecode) j["decodes"] = s.decodes;
    if (s.kind == SourceKind::kRemote) j["remote_version"] = version;
    j["read_nodes"] = s.read_nodes;
    j["bytes"] = s.bytes;
    shards_json.push_back(std::move(j));
  }
  Json& decodes_json = out["decodes"] = Json::array();
  for (const StripeDecode& d : decodes) {
    Json j = {{"lane", d.lane},
              {"group", d.group},
              {"stripe", d.stripe},
              {"data_rows", d.data_rows},
              {"parity_rows", d.parity_rows},
              {"piece_bytes", d.piece_bytes}};
    Json& inputs = j["inputs"] = Json::array();
    for (const StripeRow& r : d.inputs) inputs.push_back(RowJson(r));
    Json& rebuilt = j["rebuilt"] = Json::array();
    for (const StripeRow& r : d.rebuilt) rebuilt.push_back(RowJson(r));
    decodes_json.push_back(std::move(j));
  }
  Json& reprotect_json = out["reprotect"] = Json::array();
  for (const ReprotectItem& r : reprotect) {
    Json j = {{"node", r.node}, {"lane", r.lane}, {"kind", ItemKindName(r.kind)}};
    if (r.kind == ItemKind::kReplica) j["owner"] = r.owner;
    if (r.kind == ItemKind::kParity) {
      j["group"] = r.group;
      j["stripe"] = r.stripe;
      j["row"] = r.row;
    }
    j["bytes"] = r.bytes;
    reprotect_json.push_back(std::move(j));
  }
  out["read_bytes_per_node"] = read_bytes_per_node;
  out["max_read_bytes"] = max_read_bytes;
  return out.dump();
}

}  // namespace memento::placement
