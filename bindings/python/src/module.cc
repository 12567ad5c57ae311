// _memento: the extension under the `memento` Python package (see
// memento/__init__.py for the user-facing API). Holds one TorchCheckpointer;
// tensors arrive as a list of (name, tensor, replicated, global_shape,
// offsets) enumerated in Python
// at every call, so Python decides names and the adapter checks them.
//
// GIL: every call that may wait (save, restore, the waits, close) releases
// it. Log lines of the runtime (from any thread) are queued here and handed to
// Python's `logging` by drain_logs(), which the package calls from the
// application thread: no runtime thread ever takes the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "fingerprint.h"
#include "memento/runtime/config.h"
#include "memento/runtime/log.h"
#include "memento/torch/launcher.h"
#include "memento/torch/torch_checkpointer.h"

namespace py = pybind11;

namespace memento::torch_adapter {
namespace {

// Log lines waiting for drain_logs().
struct LogQueue {
  std::mutex mu;
  std::deque<std::pair<int, std::string>> lines;
  size_t dropped = 0;
};
LogQueue& Logs() {
  static LogQueue* q = new LogQueue();  // never destroyed: runtime threads may log at exit
  return *q;
}

// Python exception classes, one per StatusCode.
std::map<StatusCode, py::object>& Exceptions() {
  static auto* m = new std::map<StatusCode, py::object>();
  return *m;
}

struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)) {}
  const char* what() const noexcept override { return status.message().c_str(); }
  Status status;
};

void Check(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}
template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

py::dict ReportDict(RestoreResult r) {
  const runtime::RestoreReport& rep = r.report;
  py::dict d;
  d["step"] = r.step;
  d["version"] = rep.version;
  py::list entries;
  for (const auto& e : rep.entries) {
    py::dict x;
    x["name"] = e.name;
    x["bytes"] = e.bytes;
    x["crc"] = e.crc;
    x["source"] = std::string(runtime::RestoreSourceName(e.source));
    entries.append(x);
  }
  d["entries"] = entries;
  d["notes"] = rep.notes;
  d["lost_nodes"] = rep.lost_nodes;
  d["source_detail"] = rep.source_detail;
  d["bytes_sent"] = rep.stats.bytes_sent;
  d["bytes_received"] = rep.stats.bytes_received;
  d["reprotect_mode"] = rep.stats.reprotect_mode;
  d["protection"] = rep.protection;
  d["elastic"] = rep.elastic;
  d["elastic_plan"] = rep.elastic_plan;
  d["inventory_s"] = rep.stats.inventory_s;
  d["plan_s"] = rep.stats.plan_s;
  d["transfer_s"] = rep.stats.transfer_s;
  d["reprotect_s"] = rep.stats.reprotect_s;
  d["summary"] = rep.Summary();
  // The whole report as JSON costs more than a small restore: made when asked
  // for (RestoreReport.json in the package).
  auto whole = std::make_shared<const runtime::RestoreReport>(std::move(r.report));
  d["json"] = py::cpp_function([whole] { return whole->ToJson(); });
  return d;
}

// What the getters answer after close(): the engine's values when it closed
// (a training script prints its stats after closing).
struct LastValues {
  std::optional<uint64_t> latest_committed;
  runtime::Protection protection_state = runtime::Protection::kProtected;
  double blocked_seconds = 0;
  runtime::IntervalStats interval;
  std::vector<std::string> entry_names;
  int reregistrations = 0;
  int relayouts = 0;
  int rank = 0;
  int size = 0;
  std::string node;

  static LastValues Of(const TorchCheckpointer& c) {
    LastValues v;
    v.latest_committed = c.LatestCommitted();
    v.protection_state = c.ProtectionState();
    v.blocked_seconds = c.BlockedSeconds();
    v.interval = c.Interval();
    v.entry_names = c.EntryNames();
    v.reregistrations = c.reregistrations();
    v.relayouts = c.relayouts();
    v.rank = c.rank();
    v.size = c.size();
    v.node = c.node();
    return v;
  }
};

