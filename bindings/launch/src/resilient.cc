#include "memento/launch/resilient.h"

#include <dirent.h>
#include <netdb.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/inotify.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "memento/runtime/log.h"

namespace memento::launch {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
// How often the announcement is read when inotify is not available, and how
// long a wait for it blocks between reads when it is (a safety net only).
constexpr auto kPoll = std::chrono::milliseconds(20);
constexpr auto kEventWait = std::chrono::milliseconds(1000);

// Wakes a waiter when a file is renamed into the launcher's folder (the
// launcher writes injob.json to a temporary name, then renames it), or when
// Wake() is called. Without inotify, Wait returns after kPoll.
class FolderEvents {
 public:
  explicit FolderEvents(const std::string& directory) {
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ >= 0 && inotify_add_watch(fd_, directory.c_str(), IN_MOVED_TO) < 0) {
      close(fd_);
      fd_ = -1;
    }
    if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  }
  ~FolderEvents() {
    for (int fd : {fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) close(fd);
    }
  }
  FolderEvents(const FolderEvents&) = delete;
  FolderEvents& operator=(const FolderEvents&) = delete;

  void Wait(std::chrono::milliseconds timeout) {
    if (fd_ < 0) timeout = std::min(timeout, std::chrono::milliseconds(kPoll));
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};  // negative fds are skipped
    if (poll(p, 2, static_cast<int>(timeout.count())) <= 0) return;
    char buf[4096];
    if (p[0].revents & POLLIN) {
      while (read(fd_, buf, sizeof(buf)) > 0) {
      }
    }
  }
  // Ends every Wait from now on at once (the wake byte stays unread).
  void Wake() {
    if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  }

 private:
  int fd_ = -1;
  int wake_[2] = {-1, -1};
};

std::string Env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : fallback;
}

int EnvInt(const char* name, int fallback) {
  const std::string v = Env(name);
  return v.empty() ? fallback : std::atoi(v.c_str());
}

void Info(const std::string& message) {
  runtime::Log(runtime::LogLevel::kInfo, "in-job recovery: " + message);
}

Membership Parse(const json& j) {
  Membership m;
  m.attempt = j.at("attempt").get<int>();
  m.master_addr = j.value("master_addr", std::string("127.0.0.1"));
  m.master_port = j.at("master_port").get<int>();
  m.world_size = j.at("world_size").get<int>();
  m.ranks_per_node = j.value("ranks_per_node", 1);
  m.fault = j.value("fault", std::string());
  if (!j.contains("ranks")) return m;
  const json& ranks = j.at("ranks");
  for (auto it = ranks.begin(); it != ranks.end(); ++it) {
    const json& place = it.value();
    m.ranks.push_back({std::stoi(it.key()), place.value("node", std::string()),
                       place.value("local_rank", 0), place.value("spare_pid", 0L)});
  }
  return m;
}

// Until a TCP server accepts at addr:port or `timeout_s` passed. torch's store
// client retries a refused connection only after a back-off of about half a
// second, and a rank of a new membership usually comes before rank 0 has its
// store up.
void WaitForStore(const std::string& addr, int port, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return;
  while (Clock::now() < end) {
    bool ok = false;
    for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
      close(fd);
    }
    if (ok) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  freeaddrinfo(res);
}

// Aborts this attempt's communication once the launcher announces a newer one.
class Watcher {
 public:
  Watcher(const MembershipFile& file, int attempt, std::map<int, std::string> before,
          std::function<void()> abort)
      : file_(file),
        attempt_(attempt),
        before_(std::move(before)),
        abort_(std::move(abort)),
        events_(file.directory()) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Watcher() { Stop(); }

  void Abort() {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (fired_) return;
    const int n = ShutdownConnectionsSince(before_);
    if (abort_) abort_();
    fired_ = true;
    Info("membership changed; " + std::to_string(n) + " connection(s) of attempt " +
         std::to_string(attempt_) + " shut down");
  }

  void Stop() {
    stopped_.store(true);
    events_.Wake();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    while (!stopped_.load()) {
      if (file_.NewerThan(attempt_).has_value()) {
        Abort();
        return;
      }
      events_.Wait(kEventWait);
    }
  }

  const MembershipFile& file_;
  const int attempt_;
  const std::map<int, std::string> before_;
  const std::function<void()> abort_;
  std::mutex abort_mu_;
  bool fired_ = false;
  std::atomic<bool> stopped_{false};
  FolderEvents events_;  // watched before the first read: no announcement slips between
  std::thread thread_;
};

}  // namespace

bool InJob() {
  return Env("MEMENTO_LAUNCH_RECOVERY") == "in-job" && !Env("MEMENTO_LAUNCH_DIR").empty();
}

MembershipFile::MembershipFile(std::string directory)
    : directory_(std::move(directory)), path_(directory_ + "/injob.json") {}

std::optional<Membership> MembershipFile::Read() const {
  std::ifstream in(path_);
  if (!in) return std::nullopt;
  try {
    return Parse(json::parse(in));
  } catch (const std::exception&) {
    return std::nullopt;  // the launcher replaces the file atomically: not written yet
  }
}

std::optional<Membership> MembershipFile::NewerThan(int attempt) const {
  std::optional<Membership> m = Read();
  if (m && m->attempt > attempt) return m;
  return std::nullopt;
}

std::optional<Membership> MembershipFile::WaitNewer(int attempt, double timeout_s) const {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  FolderEvents events(directory_);
  for (;;) {
    std::optional<Membership> m = NewerThan(attempt);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (m || left.count() <= 0) return m;
    events.Wait(std::min(left + std::chrono::milliseconds(1), kEventWait));
  }
}

