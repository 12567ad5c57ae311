#include "memento/runtime/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "memento/erasure/crc32c.h"
#include "memento/placement/scheme.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/shm_segment.h"

extern char** environ;

namespace memento::runtime {
namespace {

constexpr char kJob[] = "MEMENTO_JOB";
constexpr char kNode[] = "MEMENTO_NODE";
constexpr char kRanksPerNode[] = "MEMENTO_RANKS_PER_NODE";
constexpr char kScheme[] = "MEMENTO_SCHEME";
constexpr char kSlots[] = "MEMENTO_SLOTS";
constexpr char kRemote[] = "MEMENTO_REMOTE";
constexpr char kPersistEvery[] = "MEMENTO_PERSIST_EVERY";
constexpr char kRemoteFormat[] = "MEMENTO_REMOTE_FORMAT";
constexpr char kRestoreFrom[] = "MEMENTO_RESTORE_FROM";
constexpr char kPersistKeep[] = "MEMENTO_PERSIST_KEEP";
constexpr char kLog[] = "MEMENTO_LOG";
constexpr char kChunkBytes[] = "MEMENTO_CHUNK_BYTES";
constexpr char kThreads[] = "MEMENTO_THREADS";
constexpr char kTimeout[] = "MEMENTO_TIMEOUT_S";
constexpr char kStale[] = "MEMENTO_STALE";
constexpr char kElastic[] = "MEMENTO_ELASTIC";
constexpr char kBackgroundReprotect[] = "MEMENTO_BACKGROUND_REPROTECT";
constexpr char kInterval[] = "MEMENTO_INTERVAL";
constexpr char kNodeMtbf[] = "MEMENTO_NODE_MTBF_H";
constexpr char kShmDir[] = "MEMENTO_SHM_DIR";
constexpr char kResumeFinished[] = "MEMENTO_RESUME_FINISHED";
constexpr char kKeepFinished[] = "MEMENTO_KEEP_FINISHED";
constexpr char kTransportDevice[] = "MEMENTO_TRANSPORT_DEVICE";
constexpr char kDeviceCopy[] = "MEMENTO_DEVICE_COPY";
constexpr char kIntervalForms[] = "auto or a positive integer (save every N-th step)";
constexpr char kNodeMtbfForms[] = "hours > 0, a decimal number such as 8760 or 0.5";
// Not a Config field: "1" turns unknown MEMENTO_* variables from an error into
// a warning.
constexpr char kAllowUnknown[] = "MEMENTO_ALLOW_UNKNOWN";
constexpr char kTimeoutForms[] = "seconds in [0.001, 86400], e.g. 300 or 0.5";

// MEMENTO_* names owned by other tools, never errors: the scripts' settings
// (scripts/setup, test-install, ...: a user may export them in the shell that
// also runs jobs), `memento launch`'s protocol with the job it runs
// (MEMENTO_LAUNCH_*), the benchmark drivers (MEMENTO_BENCH_*) and the test
// harnesses (MEMENTO_TEST_*).
constexpr const char* kForeignVariables[] = {
    "MEMENTO_BUILD_DIR", "MEMENTO_BUILD_TARGETS",    "MEMENTO_BUILD_VENV", "MEMENTO_INSTALL_TORCH",
    "MEMENTO_PYTHON",    "MEMENTO_SKIP_SPACE_CHECK", "MEMENTO_TORCH",      "MEMENTO_VENV"};
constexpr const char* kForeignPrefixes[] = {"MEMENTO_LAUNCH_", "MEMENTO_BENCH_", "MEMENTO_TEST_"};

Status Bad(const std::string& var, const std::string& value, const std::string& accepted) {
  return Status::InvalidArgument(var + "='" + value + "' is invalid; accepted: " + accepted);
}

// Strict decimal integer in [lo, hi]: digits only, with a leading '-' when
// lo < 0 (no blanks, no '+', no hexadecimal or octal prefixes).
Result<long long> ParseInt(const std::string& var, const std::string& value, long long lo,
                           long long hi, const std::string& accepted) {
  if (value.empty() || value.size() > 19) return Bad(var, value, accepted);
  for (size_t i = 0; i < value.size(); ++i) {
    const bool sign = i == 0 && value[i] == '-' && lo < 0 && value.size() > 1;
    if (!sign && (value[i] < '0' || value[i] > '9')) return Bad(var, value, accepted);
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (errno != 0 || end != value.c_str() + value.size() || v < lo || v > hi) {
    return Bad(var, value, accepted);
  }
  return v;
}

// A plain decimal: digits, at most one '.', a digit on both sides of it or
// only after it ("300", "0.5", ".5"), at most 32 characters.
bool IsPlainDecimal(const std::string& value) {
  size_t digits = 0, dots = 0;
  for (char ch : value) {
    if (ch >= '0' && ch <= '9') {
      ++digits;
    } else if (ch == '.' && dots == 0) {
      ++dots;
    } else {
      return false;
    }
  }
  const bool dangling_dot = !value.empty() && value.back() == '.';
  return digits > 0 && !dangling_dot && value.size() <= 32;
}

// The value of a plain decimal, whatever the process's locale (strtod would
// stop at the '.' where LC_NUMERIC has a decimal comma); NaN if not all of it
// parses.
double PlainDecimalValue(const std::string& value) {
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size()) return std::nan("");
  return v;
}

// Seconds in [0.001, 86400], a plain decimal.
Result<double> ParseSeconds(const std::string& var, const std::string& value) {
  if (!IsPlainDecimal(value)) return Bad(var, value, kTimeoutForms);
  const double v = PlainDecimalValue(value);
  if (!(v >= 0.001 && v <= 86400)) return Bad(var, value, kTimeoutForms);
  return v;
}

// A positive plain decimal up to 1e12 ("8760", "0.5", ".5").
Result<double> ParsePositiveDecimal(const std::string& var, const std::string& value,
                                    const std::string& accepted) {
  if (!IsPlainDecimal(value)) return Bad(var, value, accepted);
  const double v = PlainDecimalValue(value);
  if (!(v > 0 && v <= 1e12)) return Bad(var, value, accepted);
  return v;
}

std::string IntervalText(int interval) {
  return interval == Config::kAutoInterval ? "auto" : std::to_string(interval);
}

// Levenshtein distance, for "did you mean" on misspelt variable names.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string KnownVariables() {
  std::string all;
  for (const auto& n : Config::VariableNames()) all += (all.empty() ? "" : ", ") + n;
  return all;
}

std::string UnknownVariableMessage(const std::string& var) {
  std::string best;
  size_t best_distance = 4;  // suggest only close names
  for (const auto& n : Config::VariableNames()) {
    const size_t d = EditDistance(var, n);
    if (d < best_distance) {
      best_distance = d;
      best = n;
    }
  }
  return "unknown variable " + var + (best.empty() ? "" : " (did you mean " + best + "?)") +
         "; known: " + KnownVariables();
}

}  // namespace