class PyCheckpointer {
 public:
  PyCheckpointer(const std::map<std::string, std::string>& settings, const std::string& launcher,
                 uint64_t extra_capacity, uint64_t total_steps) {
    // MEMENTO_* variables of the environment (checked as Config::FromEnv
    // checks them: an unknown one is an error unless MEMENTO_ALLOW_UNKNOWN=1),
    // then the keyword arguments over them.
    runtime::Config config = Check(runtime::Config::FromEnv(settings));
    Launcher l = Check(ParseLauncher(launcher));
    if (l == Launcher::kAuto) l = DetectLauncher();
    launcher_ = LauncherName(l);
    {
      py::gil_scoped_release release;
      transport_ = Check(CreateLauncherTransport(l, config));
    }
    abortable_ = transport_;
    Options options;
    options.extra_capacity = extra_capacity;
    options.total_steps = total_steps;
    ck_ = Check(TorchCheckpointer::Create(config, transport_, options));
    auto tensors = tensors_;
    Check(ck_->RegisterSource([tensors] { return *tensors; }));
    config_ = config.ToString();
    // The remote tier's format when there is one ("" without a remote tier).
    remote_format_ = config.remote_dir.empty() ? "" : config.remote_format;
    restore_from_ = config.restore_from;
  }

  // (name, tensor, replicated, global_shape or None, offsets or None,
  // copy_at_save).
  using TensorTuple = std::tuple<std::string, at::Tensor, bool, std::optional<std::vector<int64_t>>,
                                 std::optional<std::vector<int64_t>>, bool>;
  void SetTensors(const std::vector<TensorTuple>& list) {
    std::vector<NamedTensor> v;
    v.reserve(list.size());
    for (const auto& [name, t, replicated, global_shape, offsets, copy_at_save] : list) {
      NamedTensor nt{name, t, replicated, std::nullopt, at::Tensor()};
      nt.copy_at_save = copy_at_save;
      if (global_shape) {
        nt.shard = ShardSpec{*global_shape,
                             offsets ? *offsets : std::vector<int64_t>(global_shape->size(), 0)};
      }
      v.push_back(std::move(nt));
    }
    *tensors_ = std::move(v);
  }

  void SetUserState(const py::bytes& b) { ck().SetUserState("python", std::string(b)); }
  // A record of the extra state beside Python's own: "dcp.items" / "dcp.paths"
  // (the values and paths the dcp remote format writes).
  void SetUserRecord(const std::string& key, const py::bytes& b) {
    if (key == "python") throw py::value_error("set_user_record: 'python' is set_user_state's");
    ck().SetUserState(key, std::string(b));
  }
  py::object UserState() {
    auto s = ck().UserState("python");
    if (!s) return py::none();
    return py::bytes(*s);
  }

  void Save(uint64_t step) {
    Check(Call([step](TorchCheckpointer& c) { return c.Save(step); }));
  }

  py::object Restore() {
    std::optional<RestoreResult> v = Check(Call(
        [](TorchCheckpointer& c) -> Result<std::optional<RestoreResult>> { return c.Restore(); }));
    if (!v) return py::none();
    return ReportDict(std::move(*v));
  }

  // After close() the waits have nothing to wait for and return at once.
  void WaitSnapshot() {
    Released([](TorchCheckpointer& c) { return c.WaitSnapshot(); });
  }
  void Wait() {
    Released([](TorchCheckpointer& c) { return c.Wait(); });
  }
  void WaitPersist() {
    Released([](TorchCheckpointer& c) { return c.WaitPersist(); });
  }
  // Dropped without close(): as close(), its failure logged by the engine
  // only; other Python threads run while it waits.
  ~PyCheckpointer() { (void)Release(); }
  PyCheckpointer(const PyCheckpointer&) = delete;
  PyCheckpointer& operator=(const PyCheckpointer&) = delete;

  // In-job recovery: the group the transport spans is gone. Ends the
  // transfers the engine's threads wait for (runtime::Transport::Abort), so
  // that the calls in flight and a close() return at once. Takes no call
  // lock: it is what lets those calls return.
  void AbortTransport() {
    std::shared_ptr<runtime::Transport> t;
    {
      std::lock_guard<std::mutex> lock(abort_mu_);
      t = abortable_.lock();
    }
    if (t) t->Abort();
  }

  // Waits for the checkpoint in flight, releases everything, then raises if
  // that checkpoint failed. A second Close does nothing. `finished`: the
  // run ended normally, so first TorchCheckpointer::Finish (marked finished
  // once every rank's last checkpoint committed; its node stores freed).
  void Close(bool finished) { Check(Release(finished)); }

