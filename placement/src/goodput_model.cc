#include "memento/placement/goodput_model.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

namespace memento::placement {
namespace {

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Status Invalid(const std::string& field, double value, const std::string& requirement) {
  return Status::InvalidArgument(field + " = " + Num(value) + ": " + requirement);
}

bool PositiveOrNever(double v) { return v == kNever || (std::isfinite(v) && v > 0); }
bool NonNegative(double v) { return std::isfinite(v) && v >= 0; }

// 1 - x / expm1(x), accurate for small x (x >= 0).
double OneMinusXOverExpm1(double x) {
  if (x < 1e-4) return x / 2 - x * x / 12;
  if (x > 40)
    return 1 - x * std::exp(-x);  // x / expm1(x) = x e^-x / (1 - e^-x); inf / inf beyond 709
  return (std::expm1(x) - x) / std::expm1(x);
}

// Λ * E[work lost] when rolling back to the last version of a series saved every `period`
// (wall time), each usable `lag` after its save point, with the phase restarting at every
// rollback and rollbacks arriving at rate `rate`: 1 - e^{-rate*lag} x/expm1(x), x =
// rate*period, scaled from `rate` to `lambda`.
double ScaledLoss(double lambda, double rate, double period, double lag) {
  if (rate <= 0) return lambda * (period / 2 + lag);
  const double x = rate * period;
  const double keep = std::exp(-rate * lag) * (1 - OneMinusXOverExpm1(x));
  return (lambda / rate) * (1 - keep);
}

double RecoverFromMemory(const CheckpointCosts& c, const Scheme& s) {
  if (s.is_replica()) return c.recover_replica_s;
  if (s.is_erasure()) return c.recover_decode_s;
  return c.recover_remote_s;  // unprotected: memory never serves a lost node
}

}  // namespace

Status ValidateInputs(const JobShape& job, const FailureProcess& f, const CheckpointCosts& c,
                      const CheckpointPlan& plan) {
  if (job.nodes < 1) return Invalid("nodes", job.nodes, "must be >= 1");
  if (!(std::isfinite(job.shard_bytes) && job.shard_bytes > 0))
    return Invalid("shard_bytes", job.shard_bytes, "must be > 0");
  if (!(std::isfinite(job.step_s) && job.step_s > 0))
    return Invalid("step_s", job.step_s, "must be > 0");
  if (!PositiveOrNever(f.node_mtbf_s))
    return Invalid("node_mtbf_s", f.node_mtbf_s, "must be > 0 (or never)");
  if (!PositiveOrNever(f.process_mtbf_s))
    return Invalid("process_mtbf_s", f.process_mtbf_s, "must be > 0 (or never)");
  if (!PositiveOrNever(f.rack_mtbf_s))
    return Invalid("rack_mtbf_s", f.rack_mtbf_s, "must be > 0 (or never)");
  if (f.rack_mtbf_s != kNever && (f.nodes_per_rack < 1 || f.nodes_per_rack > job.nodes))
    return Invalid("nodes_per_rack", f.nodes_per_rack, "must be in [1, nodes] when racks fail");
  if (!NonNegative(f.multi_events_per_day))
    return Invalid("multi_events_per_day", f.multi_events_per_day, "must be >= 0");
  if (f.multi_events_per_day > 0 && (f.multi_event_nodes < 1 || f.multi_event_nodes > job.nodes))
    return Invalid("multi_event_nodes", f.multi_event_nodes, "must be in [1, nodes]");
  const std::pair<const char*, double> costs[] = {{"stall_s", c.stall_s},
                                                  {"protect_s", c.protect_s},
                                                  {"persist_s", c.persist_s},
                                                  {"relaunch_s", c.relaunch_s},
                                                  {"recover_local_s", c.recover_local_s},
                                                  {"recover_replica_s", c.recover_replica_s},
                                                  {"recover_decode_s", c.recover_decode_s},
                                                  {"recover_remote_s", c.recover_remote_s}};
  for (const auto& [name, v] : costs) {
    if (!NonNegative(v)) return Invalid(name, v, "must be a finite number >= 0");
  }
  if (!plan.remote_only) {
    if (c.protect_s < c.stall_s)
      return Invalid("protect_s", c.protect_s, "must be >= stall_s (" + Num(c.stall_s) + ")");
    if (c.persist_s < c.protect_s)
      return Invalid("persist_s", c.persist_s,
                     "must be >= protect_s (" + Num(c.protect_s) + "): persist follows commit");
  }
  if (plan.save_every_steps < 1)
    return Invalid("save_every_steps", plan.save_every_steps, "must be >= 1");
  if (plan.persist_every_saves < 1)
    return Invalid("persist_every_saves", plan.persist_every_saves, "must be >= 1");
  return plan.remote_only ? Status::Ok() : plan.scheme.ValidateFor(job.nodes);
}

CheckpointCosts EffectiveCosts(const CheckpointCosts& costs, const CheckpointPlan& plan) {
  CheckpointCosts c = costs;
  if (plan.remote_only) {
    c.stall_s = costs.persist_s;
    c.protect_s = costs.persist_s;
  }
  return c;
}

FailureRates RatesFor(const JobShape& job, const FailureProcess& f) {
  FailureRates r;
  const double n = job.nodes;
  if (f.process_mtbf_s != kNever) r.process = n / f.process_mtbf_s;
  if (f.node_mtbf_s != kNever) r.node = n / f.node_mtbf_s;
  if (f.rack_mtbf_s != kNever && f.nodes_per_rack > 0)
    r.rack = std::ceil(n / f.nodes_per_rack) / f.rack_mtbf_s;
  r.multi = f.multi_events_per_day / kSecondsPerDay;
  return r;
}

Result<GoodputEstimate> EvaluateGoodput(const JobShape& job, const FailureProcess& failures,
                                        const CheckpointCosts& costs,
                                        const ServeProbabilities& serve,
                                        const CheckpointPlan& plan) {
  MEMENTO_RETURN_IF_ERROR(ValidateInputs(job, failures, costs, plan));
  for (double q : {serve.node, serve.rack, serve.multi}) {
    if (!(q >= 0 && q <= 1)) return Invalid("serve probability", q, "must be in [0, 1]");
  }
  const CheckpointCosts c = EffectiveCosts(costs, plan);
  const int p = plan.remote_only ? 1 : plan.persist_every_saves;
  const double work = plan.save_every_steps * job.step_s;
  const double cycle = work + c.stall_s;
  const double e0 = work / cycle;

  GoodputEstimate est;
  est.save_cycle_s = cycle;
  const FailureRates rates = RatesFor(job, failures);
  const double lambda = rates.total();
  est.failures_per_day = lambda * kSecondsPerDay;
  if (lambda <= 0) {
    est.goodput = e0;
    est.stall_s_per_day = (1 - e0) * kSecondsPerDay;
    est.memory_served_fraction = 1;
    return est;
  }

  // The event mix: (share of failures, served by memory, recovery time).
  struct Outcome {
    double weight;
    bool served;
    double recover_s;
  };
  std::vector<Outcome> outcomes;
  const double remote_r = c.relaunch_s + c.recover_remote_s;
  auto add = [&](double rate, double q, double memory_r) {
    if (rate <= 0) return;
    if (plan.remote_only) q = 0;
    if (q > 0) outcomes.push_back({rate / lambda * q, true, c.relaunch_s + memory_r});
    if (q < 1) outcomes.push_back({rate / lambda * (1 - q), false, remote_r});
  };
  const double mem_r = RecoverFromMemory(c, plan.scheme);
  add(rates.process, 1.0, c.recover_local_s);
  add(rates.node, serve.node, mem_r);
  add(rates.rack, serve.rack, mem_r);
  add(rates.multi, serve.multi, mem_r);

  double served = 0;
  for (const Outcome& o : outcomes) served += o.served ? o.weight : 0;
  const double unserved_rate = lambda * (1 - served);
  est.memory_served_fraction = served;

  // Λ E[lost]: memory rollbacks restart the save phase at every run; remote rollbacks lose
  // the work since the last durable version, whose phase restarts only on remote rollbacks.
  const double loss_memory = ScaledLoss(lambda, lambda, cycle, c.protect_s - c.stall_s);
  const double loss_remote = ScaledLoss(lambda, unserved_rate, p * cycle, c.persist_s - c.stall_s);
  const double lambda_lost = served * loss_memory + (1 - served) * loss_remote;

  // Λ V: recoveries restarted by failures that arrive during them.
  double num = 0, den = 0;
  for (const Outcome& o : outcomes) {
    num += o.weight * -std::expm1(-lambda * o.recover_s);
    den += o.weight * std::exp(-lambda * o.recover_s);
  }
  const double lambda_v = num / den;

  const double kept = std::max(0.0, 1 - lambda_lost);  // per run, in units of 1/Λ
  const double renewal = 1 + lambda_v;
  est.goodput = e0 * kept / renewal;
  const double per_day = kSecondsPerDay / renewal;  // renewal durations (1/Λ) per day, × Λ
  est.stall_s_per_day = (1 - e0) * kept * per_day;
  est.lost_s_per_day = (1 - kept) * per_day;
  // With every recovery outlived by the next failure (e^{-λr} underflows)
  // Λ V is infinite: the day is all recovery, not inf x 0.
  est.recovery_s_per_day = kSecondsPerDay * (std::isinf(lambda_v) ? 1.0 : lambda_v / renewal);
  return est;
}

namespace {

// The best plan with p in [p_first, p_last] (p = 1 when remote-only).
Result<OptimalPlan> OptimizeOver(const JobShape& job, const FailureProcess& failures,
                                 const CheckpointCosts& costs, const ServeProbabilities& serve,
                                 const Scheme& scheme, bool remote_only, int max_save_every_steps,
                                 int p_first, int p_last) {
  if (max_save_every_steps < 1)
    return Invalid("max_save_every_steps", max_save_every_steps, "must be >= 1");
  CheckpointPlan plan{scheme, remote_only, 1, 1};
  MEMENTO_RETURN_IF_ERROR(ValidateInputs(job, failures, costs, plan));
  const CheckpointCosts c = EffectiveCosts(costs, plan);
  const double t = job.step_s;
  // No two protects in flight: k T + stall >= protect.
  const int k_min = static_cast<int>(std::min<double>(
      max_save_every_steps, std::max(1.0, std::ceil((c.protect_s - c.stall_s) / t - 1e-9))));

  auto eval = [&](int k, int p) -> double {
    CheckpointPlan cand{scheme, remote_only, k, p};
    auto e = EvaluateGoodput(job, failures, costs, serve, cand);
    return e.ok() ? e->goodput : -1;
  };
  // Golden-section search over log k in [lo, hi], then the integers around the optimum.
  auto best_k = [&](int lo, int hi, int p) -> std::pair<int, double> {
    double a = std::log(static_cast<double>(lo)), b = std::log(static_cast<double>(hi));
    auto g = [&](double x) {
      const int k = std::clamp(static_cast<int>(std::lround(std::exp(x))), lo, hi);
      return eval(k, p);
    };
    const double r = (std::sqrt(5.0) - 1) / 2;
    double x1 = b - r * (b - a), x2 = a + r * (b - a);
    double g1 = g(x1), g2 = g(x2);
    // Ties move up: where goodput is flat in k (no failures and no stall)
    // the longest interval is as good and costs the least.
    for (int i = 0; i < 80 && b - a > 1e-4; ++i) {
      if (g1 <= g2) {
        a = x1;
        x1 = x2;
        g1 = g2;
        x2 = a + r * (b - a);
        g2 = g(x2);
      } else {
        b = x2;
        x2 = x1;
        g2 = g1;
        x1 = b - r * (b - a);
        g1 = g(x1);
      }
    }
    const int mid = std::clamp(static_cast<int>(std::lround(std::exp((a + b) / 2))), lo, hi);
    std::pair<int, double> best{mid, eval(mid, p)};
    for (int k : {lo, hi, std::max(lo, mid - 2), std::max(lo, mid - 1), std::min(hi, mid + 1),
                  std::min(hi, mid + 2)}) {
      const double v = eval(k, p);
      if (v > best.second || (v == best.second && k > best.first)) best = {k, v};
    }
    return best;
  };

  // The best k for a persist interval p; -1 when no k satisfies the constraints.
  auto for_p = [&](int p) -> std::pair<int, double> {
    // The persist period p (k T + stall) must cover the persist time.
    const double need = (c.persist_s / p - c.stall_s) / t;
    const int k_lo =
        remote_only ? k_min
                    : std::max(k_min, static_cast<int>(std::clamp(std::ceil(need - 1e-9), 1.0,
                                                                  max_save_every_steps + 1.0)));
    if (k_lo > max_save_every_steps) return {0, -1};
    return best_k(k_lo, max_save_every_steps, p);
  };
  OptimalPlan best;
  double best_g = -1;
  auto consider = [&](int p) {
    const auto [k, g] = for_p(p);
    if (g > best_g) {
      best_g = g;
      best.plan = CheckpointPlan{scheme, remote_only, k, p};
    }
    return g;
  };
  const int p_min = remote_only ? 1 : p_first;
  const int p_max = remote_only ? 1 : p_last;
  // p on a geometric grid (ratio 1.1, every integer up to 10), then a golden-section search
  // over the integers between the best grid point's neighbours.
  std::vector<int> grid;
  for (double x = p_min; x <= p_max; x = std::max(x + 1, x * 1.1)) {
    grid.push_back(static_cast<int>(x));
  }
  if (grid.back() != p_max) grid.push_back(p_max);
  size_t best_i = 0;
  double grid_best = -2;
  for (size_t i = 0; i < grid.size(); ++i) {
    const double g = consider(grid[i]);
    if (g > grid_best) {
      grid_best = g;
      best_i = i;
    }
  }
  int lo = grid[best_i > 0 ? best_i - 1 : 0];
  int hi = grid[std::min(best_i + 1, grid.size() - 1)];
  while (hi - lo > 2) {
    const int m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
    if (consider(m1) < consider(m2)) {
      lo = m1;
    } else {
      hi = m2;
    }
  }
  for (int p = lo; p <= hi; ++p) consider(p);
  if (best_g < 0) return Status::InvalidArgument("no save interval satisfies the constraints");
  MEMENTO_ASSIGN_OR_RETURN(best.estimate, EvaluateGoodput(job, failures, costs, serve, best.plan));
  return best;
}

}  // namespace

Result<OptimalPlan> OptimizeIntervals(const JobShape& job, const FailureProcess& failures,
                                      const CheckpointCosts& costs, const ServeProbabilities& serve,
                                      const Scheme& scheme, bool remote_only,
                                      int max_save_every_steps, int max_persist_every_saves) {
  if (max_persist_every_saves < 1)
    return Invalid("max_persist_every_saves", max_persist_every_saves, "must be >= 1");
  return OptimizeOver(job, failures, costs, serve, scheme, remote_only, max_save_every_steps, 1,
                      max_persist_every_saves);
}

Result<OptimalPlan> OptimizeSaveInterval(const JobShape& job, const FailureProcess& failures,
                                         const CheckpointCosts& costs,
                                         const ServeProbabilities& serve, const Scheme& scheme,
                                         int persist_every_saves, int max_save_every_steps) {
  if (persist_every_saves < 1)
    return Invalid("persist_every_saves", persist_every_saves, "must be >= 1");
  return OptimizeOver(job, failures, costs, serve, scheme, false, max_save_every_steps,
                      persist_every_saves, persist_every_saves);
}

double YoungInterval(double checkpoint_s, double mtbf_s) {
  return std::sqrt(2 * checkpoint_s * mtbf_s);
}

double DalyInterval(double checkpoint_s, double mtbf_s) {
  return std::sqrt(2 * checkpoint_s * mtbf_s) - checkpoint_s;
}

double DalyGoodput(double tau_s, double checkpoint_s, double restart_s, double mtbf_s) {
  const double wall_per_work =
      mtbf_s * std::exp(restart_s / mtbf_s) * std::expm1((tau_s + checkpoint_s) / mtbf_s) / tau_s;
  return 1 / wall_per_work;
}

}  // namespace memento::placement