Result<std::chrono::milliseconds> TimeoutFromEnv() {
  const char* value = std::getenv(kTimeout);
  if (value == nullptr) return Config().timeout();
  Result<double> seconds = ParseSeconds(kTimeout, value);
  if (!seconds.ok()) return seconds.status();
  Config c;
  c.timeout_s = *seconds;
  return c.timeout();
}

std::chrono::milliseconds Config::timeout() const {
  const double ms = std::ceil(timeout_s * 1000.0 - 1e-9);
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(ms)));
}

Status ValidateJobId(const std::string& job) {
  constexpr char kForms[] = "1..48 characters from [A-Za-z0-9_-]";
  if (job.empty() || job.size() > 48) return Bad(kJob, job, kForms);
  for (char c : job) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return Bad(kJob, job, kForms);
  }
  return Status::Ok();
}

namespace {

// A random (version 4) UUID in canonical form: what `torchrun --standalone`
// draws as its run id at every invocation, so not the same for a relaunch.
bool IsRandomUuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return s[14] == '4' && (s[19] == '8' || s[19] == '9' || s[19] == 'a' || s[19] == 'b');
}

}  // namespace

std::string JobIdFromLauncher(std::string* source) {
  if (source != nullptr) source->clear();
  std::string id, from;
  // torchrun's --rdzv-id (the same for every restart of the job); its
  // default is the literal "none", which names no job, and --standalone's a
  // random UUID drawn per invocation, which a relaunch would not find again.
  if (const char* run_id = std::getenv("TORCHELASTIC_RUN_ID");
      run_id != nullptr && *run_id != '\0' && std::string(run_id) != "none" &&
      !IsRandomUuid(run_id)) {
    id = run_id;
    from = "TORCHELASTIC_RUN_ID";
  } else if (const char* slurm = std::getenv("SLURM_JOB_ID"); slurm != nullptr && *slurm != '\0') {
    id = slurm;
    from = "SLURM_JOB_ID";
  } else {
    return "";
  }
  std::string job;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    job += ok ? c : '_';
  }
  if (job.size() > 48) {
    char hash[16];
    std::snprintf(hash, sizeof(hash), "%08x", erasure::Crc32c(id.data(), id.size()));
    job = job.substr(0, 39) + "-" + hash;
  }
  if (source != nullptr) *source = from;
  return job;
}