  TorchCheckpointer& ck() {
    if (!ck_) throw StatusError(Status::FailedPrecondition("the checkpointer is closed"));
    return *ck_;
  }
  const std::string& launcher() const { return launcher_; }
  const std::string& config() const { return config_; }
  const std::string& remote_format() const { return remote_format_; }
  const std::string& restore_from() const { return restore_from_; }

  // A getter: f on the engine without the GIL, under the call lock (so a
  // close() on another thread waits for it); "closed" after close().
  template <typename F>
  auto Get(F&& f) -> decltype(f(std::declval<TorchCheckpointer&>())) {
    {
      py::gil_scoped_release release;
      std::shared_lock<std::shared_mutex> lock(call_mu_);
      if (ck_) return f(*ck_);
    }
    throw StatusError(Status::FailedPrecondition("the checkpointer is closed"));
  }

  // A value getter: as Get while the engine is open; after close() the value
  // it had when it closed.
  template <typename R>
  R Value(R (TorchCheckpointer::*f)() const, R LastValues::*last) {
    {
      py::gil_scoped_release release;
      std::shared_lock<std::shared_mutex> lock(call_mu_);
      if (ck_) return ((*ck_).*f)();
      if (last_) return (*last_).*last;
    }
    throw StatusError(Status::FailedPrecondition("the checkpointer is closed"));
  }

 private:
  // Waits for the calls in flight on other threads to return (a close()
  // from a watchdog thread while the training thread is inside save()),
  // then for the checkpoint in flight, without the GIL; takes the engine
  // and the transport out with the GIL, so that the calls that run under
  // it see the checkpointer closed, and releases them without it (the
  // engine's destruction waits for queued persists, which may take long).
  // What Wait returned.
  // The lock is held until both are gone: a second close() (the main
  // thread's while a watchdog's runs) returns once they are.
  // `finished`: TorchCheckpointer::Finish first, under the lock (no save()
  // of another thread runs beside it); its failure comes first.
  Status Release(bool finished = false) {
    std::unique_lock<std::shared_mutex> lock(call_mu_, std::defer_lock);
    Status s;
    {
      py::gil_scoped_release release;
      lock.lock();
      Status ended = ck_ && finished ? ck_->Finish() : Status::Ok();
      s = ck_ ? ck_->Wait() : Status::Ok();
      if (!ended.ok()) s = ended;
      if (ck_) last_ = LastValues::Of(*ck_);
    }
    std::unique_ptr<TorchCheckpointer> ck = std::move(ck_);
    std::shared_ptr<runtime::Transport> transport = std::move(transport_);
    {
      py::gil_scoped_release release;
      ck.reset();
      transport.reset();
    }
    // The registered tensors are not held beyond the run (the GIL is held:
    // a tensor made from a Python buffer releases it in its deleter).
    tensors_->clear();
    return s;
  }

  // Runs f on the engine without the GIL. The call lock is taken only with
  // the GIL released (Release takes the GIL while it holds the lock), and
  // ck_ is read under it: a close() on another thread waits for f.
  template <typename F>
  auto Call(F&& f) -> decltype(f(std::declval<TorchCheckpointer&>())) {
    py::gil_scoped_release release;
    std::shared_lock<std::shared_mutex> lock(call_mu_);
    if (!ck_) return Status::FailedPrecondition("the checkpointer is closed");
    return f(*ck_);
  }
  template <typename F>
  void Released(F&& f) {
    Status s;
    {
      py::gil_scoped_release release;
      std::shared_lock<std::shared_mutex> lock(call_mu_);
      s = ck_ ? f(*ck_) : Status::Ok();
    }
    Check(s);
  }

  // Shared by the calls that run without the GIL, exclusive in Release.
  std::shared_mutex call_mu_;
  std::shared_ptr<runtime::Transport> transport_;
  std::mutex abort_mu_;
  std::weak_ptr<runtime::Transport> abortable_;  // transport_, for AbortTransport
  std::unique_ptr<TorchCheckpointer> ck_;
  std::optional<LastValues> last_;  // set by the close() that released ck_
  std::shared_ptr<std::vector<NamedTensor>> tensors_ = std::make_shared<std::vector<NamedTensor>>();
  std::string launcher_;
  std::string config_;
  std::string remote_format_;
  std::string restore_from_;
};

