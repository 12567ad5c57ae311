// Goodput model: the fraction of wall-clock time a training job spends on work it keeps,
// for a protection scheme, a save interval and a persist interval, under a failure process.
//
// The job: N nodes, one shard per node (S bytes), a training step of T seconds. A save is
// taken every k steps; it blocks training for `stall_s` (the snapshot), commits in memory
// `protect_s` after the save point (replicas / parity on peers), and every p-th save (by
// progress: versions whose step is a multiple of k*p) is durable on remote storage
// `persist_s` after its save point. A save cycle lasts L = k*T + stall_s of wall time.
//
// Failures (all Poisson, independent of each other):
//  * process failures: the training process dies, the node and its shared memory survive
//    (rate N / process_mtbf). Memory always serves: the local copy (`recover_local_s`).
//  * node failures: a node and its memory are lost (rate N / node_mtbf). Memory serves
//    with P(recoverable | 1 random node lost) of the scheme's layout.
//  * rack failures: every node of one rack is lost (rate racks / rack_mtbf).
//  * multi-node events: `multi_event_nodes` random nodes are lost at once (rate per day).
// After any failure the job is relaunched (`relaunch_s`) and rolls back: to the last
// version committed in memory when memory can serve (replica fetch or decode time), else
// to the last durable version (`recover_remote_s`). A failure during a recovery restarts
// it. Remote-only checkpointing (no copies in memory) writes every save synchronously:
// its stall is the persist time and every failure restores from remote storage.
//
// Closed form (EvaluateGoodput): renewal-reward over the runs between failures. With total
// failure rate Λ, a run lasts Exp(Λ); the work it keeps is the run minus the work rolled
// back, E[lost]; a recovery with restarts lasts V = E[(1-e^{-Λr})/Λ] / E[e^{-Λr}] over the
// recovery times r of the event mix (Daly's restart term). Goodput = e0 (1/Λ - E[lost]) /
// (1/Λ + V), e0 = kT/L. Rolling back to memory loses exactly 1/Λ - L e^{-Λδ}/(e^{ΛL}-1)
// (δ = protect_s - stall_s; the phase restarts with every run); rolling back to remote
// storage loses the same expression with period p*L, lag persist_s - stall_s and the rate
// of the events memory cannot serve (first order in that rate: the persist phase restarts
// only on those). For remote-only this is Daly's complete model, exactly:
// G = Λ k T / (e^{ΛR} (e^{Λ(kT+C)} - 1)). Without failures G = kT / (kT + stall_s).
// Cost: O(1) per evaluation once the probabilities are known.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <limits>
#include <string>

#include "memento/common/status.h"
#include "memento/placement/scheme.h"

