#include "memento/launch/job_reporter.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "memento/launch/json_text.h"

namespace memento::launch {
namespace {

// Read, not removed: the runtime's Config knows MEMENTO_LAUNCH_* belong to
// the launcher, and the environment is never changed under running threads.
std::string LaunchEnv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Writes `text` to `path` through a temporary file and a rename, so that the
// launcher never reads half a file.
void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

double JobReporter::Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

JobReporter JobReporter::FromEnv(int rank) {
  JobReporter r;
  r.rank_ = rank;
  r.dir_ = LaunchEnv("MEMENTO_LAUNCH_DIR");
  const std::string attempt = LaunchEnv("MEMENTO_LAUNCH_ATTEMPT");
  r.attempt_ = attempt.empty() ? 0 : std::atoi(attempt.c_str());
  r.ArmFault(LaunchEnv("MEMENTO_LAUNCH_FAULT"));
  return r;
}

JobReporter JobReporter::ForGeneration(int rank, int generation) {
  JobReporter r = FromEnv(rank);
  if (!r.active()) return r;
  r.attempt_ += generation;
  if (std::getenv("MEMENTO_LAUNCH_FAULTS") != nullptr) {
    // "A=STAGE:VERSION:RANK[+RANK...],...": this attempt's entry, if any.
    r.ArmFault("");
    std::stringstream faults(LaunchEnv("MEMENTO_LAUNCH_FAULTS"));
    const std::string key = std::to_string(r.attempt_) + "=";
    for (std::string item; std::getline(faults, item, ',');) {
      if (item.rfind(key, 0) == 0) r.ArmFault(item.substr(key.size()));
    }
  }
  r.WritePid();
  return r;
}

void JobReporter::WritePid() const {
  WriteFileAtomically(dir_ + "/pid.a" + std::to_string(attempt_) + ".r" + std::to_string(rank_),
                      std::to_string(static_cast<long>(getpid())));
}

// "STAGE:VERSION:RANK[+RANK...]" (VERSION "*" = any); "" disarms.
void JobReporter::ArmFault(const std::string& fault) {
  fault_stage_.clear();
  fault_rank_ = -1;
  fault_with_.clear();
  const size_t a = fault.find(':'), b = fault.rfind(':');
  if (fault.empty() || a == std::string::npos || b == a) return;
  fault_stage_ = fault.substr(0, a);
  const std::string version = fault.substr(a + 1, b - a - 1);
  fault_any_version_ = version == "*";
  fault_version_ = fault_any_version_ ? 0 : std::strtoull(version.c_str(), nullptr, 10);
  char* next = nullptr;
  fault_rank_ = static_cast<int>(std::strtol(fault.c_str() + b + 1, &next, 10));
  while (*next == '+') fault_with_.push_back(static_cast<int>(std::strtol(next + 1, &next, 10)));
}

void JobReporter::Append(const std::string& line) const {
  if (!active() || rank_ != 0) return;
  const std::string path = dir_ + "/events.jsonl";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = line + "\n";
  [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

void JobReporter::Start(uint64_t total_steps) const {
  Append(JsonText(nlohmann::json{
      {"event", "start"}, {"attempt", attempt_}, {"total_steps", total_steps}, {"t", Now()}}));
}

void JobReporter::RestoreBegin() const {
  Append(JsonText(nlohmann::json{{"event", "restore_begin"}, {"attempt", attempt_}, {"t", Now()}}));
}

void JobReporter::Step(uint64_t step, double loss, double step_s, double stall_s) const {
  Append(JsonText(nlohmann::json{{"event", "step"},
                                 {"attempt", attempt_},
                                 {"step", step},
                                 {"loss", loss},
                                 {"step_s", step_s},
                                 {"stall_s", stall_s},
                                 {"t", Now()}}));
}

void JobReporter::Done(uint64_t step, const std::string& state_hash) const {
  Append(JsonText(
      nlohmann::json{{"event", "done"}, {"attempt", attempt_}, {"step", step},
                     {"state_hash", state_hash}, {"t", Now()}}));
}

void JobReporter::Restored(const Result<runtime::RestoreReport>& report, double t_begin,
                           double t_end, const std::string& state_hash) const {
  if (!active()) return;
  nlohmann::json j{{"rank", rank_}, {"attempt", attempt_}, {"t_begin", t_begin}, {"t_end", t_end}};
  if (report.ok()) {
    j["ok"] = true;
    j["version"] = report->version;
    j["state_hash"] = state_hash;
    j["report"] = nlohmann::json::parse(report->ToJson(), nullptr, false);
  } else {
    j["ok"] = false;
    j["error"] = report.status().ToString();
    j["not_found"] = report.status().code() == StatusCode::kNotFound;
  }
  WriteFileAtomically(
      dir_ + "/restore.a" + std::to_string(attempt_) + ".r" + std::to_string(rank_) + ".json",
      JsonText(j));
}

runtime::FaultHooks JobReporter::Hooks() const {
  runtime::FaultHooks hooks;
  if (!active() || fault_stage_.empty() || fault_rank_ != rank_) return hooks;
  const std::string dir = dir_, stage = fault_stage_;
  const uint64_t version = fault_version_;
  const bool any = fault_any_version_;
  const int rank = rank_, attempt = attempt_;
  const std::vector<int> with = fault_with_;
  hooks.at_stage = [=](runtime::Stage s, uint64_t v) -> Status {
    if (stage != runtime::StageName(s) || (!any && v != version)) return Status::Ok();
    WriteFileAtomically(
        dir + "/fault.a" + std::to_string(attempt),
        JsonText(nlohmann::json{{"stage", stage}, {"version", v}, {"rank", rank}, {"t", Now()}}));
    std::fprintf(stderr, "rank %d: injected node loss at %s of v%llu (SIGKILL)\n", rank,
                 stage.c_str(), static_cast<unsigned long long>(v));
    std::fflush(stderr);
    // The ranks lost with this one go at the same instant, by the pids they
    // recorded for this attempt: a world that repairs itself must not see
    // them go one by one.
    for (int other : with) {
      std::ifstream in(dir + "/pid.a" + std::to_string(attempt) + ".r" + std::to_string(other));
      long pid = 0;
      if (in >> pid && pid > 0 && pid != static_cast<long>(getpid())) {
        kill(static_cast<pid_t>(pid), SIGKILL);
      }
    }
    raise(SIGKILL);
    return Status::Ok();
  };
  return hooks;
}

}  // namespace memento::launch
