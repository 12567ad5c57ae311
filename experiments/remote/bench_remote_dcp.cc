// bench_remote_dcp: what writing the remote tier as torch.distributed.checkpoint
// (MEMENTO_REMOTE_FORMAT=dcp) costs against memento's own rank files.
//
// One rank's state, GPT-like (--tensors float32 tensors of --mib MiB in all,
// weights N(0, 0.02)), is persisted as one version (rank file + manifest;
// for dcp also each tensor's torch.save archive and .metadata) through
// DirectoryRemoteStore, in both formats, interleaved, --reps times:
//   - through an emulated shared file system: writes paced to --gibps GiB/s,
//     a rank's fair share (bench_cluster gives each node 1/15 of its link);
//   - unpaced (the local --dir, a tmpfs by default): the formats' CPU cost alone;
//   - read back (ReadRankFile, every crc32c checked), unpaced.
// Prints one JSON object: median seconds and GiB/s of state per format and case,
// and the ratios dcp / memento of the throughputs (the target: >= 0.9 paced).
//
//   bench_remote_dcp [--mib 256] [--tensors 96] [--gibps 1] [--dir /dev/shm] [--reps 3]
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dcp/dcp_format.h"
#include "memento/runtime/directory_remote_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using memento::Status;
using memento::runtime::DirectoryRemoteStore;
using memento::runtime::RemoteEntrySource;
using memento::runtime::RemoteEntryTarget;
using memento::torch_adapter::dcp::DcpFormat;
using memento::torch_adapter::dcp::DcpTensor;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench_remote_dcp: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_remote_dcp: the dcp remote format's persist and read cost"};
  int mib = 256, tensors = 96, reps = 3;
  double gibps = 1.0;
  std::string dir = "/dev/shm";
  app.add_option("--mib", mib, "state size in MiB")->check(CLI::Range(1, 1 << 16));
  app.add_option("--tensors", tensors, "number of tensors")->check(CLI::Range(1, 100000));
  app.add_option("--gibps", gibps, "emulated file system write rate, GiB/s")
      ->check(CLI::Range(0.001, 1000.0));
  app.add_option("--dir", dir, "directory of the remote tier")->check(CLI::ExistingDirectory);
  app.add_option("--reps", reps, "repetitions (median)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  // The state: a few shapes of a transformer's layers (matrices of two widths,
  // vectors), scaled to --mib.
  const int64_t total = static_cast<int64_t>(mib) << 20;
  const int64_t per = total / tensors / 4;  // float32 elements per tensor
  std::vector<at::Tensor> state;
  std::vector<RemoteEntrySource> entries;
  std::map<std::string, DcpTensor> described;
  at::manual_seed(1);
  for (int i = 0; i < tensors; ++i) {
    const int64_t cols = i % 3 == 2 ? per : (i % 3 == 0 ? 1024 : 4096);
    const int64_t rows = std::max<int64_t>(1, per / cols);
    at::Tensor t = at::randn({rows, cols}) * 0.02;
    if (i % 3 == 2) t = t.reshape({rows * cols});
    const std::string name = "model.layers." + std::to_string(i / 3) + ".w" + std::to_string(i % 3);
    RemoteEntrySource e;
    e.name = name;
    e.data = t.data_ptr();
    e.bytes = t.numel() * 4;
    e.layout.dtype = "float32";
    e.layout.shape = t.sizes().vec();
    e.layout.global_shape = e.layout.shape;
    e.layout.offsets.assign(e.layout.shape.size(), 0);
    entries.push_back(e);
    described[name] = {DcpTensor::Kind::kWhole, at::kFloat, t.sizes().vec(), t.strides().vec()};
    state.push_back(std::move(t));
  }
  uint64_t state_bytes = 0;
  for (const auto& e : entries) state_bytes += e.bytes;
  auto format = std::make_shared<DcpFormat>(described, "__memento__");

  const std::string root = dir + "/bench_remote_dcp." + std::to_string(getpid());
  std::filesystem::create_directories(root);
  struct Case {
    const char* name;
    double rate;
  };
  const Case cases[] = {{"paced", gibps * (1ull << 30)}, {"unpaced", 0}};
  const char* formats[] = {"memento", "dcp"};
  std::map<std::string, std::vector<double>> times;
  std::map<std::string, uint64_t> file_bytes;
  uint64_t version = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (const Case& c : cases) {
      for (int k = 0; k < 2; ++k) {
        // Alternate which format goes first.
        const std::string f = formats[(k + rep) % 2];
        DirectoryRemoteStore::Options o;
        o.emulated_write_bytes_per_s = c.rate;
        if (f == "dcp") o.format = format;
        DirectoryRemoteStore store(root, "job-" + f, o);
        ++version;
        auto t0 = Clock::now();
        auto info = store.WriteRankFile(version, 0, entries, 1);
        Check(info.status(), "WriteRankFile");
        Check(store.WriteManifest(version, 1, {*info}, 1), "WriteManifest");
        times[f + "." + c.name] .push_back(Since(t0));
        file_bytes[f] = info->bytes;
        if (c.rate == 0) {
          std::vector<at::Tensor> back;
          std::vector<RemoteEntryTarget> targets;
          for (const auto& e : entries) {
            back.push_back(at::empty({static_cast<int64_t>(e.bytes)}, at::kByte));
            targets.push_back({e.name, back.back().data_ptr(), e.bytes});
          }
          t0 = Clock::now();
          Check(store.ReadRankFile(version, 0, targets), "ReadRankFile");
          times[f + ".read"].push_back(Since(t0));
        }
        Check(store.Prune(1), "Prune");
      }
    }
  }
  std::filesystem::remove_all(root);

  nlohmann::json out;
  out["state_bytes"] = state_bytes;
  out["tensors"] = tensors;
  out["emulated_gibps"] = gibps;
  out["reps"] = reps;
  const double gib = static_cast<double>(1ull << 30);
  for (const char* f : formats) {
    for (const char* c : {"paced", "unpaced", "read"}) {
      const double s = Median(times[std::string(f) + "." + c]);
      out[f][std::string(c) + "_s"] = s;
      out[f][std::string(c) + "_gibps"] = state_bytes / gib / s;
    }
    out[f]["file_bytes"] = file_bytes[f];
  }
  for (const char* c : {"paced", "unpaced", "read"}) {
    const std::string k = std::string(c) + "_s";
    out["ratio_dcp_over_memento"][c] =
        out["memento"][k].get<double>() / out["dcp"][k].get<double>();
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
