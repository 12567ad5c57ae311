#include "job_command.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

namespace memento::launch {

std::vector<std::vector<std::string>> JobCommands(const LaunchOptions& o,
                                                  const std::string& status_dir, int port) {
  const std::vector<std::string> rank_exec = {o.self_exe, "launch", "--rank-exec", status_dir,
                                              "--"};
  std::vector<std::vector<std::string>> out;
  if (o.launcher == "torchrun") {
    const int nodes = o.np / o.ranks_per_node;
    for (int k = 0; k < nodes; ++k) {
      std::vector<std::string> args = o.torchrun;
      args.insert(args.end(), {"--nnodes", std::to_string(nodes), "--node_rank",
                               std::to_string(k), "--nproc_per_node",
                               std::to_string(o.ranks_per_node), "--master_addr", "127.0.0.1",
                               "--master_port", std::to_string(port), "--max_restarts", "0",
                               "--monitor_interval", "0.1", "--rdzv_id", o.job, "--no_python"});
      args.insert(args.end(), rank_exec.begin(), rank_exec.end());
      args.insert(args.end(), o.command.begin(), o.command.end());
      out.push_back(std::move(args));
    }
    return out;
  }
  std::vector<std::string> args = o.mpirun;
  if (geteuid() == 0 && std::find(args.begin(), args.end(), "--allow-run-as-root") == args.end()) {
    args.push_back("--allow-run-as-root");
  }
  auto has = [&](const char* flag) {
    return std::find(args.begin(), args.end(), flag) != args.end();
  };
  int np = o.np;
  if (o.launcher == "ulfm") {
    // ULFM: a lost rank is reported to the others, which repair the world;
    // the spares are the last ranks of the same job.
    if (!has("--with-ft")) args.insert(args.end(), {"--with-ft", "ulfm"});
    // Virtual nodes put more ranks than cores on a machine, as the
    // OMPI_MCA_ variable does for Open MPI 4's mpirun (SetJobEnv); PRRTE,
    // Open MPI 5's, takes only the flag.
    if (!has("--oversubscribe") && !has("--map-by")) args.push_back("--oversubscribe");
    np += o.spares;
  } else if (o.recovery == "in-job" && !has("--enable-recovery")) {
    // In-job recovery: the survivors outlive a lost rank (Open MPI ends the
    // whole job otherwise).
    args.push_back("--enable-recovery");
  }
  args.insert(args.end(), {"-np", std::to_string(np)});
  args.insert(args.end(), rank_exec.begin(), rank_exec.end());
  args.insert(args.end(), o.command.begin(), o.command.end());
  out.push_back(std::move(args));
  return out;
}

namespace {

// Whether a TCP listener could bind `port` on every address now.
bool Bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

int EphemeralPortsFrom() {
  int lo = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo;
  return lo;
}

int FreePort() {
  // Below the kernel's ephemeral range: a port there is only ever taken by an
  // explicit bind, so the sockets the job opens meanwhile (gloo binds its
  // listeners and connections to ephemeral ports, many at once during an
  // in-job recovery) cannot take it before rank 0 binds it. A port handed out
  // by bind(0) could be, and the ranks then met a stranger's socket there.
  const int first = 10000, last = EphemeralPortsFrom() - 1;
  if (last - first >= 1000) {
    std::mt19937 rng(std::random_device{}());
    for (int i = 0; i < 200; ++i) {
      const int port = first + static_cast<int>(rng() % static_cast<unsigned>(last - first + 1));
      if (Bindable(port)) return port;
    }
  }
  // A machine whose ephemeral range starts low: the kernel's pick.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

namespace {

const char* FirstSet(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v != nullptr && *v != '\0') return v;
  }
  return nullptr;
}

}  // namespace

int RankExec(const std::string& dir, const std::vector<std::string>& command) {
  // mpirun's rank, else torchrun's.
  const char* rank_env = FirstSet({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK"});
  if (rank_env == nullptr || command.empty()) {
    std::fprintf(stderr,
                 "memento launch --rank-exec: no OMPI_COMM_WORLD_RANK or RANK (run under mpirun "
                 "or torchrun)\n");
    return 2;
  }
  const int rank = std::atoi(rank_env);
  // Under mpirun, torch.distributed's env:// variables from Open MPI's, so
  // that one script runs under either launcher (those the user set stay).
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE"); size != nullptr) {
    setenv("RANK", rank_env, 0);
    setenv("WORLD_SIZE", size, 0);
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) setenv("LOCAL_RANK", v, 0);
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
      setenv("LOCAL_WORLD_SIZE", v, 0);
    }
    if (const char* v = std::getenv("MEMENTO_LAUNCH_MASTER_PORT")) {
      setenv("MASTER_ADDR", "127.0.0.1", 0);
      setenv("MASTER_PORT", v, 0);
    }
  }
  const char* per_node_env = std::getenv("MEMENTO_RANKS_PER_NODE");
  const int per_node =
      per_node_env != nullptr && std::atoi(per_node_env) > 0 ? std::atoi(per_node_env) : 1;
  const char* attempt = std::getenv("MEMENTO_LAUNCH_ATTEMPT");
  std::string line;
  {
    std::ifstream nodes(dir + "/nodes");  // closed before the exec
    for (int k = 0; k <= rank / per_node && std::getline(nodes, line); ++k) {
    }
  }
  if (!line.empty()) setenv("MEMENTO_NODE", line.c_str(), 1);
  {
    std::ofstream pid(dir + "/pid.a" + std::string(attempt == nullptr ? "0" : attempt) + ".r" +
                      std::to_string(rank));
    pid << getpid() << "\n";
  }
  // The rank leads a process group of its own (Open MPI's ranks do already), so
  // that a node loss the launcher injects takes every process of the rank: a
  // wrapper script's program that it did not exec, its data loader workers.
  if (getpgrp() != getpid()) setpgid(0, 0);
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "memento launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  return 127;
}

}  // namespace memento::launch
