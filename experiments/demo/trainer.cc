// The demo: a small GPT-style character language model trained
// data-parallel, checkpointed with memento every step.
//
// Parallelism (ZeRO-1 style): every rank holds the full parameters for the
// forward/backward pass; the flat gradient is reduce-scattered (averaged),
// and each rank owns one slice of the parameters and of the Adam moments,
// updates it, and allgathers the parameters. A rank's checkpoint shard is its
// slice: parameters, Adam m and v, and the step. Batches are a pure function
// of (seed, step, rank) and there is no dropout, so the run is deterministic:
// the same seed gives bit-identical state on every run, with or without
// failures and restores in between.
//
// `--baseline-remote DIR` replaces memento with the usual synchronous
// checkpoint to a directory (every rank writes its slice, fsync, barrier).
#include "trainer.h"

#include <fcntl.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "checkpoint_glue.h"
#include "corpus.h"
#include "memento/runtime/restore_report.h"

namespace memento::demo {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint64_t Fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

void AddArgs(CLI::App& app, Args& a) {
  // Bounds that keep a typo from wrapping around (an unsigned --steps -3) or from
  // reaching libtorch as a shape it crashes on (--dim -4, --heads 0).
  app.add_option("--steps", a.steps, "training steps (default 40)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--seed", a.seed, "seed of the initial weights and the batches (default 1)");
  app.add_option("--dim", a.dim, "embedding width (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--heads", a.heads, "attention heads (default 4)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 10));
  app.add_option("--blocks", a.blocks, "transformer blocks (default 2)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 10));
  app.add_option("--context", a.context, "tokens per sequence (default 32)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--batch", a.batch, "sequences per rank and step (default 8)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--lr", a.lr, "Adam learning rate (default 3e-3)");
  app.add_option("--ckpt-every", a.ckpt_every, "checkpoint every K steps (default 1)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--out", a.out, "rank 0 writes the final parameters (raw float32) here");
  app.add_option("--hash-log", a.hash_log, "rank 0 appends 'step state-hash' per step here");
  app.add_option("--baseline-remote", a.baseline_remote,
                 "no memento: checkpoint synchronously to this directory");
  app.add_option("--pids", a.pids, "every rank appends 'rank pid attempt' here when it starts");
  app.add_flag("--quiet", a.quiet, "no per-step lines");
}

std::string CheckArgs(const Args& a) {
  if (!(a.lr > 0 && std::isfinite(a.lr))) {
    char lr[32];
    std::snprintf(lr, sizeof(lr), "%g", a.lr);
    return std::string("--lr ") + lr + " must be a positive, finite learning rate";
  }
  if (a.dim % a.heads != 0) {
    return "--dim " + std::to_string(a.dim) + " must be a multiple of --heads " +
           std::to_string(a.heads);
  }
  return "";
}

Trainer::Trainer(const Args& args, Collectives& comm, launch::JobReporter reporter,
                 ConnectFn connect)
    : a_(args),
      comm_(comm),
      rank_(comm.rank()),
      size_(comm.size()),
      reporter_(std::move(reporter)),
      connect_(std::move(connect)) {}

Trainer::~Trainer() = default;

void Trainer::Build() {
  const std::string text = GenerateCorpus(7, 96 << 10);
  std::map<char, int64_t> ids;
  for (char c : text) ids.emplace(c, 0);
  for (auto& [c, id] : ids) id = vocab_++;
  for (char c : text) data_.push_back(ids[c]);

  torch::manual_seed(a_.seed);
  GptOptions o;
  o.vocab = vocab_;
  o.context = a_.context;
  o.dim = a_.dim;
  o.heads = a_.heads;
  o.blocks = a_.blocks;
  model_ = Gpt(o);
  for (auto& p : model_->parameters()) {
    params_.push_back(p);
    total_ += p.numel();
  }
  chunk_ = (total_ + size_ - 1) / size_;
  flat_ = torch::zeros({chunk_ * size_});
  int64_t off = 0;
  for (auto& p : params_) {
    torch::NoGradGuard guard;
    flat_.narrow(0, off, p.numel()).copy_(p.reshape({-1}));
    p.set_data(flat_.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
  grad_flat_ = torch::zeros({chunk_ * size_});
  grad_scratch_ = torch::zeros({chunk_ * size_});
  grad_slice_ = torch::zeros({chunk_});
  slice_ = flat_.narrow(0, rank_ * chunk_, chunk_).clone();
  m_ = torch::zeros({chunk_});
  v_ = torch::zeros({chunk_});
  meta_ = torch::zeros({4}, torch::kLong);
  meta_[1] = static_cast<int64_t>(a_.seed);
}

std::string Trainer::StateHash() const {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : Shard()) h = Fnv1a(t.data_ptr(), t.nbytes(), h);
  std::vector<uint64_t> all(size_);
  comm_.AllgatherU64(h, all.data());
  return Hex(Fnv1a(all.data(), all.size() * sizeof(uint64_t)));
}

double Trainer::TrainStep(uint64_t step) {
  const int64_t b = a_.batch, t = a_.context;
  std::mt19937_64 rng(a_.seed * 1000003ull + step * 8191ull + static_cast<uint64_t>(rank_));
  torch::Tensor x = torch::empty({b, t}, torch::kLong), y = torch::empty({b, t}, torch::kLong);
  auto xa = x.accessor<int64_t, 2>();
  auto ya = y.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const size_t off = rng() % (data_.size() - t - 1);
    for (int64_t j = 0; j < t; ++j) {
      xa[i][j] = data_[off + j];
      ya[i][j] = data_[off + j + 1];
    }
  }
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
  torch::Tensor logits = model_->forward(x);
  torch::Tensor loss =
      torch::nn::functional::cross_entropy(logits.view({-1, vocab_}), y.view({-1}));
  loss.backward();
  int64_t off = 0;
  grad_flat_.zero_();
  for (auto& p : params_) {
    grad_flat_.narrow(0, off, p.numel()).copy_(p.grad().reshape({-1}));
    off += p.numel();
  }
  comm_.ReduceScatterSum(grad_flat_, grad_scratch_, grad_slice_);
  grad_slice_.div_(static_cast<double>(size_));
  return comm_.AllreduceSum(loss.item<double>()) / size_;
}

void Trainer::AdamUpdate(uint64_t step) {
  torch::NoGradGuard guard;
  const double b1 = 0.9, b2 = 0.99, eps = 1e-8;
  m_.mul_(b1).add_(grad_slice_, 1 - b1);
  v_.mul_(b2).addcmul_(grad_slice_, grad_slice_, 1 - b2);
  const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(step));
  slice_.addcdiv_(m_, (v_ / bc2).sqrt_().add_(eps), -a_.lr / bc1);
  meta_[0] = static_cast<int64_t>(step);
}

Status Trainer::BaselineSave(uint64_t step) {
  namespace fs = std::filesystem;
  const std::string file =
      a_.baseline_remote + "/step" + std::to_string(step) + ".r" + std::to_string(rank_);
  const int fd = ::open((file + ".tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Status::IoError("cannot write " + file);
  for (const auto& [name, t] : Shard()) {
    if (::write(fd, t.data_ptr(), t.nbytes()) != static_cast<ssize_t>(t.nbytes())) {
      ::close(fd);
      return Status::IoError("short write to " + file);
    }
  }
  ::fsync(fd);
  ::close(fd);
  std::error_code ec;
  fs::rename(file + ".tmp", file, ec);
  comm_.Barrier();  // every rank's file is durable
  if (rank_ == 0) {
    std::ofstream(a_.baseline_remote + "/LATEST.tmp") << step << "\n";
    fs::rename(a_.baseline_remote + "/LATEST.tmp", a_.baseline_remote + "/LATEST", ec);
  }
  comm_.Barrier();
  if (step > static_cast<uint64_t>(a_.ckpt_every)) {
    fs::remove(a_.baseline_remote + "/step" + std::to_string(step - a_.ckpt_every) + ".r" +
                   std::to_string(rank_),
               ec);
  }
  return Status::Ok();
}

uint64_t Trainer::BaselineRestore() {
  uint64_t latest = 0;
  std::ifstream(a_.baseline_remote + "/LATEST") >> latest;
  if (latest == 0) return 0;
  std::ifstream in(
      a_.baseline_remote + "/step" + std::to_string(latest) + ".r" + std::to_string(rank_),
      std::ios::binary);
  for (const auto& [name, t] : Shard()) {
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  }
  return in ? latest : 0;
}

// Baseline: the newest step every rank has on the remote directory (the
// initial state when there is none).
void Trainer::ResumeBaseline(uint64_t* start) {
  std::filesystem::create_directories(a_.baseline_remote);
  reporter_.RestoreBegin();
  const double t0 = launch::JobReporter::Now();
  const uint64_t agreed = comm_.AllreduceMin(BaselineRestore());
  *start = agreed;
  if (agreed == 0) slice_.copy_(flat_.narrow(0, rank_ * chunk_, chunk_));
  runtime::RestoreReport report;
  report.version = agreed;
  for (const auto& [name, t] : Shard()) {
    report.entries.push_back({name, t.nbytes(), 0, runtime::RestoreSource::kRemote});
  }
  const std::string hash = StateHash();
  if (agreed > 0) {
    reporter_.Restored(report, t0, launch::JobReporter::Now(), hash);
  } else {
    reporter_.Restored(Status::NotFound("nothing to restore"), t0, launch::JobReporter::Now(),
                       hash);
  }
}

// memento: the checkpointer over the shard, then the newest version it can
// rebuild. Returns 0, or the exit code (2 bad settings, 1 no checkpointer,
// 3 the restore failed).
int Trainer::ResumeMemento(uint64_t* start) {
  auto connection = connect_();
  if (!connection.ok()) {
    std::fprintf(stderr, "%s\n", connection.status().ToString().c_str());
    return connection.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  auto created = CreateCheckpointer(Shard(), reporter_.Hooks(), std::move(connection->config),
                                    std::move(connection->transport));
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return created.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  ck_ = std::move(created).value();
  reporter_.RestoreBegin();
  const double t0 = launch::JobReporter::Now();
  auto restored = ck_->Restore();
  const double t1 = launch::JobReporter::Now();
  if (!restored.ok()) {
    reporter_.Restored(restored.status(), t0, t1, "");
    std::fprintf(stderr, "rank %d: restore failed: %s\n", rank_,
                 restored.status().ToString().c_str());
    return 3;
  }
  if (restored->has_value()) {
    *start = (*restored)->step;
    GatherParams();
    reporter_.Restored((*restored)->report, t0, t1, StateHash());
  } else {
    reporter_.Restored(Status::NotFound("nothing to restore"), t0, t1, StateHash());
  }
  if (rank_ == 0 && !a_.quiet) {
    std::printf("%s\n", restored->has_value() ? (*restored)->report.ToString().c_str()
                                              : "fresh start (nothing to restore)");
  }
  return 0;
}

// Steps start+1 .. a_.steps, checkpointing every a_.ckpt_every steps and at
// the last. Returns 0, or 1 when a checkpoint failed.
int Trainer::TrainLoop(uint64_t start, LoopStats* stats) {
  std::unique_ptr<std::ofstream> hash_log;
  if (!a_.hash_log.empty() && rank_ == 0) {
    hash_log = std::make_unique<std::ofstream>(a_.hash_log, std::ios::app);
  }
  if (!a_.hash_log.empty() && start == 0) {
    const std::string h = StateHash();
    if (hash_log) *hash_log << 0 << " " << h << "\n";
  }
  for (uint64_t step = start + 1; step <= a_.steps; ++step) {
    const auto t0 = Clock::now();
    const double loss = TrainStep(step);
    double stall = 0;
    const bool save = step % static_cast<uint64_t>(a_.ckpt_every) == 0 || step == a_.steps;
    if (ck_) {
      const auto w0 = Clock::now();
      if (Status s = ck_->WaitSnapshot(); !s.ok()) {
        std::fprintf(stderr, "rank %d: snapshot of the previous checkpoint failed: %s\n", rank_,
                     s.ToString().c_str());
      }
      stall += Seconds(w0, Clock::now());
    }
    AdamUpdate(step);
    if (save) {
      const auto s0 = Clock::now();
      Status s = ck_ ? ck_->Save(step) : BaselineSave(step);
      stall += Seconds(s0, Clock::now());
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: checkpoint of step %llu failed: %s\n", rank_,
                     static_cast<unsigned long long>(step), s.ToString().c_str());
        return 1;
      }
    }
    GatherParams();
    const double step_s = Seconds(t0, Clock::now());
    stats->step_sum += step_s;
    stats->stall_sum += stall;
    ++stats->counted;
    reporter_.Step(step, loss, step_s, stall);
    if (!a_.hash_log.empty()) {
      const std::string h = StateHash();
      if (hash_log) *hash_log << step << " " << h << std::endl;
    }
    if (rank_ == 0 && !a_.quiet) {
      std::printf("step %llu/%llu loss %.4f step %.4f s checkpoint stall %.2f ms\n",
                  static_cast<unsigned long long>(step), static_cast<unsigned long long>(a_.steps),
                  loss, step_s, stall * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}

// The end: the last checkpoint (and persist) complete, the final state hash
// reported and (rank 0) printed, the parameters written to --out.
int Trainer::Finish(const LoopStats& stats) {
  if (ck_) {
    Status w = ck_->Wait(), p = ck_->WaitPersist();
    if (!w.ok() || !p.ok()) {
      std::fprintf(stderr, "rank %d: last checkpoint: %s; persist: %s\n", rank_,
                   w.ToString().c_str(), p.ToString().c_str());
      return 1;
    }
  }
  const std::string hash = StateHash();
  if (rank_ == 0) {
    if (!a_.out.empty()) {
      std::ofstream out(a_.out, std::ios::binary | std::ios::trunc);
      out.write(static_cast<const char*>(flat_.data_ptr()),
                static_cast<std::streamsize>(flat_.nbytes()));
    }
    if (!a_.quiet) {
      const double n = stats.counted ? static_cast<double>(stats.counted) : 1.0;
      std::printf(
          "done: step %llu, state %s, mean step %.4f s, mean checkpoint stall %.2f ms "
          "(%llu steps this launch)\n",
          static_cast<unsigned long long>(a_.steps), hash.c_str(), stats.step_sum / n,
          stats.stall_sum / n * 1e3, static_cast<unsigned long long>(stats.counted));
    }
  }
  reporter_.Done(a_.steps, hash);
  ck_.reset();
  return 0;
}

int Trainer::Run() {
  at::set_num_threads(1);
  Build();
  if (rank_ == 0 && !a_.quiet) {
    std::printf(
        "memento_demo: %d ranks, %lld parameters (%lld per rank slice), vocab %lld, "
        "%llu steps\n",
        size_, static_cast<long long>(total_), static_cast<long long>(chunk_),
        static_cast<long long>(vocab_), static_cast<unsigned long long>(a_.steps));
  }
  reporter_.Start(a_.steps);
  uint64_t start = 0;
  if (a_.baseline_remote.empty()) {
    if (int rc = ResumeMemento(&start); rc != 0) return rc;
  } else {
    ResumeBaseline(&start);
  }
  LoopStats stats;
  if (int rc = TrainLoop(start, &stats); rc != 0) return rc;
  return Finish(stats);
}

void RecordProcess(const std::string& path, int rank, int generation) {
  if (path.empty()) return;
  const char* attempt = std::getenv("MEMENTO_LAUNCH_ATTEMPT");
  std::ofstream(path, std::ios::app)
      << rank << " " << getpid() << " "
      << (attempt != nullptr ? std::atoi(attempt) : 0) + generation << std::endl;
}

}  // namespace memento::demo