Status ValidateSchemeSyntax(const std::string& scheme) {
  // One grammar for the whole project: placement's parser. Whether the scheme
  // fits the node count is checked once the nodes are known (Prepare()).
  Result<placement::Scheme> parsed = placement::Scheme::Parse(scheme);
  if (!parsed.ok()) return Bad(kScheme, scheme, placement::Scheme::kAcceptedForms);
  return Status::Ok();
}

// `bytes` as a user would write it: "2G", "48K", "5000" (the largest exact suffix).
std::string ByteSizeText(uint64_t bytes) {
  static const char* const kSuffixes[] = {"G", "M", "K"};
  for (int i = 0; i < 3; ++i) {
    const int shift = 30 - 10 * i;
    if (bytes != 0 && bytes % (uint64_t{1} << shift) == 0) {
      return std::to_string(bytes >> shift) + kSuffixes[i];
    }
  }
  return std::to_string(bytes);
}

Result<uint64_t> ParseByteSize(const std::string& text) {
  std::string digits;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits += text[i++];
  std::string suffix = text.substr(i);
  if (digits.empty() || digits.size() > 19) {
    return Status::InvalidArgument("byte size '" + text + "' is not a number with K/M/G suffix");
  }
  uint64_t shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KiB" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MiB" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GiB" || suffix == "g") {
    shift = 30;
  } else {
    return Status::InvalidArgument("byte size '" + text + "' has unknown suffix '" + suffix +
                                   "' (accepted: none, K, M, G)");
  }
  unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
  if (v > (~0ull >> shift)) {
    return Status::InvalidArgument("byte size '" + text + "' overflows 64 bits");
  }
  return static_cast<uint64_t>(v) << shift;
}

const std::vector<std::string>& Config::VariableNames() {
  static const std::vector<std::string> names = {kJob,
                                                 kNode,
                                                 kRanksPerNode,
                                                 kScheme,
                                                 kSlots,
                                                 kRemote,
                                                 kPersistEvery,
                                                 kPersistKeep,
                                                 kLog,
                                                 kChunkBytes,
                                                 kThreads,
                                                 kTimeout,
                                                 kStale,
                                                 kInterval,
                                                 kNodeMtbf,
                                                 kElastic,
                                                 kBackgroundReprotect,
                                                 kShmDir,
                                                 kResumeFinished,
                                                 kKeepFinished,
                                                 kRemoteFormat,
                                                 kRestoreFrom,
                                                 kTransportDevice,
                                                 kDeviceCopy};
  return names;
}

Status Config::CheckShmDir() const {
  if (shm_dir.empty()) return Status::Ok();
  MEMENTO_RETURN_IF_ERROR(ShmSegment::CheckDirectory());
  // The same directory however spelt (a trailing '/', a symbolic link).
  const std::string dir = ShmSegment::Directory();
  struct stat want = {};
  struct stat used = {};
  if (stat(shm_dir.c_str(), &want) != 0 || stat(dir.c_str(), &used) != 0 ||
      want.st_dev != used.st_dev || want.st_ino != used.st_ino) {
    return Status::InvalidArgument(
        std::string(kShmDir) + "='" + shm_dir +
        "' in the configuration, but the node stores go to " + dir + " (the environment's " +
        kShmDir + ", else /dev/shm): set " + kShmDir +
        " in the environment of every rank (and of `memento inspect` / `memento clean`), so that "
        "all of them find the same stores");
  }
  return Status::Ok();
}

