// RecoveryPlan::ToJson and Summary: the plan as text for logs.
#include <cstdio>
#include <sstream>
#include <string>

#include "memento/placement/recovery_plan.h"

namespace memento::placement {
namespace {

template <typename T>
std::string JsonArray(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string JsonString(const std::string& in) {
  std::string s = "\"";
  for (char c : in) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      s += buf;
    } else {
      s += c;
    }
  }
  return s + "\"";
}

std::string RowJson(const StripeRow& r) {
  return std::string("{\"node\":") + std::to_string(r.node) + ",\"kind\":\"" +
         (r.parity ? "parity" : "data") + "\",\"row\":" + std::to_string(r.row) +
         ",\"bytes\":" + std::to_string(r.bytes) + "}";
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
  std::ostringstream os;
  os << "{\"version\":" << version
     << ",\"memory_cannot_serve\":" << (memory_cannot_serve ? "true" : "false")
     << ",\"scheme\":" << JsonString(scheme) << ",\"nodes\":" << num_nodes << ",\"lanes\":" << lanes
     << ",\"failed_nodes\":" << JsonArray(failed_nodes)
     << ",\"skipped_versions\":" << JsonArray(skipped_versions) << ",\"shards\":[";
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardSource& s = shards[i];
    os << (i ? "," : "") << "{\"node\":" << s.node << ",\"lane\":" << s.lane << ",\"source\":\""
       << SourceKindName(s.kind) << "\"";
    if (s.kind == SourceKind::kReplica) os << ",\"from_node\":" << s.from_node;
    if (s.kind == SourceKind::kDecode) os << ",\"decodes\":" << JsonArray(s.decodes);
    if (s.kind == SourceKind::kRemote) os << ",\"remote_version\":" << version;
    os << ",\"read_nodes\":" << JsonArray(s.read_nodes) << ",\"bytes\":" << s.bytes << "}";
  }
  os << "],\"decodes\":[";
  for (size_t i = 0; i < decodes.size(); ++i) {
    const StripeDecode& d = decodes[i];
    os << (i ? "," : "") << "{\"lane\":" << d.lane << ",\"group\":" << d.group
       << ",\"stripe\":" << d.stripe << ",\"data_rows\":" << d.data_rows
       << ",\"parity_rows\":" << d.parity_rows << ",\"piece_bytes\":" << d.piece_bytes
       << ",\"inputs\":[";
    for (size_t k = 0; k < d.inputs.size(); ++k) os << (k ? "," : "") << RowJson(d.inputs[k]);
    os << "],\"rebuilt\":[";
    for (size_t k = 0; k < d.rebuilt.size(); ++k) os << (k ? "," : "") << RowJson(d.rebuilt[k]);
    os << "]}";
  }
  os << "],\"reprotect\":[";
  for (size_t i = 0; i < reprotect.size(); ++i) {
    const ReprotectItem& r = reprotect[i];
    os << (i ? "," : "") << "{\"node\":" << r.node << ",\"lane\":" << r.lane << ",\"kind\":\""
       << ItemKindName(r.kind) << "\"";
    if (r.kind == ItemKind::kReplica) os << ",\"owner\":" << r.owner;
    if (r.kind == ItemKind::kParity) {
      os << ",\"group\":" << r.group << ",\"stripe\":" << r.stripe << ",\"row\":" << r.row;
    }
    os << ",\"bytes\":" << r.bytes << "}";
  }
  os << "],\"read_bytes_per_node\":" << JsonArray(read_bytes_per_node)
     << ",\"max_read_bytes\":" << max_read_bytes << "}";
  return os.str();
}

}  // namespace memento::placement