const char* ExceptionName(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case StatusCode::kNotFound:
      return "NotFoundError";
    case StatusCode::kAlreadyExists:
      return "AlreadyExistsError";
    case StatusCode::kCorruption:
      return "CorruptionError";
    case StatusCode::kUnrecoverable:
      return "UnrecoverableError";
    case StatusCode::kUnavailable:
      return "UnavailableError";
    case StatusCode::kTimeout:
      return "TimeoutError";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kResourceExhausted:
      return "ResourceExhaustedError";
    case StatusCode::kFailedPrecondition:
      return "FailedPreconditionError";
    case StatusCode::kElasticRestoreNeeded:
      return "ElasticRestoreNeededError";
    case StatusCode::kInternal:
      return "InternalError";
    case StatusCode::kOk:
      break;
  }
  return "MementoError";
}

// Exceptions: MementoError(RuntimeError), one subclass per status code;
// InvalidArgumentError is also a ValueError.
void BindExceptions(py::module_& m) {
  py::object base = py::reinterpret_steal<py::object>(
      PyErr_NewException("memento.MementoError", PyExc_RuntimeError, nullptr));
  m.attr("MementoError") = base;
  for (int c = 1; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    const StatusCode code = static_cast<StatusCode>(c);
    py::tuple bases;
    if (code == StatusCode::kInvalidArgument) {
      bases = py::make_tuple(base, py::handle(PyExc_ValueError));
    } else {
      bases = py::make_tuple(base);
    }
    const std::string name = std::string("memento.") + ExceptionName(code);
    py::object cls =
        py::reinterpret_steal<py::object>(PyErr_NewException(name.c_str(), bases.ptr(), nullptr));
    cls.attr("code") = StatusCodeName(code);
    m.attr(ExceptionName(code)) = cls;
    Exceptions()[code] = cls;
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = Exceptions().find(e.status.code());
      PyObject* cls = it != Exceptions().end() ? it->second.ptr() : PyExc_RuntimeError;
      PyErr_SetString(cls, e.status.message().c_str());
    }
  });
}

// The runtime's log lines, queued from any thread, drained by Python.
void BindLogs(py::module_& m) {
  runtime::SetLogSink([](runtime::LogLevel level, const std::string& line) {
    LogQueue& q = Logs();
    std::lock_guard<std::mutex> lock(q.mu);
    if (q.lines.size() >= 10000) {
      ++q.dropped;
      return;
    }
    q.lines.emplace_back(static_cast<int>(level), line);
  });
  m.def(
      "drain_logs",
      [] {
        std::vector<std::pair<int, std::string>> out;
        LogQueue& q = Logs();
        std::lock_guard<std::mutex> lock(q.mu);
        out.assign(q.lines.begin(), q.lines.end());
        q.lines.clear();
        if (q.dropped != 0) {
          out.emplace_back(1, std::to_string(q.dropped) + " log lines dropped (queue full)");
          q.dropped = 0;
        }
        return out;
      },
      "Log lines queued since the last call: [(level 0=error..3=debug, message)].");
}

// A getter of TorchCheckpointer bound for any thread, answering its last
// value after close(): PyCheckpointer::Value.
template <typename R>
auto Getter(R (TorchCheckpointer::*f)() const, R LastValues::*last) {
  return [f, last](PyCheckpointer& c) { return c.Value(f, last); };
}

py::dict IntervalDict(const runtime::IntervalStats& s) {
  py::dict d;
  d["automatic"] = s.automatic;
  d["last_saved"] = s.last_saved;
  d["saves"] = s.saves;
  d["skipped"] = s.skipped;
  d["interval_steps"] = s.interval_steps;
  d["changes"] = s.changes;
  d["step_s"] = s.step_s;
  d["stall_s"] = s.stall_s;
  d["protect_s"] = s.protect_s;
  return d;
}