Status Config::Validate() const {
  if (Status s = ValidateJobId(job); !s.ok()) return s;
  if (node.size() > 200 || node.find('\0') != std::string::npos) {
    return Bad(kNode, node, "empty (host name) or 1..200 bytes");
  }
  if (ranks_per_node < 0 || ranks_per_node > 1000000) {
    return Bad(kRanksPerNode, std::to_string(ranks_per_node), "0 (off) or 1..1000000");
  }
  if (Status s = ValidateSchemeSyntax(scheme); !s.ok()) return s;
  if (slots < 2 || slots > 64) return Bad(kSlots, std::to_string(slots), "2..64");
  if (remote_format != "memento" && remote_format != "dcp") {
    return Bad(kRemoteFormat, remote_format, "memento or dcp");
  }
  if (device_transport != "off" && device_transport != "auto" && device_transport != "nccl") {
    return Bad(kTransportDevice, device_transport, "off, auto or nccl");
  }
  if (device_copy != "direct" && device_copy != "staged") {
    return Bad(kDeviceCopy, device_copy, "direct or staged");
  }
  if (persist_every < 0) {
    return Bad(kPersistEvery, std::to_string(persist_every), "0 (never) or a positive integer");
  }
  if (persist_keep < 1) return Bad(kPersistKeep, std::to_string(persist_keep), "1 or more");
  if (chunk_bytes < (4u << 10) || chunk_bytes > (1ull << 30)) {
    return Bad(kChunkBytes, ByteSizeText(chunk_bytes), "4K..1G (bytes, K/M/G suffix)");
  }
  if (threads < 0 || threads > 64) {
    return Bad(kThreads, std::to_string(threads), "0 (auto) or 1..64");
  }
  if (!(timeout_s >= 0.001 && timeout_s <= 86400)) {
    return Bad(kTimeout, std::to_string(timeout_s), kTimeoutForms);
  }
  if (interval < 0) return Bad(kInterval, std::to_string(interval), kIntervalForms);
  if (!(node_mtbf_h >= 0 && node_mtbf_h <= 1e12)) {
    return Bad(kNodeMtbf, std::to_string(node_mtbf_h), kNodeMtbfForms);
  }
  if (interval == kAutoInterval && node_mtbf_h == 0) {
    return Status::InvalidArgument(std::string(kInterval) + "=auto needs " + kNodeMtbf +
                                   " (mean hours between failures of one node) to weigh the "
                                   "stall of a save against the work a failure loses");
  }
  return Status::Ok();
}