namespace memento::placement {

inline constexpr double kNever = std::numeric_limits<double>::infinity();
inline constexpr double kSecondsPerDay = 86400.0;

struct JobShape {
  int nodes = 1;           // N >= 1
  double shard_bytes = 0;  // S per node (memory budget and cost scaling); > 0
  double step_s = 1;       // T > 0: one training step
};

// Failure process. An MTBF of kNever (the default) means "does not happen".
struct FailureProcess {
  double node_mtbf_s = kNever;      // per node: failures that lose the node and its memory
  double process_mtbf_s = kNever;   // per node: process failures, the node's memory survives
  double rack_mtbf_s = kNever;      // per rack: every node of the rack lost at once
  int nodes_per_rack = 0;           // rack size (needed when rack_mtbf_s is finite)
  double multi_events_per_day = 0;  // job-wide events that lose `multi_event_nodes` nodes
  int multi_event_nodes = 2;
};

// Measured costs at the job's N and S (seconds). Save-related lags count from the save
// point (the end of the k-th step): stall_s <= protect_s <= persist_s.
struct CheckpointCosts {
  double stall_s = 0;            // training blocked per save (snapshot copy)
  double protect_s = 0;          // until the version is committed in memory on peers
  double persist_s = 0;          // until the version is durable on remote storage
  double relaunch_s = 0;         // after any failure: reschedule, restart, rendezvous
  double recover_local_s = 0;    // restore from the node's own memory
  double recover_replica_s = 0;  // fetch a replica (and re-protect)
  double recover_decode_s = 0;   // decode lost shards (and re-protect)
  double recover_remote_s = 0;   // read the durable version from remote storage
};

// P(the last committed version can be rebuilt from memory) for each kind of event.
struct ServeProbabilities {
  double node = 0;   // one random node lost
  double rack = 0;   // one random rack lost
  double multi = 0;  // `multi_event_nodes` random nodes lost
};

// What is being evaluated.
struct CheckpointPlan {
  Scheme scheme = Scheme::None();
  bool remote_only = false;     // classic synchronous checkpointing to remote storage
  int save_every_steps = 1;     // k >= 1
  int persist_every_saves = 1;  // p >= 1 (remote_only: ignored, every save is durable)
};

struct GoodputEstimate {
  double goodput = 0;           // kept work / wall time, in [0, 1]
  double failures_per_day = 0;  // Λ * 86400
  double save_cycle_s = 0;      // L = k T + stall
  // Per day of wall time: stall_s_per_day + lost_s_per_day + recovery_s_per_day +
  // goodput * 86400 = 86400.
  double stall_s_per_day = 0;         // blocked in saves whose work is kept
  double lost_s_per_day = 0;          // work (and its stalls) rolled back and redone
  double recovery_s_per_day = 0;      // relaunch and restore, restarts included
  double memory_served_fraction = 0;  // of failures, the share memory serves
};

// Validates the inputs; InvalidArgument names the field and the value.
Status ValidateInputs(const JobShape& job, const FailureProcess& failures,
                      const CheckpointCosts& costs, const CheckpointPlan& plan);

// The costs as the plan sees them: remote-only replaces the stall and the commit lag by
// the persist time.
CheckpointCosts EffectiveCosts(const CheckpointCosts& costs, const CheckpointPlan& plan);

// Failure rates per second by kind (process, node, rack, multi) for N nodes.
struct FailureRates {
  double process = 0, node = 0, rack = 0, multi = 0;
  double total() const { return process + node + rack + multi; }
};
FailureRates RatesFor(const JobShape& job, const FailureProcess& failures);

// The closed form above. InvalidArgument on invalid inputs.
Result<GoodputEstimate> EvaluateGoodput(const JobShape& job, const FailureProcess& failures,
                                        const CheckpointCosts& costs,
                                        const ServeProbabilities& serve,
                                        const CheckpointPlan& plan);

// Save and persist intervals maximising the closed-form goodput, subject to a save cycle
// no shorter than the protect time (no two protects in flight) and a persist period
// p*L no shorter than the persist time. k is searched in [1, max_save_every_steps], p in
// [1, max_persist_every_saves] (golden-section searches: goodput is unimodal in each).
// Cost: O(log p_max * log k_max) closed-form evaluations.
struct OptimalPlan {
  CheckpointPlan plan;
  GoodputEstimate estimate;
};
Result<OptimalPlan> OptimizeIntervals(const JobShape& job, const FailureProcess& failures,
                                      const CheckpointCosts& costs, const ServeProbabilities& serve,
                                      const Scheme& scheme, bool remote_only,
                                      int max_save_every_steps = 1 << 22,
                                      int max_persist_every_saves = 4096);
// The save interval maximising goodput for a given persist interval (memory tiers in use,
// the same constraints); InvalidArgument when no k in [1, max_save_every_steps] meets them.
Result<OptimalPlan> OptimizeSaveInterval(const JobShape& job, const FailureProcess& failures,
                                         const CheckpointCosts& costs,
                                         const ServeProbabilities& serve, const Scheme& scheme,
                                         int persist_every_saves,
                                         int max_save_every_steps = 1 << 22);

// Classic first-order optimum of Young (1974): sqrt(2 C M), and Daly's (2006) first-order
// refinement sqrt(2 C M) - C, for a checkpoint cost C and a job MTBF M (seconds of compute
// between checkpoints).
double YoungInterval(double checkpoint_s, double mtbf_s);
double DalyInterval(double checkpoint_s, double mtbf_s);
// Daly's complete model: wall time per unit of work for compute interval tau, checkpoint
// cost C, restart R and job MTBF M: M e^{R/M} (e^{(tau+C)/M} - 1) / tau; its inverse is
// the goodput.
double DalyGoodput(double tau_s, double checkpoint_s, double restart_s, double mtbf_s);

}  // namespace memento::placement