void BindCheckpointer(py::module_& m) {
  py::class_<PyCheckpointer>(m, "_Checkpointer")
      .def(py::init<const std::map<std::string, std::string>&, const std::string&, uint64_t,
                    uint64_t>(),
           py::arg("settings"), py::arg("launcher"), py::arg("extra_capacity"),
           py::arg("total_steps") = 0)
      // memento launch's progress records (no-ops outside the launcher).
      .def("set_loss",
           [](PyCheckpointer& c, double loss) {
             c.Get([loss](TorchCheckpointer& t) { t.SetLoss(loss); });
           })
      .def("add_caller_stall",
           [](PyCheckpointer& c, double seconds) {
             c.Get([seconds](TorchCheckpointer& t) { t.AddCallerStall(seconds); });
           })
      .def("note_failed_save",
           [](PyCheckpointer& c) { c.Get([](TorchCheckpointer& t) { t.NoteFailedSave(); }); })
      .def("report_done",
           [](PyCheckpointer& c, const std::string& hash) {
             c.Get([&hash](TorchCheckpointer& t) { t.ReportDone(hash); });
           })
      .def("set_tensors", &PyCheckpointer::SetTensors)
      .def("set_user_state", &PyCheckpointer::SetUserState)
      .def("set_user_record", &PyCheckpointer::SetUserRecord)
      .def("user_state", &PyCheckpointer::UserState)
      .def("save", &PyCheckpointer::Save)
      .def("restore", &PyCheckpointer::Restore)
      .def("wait_snapshot", &PyCheckpointer::WaitSnapshot)
      .def("wait", &PyCheckpointer::Wait)
      .def("wait_persist", &PyCheckpointer::WaitPersist)
      .def("close", &PyCheckpointer::Close, py::arg("finished") = false)
      .def("abort_transport", &PyCheckpointer::AbortTransport)
      .def("would_save",
           [](PyCheckpointer& c, uint64_t step) {
             runtime::Checkpointer* engine = c.ck().engine();
             return engine == nullptr || engine->WouldSave(step);
           })
      // The getters may be called from any thread (a watchdog), also while
      // another thread is inside save() or close(); after close() they
      // answer the values they had when it closed.
      .def("latest_committed",
           Getter(&TorchCheckpointer::LatestCommitted, &LastValues::latest_committed))
      .def("protection_state",
           [](PyCheckpointer& c) {
             return std::string(runtime::ProtectionName(
                 Getter(&TorchCheckpointer::ProtectionState, &LastValues::protection_state)(c)));
           })
      .def("blocked_seconds",
           Getter(&TorchCheckpointer::BlockedSeconds, &LastValues::blocked_seconds))
      .def("interval_stats",
           [](PyCheckpointer& c) {
             return IntervalDict(Getter(&TorchCheckpointer::Interval, &LastValues::interval)(c));
           })
      .def("entry_names", Getter(&TorchCheckpointer::EntryNames, &LastValues::entry_names))
      .def("reregistrations",
           Getter(&TorchCheckpointer::reregistrations, &LastValues::reregistrations))
      .def("relayouts", Getter(&TorchCheckpointer::relayouts, &LastValues::relayouts))
      .def_property_readonly("node", Getter(&TorchCheckpointer::node, &LastValues::node))
      .def_property_readonly("rank", Getter(&TorchCheckpointer::rank, &LastValues::rank))
      .def_property_readonly("size", Getter(&TorchCheckpointer::size, &LastValues::size))
      .def_property_readonly("launcher", &PyCheckpointer::launcher)
      .def_property_readonly("config", &PyCheckpointer::config)
      .def_property_readonly("remote_format", &PyCheckpointer::remote_format)
      .def_property_readonly("restore_from", &PyCheckpointer::restore_from);
}

}  // namespace
}  // namespace memento::torch_adapter

PYBIND11_MODULE(_memento, m) {
  using namespace memento::torch_adapter;
  m.doc() = "memento extension (use the `memento` package)";
  BindExceptions(m);
  BindLogs(m);
  m.def("dcp_check_file", [](const std::string& path) {
    bool memento = false;
    memento::Status s;
    {
      py::gil_scoped_release release;
      s = memento::torch_adapter::CheckDcpFile(path, &memento);
    }
    Check(s);
    return memento;
  });
  m.def("config_variables", [] { return memento::runtime::Config::VariableNames(); });
  m.def("detect_launcher", [] { return std::string(LauncherName(DetectLauncher())); });
  BindCheckpointer(m);
  BindFingerprint(m);
}
