// The launcher's records: what each restore rebuilt from where, each failure,
// the time lost per failure, the summary, and the timeline at the end.
#include "launch_session.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include "lost_time.h"
#include "memento/launch/json_text.h"
#include "memento/launch/timeline.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"
#include "memento/runtime/store_admin.h"

namespace memento::launch::detail {

void Launcher::Record(json record) {
  record["t"] = Now() - t0_;
  if (o_.json) {
    std::printf("%s\n", JsonText(record).c_str());
    std::fflush(stdout);
  }
  records_.push_back(std::move(record));
}

// Reads every rank's restore record of `attempt` into `restore` (a summary).
void Launcher::ReadRestores(int attempt, json* restore) {
  std::map<std::string, uint64_t> entries_by_source;
  std::set<std::string> hashes, errors;
  std::set<uint64_t> versions;
  int ranks = 0, failed = 0;
  bool not_found = false;
  double t_begin = 0, t_end = 0, reprotect_s = 0, transfer_s = 0;
  uint64_t bytes_received = 0, reprotect_bytes = 0;
  json rank0;
  std::string reprotect_mode = "none";
  for (int r = 0; r < o_.np; ++r) {
    const std::string text = ReadFile(dir_ + "/restore.a" + std::to_string(attempt) + ".r" +
                                      std::to_string(r) + ".json");
    json j = json::parse(text, nullptr, false);
    if (text.empty() || j.is_discarded()) continue;
    ++ranks;
    t_begin = ranks == 1 ? j.value("t_begin", 0.0) : std::min(t_begin, j.value("t_begin", 0.0));
    t_end = std::max(t_end, j.value("t_end", 0.0));
    if (!j.value("ok", false)) {
      ++failed;
      errors.insert(j.value("error", std::string("?")));
      not_found = not_found || j.value("not_found", false);
      continue;
    }
    versions.insert(j.value("version", uint64_t{0}));
    hashes.insert(j.value("state_hash", std::string()));
    const json& rep = j["report"];
    if (rep.is_object()) {
      for (const auto& e : rep.value("entries", json::array())) {
        entries_by_source[e.value("source", std::string("?"))] += 1;
      }
      // RestoreReport::ToJson: "reprotect" {mode, bytes_received, ...} and
      // "seconds" {transfer, reprotect, ...}.
      const json none = json::object();
      const json& re =
          rep.contains("reprotect") && rep["reprotect"].is_object() ? rep["reprotect"] : none;
      const json& secs =
          rep.contains("seconds") && rep["seconds"].is_object() ? rep["seconds"] : none;
      reprotect_s = std::max(reprotect_s, secs.value("reprotect", 0.0));
      const std::string mode = re.value("mode", std::string("none"));
      // "full" over "minimal" over "none", each possibly ", background".
      const bool full = mode.rfind("full", 0) == 0;
      if (full || (mode != "none" && reprotect_mode == "none")) reprotect_mode = mode;
      transfer_s = std::max(transfer_s, secs.value("transfer", 0.0));
      bytes_received += rep.value("bytes_received", uint64_t{0});
      reprotect_bytes += re.value("bytes_received", uint64_t{0});
      if (r == 0) rank0 = rep;
    }
  }
  if (ranks == 0) return;
  json& out = *restore;
  out["ranks_reported"] = ranks;
  out["ok"] = failed == 0 && versions.size() == 1;
  if (!errors.empty()) out["errors"] = std::vector<std::string>(errors.begin(), errors.end());
  out["nothing_to_restore"] = not_found;
  if (versions.size() == 1) out["version"] = *versions.begin();
  if (versions.size() > 1)
    out["versions"] = std::vector<uint64_t>(versions.begin(), versions.end());
  if (hashes.size() == 1) out["state_hash"] = *hashes.begin();
  out["entries_by_source"] = entries_by_source;
  out["from_remote"] = entries_by_source.count("remote") > 0;
  out["from_memory"] = !entries_by_source.empty() && entries_by_source.count("remote") == 0;
  if (rank0.is_object()) {
    out["lost_nodes"] = rank0.value("lost_nodes", json::array());
    out["source_detail"] = rank0.value("source_detail", std::string());
    out["notes"] = rank0.value("notes", json::array());
  }
  out["reprotect_mode"] = reprotect_mode;
  out["restore_s"] = std::max(0.0, t_end - t_begin - reprotect_s);
  out["reprotect_s"] = reprotect_s;
  out["transfer_s"] = transfer_s;
  out["bytes_received"] = bytes_received;
  out["reprotect_bytes_received"] = reprotect_bytes;
  out["t_begin"] = t_begin - t0_;
}

void Launcher::RecordJob() {
  std::vector<json> planned;
  for (const auto& ev : events_) {
    planned.push_back({{"event", ev.text},
                       {"nodes", ev.nodes},
                       {"step", ev.step},
                       {"stage", InjectStageName(ev.stage)},
                       {"resolved", ev.ToString()}});
  }
  Record({{"record", "job"},
          {"job", o_.job},
          {"np", o_.np},
          {"ranks_per_node", o_.ranks_per_node},
          {"nodes", nodes_},
          {"scheme", o_.scheme},
          {"remote", o_.remote_dir},
          {"persist_every", o_.persist_every},
          {"inject", planned},
          {"seed", o_.seed},
          {"command", o_.command},
          {"status_dir", dir_}});
}

// Time lost to the failures this restore recovered from: detection of each,
// relaunch (or in-job rejoin) up to this restore's begin, the two adding up
// to the time from the first fault to it (SplitLostTime), restore, re-protect,
// and recomputing the steps between the restored version and the newest step
// reached (all of them when nothing could be restored).
json Launcher::TimeLost(const json& restore, const Attempt& a) const {
  const json& first = open_failures_.front();
  const uint64_t from = restore.value("version", uint64_t{0});
  const uint64_t last = open_failures_.back().value("last_step", uint64_t{0});
  json lost, indices = json::array();
  std::vector<LossSpan> spans;
  for (const json& f : open_failures_) {
    indices.push_back(f.value("index", 0));
    const double seen = f.value("t_exit_abs", a.t_launch);
    spans.push_back({seen - f.value("detection_s", 0.0), seen});
  }
  const LostSplit split = SplitLostTime(spans, a.t_restore_begin);
  lost["failures"] = indices;
  lost["steps_lost"] = last > from ? last - from : 0;
  lost["detection_s"] = split.detection_s;
  // In-job: the survivors ran on while the lost ranks were replaced.
  lost["recovery"] = a.t_injob > 0 ? "in-job" : "relaunch";
  lost[a.t_injob > 0 ? "rejoin_s" : "relaunch_s"] = split.wait_s;
  // When rank 0's restore began (run seconds, as a failure's t_fail); absent
  // when it never reported one.
  if (a.t_restore_begin > 0) lost["t_restore_begin"] = a.t_restore_begin - t0_;
  lost["restore_s"] = restore.value("restore_s", 0.0);
  lost["reprotect_s"] = restore.value("reprotect_s", 0.0);
  lost["recompute_s"] =
      static_cast<double>(lost["steps_lost"].get<uint64_t>()) * first.value("step_s", 0.0);
  return lost;
}

// Records what the attempt's restore did, once every rank has reported (or
// when the attempt is over), and closes the books on the open failures.
void Launcher::RecordRestore(Attempt* a, bool attempt_over) {
  json restore = json::object();
  ReadRestores(a->index, &restore);
  if (restore.empty() || (!attempt_over && restore.value("ranks_reported", 0) < o_.np)) return;
  a->restore_recorded = true;
  restore["record"] = "restore";
  restore["attempt"] = a->index;
  const bool all_reported = restore.value("ranks_reported", 0) == o_.np;
  const bool started_over = restore.value("nothing_to_restore", false) && all_reported;
  if (!open_failures_.empty() && (restore.value("ok", false) || started_over)) {
    restore["lost"] = TimeLost(restore, *a);
    open_failures_.clear();
  }
  Record(restore);
  if (all_reported && !restore.value("ok", false) && !restore.value("nothing_to_restore", false)) {
    outcome_ = "unrecoverable";
    exit_code_ = 1;
    message_ = "the job could not restore its state";
    if (restore.contains("errors")) message_ += ": " + restore["errors"][0].get<std::string>();
    a->unrecoverable = true;
  }
}

double Launcher::MedianStepS(const Attempt& a) {
  if (a.step_times.empty()) return 0;
  std::vector<double> times = a.step_times;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// What to do once mpirun has exited: stop (finished, interrupted,
// unrecoverable, too many failures) or relaunch.
Launcher::Next Launcher::AfterExit(Attempt* a) {
  if (a->unrecoverable) return Next::kStop;
  if (a->injob_fallback && !a->fallback_reason.empty() && !g_interrupted) {
    // The failure is recorded and open: the relaunch's restore closes it.
    backoff_ = o_.backoff_s;
    return Next::kRelaunch;
  }
  if (g_interrupted) {
    outcome_ = "interrupted";
    exit_code_ = 130;
    message_ = "interrupted; the job was stopped";
    return Next::kStop;
  }
  const json fault =
      json::parse(ReadFile(dir_ + "/fault.a" + std::to_string(a->index)), nullptr, false);
  const bool stage_fired = !fault.is_discarded() && fault.is_object();
  // A job that reported done before mpirun hung in its teardown finished.
  const bool exited_ok = JobStatus(*a) == 0;
  const bool done_then_stuck = a->mpirun_stuck && a->reported_done;
  if ((exited_ok || done_then_stuck) && !a->killed_by_launcher && !stage_fired) {
    outcome_ = "finished";
    exit_code_ = 0;
    if (final_step_ == 0) final_step_ = a->last_step;
    return Next::kStop;
  }
  if (a->killed_by_launcher || stage_fired) {
    RecordInjectedFailure(*a, stage_fired ? fault : json());
    return Next::kRelaunch;
  }
  return RecordUnplannedFailure(*a);
}

// An injected node loss: the node's memory goes with it. `fault`: the stage
// hook's record (null for a step event).
void Launcher::RecordInjectedFailure(const Attempt& a, const json& fault) {
  const InjectEvent& ev = events_[next_event_++];
  std::vector<std::string> lost_ids, segments;
  for (int node : ev.nodes) {
    lost_ids.push_back(Identity(node));
    for (int lane = 0; lane < o_.ranks_per_node; ++lane) {
      runtime::StoreId id{o_.job, Identity(node), static_cast<uint32_t>(lane)};
      auto name = runtime::NodeStore::SegmentName(id);
      if (runtime::NodeStore::Destroy(id).ok() && name.ok()) segments.push_back(*name);
    }
    ++generation_[node];
    // Under ULFM a spare node takes the place: UlfmWorld hands the lost
    // nodes, lowest first, each to the next node of spares (ReplaceRanks
    // counts the spares handed out). With too few left the job is
    // relaunched, which names the node from its generation again.
    const int m = ulfm_spares_used_ / o_.ranks_per_node +
                  static_cast<int>(std::count_if(ev.nodes.begin(), ev.nodes.end(),
                                                 [&](int other) { return other < node; }));
    const bool spare_left = Ulfm() && m < o_.spares / o_.ranks_per_node;
    spare_name_[node] = spare_left ? UlfmSpareName(ulfm_launch_, m) : "";
    replaced_.push_back("node " + std::to_string(node) + " -> " + Identity(node));
  }
  ++failures_;
  const bool stage_fired = fault.is_object();
  const double t_fail = stage_fired ? fault.value("t", a.t_exit) : a.t_kill;
  json failure = {{"record", "failure"},
                  {"index", failures_},
                  {"attempt", a.index},
                  {"injected", true},
                  {"event", ev.text},
                  {"what", ev.ToString()},
                  {"stage", InjectStageName(ev.stage)},
                  {"nodes", ev.nodes},
                  {"identities", lost_ids},
                  {"segments_unlinked", segments},
                  {"last_step", reached_},
                  {"job_exit", DescribeExit(JobStatus(a))},
                  {"detection_s", std::max(0.0, a.t_exit - t_fail)},
                  {"step_s", MedianStepS(a)},
                  {"t_fail", t_fail - t0_},
                  {"t_exit_abs", a.t_exit}};
  if (stage_fired) failure["stage_version"] = fault.value("version", uint64_t{0});
  if (!stage_fired && a.t_step_report > 0) failure["after_report_s"] = a.t_kill - a.t_step_report;
  Record(failure);
  open_failures_.push_back(failure);
  unplanned_ = 0;
  backoff_ = o_.backoff_s;
}

// A failure nobody injected, open until a restore closes it: timed from when
// the launcher saw it (it did not start the process that ended, or cannot
// tell when it died), with the tail of the job's output; `fields` say what
// failed. It counts in the row of such failures that --max-restarts bounds (a
// generation that trained past every step reported before it starts a new row).
json Launcher::RecordFailureNobodyInjected(const Attempt& a, const json& fields) {
  ++failures_;
  if (a.last_step > a.reached_before) unplanned_ = 0;
  ++unplanned_;
  json failure = {{"record", "failure"},
                  {"index", failures_},
                  {"attempt", a.index},
                  {"injected", false},
                  {"last_step", reached_},
                  {"output_tail", OutputTail(a)},
                  {"detection_s", 0.0},
                  {"step_s", MedianStepS(a)},
                  {"t_fail", a.t_exit - t0_},
                  {"t_exit_abs", a.t_exit}};
  failure.update(fields);
  Record(failure);
  open_failures_.push_back(failure);
  return failure;
}

// A rank that ended with nobody injecting it, recovered in-job.
void Launcher::RecordRankEnded(const Attempt& a, int rank, const std::string& identity,
                               const std::string& job_exit) {
  RecordFailureNobodyInjected(
      a, {{"what", "rank " + std::to_string(rank) + " ended, nobody injected it"},
          {"nodes", {rank / o_.ranks_per_node}},
          {"identities", {identity}},
          {"job_exit", job_exit}});
}

// The last lines of the launch's output; after in-job recoveries, also of
// the fresh replacements of the newest generation (their own log).
std::string Launcher::OutputTail(const Attempt& a) const {
  std::string text = Tail(dir_ + "/attempt" + std::to_string(a.launch_index) + ".log", 15);
  if (a.index != a.launch_index) {
    const std::string log = "attempt" + std::to_string(a.index) + ".log";
    const std::string later = Tail(dir_ + "/" + log, 15);
    if (!later.empty()) text += "\n[" + log + ", the replacements']\n" + later;
  }
  return text;
}

// The job failed with nobody injecting it: relaunched with a doubling
// backoff, at most max_restarts times in a row.
Launcher::Next Launcher::RecordUnplannedFailure(const Attempt& a) {
  const int status = JobStatus(a);
  const json failure =
      RecordFailureNobodyInjected(a, {{"what", "the job failed (" + DescribeExit(status) + ")"},
                                      {"nodes", json::array()},
                                      {"job_exit", DescribeExit(status)},
                                      {"exit_code", ExitCode(status)}});
  if (unplanned_ > o_.max_restarts) {
    message_ = "the job failed " + std::to_string(unplanned_) +
               " times in a row without an injected failure (" + DescribeExit(status) +
               "); giving up after --max-restarts " + std::to_string(o_.max_restarts) +
               ". Last output:\n" + failure["output_tail"].get<std::string>();
    return Next::kStop;
  }
  backoff_ = std::min(o_.backoff_max_s, o_.backoff_s * std::pow(2.0, unplanned_ - 1));
  return Next::kRelaunch;
}

json Launcher::Summary(int segments_removed) const {
  // A job that did not finish (interrupted, given up, unrecoverable) ended
  // at the last step it reported.
  const uint64_t final_step = final_step_ > 0 ? final_step_ : reached_;
  json summary = {{"record", "summary"},
                  {"outcome", outcome_},
                  {"exit_code", exit_code_},
                  {"final_step", final_step},
                  {"state_hash", final_hash_},
                  {"failures", failures_},
                  {"launches", launches_},
                  {"segments_removed", segments_removed},
                  {"injob_recoveries", injob_recoveries_},
                  {"wall_s", Now() - t0_}};
  if (!message_.empty()) summary["message"] = message_;
  double totals[6] = {0, 0, 0, 0, 0, 0};
  uint64_t steps_lost = 0;
  for (const json& r : records_) {
    if (r.value("record", std::string()) != "restore" || !r.contains("lost")) continue;
    const json& l = r["lost"];
    steps_lost += l.value("steps_lost", uint64_t{0});
    totals[0] += l.value("detection_s", 0.0);
    totals[1] += l.value("relaunch_s", 0.0);
    totals[2] += l.value("restore_s", 0.0);
    totals[3] += l.value("reprotect_s", 0.0);
    totals[4] += l.value("recompute_s", 0.0);
    totals[5] += l.value("rejoin_s", 0.0);
  }
  summary["steps_lost"] = steps_lost;
  summary["time_lost_s"] = {{"detection", totals[0]},
                            {"relaunch", totals[1]},
                            {"restore", totals[2]},
                            {"reprotect", totals[3]},
                            {"recompute", totals[4]},
                            {"rejoin", totals[5]}};
  return summary;
}

// A segment still held by a process of this launch (a rank of an interrupted
// job in its teardown, one mpirun left behind) is this run's to clean: that
// process is killed and its lock waited for (5 s at most), so that only
// another launch's hold keeps a segment.
void Launcher::ReleaseOwnSegments() {
  auto names = runtime::ListJobSegments(o_.job);
  if (!names.ok()) return;
  const double until = Now() + 5;
  for (const std::string& name : *names) {
    for (long pid = runtime::ShmSegment::HolderPid(name); pid > 0 && Now() < until;
         pid = runtime::ShmSegment::HolderPid(name)) {
      const Holder holder = HolderOf(static_cast<pid_t>(pid));
      if (holder == Holder::kOther) break;  // another launch's running job
      if (holder == Holder::kThisLaunch) kill(static_cast<pid_t>(pid), SIGKILL);
      // kEnding: a process past its memory's release (its environment reads
      // empty) closes its files next.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// The end of a launch: events that never fired, the job's segments, the
// summary, the timeline or records, and the status folder.
int Launcher::Finish() {
  Progress(true);
  for (size_t i = next_event_; i < events_.size(); ++i) {
    const bool reached = events_[i].stage == InjectStage::kStep && reached_ >= events_[i].step;
    Record({{"record", "not_fired"},
            {"event", events_[i].text},
            {"what", events_[i].ToString()},
            {"why", reached ? "the job ended first" : "never reached"}});
  }
  // The job's segments go, but never those a running process holds (another
  // launch of the same job id, refused at its start, must not take the running
  // one's stores). A job that failed until the launch gave up keeps them: they
  // hold its committed versions, which a rerun of the same job id (the bug
  // fixed) resumes from.
  int segments_removed = 0;
  const bool gave_up = outcome_ == "failed";
  if (!o_.keep_segments && !gave_up) {
    ReleaseOwnSegments();
    std::vector<std::string> kept;
    auto removed = runtime::CleanJob(o_.job, &kept, /*keep_in_use=*/true);
    if (removed.ok()) segments_removed = static_cast<int>(removed->size());
    for (const std::string& name : kept) {
      std::fprintf(stderr, "memento launch: %s left alone\n", name.c_str());
    }
  }
  std::string kept_note;
  if (!o_.keep_segments && gave_up) {
    auto names = runtime::ListJobSegments(o_.job);
    if (names.ok() && !names->empty()) {
      kept_note = "the job's " + std::to_string(names->size()) +
                  " node store segment(s) are kept with its committed versions: a rerun with "
                  "--job " + o_.job + " resumes from them; `memento clean --job " + o_.job +
                  "` frees them";
    }
  }
  Record(Summary(segments_removed));
  if (!o_.records_path.empty()) {
    std::ofstream out(o_.records_path, std::ios::trunc);
    for (const json& r : records_) out << JsonText(r) << "\n";
    out.close();
    if (!out) {
      std::fprintf(stderr, "memento launch: writing the records to %s failed\n",
                   o_.records_path.c_str());
      if (exit_code_ == 0) exit_code_ = 1;
    }
  }
  if (!o_.json) std::fputs(RenderTimeline(records_).c_str(), stdout);
  std::fflush(stdout);
  if (exit_code_ != 0 && !message_.empty()) {
    std::fprintf(stderr, "memento launch: %s\n", message_.c_str());
  }
  if (!kept_note.empty()) std::fprintf(stderr, "memento launch: %s\n", kept_note.c_str());
  if (own_dir_) {
    std::error_code ec;
    if (exit_code_ == 0) {
      fs::remove_all(dir_, ec);
    } else {
      std::fprintf(stderr, "memento launch: job logs kept in %s\n", dir_.c_str());
    }
  }
  return exit_code_;
}

}  // namespace memento::launch::detail