void MembershipFile::NoteRaised(int attempt, int rank, const std::string& what) const {
  const std::string name = "raised.a" + std::to_string(attempt) + ".r" + std::to_string(rank);
  const std::string tmp = directory_ + "/." + name;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << what.substr(0, std::min(what.find('\n'), size_t{500})) << "\n";
    if (!out) return;
  }
  std::rename(tmp.c_str(), (directory_ + "/" + name).c_str());
}

std::pair<int, Membership> MembershipFile::WaitAssignment(long pid) const {
  FolderEvents events(directory_);
  for (;;) {
    if (std::optional<Membership> m = Read()) {
      for (const Membership::Place& p : m->ranks) {
        if (p.spare_pid == pid) return {p.rank, *m};
      }
    }
    events.Wait(kEventWait);
  }
}

void AdoptMembership(const Membership& m, int rank) {
  setenv("MASTER_ADDR", m.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(m.master_port).c_str(), 1);
  setenv("MEMENTO_LAUNCH_ATTEMPT", std::to_string(m.attempt).c_str(), 1);
  // memento's own transport keys its store entries by it.
  setenv("MEMENTO_LAUNCH_GENERATION", std::to_string(m.attempt).c_str(), 1);
  if (m.fault.empty()) {
    unsetenv("MEMENTO_LAUNCH_FAULT");
  } else {
    setenv("MEMENTO_LAUNCH_FAULT", m.fault.c_str(), 1);
  }
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");  // rank 0 serves the new store
  if (rank < 0) return;
  for (const Membership::Place& p : m.ranks) {
    if (p.rank != rank) continue;
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(m.world_size).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(p.local_rank).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(m.ranks_per_node).c_str(), 1);
    setenv("MEMENTO_NODE", p.node.c_str(), 1);
    unsetenv("MEMENTO_LAUNCH_SPARE");
    unsetenv("MEMENTO_LAUNCH_SPARE_PID");
  }
}

std::map<int, std::string> SocketInodes() {
  std::map<int, std::string> out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char link[64];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (std::string(link).rfind("socket:[", 0) == 0) out[std::atoi(e->d_name)] = link;
  }
  closedir(d);
  return out;
}

int ShutdownConnectionsSince(const std::map<int, std::string>& before) {
  int count = 0;
  for (const auto& [fd, link] : SocketInodes()) {
    auto it = before.find(fd);
    if (it != before.end() && it->second == link) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int type = 0, listening = 0;
    socklen_t ilen = sizeof(int);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) continue;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ilen) != 0 || type != SOCK_STREAM) continue;
    ilen = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen) != 0 || listening) continue;
    // The read side only: a blocked receive or wait then sees the end of the
    // stream at once, and gloo closes the pair itself (its peer sees that).
    // A write side shut down here would make gloo's next write fail with
    // EPIPE, which its asynchronous path takes as "try later": an unbound
    // send queued that way is never failed and blocks its collective for the
    // whole group timeout.
    if (shutdown(fd, SHUT_RD) == 0) ++count;  // fails when not connected (any more)
  }
  return count;
}

int Resilient(const std::function<int()>& train, const ResilientOptions& options) {
  if (!InJob()) return train();
  // A write to a connection of a lost rank (or one the watcher shut down) must
  // fail with EPIPE, not end this process (Python ignores SIGPIPE likewise).
  signal(SIGPIPE, SIG_IGN);
  const double wait_s = options.wait_s >= 0
                            ? options.wait_s
                            : std::atof(Env("MEMENTO_LAUNCH_INJOB_WAIT_S", "30").c_str());
  const MembershipFile file(Env("MEMENTO_LAUNCH_DIR"));
  if (Env("MEMENTO_LAUNCH_SPARE") == "1") {
    if (options.spare_warm_up) options.spare_warm_up();
    // The process the launcher started (a wrapper script's, when the command is one).
    const std::string started = Env("MEMENTO_LAUNCH_SPARE_PID");
    auto [rank, m] = file.WaitAssignment(started.empty() ? static_cast<long>(getpid())
                                                         : std::atol(started.c_str()));
    AdoptMembership(m, rank);
    Info("spare takes rank " + std::to_string(rank) + " (attempt " + std::to_string(m.attempt) +
         ")");
  } else if (Env("MEMENTO_LAUNCH_GENERATION").empty()) {
    setenv("MEMENTO_LAUNCH_GENERATION", Env("MEMENTO_LAUNCH_ATTEMPT", "0").c_str(), 1);
  }
  for (;;) {
    const int attempt = EnvInt("MEMENTO_LAUNCH_ATTEMPT", 0);
    std::optional<Membership> newer;
    std::exception_ptr error;
    int rc = 0;
    std::string failure;
    {
      Watcher watcher(file, attempt, SocketInodes(), options.abort);
      if (Env("RANK") != "0") {
        WaitForStore(Env("MASTER_ADDR", "127.0.0.1"), EnvInt("MASTER_PORT", 0), wait_s);
      }
      try {
        rc = train();
        if (rc == 0) return 0;
        failure = "exit code " + std::to_string(rc);
      } catch (const std::exception& e) {
        error = std::current_exception();
        const std::string what = e.what();
        failure = what.substr(0, std::min(what.find('\n'), size_t{200}));
      }
      // Whatever failed, the peers blocked with this rank learn it at once.
      watcher.Abort();
      file.NoteRaised(attempt, EnvInt("RANK", 0), failure);
      newer = file.WaitNewer(attempt, wait_s);
    }  // the watcher ends before the environment changes
    if (!newer) {
      if (error) std::rethrow_exception(error);
      return rc;
    }
    Info("attempt " + std::to_string(attempt) + " ended by " + failure);
    AdoptMembership(*newer);
  }
}

}  // namespace memento::launch
