#include "engine/save_schedule.h"

#include <algorithm>
#include <string>
#include <vector>

#include "memento/common/check.h"
#include "memento/runtime/config.h"
#include "memento/runtime/log.h"

namespace memento::runtime {
namespace {

constexpr double kSmoothing = 0.2;  // EWMA weight of a new measurement
constexpr double kSecondsPerHour = 3600;

// What a rank contributes to the agreement: whether it has measured step and
// stall yet, and its smoothed step, stall and protect seconds.
struct Contribution {
  double valid = 0;
  double step_s = 0;
  double stall_s = 0;
  double protect_s = 0;
};

}  // namespace

SaveSchedule::SaveSchedule(int interval, double node_mtbf_h, placement::TunerClock* clock)
    : automatic_(interval == Config::kAutoInterval),
      fixed_(std::max(1, interval)),
      node_mtbf_h_(node_mtbf_h),
      clock_(clock != nullptr ? clock : &steady_) {
  if (automatic_) tuner_ = MakeTuner();
}

std::unique_ptr<placement::IntervalTuner> SaveSchedule::MakeTuner() {
  placement::IntervalTunerOptions options;
  options.initial_interval_steps = 1;  // every step until the first agreed measurements
  auto tuner = placement::IntervalTuner::Create(options, clock_);
  MEMENTO_CHECK(tuner.ok());
  return std::make_unique<placement::IntervalTuner>(std::move(tuner).value());
}

void SaveSchedule::Smooth(double* average, bool* seen, double value) {
  if (!*seen) {
    *average = value;
    *seen = true;
  } else {
    *average += kSmoothing * (value - *average);
  }
}

double SaveSchedule::Now() { return clock_->NowSeconds(); }

bool SaveSchedule::WouldSave(uint64_t step) const {
  if (!automatic_) return step % static_cast<uint64_t>(fixed_) == 0;
  std::lock_guard<std::mutex> lock(mu_);
  return !have_saved_ || step >= next_save_;
}

bool SaveSchedule::Offer(uint64_t step) {
  const double now = automatic_ ? Now() : 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (automatic_ && have_offer_ && step > last_offer_) {
    const double compute = now - offer_time_ - blocked_since_offer_;
    if (compute > 0) {
      Smooth(&mine_.step_s, &mine_.step, compute / static_cast<double>(step - last_offer_));
    }
    if (last_offer_saved_) Smooth(&mine_.stall_s, &mine_.stall, blocked_since_offer_);
  }
  have_offer_ = true;
  last_offer_ = step;
  offer_time_ = now;
  blocked_since_offer_ = 0;
  const bool save = automatic_ ? (!have_saved_ || step >= next_save_)
                               : step % static_cast<uint64_t>(fixed_) == 0;
  last_offer_saved_ = save;
  last_saved_ = save;
  ++(save ? saves_ : skipped_);
  return save;
}

void SaveSchedule::Saved(uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  have_saved_ = true;
  next_save_ = step + static_cast<uint64_t>(automatic_ ? tuner_->interval_steps() : fixed_);
  version_started_ = automatic_;
  version_start_ = offer_time_;
}

void SaveSchedule::SaveReturned() {
  if (!automatic_) return;
  const double now = Now();
  std::lock_guard<std::mutex> lock(mu_);
  blocked_since_offer_ += std::max(0.0, now - offer_time_);
}

void SaveSchedule::AddBlocked(double seconds) {
  if (!automatic_ || !(seconds > 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  blocked_since_offer_ += seconds;
}

Status SaveSchedule::Agree(Transport* transport, int nodes, uint64_t version) {
  if (!automatic_) return Status::Ok();
  Contribution mine;
  {
    const double now = Now();
    std::lock_guard<std::mutex> lock(mu_);
    if (version_started_) {
      Smooth(&mine_.protect_s, &mine_.protect, std::max(0.0, now - version_start_));
      version_started_ = false;
    }
    mine.valid = mine_.step && mine_.stall ? 1 : 0;
    mine.step_s = mine_.step_s;
    mine.stall_s = mine_.stall_s;
    mine.protect_s = mine_.protect ? mine_.protect_s : 0;
  }
  MEMENTO_ASSIGN_OR_RETURN(auto gathered, transport->Allgather(&mine, sizeof(mine)));
  Contribution all{1, 0, 0, 0};
  for (const auto& raw : gathered) {
    Contribution c;
    if (raw.size() != sizeof(c)) return Status::Corruption("interval agreement: malformed record");
    std::copy(raw.begin(), raw.end(), reinterpret_cast<uint8_t*>(&c));
    all.valid = std::min(all.valid, c.valid);
    all.step_s = std::max(all.step_s, c.step_s);
    all.stall_s = std::max(all.stall_s, c.stall_s);
    all.protect_s = std::max(all.protect_s, c.protect_s);
  }
  if (all.valid == 0) return Status::Ok();  // some rank has not measured yet: no change anywhere
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double rate = std::max(1, nodes) / (node_mtbf_h_ * kSecondsPerHour);
    tuner_->SetFailureRate(rate);
    tuner_->Update(static_cast<int64_t>(version), all.step_s, all.stall_s,
                   std::max(all.stall_s, all.protect_s));
    agreed_.step_s = all.step_s;
    agreed_.stall_s = all.stall_s;
    agreed_.protect_s = std::max(all.stall_s, all.protect_s);
    agreed_.step = agreed_.stall = agreed_.protect = true;
    const auto& changes = tuner_->changes();
    for (; logged_changes_ < changes.size(); ++logged_changes_) {
      lines.push_back(changes[logged_changes_].ToString());
    }
  }
  for (const auto& line : lines) Log(LogLevel::kInfo, line);
  return Status::Ok();
}

void SaveSchedule::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  have_offer_ = have_saved_ = last_saved_ = last_offer_saved_ = version_started_ = false;
  last_offer_ = next_save_ = 0;
  blocked_since_offer_ = 0;
  mine_ = Measured();
  agreed_ = Measured();
  if (automatic_) tuner_ = MakeTuner();
  logged_changes_ = 0;
}

IntervalStats SaveSchedule::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  IntervalStats s;
  s.automatic = automatic_;
  s.last_saved = last_saved_;
  s.saves = saves_;
  s.skipped = skipped_;
  s.interval_steps = automatic_ ? tuner_->interval_steps() : fixed_;
  s.changes = automatic_ ? static_cast<int>(tuner_->changes().size()) : 0;
  s.step_s = agreed_.step_s;
  s.stall_s = agreed_.stall_s;
  s.protect_s = agreed_.protect_s;
  return s;
}

}  // namespace memento::runtime
