// bench_ulfm_watch: what UlfmWorld's failure watcher costs a training step.
//
// Under `mpirun --with-ft ulfm -np N`, every working rank runs steps of a
// fixed computation followed by an allreduce over the working communicator
// (a data-parallel step in miniature), with no watcher and with the watcher
// polling every P microseconds (UlfmWorld::WatchForFailures, as RunResilient
// runs it during training). The modes alternate within each repetition, in
// a rotating order, so that every ratio compares runs of the same minutes.
//
//   bench_ulfm_watch [--steps 200] [--compute-us 2000] [--bytes 1048576]
//                    [--polls 1000,5000] [--reps 5]
//
// Prints, per mode, the median step time over the repetitions (the slowest
// rank's mean of each repetition) and its ratio to the run without watcher,
// and the CPU time per step of all ranks together (getrusage: the training
// thread, MPI's progress and the watcher). Last, the watcher's own CPU use:
// each rank sleeps --idle-s with it running (and without), and the CPU time
// the process used meanwhile, per second, is what it takes from training.
#include <mpi.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "memento/runtime/config.h"
#include "memento/runtime/ulfm_world.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Work that keeps one core busy for a while and cannot be optimized away.
float Compute(std::vector<float>* v, long rounds) {
  float acc = 0;
  for (long r = 0; r < rounds; ++r) {
    for (float& x : *v) x = x * 0.999f + 0.001f;
    acc += (*v)[static_cast<size_t>(r) % v->size()];
  }
  return acc;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double Median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 200, compute_us = 2000, reps = 5;
  double idle_s = 2;
  long bytes = 1 << 20;
  std::vector<int> polls = {1000, 5000};
  CLI::App app{"bench_ulfm_watch: the failure watcher's cost per training step"};
  app.add_option("--steps", steps, "steps per run (default 200)")->check(CLI::PositiveNumber);
  app.add_option("--compute-us", compute_us, "computation per step, microseconds (default 2000)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bytes", bytes, "allreduce size per step (default 1 MiB)")
      ->check(CLI::PositiveNumber);
  app.add_option("--polls", polls, "watcher poll intervals to measure, microseconds")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "repetitions of every mode (default 5)")
      ->check(CLI::PositiveNumber);
  app.add_option("--idle-s", idle_s, "seconds per mode of the idle CPU measurement (default 2)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  int level = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  // No rank fails here: the repair timeout is MEMENTO_TIMEOUT_S's default.
  auto world =
      memento::runtime::UlfmWorld::Create(MPI_COMM_WORLD, 0, memento::runtime::Config().timeout());
  if (!world.ok()) {
    std::fprintf(stderr, "bench_ulfm_watch: %s\n", world.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  memento::runtime::UlfmWorld& w = **world;
  const MPI_Comm comm = w.comm();
  const int rank = w.rank();

  // Rounds of Compute() that take --compute-us on rank 0, used by every rank.
  std::vector<float> work(4096, 1.0f);
  long rounds = 0;
  if (rank == 0 && compute_us > 0) {
    volatile float warm = Compute(&work, 2000);  // caches and clocks up first
    (void)warm;
    const auto t0 = Clock::now();
    volatile float sink = Compute(&work, 2000);
    (void)sink;
    const double per_round = Seconds(t0, Clock::now()) / 2000;
    rounds = std::max(1L, std::lround(compute_us * 1e-6 / per_round));
  }
  MPI_Bcast(&rounds, 1, MPI_LONG, 0, comm);

  std::vector<float> grad(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
  std::vector<int> modes = {0};  // 0: no watcher
  modes.insert(modes.end(), polls.begin(), polls.end());
  std::vector<std::vector<double>> step_s(modes.size()), cpu_s(modes.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t i = 0; i < modes.size(); ++i) {
      const size_t m = (i + static_cast<size_t>(rep)) % modes.size();
      if (modes[m] > 0) {
        w.WatchForFailures([] { std::fprintf(stderr, "bench_ulfm_watch: a process failed\n"); },
                           std::chrono::microseconds(modes[m]));
      }
      MPI_Barrier(comm);
      const auto t0 = Clock::now();
      const double c0 = CpuSeconds();
      for (int s = 0; s < steps; ++s) {
        volatile float sink = Compute(&work, rounds);
        (void)sink;
        MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(grad.size()), MPI_FLOAT, MPI_SUM,
                      comm);
      }
      double mean = Seconds(t0, Clock::now()) / steps, slowest = 0;
      double cpu = (CpuSeconds() - c0) / steps, all_cpu = 0;
      w.StopWatching();
      MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
      MPI_Allreduce(&cpu, &all_cpu, 1, MPI_DOUBLE, MPI_SUM, comm);
      step_s[m].push_back(slowest);
      cpu_s[m].push_back(all_cpu);
    }
  }
  // The watcher alone: CPU milliseconds per second while the rank sleeps.
  std::vector<double> idle_cpu(modes.size());
  for (size_t m = 0; m < modes.size(); ++m) {
    if (modes[m] > 0) w.WatchForFailures([] {}, std::chrono::microseconds(modes[m]));
    MPI_Barrier(comm);
    const double c0 = CpuSeconds();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
    double cpu = (CpuSeconds() - c0) / idle_s, mean = 0;
    w.StopWatching();
    MPI_Allreduce(&cpu, &mean, 1, MPI_DOUBLE, MPI_SUM, comm);
    idle_cpu[m] = mean / w.size();
  }
  if (rank == 0) {
    std::printf(
        "bench_ulfm_watch: %d ranks, %d steps of %d us computation + allreduce of %ld B, "
        "%d repetitions\n",
        w.size(), steps, compute_us, bytes, reps);
    std::printf("%-16s %10s %10s %8s %12s %14s\n", "watcher", "step ms", "spread ms", "÷ none",
                "CPU ms/step", "CPU - none ms");
    const double base = Median(step_s[0]);
    for (size_t m = 0; m < modes.size(); ++m) {
      const auto [lo, hi] = std::minmax_element(step_s[m].begin(), step_s[m].end());
      const std::string name =
          modes[m] == 0 ? std::string("none") : "poll " + std::to_string(modes[m]) + " us";
      std::printf("%-16s %10.3f %10.3f %8.3f %12.3f %14.3f\n", name.c_str(),
                  Median(step_s[m]) * 1e3, (*hi - *lo) * 1e3, Median(step_s[m]) / base,
                  Median(cpu_s[m]) * 1e3, (Median(cpu_s[m]) - Median(cpu_s[0])) * 1e3);
    }
    std::printf("idle rank, %.1f s each: CPU ms per second (mean over ranks)\n", idle_s);
    for (size_t m = 0; m < modes.size(); ++m) {
      const std::string name =
          modes[m] == 0 ? std::string("none") : "poll " + std::to_string(modes[m]) + " us";
      std::printf("%-16s %10.2f\n", name.c_str(), idle_cpu[m] * 1e3);
    }
  }
  (void)w.Finish();
  world->reset();
  return memento::runtime::FinalizeWithin(std::chrono::seconds(10), 0);
}
