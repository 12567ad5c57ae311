// memento inspect --job J [--verify] [--json]: a job's node-store segments on this machine.
// The logic lives in runtime/ (store_admin.h); this file parses flags and prints.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "job_flag.h"
#include "memento/launch/json_text.h"
#include "memento/runtime/shm_segment.h"
#include "memento/runtime/store_admin.h"

namespace memento::cli {
namespace {

using Json = nlohmann::ordered_json;

struct InspectOptions {
  std::string job;
  bool verify = false;
  bool json = false;
};

// Every segment usable and every sealed region valid (and verified, with --verify).
bool AllValid(const std::vector<runtime::SegmentReport>& reports) {
  for (const auto& r : reports) {
    if (!r.status.ok()) return false;
    for (const auto& slot : r.verified) {
      for (const auto& s : slot) {
        if (!s.ok()) return false;
      }
    }
  }
  return true;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

Json SegmentJson(const runtime::SegmentReport& rep) {
  Json seg = {{"name", rep.name}, {"bytes", rep.bytes}, {"usable", rep.status.ok()}};
  if (!rep.status.ok()) {
    seg["error"] = rep.status.ToString();
    return seg;
  }
  seg["node"] = rep.node;
  seg["lane"] = rep.local_rank;
  seg["regions"] = rep.region_names;
  seg["payload_bytes_per_slot"] = rep.payload_bytes;
  if (rep.finished) seg["finished_version"] = rep.finished->version;
  Json& slots = seg["slots"] = Json::array();
  for (const auto& slot : rep.inventory.slots) {
    Json s = {{"slot", slot.slot}};
    if (slot.ok) {
      s["version"] = slot.version;
      s["state"] = slot.committed ? "committed" : "sealed";
    } else if (slot.writing) {
      s["version"] = slot.version;
      s["state"] = "writing";
    } else {
      s["state"] = "invalid";
      s["problem"] = slot.problem;
    }
    if (slot.sealed) {
      Json& regions = s["regions"] = Json::array();
      for (const auto& r : slot.regions) {
        Json region = {{"region", r.region},
                       {"name", rep.region_names.at(r.region)},
                       {"kind", runtime::RegionKindName(r.kind)},
                       {"owner_node", r.owner_node},
                       {"owner_lane", r.owner_lane}};
        if (r.kind == runtime::RegionKind::kParity) region["piece"] = r.piece;
        region["valid"] = r.ok;
        if (r.ok) {
          region["length"] = r.length;
          region["crc32c"] = Hex32(r.crc);
          const Status& v = rep.verified.at(slot.slot).at(r.region);
          if (!v.ok()) {
            region["valid"] = false;
            region["problem"] = v.ToString();
          }
        } else {
          region["problem"] = r.problem;
        }
        regions.push_back(std::move(region));
      }
    }
    slots.push_back(std::move(s));
  }
  return seg;
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "list a job's shared-memory segments, versions and checksums");
  cmd->footer(
      "Lists job J's shared-memory segments on this machine: node, lane, bytes, and per slot\n"
      "the version, sealed/committed state and per-region checksums; first, the store\n"
      "directory (MEMENTO_SHM_DIR, default /dev/shm) and its tmpfs huge= setting.\n"
      "Exit code 0 when every segment and sealed region validates, 1 otherwise, 2 on bad "
      "usage.");
  AddJobOption(cmd, &o->job);
  cmd->add_flag("--verify", o->verify,
                "also recompute every sealed region's crc32c (reads all data)");
  cmd->add_flag("--json", o->json, "machine-readable output (one JSON object)");
  cmd->callback([o] {
    CheckJobFlag(o->job);
    auto reports = runtime::InspectJob(o->job, o->verify);
    if (!reports.ok()) {
      std::fprintf(stderr, "memento inspect: %s\n", reports.status().ToString().c_str());
      throw CommandFailed(1);
    }
    const bool valid = AllValid(*reports);
    // Where the stores live and their page size: a first access to each
    // 4 KiB page is what restores of large shards pay for on VMs.
    const std::string dir = runtime::ShmSegment::Directory();
    const std::string huge = runtime::ShmSegment::HugePages();
    if (o->json) {
      Json out = {{"job", o->job},
                  {"verified", o->verify},
                  {"valid", valid},
                  {"store_directory", dir},
                  {"store_huge_pages", huge}};
      Json& segments = out["segments"] = Json::array();
      for (const auto& rep : *reports) segments.push_back(SegmentJson(rep));
      // Names come from the file system: bytes that are not UTF-8 print as U+FFFD
      // instead of ending the program.
      std::printf("%s\n", launch::JsonText(out, 2).c_str());
    } else {
      std::printf("store directory %s (tmpfs huge=%s%s)\n", dir.c_str(), huge.c_str(),
                  huge == "never" ? ": 4 KiB pages; huge=within_size gives 2 MiB pages, see "
                                    "MEMENTO_SHM_DIR"
                                  : "");
      std::fputs(runtime::FormatReports(*reports).c_str(), stdout);
    }
    if (!valid) throw CommandFailed(1);
  });
}

}  // namespace memento::cli