Result<Config> Config::FromMap(const std::map<std::string, std::string>& vars) {
  Config c;
  for (const auto& [var, value] : vars) {
    if (var == kJob) {
      if (Status s = ValidateJobId(value); !s.ok()) return s;
      c.job = value;
    } else if (var == kNode) {
      c.node = value;
    } else if (var == kRanksPerNode) {
      Result<long long> v = ParseInt(var, value, 0, 1000000, "0 (off) or 1..1000000");
      if (!v.ok()) return v.status();
      c.ranks_per_node = static_cast<int>(*v);
    } else if (var == kScheme) {
      c.scheme = value;
    } else if (var == kSlots) {
      Result<long long> v = ParseInt(var, value, 2, 64, "an integer 2..64");
      if (!v.ok()) return v.status();
      c.slots = static_cast<int>(*v);
    } else if (var == kRemote) {
      c.remote_dir = value;
    } else if (var == kRemoteFormat) {
      if (value != "memento" && value != "dcp") {
        return Bad(var, value, "memento (memento's rank files) or dcp (torch.distributed.checkpoint)");
      }
      c.remote_format = value;
    } else if (var == kTransportDevice) {
      if (value != "off" && value != "auto" && value != "nccl") {
        return Bad(var, value,
                   "off (default), auto (NCCL when every rank has GPU tensors) or nccl");
      }
      c.device_transport = value;
    } else if (var == kDeviceCopy) {
      if (value != "direct" && value != "staged") {
        return Bad(var, value,
                   "direct (default: the GPU writes into the store's registered pages) or staged "
                   "(through pinned buffers of the driver's, copied on the host)");
      }
      c.device_copy = value;
    } else if (var == kRestoreFrom) {
      if (value.find('\0') != std::string::npos) return Bad(var, value, "a directory");
      c.restore_from = value;
    } else if (var == kShmDir) {
      if (value.empty() || value[0] != '/' || value.find('\0') != std::string::npos) {
        return Bad(var, value, "an absolute path of a directory on a tmpfs");
      }
      c.shm_dir = value;
    } else if (var == kPersistEvery) {
      Result<long long> v = ParseInt(var, value, 0, 1ll << 40, "0 (never) or a positive integer");
      if (!v.ok()) return v.status();
      c.persist_every = static_cast<int>(std::min<long long>(*v, 1 << 30));
    } else if (var == kPersistKeep) {
      Result<long long> v = ParseInt(var, value, 1, 1 << 20, "an integer >= 1");
      if (!v.ok()) return v.status();
      c.persist_keep = static_cast<int>(*v);
    } else if (var == kLog) {
      if (value == "error") {
        c.log_level = LogLevel::kError;
      } else if (value == "warn") {
        c.log_level = LogLevel::kWarn;
      } else if (value == "info") {
        c.log_level = LogLevel::kInfo;
      } else if (value == "debug") {
        c.log_level = LogLevel::kDebug;
      } else {
        return Bad(var, value, "error | warn | info | debug");
      }
    } else if (var == kChunkBytes) {
      Result<uint64_t> v = ParseByteSize(value);
      if (!v.ok()) return Bad(var, value, "4K..1G: bytes with optional K, M or G suffix");
      c.chunk_bytes = *v;
    } else if (var == kThreads) {
      if (value == "auto") {
        c.threads = 0;
      } else {
        Result<long long> v = ParseInt(var, value, 1, 64, "auto or an integer 1..64");
        if (!v.ok()) return v.status();
        c.threads = static_cast<int>(*v);
      }
    } else if (var == kTimeout) {
      Result<double> v = ParseSeconds(var, value);
      if (!v.ok()) return v.status();
      c.timeout_s = *v;
    } else if (var == kInterval) {
      if (value == "auto") {
        c.interval = kAutoInterval;
      } else {
        Result<long long> v = ParseInt(var, value, 1, 1 << 30, kIntervalForms);
        if (!v.ok()) return v.status();
        c.interval = static_cast<int>(*v);
      }
    } else if (var == kNodeMtbf) {
      Result<double> v = ParsePositiveDecimal(var, value, kNodeMtbfForms);
      if (!v.ok()) return v.status();
      c.node_mtbf_h = *v;
    } else if (var == kElastic) {
      if (value != "0" && value != "1") return Bad(var, value, "0 | 1");
      c.elastic = value == "1";
    } else if (var == kBackgroundReprotect) {
      if (value != "0" && value != "1") return Bad(var, value, "0 | 1");
      c.background_reprotect = value == "1";
    } else if (var == kResumeFinished) {
      if (value != "0" && value != "1") return Bad(var, value, "0 | 1");
      c.resume_finished = value == "1";
    } else if (var == kKeepFinished) {
      if (value != "0" && value != "1") return Bad(var, value, "0 | 1");
      c.keep_finished = value == "1";
    } else if (var == kStale) {
      if (value == "error") {
        c.stale_policy = StalePolicy::kError;
      } else if (value == "replace") {
        c.stale_policy = StalePolicy::kReplace;
      } else {
        return Bad(var, value, "error | replace");
      }
    } else {
      return Status::InvalidArgument(UnknownVariableMessage(var));
    }
  }
  if (Status s = c.Validate(); !s.ok()) return s;
  return c;
}

