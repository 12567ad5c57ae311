#include "memento/launch/inject_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "memento/common/strings.h"

namespace memento::launch {
namespace {

bool ParseUint(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 12) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// Uniform in [0, n) from the generator; the modulo bias is negligible for
// the small n used here and the result is the same on every platform.
uint64_t Draw(std::mt19937_64& rng, uint64_t n) { return rng() % n; }

constexpr InjectStage kRandomStages[] = {InjectStage::kStep, InjectStage::kSnapshot,
                                         InjectStage::kProtect, InjectStage::kCommit};

}  // namespace

const char* InjectStageName(InjectStage stage) {
  switch (stage) {
    case InjectStage::kStep:
      return "step";
    case InjectStage::kSnapshot:
      return "snapshot";
    case InjectStage::kProtect:
      return "protect";
    case InjectStage::kCommit:
      return "commit";
    case InjectStage::kPersist:
      return "persist";
    case InjectStage::kRecovery:
      return "recovery";
    case InjectStage::kReprotect:
      return "reprotect";
  }
  return "?";
}

const char* EngineStageName(InjectStage stage) {
  switch (stage) {
    case InjectStage::kStep:
      return "";
    case InjectStage::kSnapshot:
      return "snapshot";
    // Chunks stream to the peers while they land; "seal" is reached once the
    // snapshot is copied and the protect traffic is finishing.
    case InjectStage::kProtect:
      return "seal";
    case InjectStage::kCommit:
      return "commit";
    case InjectStage::kPersist:
      return "persist";
    case InjectStage::kRecovery:
      return "recover";
    case InjectStage::kReprotect:
      return "reprotect";
  }
  return "";
}

std::string InjectEvent::ToString() const {
  std::ostringstream os;
  os << (nodes.size() == 1 ? "node " : "nodes ");
  for (size_t i = 0; i < nodes.size(); ++i) os << (i ? "+" : "") << nodes[i];
  if (stage == InjectStage::kRecovery || stage == InjectStage::kReprotect) {
    os << " during the next " << InjectStageName(stage);
  } else if (stage == InjectStage::kStep) {
    os << " at step " << step;
    if (delay_s > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), " + %.3g s", delay_s);
      os << buf;
    }
  } else {
    os << " at the " << InjectStageName(stage) << " stage of v" << step;
  }
  return os.str();
}

Result<std::vector<InjectEvent>> ParseInjectSpec(const std::string& spec, int num_nodes,
                                                 uint64_t seed) {
  std::vector<InjectEvent> events;
  if (spec.empty()) return events;
  std::mt19937_64 rng(seed);
  for (const std::string& item : Split(spec, ',')) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("--inject event '" + item + "': " + why +
                                     " (form: NODES@STEP[:STAGE], NODES@recovery; see --help)");
    };
    InjectEvent ev;
    ev.text = item;
    const size_t at = item.find('@');
    if (at == std::string::npos) return bad("missing '@'");
    const std::string nodes = item.substr(0, at);
    const std::string when = item.substr(at + 1);
    // Random draws happen in text order: nodes, then step, then stage.
    std::string steps = when, stage = "step";
    if (const size_t colon = when.find(':'); colon != std::string::npos) {
      steps = when.substr(0, colon);
      stage = when.substr(colon + 1);
    }
    if (nodes.rfind("rand", 0) == 0) {
      uint64_t k = 1;
      if (nodes.size() > 4 && !ParseUint(nodes.substr(4), &k)) return bad("bad count after 'rand'");
      if (k < 1 || k > static_cast<uint64_t>(num_nodes)) {
        return bad("cannot pick " + std::to_string(k) + " distinct nodes of " +
                   std::to_string(num_nodes));
      }
      std::vector<int> all(num_nodes);
      for (int i = 0; i < num_nodes; ++i) all[i] = i;
      for (uint64_t i = 0; i < k; ++i) {  // partial Fisher-Yates
        std::swap(all[i], all[i + Draw(rng, num_nodes - i)]);
        ev.nodes.push_back(all[i]);
      }
    } else {
      for (const std::string& n : Split(nodes, '+')) {
        uint64_t v = 0;
        if (!ParseUint(n, &v)) return bad("node '" + n + "' is not a node index");
        if (v >= static_cast<uint64_t>(num_nodes)) {
          return bad("node " + n + " does not exist (the job has nodes 0.." +
                     std::to_string(num_nodes - 1) + ")");
        }
        ev.nodes.push_back(static_cast<int>(v));
      }
    }
    std::sort(ev.nodes.begin(), ev.nodes.end());
    if (std::adjacent_find(ev.nodes.begin(), ev.nodes.end()) != ev.nodes.end()) {
      return bad("a node is named twice");
    }
    if (when == "recovery" || when == "reprotect") {
      if (events.empty()) return bad("a failure during " + when + " needs an earlier failure");
      ev.stage = when == "recovery" ? InjectStage::kRecovery : InjectStage::kReprotect;
      events.push_back(ev);
      continue;
    }
    if (const size_t plus = steps.find('+'); plus != std::string::npos) {
      const std::string delay = steps.substr(plus + 1);
      steps = steps.substr(0, plus);
      char* end = nullptr;
      // Decimal digits with at most one '.' (strtod alone takes "0x10" as 16).
      const std::string number = delay.empty() ? delay : delay.substr(0, delay.size() - 1);
      const bool decimal = !number.empty() && std::isdigit(static_cast<unsigned char>(number[0])) &&
                           number.find_first_not_of("0123456789.") == std::string::npos &&
                           std::count(number.begin(), number.end(), '.') <= 1;
      const double d = delay.size() > 1 && delay.back() == 's' && decimal
                           ? std::strtod(delay.c_str(), &end)
                           : -1;
      if (end != delay.c_str() + delay.size() - 1 || !(d >= 0 && d <= 3600)) {
        return bad("delay '" + delay + "' must be seconds 0..3600 ending in 's', e.g. +0.25s");
      }
      ev.delay_s = d;
    }
    const size_t dash = steps.find('-');
    if (dash == std::string::npos) {
      if (!ParseUint(steps, &ev.step) || ev.step == 0) return bad("step must be a number >= 1");
    } else {
      uint64_t lo = 0, hi = 0;
      if (!ParseUint(steps.substr(0, dash), &lo) || !ParseUint(steps.substr(dash + 1), &hi) ||
          lo == 0 || hi < lo) {
        return bad("step range must be LO-HI with 1 <= LO <= HI");
      }
      ev.step = lo + Draw(rng, hi - lo + 1);
    }
    if (stage == "rand") {
      ev.stage = kRandomStages[Draw(rng, std::size(kRandomStages))];
    } else {
      bool found = false;
      for (InjectStage s : {InjectStage::kStep, InjectStage::kSnapshot, InjectStage::kProtect,
                            InjectStage::kCommit, InjectStage::kPersist}) {
        if (stage == InjectStageName(s)) {
          ev.stage = s;
          found = true;
        }
      }
      if (!found) {
        return bad("unknown stage '" + stage +
                   "' (step, snapshot, protect, commit, persist, rand; or NODES@recovery)");
      }
    }
    if (ev.delay_s > 0 && ev.stage != InjectStage::kStep) {
      return bad("a delay applies to a step, not to the " +
                 std::string(InjectStageName(ev.stage)) + " stage");
    }
    events.push_back(ev);
  }
  return events;
}

}  // namespace memento::launch
