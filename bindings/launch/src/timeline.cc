#include "memento/launch/timeline.h"

#include <cstdio>
#include <sstream>

#include "memento/launch/json_text.h"

namespace memento::launch {
namespace {

using json = nlohmann::json;

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string Join(const json& list, const char* sep) {
  std::string out;
  for (const auto& v : list) {
    if (!out.empty()) out += sep;
    out += v.is_string() ? v.get<std::string>() : JsonText(v);
  }
  return out;
}

std::string Sources(const json& by_source) {
  std::string out;
  for (const auto& [source, n] : by_source.items()) {
    if (!out.empty()) out += ", ";
    out += std::to_string(n.get<int>()) + " " + source;
  }
  return out.empty() ? "no entries" : out + " (entries over all ranks)";
}

// A restore record: what was restored from where, and the time the failures it closes cost.
void RenderRestore(const json& r, const std::string& t, std::ostringstream& os) {
  os << t;
  if (r.value("ok", false)) {
    os << "restored v" << r.value("version", 0) << ": " << Sources(r["entries_by_source"]);
    if (!r.value("lost_nodes", json::array()).empty()) {
      os << "; lost node indices [" << Join(r["lost_nodes"], ",") << "]";
    }
    if (!r.value("source_detail", std::string()).empty()) {
      os << "; rank 0: " << r.value("source_detail", std::string());
    }
    os << "; re-protect " << r.value("reprotect_mode", std::string("none")) << "; restore "
       << Fmt("%.3f", r.value("restore_s", 0.0)) << " s, re-protect "
       << Fmt("%.3f", r.value("reprotect_s", 0.0)) << " s\n";
  } else if (r.value("nothing_to_restore", false)) {
    os << "nothing to restore: the job starts from step 0\n";
  } else {
    os << "RESTORE FAILED: " << Join(r.value("errors", json::array()), "; ") << "\n";
  }
  if (r.contains("lost")) {
    const json& l = r["lost"];
    os << "            failure(s) " << Join(l.value("failures", json::array()), "+") << " cost "
       << l.value("steps_lost", 0) << " step(s): detection "
       << Fmt("%.2f", l.value("detection_s", 0.0)) << " s, "
       << (l.contains("rejoin_s") ? "in-job rejoin " : "relaunch ")
       << Fmt("%.2f", l.value(l.contains("rejoin_s") ? "rejoin_s" : "relaunch_s", 0.0))
       << " s, restore "
       << Fmt("%.2f", l.value("restore_s", 0.0)) << " s, re-protect "
       << Fmt("%.2f", l.value("reprotect_s", 0.0)) << " s, recompute "
       << Fmt("%.2f", l.value("recompute_s", 0.0)) << " s\n";
  }
}

// The summary record: the outcome and the time lost by component.
void RenderSummary(const json& r, const std::string& t, std::ostringstream& os) {
  const json& tl = r["time_lost_s"];
  const double total = tl.value("detection", 0.0) + tl.value("relaunch", 0.0) +
                       tl.value("rejoin", 0.0) +
                       tl.value("restore", 0.0) + tl.value("reprotect", 0.0) +
                       tl.value("recompute", 0.0);
  os << t << "job " << r.value("outcome", std::string()) << " at step "
     << r.value("final_step", 0);
  if (!r.value("state_hash", std::string()).empty()) {
    os << " (state " << r.value("state_hash", std::string()) << ")";
  }
  os << "\nsummary: " << r.value("failures", 0) << " failure(s), " << r.value("launches", 1)
     << " launch(es), " << r.value("steps_lost", 0) << " step(s) lost; time lost "
     << Fmt("%.2f", total) << " s = detection " << Fmt("%.2f", tl.value("detection", 0.0))
     << " + relaunch " << Fmt("%.2f", tl.value("relaunch", 0.0))
     << (r.value("injob_recoveries", 0) > 0
             ? " + in-job rejoin " + Fmt("%.2f", tl.value("rejoin", 0.0))
             : std::string())
     << " + restore "
     << Fmt("%.2f", tl.value("restore", 0.0)) << " + re-protect "
     << Fmt("%.2f", tl.value("reprotect", 0.0)) << " + recompute "
     << Fmt("%.2f", tl.value("recompute", 0.0)) << " s; wall "
     << Fmt("%.1f", r.value("wall_s", 0.0)) << " s; " << r.value("segments_removed", 0)
     << " segment(s) cleaned\n";
}

}  // namespace

std::string RenderTimeline(const std::vector<json>& records) {
  std::ostringstream os;
  for (const json& r : records) {
    const std::string kind = r.value("record", std::string());
    const std::string t = Fmt("%8.2fs  ", r.value("t", 0.0));
    if (kind == "job") {
      os << "memento launch: job " << r.value("job", std::string()) << ", " << r.value("nodes", 0)
         << " nodes x " << r.value("ranks_per_node", 1) << " ranks, scheme "
         << r.value("scheme", std::string()) << ", remote "
         << (r.value("remote", std::string()).empty() ? "none" : r.value("remote", std::string()))
         << "\n";
      for (const auto& ev : r.value("inject", json::array())) {
        os << "  inject " << ev.value("event", std::string()) << ": "
           << ev.value("resolved", std::string()) << "\n";
      }
      os << "timeline:\n";
    } else if (kind == "launch") {
      // Numbered by launches (an in-job recovery is an attempt, not a launch).
      os << t << "launch " << r.value("launch", r.value("attempt", 0) + 1);
      if (r.value("backoff_s", 0.0) > 0)
        os << " (after " << Fmt("%.2f", r["backoff_s"]) << " s backoff)";
      if (!r.value("replaced", json::array()).empty()) {
        os << "; replacement " << Join(r["replaced"], ", ");
      }
      if (!r.value("fault_env", std::string()).empty()) {
        os << "; armed: " << r.value("fault_env", std::string());
      }
      os << "\n";
    } else if (kind == "failure") {
      os << t << "FAILURE " << r.value("index", 0) << ": ";
      if (r.value("injected", false)) {
        os << "injected " << r.value("what", std::string()) << " ("
           << r.value("event", std::string()) << "); lost "
           << Join(r.value("identities", json::array()), ", ") << " with "
           << r.value("segments_unlinked", json::array()).size() << " segment(s); ";
      } else {
        os << r.value("what", std::string()) << "; ";
      }
      os << "last step reported " << r.value("last_step", 0) << "; job "
         << r.value("job_exit", std::string()) << ", detected after "
         << Fmt("%.2f", r.value("detection_s", 0.0)) << " s\n";
      if (r.contains("output_tail")) {
        std::istringstream tail(r.value("output_tail", std::string()));
        std::string line;
        while (std::getline(tail, line)) os << "            | " << line << "\n";
      }
    } else if (kind == "restore") {
      RenderRestore(r, t, os);
    } else if (kind == "injob") {
      os << t << "in-job recovery (attempt " << r.value("attempt", 0) << "): replacement "
         << Join(r.value("replaced", json::array()), ", ") << "; "
         << (r.value("from_spares", 0) > 0
                 ? std::to_string(r.value("from_spares", 0)) + " from warm spares, " +
                       std::to_string(r.value("spares_left", 0)) + " left"
                 : std::string("fresh process(es)"));
      if (!r.value("fault_env", std::string()).empty()) {
        os << "; armed: " << r.value("fault_env", std::string());
      }
      os << "\n";
    } else if (kind == "injob_fallback") {
      os << t << "in-job recovery abandoned: " << r.value("reason", std::string())
         << "; the job is stopped\n";
    } else if (kind == "mpirun_stuck") {
      os << t << r.value("launcher", std::string("mpirun")) << " of launch "
         << r.value("launch", r.value("attempt", 0) + 1) << " killed: still running "
         << Fmt("%.1f", r.value("after_s", 0.0)) << " s after every rank had ended\n";
    } else if (kind == "not_fired") {
      os << t << "not injected: " << r.value("event", std::string()) << " ("
         << r.value("what", std::string()) << "): "
         << r.value("why", std::string("never reached")) << "\n";
    } else if (kind == "summary") {
      RenderSummary(r, t, os);
    }
  }
  return os.str();
}

}  // namespace memento::launch