Result<Config> Config::FromEnv(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> known;
  std::vector<std::string> unknown;
  const auto& names = VariableNames();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string var(*e, static_cast<size_t>(eq - *e));
    if (var.rfind("MEMENTO_", 0) != 0) continue;
    bool is_known = false;
    for (const auto& n : names) is_known = is_known || n == var;
    if (is_known) {
      known[var] = eq + 1;
      continue;
    }
    bool foreign = var == kAllowUnknown;
    for (const char* f : kForeignVariables) foreign = foreign || var == f;
    for (const char* p : kForeignPrefixes) foreign = foreign || var.rfind(p, 0) == 0;
    if (!foreign) unknown.push_back(var);
  }
  bool allow_unknown = false;
  if (const char* allow = std::getenv(kAllowUnknown); allow != nullptr) {
    if (std::strcmp(allow, "0") != 0 && std::strcmp(allow, "1") != 0) {
      return Bad(kAllowUnknown, allow, "0 (unknown MEMENTO_* variables are errors) or 1 (warnings)");
    }
    allow_unknown = allow[0] == '1';
  }
  if (!unknown.empty() && !allow_unknown) {
    return Status::InvalidArgument(UnknownVariableMessage(unknown.front()) + "; set " +
                                   kAllowUnknown + "=1 to ignore unknown MEMENTO_* variables");
  }
  for (const auto& [var, value] : overrides) known[var] = value;  // FromMap refuses unknown ones
  std::string job_source = kJob;
  if (known.count(kJob) == 0) {
    const std::string from_launcher = JobIdFromLauncher(&job_source);
    if (!from_launcher.empty()) known[kJob] = from_launcher;
  }
  Result<Config> parsed = FromMap(known);
  if (!parsed.ok()) return parsed.status();
  Config c = std::move(parsed).value();
  if (!c.remote_dir.empty()) {
    // Resolved once, against the working directory of this call, and checked
    // now rather than at the first persist.
    Result<std::string> root = DirectoryRemoteStore::ResolveRoot(c.remote_dir);
    Status usable = root.ok() ? DirectoryRemoteStore::CheckRoot(*root) : root.status();
    if (!usable.ok()) {
      return Status::InvalidArgument(std::string(kRemote) + "='" + c.remote_dir +
                                     "': " + usable.message());
    }
    c.remote_dir = *root;
  }
  // Checked here so that a job fails at start, not at its first store.
  MEMENTO_RETURN_IF_ERROR(c.CheckShmDir());
  SetLogLevel(c.log_level);
  for (const auto& var : unknown) {
    Log(LogLevel::kWarn, "config: unknown variable " + var + " ignored (" + kAllowUnknown + "=1)");
  }
  for (const auto& [var, value] : known) Log(LogLevel::kInfo, "config: " + var + "=" + value);
  Log(LogLevel::kInfo,
      "config: job id '" + c.job + "' from " +
          (job_source.empty() ? "the default (MEMENTO_JOB unset, no launcher id)" : job_source));
  return c;
}

std::string Config::ToString() const {
  std::ostringstream os;
  os << kJob << "=" << job << " " << kNode << "=" << node << " " << kRanksPerNode << "="
     << ranks_per_node << " " << kScheme << "=" << scheme << " " << kSlots << "=" << slots << " "
     << kRemote << "=" << remote_dir << " " << kRemoteFormat << "=" << remote_format << " "
     << kTransportDevice << "=" << device_transport << " " << kDeviceCopy << "=" << device_copy
     << " " << kPersistEvery << "=" << persist_every << " " << kPersistKeep << "=" << persist_keep
     << " " << kLog << "=" << LogLevelName(log_level) << " " << kChunkBytes << "=" << chunk_bytes
     << " " << kThreads << "=" << (threads == 0 ? std::string("auto") : std::to_string(threads))
     << " " << kTimeout << "=" << timeout_s << " " << kStale << "="
     << (stale_policy == StalePolicy::kError ? "error" : "replace") << " " << kInterval << "="
     << IntervalText(interval) << " " << kNodeMtbf << "=" << node_mtbf_h << " " << kElastic << "="
     << (elastic ? 1 : 0) << " " << kBackgroundReprotect << "=" << (background_reprotect ? 1 : 0)
     << " " << kShmDir << "=" << (shm_dir.empty() ? "/dev/shm" : shm_dir) << " " << kResumeFinished
     << "=" << (resume_finished ? 1 : 0) << " " << kKeepFinished << "=" << (keep_finished ? 1 : 0);
  return os.str();
}

int Config::SnapshotThreads(bool device_state, int cpus, int machine_cpus,
                            int ranks_on_node) const {
  if (threads > 0) return threads;
  if (!device_state) return 2;
  cpus = std::max(1, cpus);
  const int share = cpus < machine_cpus ? cpus : cpus / std::max(1, ranks_on_node);
  return std::clamp(share / 2, 2, 8);
}

}  // namespace memento::runtime
