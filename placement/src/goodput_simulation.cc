#include "memento/placement/goodput_simulation.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memento/placement/group_layout.h"
#include "memento/placement/serve_probability.h"

namespace memento::placement {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSecondsPerYear = 365 * kSecondsPerDay;

struct Tally {
  double goodput = 0;
  double failures = 0;
  double served = 0;
  double stall_s = 0;
  double lost_s = 0;
  double recovery_s = 0;
};

// One simulated job. Progress is counted in steps (fractional inside a compute phase).
class JobSimulation {
 public:
  JobSimulation(const JobShape& job, const FailureProcess& failures, const CheckpointCosts& c,
                const CheckpointPlan& plan, const GroupLayout& layout,
                const std::vector<std::vector<int>>& racks, uint64_t seed, uint64_t replicate)
      : job_(job),
        failures_(failures),
        c_(c),
        plan_(plan),
        layout_(layout),
        racks_(racks),
        rates_(RatesFor(job, failures)) {
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      static_cast<uint32_t>(replicate), static_cast<uint32_t>(replicate >> 32)};
    rng_.seed(seq);
    k_ = plan.save_every_steps;
    work_ = k_ * job.step_s;
    cycle_ = work_ + c.stall_s;
    persist_period_ = static_cast<int64_t>(k_) * (plan.remote_only ? 1 : plan.persist_every_saves);
    if (plan.scheme.is_replica()) {
      memory_recover_s_ = c.recover_replica_s;
    } else if (plan.scheme.is_erasure()) {
      memory_recover_s_ = c.recover_decode_s;
    } else {
      memory_recover_s_ = c.recover_remote_s;
    }
  }

  Tally Run(double horizon) {
    const double lambda = rates_.total();
    double next_fail = NextFailure(0, lambda);
    double end_progress = 0;
    while (true) {
      if (running_) {
        const double t_save = run_t0_ + next_save_ * cycle_ - c_.stall_s;
        const double t_commit = commits_.empty() ? kInf : commits_.front().first;
        const double t_persist = persists_.empty() ? kInf : persists_.front().first;
        const double t = std::min({t_save, t_commit, t_persist, next_fail});
        if (t >= horizon) {
          end_progress = ProgressAt(horizon);
          break;
        }
        if (t == next_fail) {
          FailWhileRunning(t);
          next_fail = NextFailure(t, lambda);
        } else if (t == t_commit) {
          committed_ = commits_.front().second;
          commits_.pop_front();
        } else if (t == t_persist) {
          durable_ = persists_.front().second;
          persists_.pop_front();
        } else {
          const int64_t progress = run_p0_ + next_save_ * k_;
          commits_.emplace_back(t + c_.protect_s, progress);
          if (progress % persist_period_ == 0) persists_.emplace_back(t + c_.persist_s, progress);
          ++next_save_;
        }
      } else {
        const double t = std::min(recover_end_, next_fail);
        if (t >= horizon) {
          tally_.recovery_s += horizon - recover_start_;
          end_progress = static_cast<double>(target_);
          break;
        }
        if (t == next_fail) {
          FailWhileRecovering(t);
          next_fail = NextFailure(t, lambda);
        } else {
          tally_.recovery_s += t - recover_start_;
          running_ = true;
          run_t0_ = t;
          run_p0_ = target_;
          committed_ = target_;
          next_save_ = 1;
        }
      }
    }
    tally_.goodput = end_progress * job_.step_s / horizon;
    tally_.stall_s = horizon - end_progress * job_.step_s - tally_.lost_s - tally_.recovery_s;
    return tally_;
  }

 private:
  double NextFailure(double now, double lambda) {
    if (lambda <= 0) return kInf;
    return now + std::exponential_distribution<double>(lambda)(rng_);
  }

  double ProgressAt(double t) const {
    const double elapsed = t - run_t0_;
    const double cycles = std::floor(elapsed / cycle_);
    const double rem = elapsed - cycles * cycle_;
    return static_cast<double>(run_p0_) + cycles * k_ + std::min(rem, work_) / job_.step_s;
  }

  // Draws the kind of the event and the nodes it takes; returns (served, recovery time).
  std::pair<bool, double> DrawEvent() {
    tally_.failures += 1;
    const double u = std::uniform_real_distribution<double>(0, rates_.total())(rng_);
    bool served;
    if (u < rates_.process) {
      served = true;  // the node and its memory survive
    } else if (u < rates_.process + rates_.node) {
      failed_.assign(1, Uniform(job_.nodes));
      served = ServedByMemory(layout_, failed_);
    } else if (u < rates_.process + rates_.node + rates_.rack) {
      served = ServedByMemory(layout_, racks_[Uniform(static_cast<int>(racks_.size()))]);
    } else {
      DistinctNodes(failures_.multi_event_nodes);
      served = ServedByMemory(layout_, failed_);
    }
    const bool process = u < rates_.process;
    if (plan_.remote_only) served = false;
    if (served) tally_.served += 1;
    const double source =
        !served ? c_.recover_remote_s : (process ? c_.recover_local_s : memory_recover_s_);
    return {served, c_.relaunch_s + source};
  }

  void FailWhileRunning(double t) {
    const auto [served, recover_s] = DrawEvent();
    target_ = served ? committed_ : durable_;
    target_from_memory_ = served;
    tally_.lost_s += (ProgressAt(t) - static_cast<double>(target_)) * cycle_ / k_;
    commits_.clear();
    persists_.clear();
    running_ = false;
    recover_start_ = t;
    recover_end_ = t + recover_s;
  }

  void FailWhileRecovering(double t) {
    const auto [served, recover_s] = DrawEvent();
    if (!served && target_from_memory_) {
      tally_.lost_s += static_cast<double>(target_ - durable_) * cycle_ / k_;
      target_ = durable_;
      target_from_memory_ = false;
    }
    recover_end_ = t + recover_s;
  }

  int Uniform(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  // Floyd's algorithm: m distinct nodes out of N.
  void DistinctNodes(int m) {
    failed_.clear();
    seen_.clear();
    for (int j = job_.nodes - m; j < job_.nodes; ++j) {
      const int t = std::uniform_int_distribution<int>(0, j)(rng_);
      const int pick = seen_.insert(t).second ? t : j;
      if (pick == j) seen_.insert(j);
      failed_.push_back(pick);
    }
  }

  const JobShape& job_;
  const FailureProcess& failures_;
  const CheckpointCosts& c_;
  const CheckpointPlan& plan_;
  const GroupLayout& layout_;
  const std::vector<std::vector<int>>& racks_;
  const FailureRates rates_;
  std::mt19937_64 rng_;

  int k_ = 1;
  double work_ = 0, cycle_ = 0, memory_recover_s_ = 0;
  int64_t persist_period_ = 1;

  bool running_ = true;
  double run_t0_ = 0;
  int64_t run_p0_ = 0;
  int64_t next_save_ = 1;
  int64_t committed_ = 0;  // progress of the last version committed in memory
  int64_t durable_ = 0;    // progress of the last durable version (0: the initial state)
  int64_t target_ = 0;
  bool target_from_memory_ = true;
  double recover_start_ = 0, recover_end_ = 0;
  std::deque<std::pair<double, int64_t>> commits_, persists_;
  std::vector<int> failed_;
  std::unordered_set<int> seen_;
  Tally tally_;
};

}  // namespace

Result<SimulationResult> SimulateGoodput(const JobShape& job, const FailureProcess& failures,
                                         const CheckpointCosts& costs, const CheckpointPlan& plan,
                                         const SimulationOptions& options) {
  MEMENTO_RETURN_IF_ERROR(ValidateInputs(job, failures, costs, plan));
  if (!(options.years > 0 && std::isfinite(options.years)))
    return Status::InvalidArgument("years must be > 0");
  if (options.replicates < 2) return Status::InvalidArgument("replicates must be >= 2");
  const CheckpointCosts c = EffectiveCosts(costs, plan);
  MEMENTO_ASSIGN_OR_RETURN(Topology topology, TopologyFor(job.nodes, failures));
  const Scheme scheme = plan.remote_only ? Scheme::None() : plan.scheme;
  MEMENTO_ASSIGN_OR_RETURN(GroupLayout layout, GroupLayout::Build(topology, scheme));
  std::map<int, std::vector<int>> by_rack;
  for (int i = 0; i < topology.num_nodes(); ++i) {
    if (topology.has_racks()) by_rack[topology.rack(i)].push_back(i);
  }
  std::vector<std::vector<int>> racks;
  for (auto& [id, nodes] : by_rack) racks.push_back(std::move(nodes));

  const double horizon = options.years * kSecondsPerYear;
  SimulationResult out;
  double served = 0, failures_total = 0;
  for (int r = 0; r < options.replicates; ++r) {
    JobSimulation sim(job, failures, c, plan, layout, racks, options.seed,
                      static_cast<uint64_t>(r));
    const Tally t = sim.Run(horizon);
    out.goodput_per_replicate.push_back(t.goodput);
    failures_total += t.failures;
    served += t.served;
    const double days = horizon / kSecondsPerDay;
    out.stall_s_per_day += t.stall_s / days / options.replicates;
    out.lost_s_per_day += t.lost_s / days / options.replicates;
    out.recovery_s_per_day += t.recovery_s / days / options.replicates;
  }
  const double n = options.replicates;
  double mean = 0;
  for (double g : out.goodput_per_replicate) mean += g / n;
  double var = 0;
  for (double g : out.goodput_per_replicate) var += (g - mean) * (g - mean) / (n - 1);
  const double half = options.z * std::sqrt(var / n);
  out.goodput = mean;
  out.ci_low = mean - half;
  out.ci_high = mean + half;
  out.failures_per_day = failures_total / (n * horizon / kSecondsPerDay);
  out.memory_served_fraction = failures_total > 0 ? served / failures_total : 1;
  return out;
}

}  // namespace memento::placement
