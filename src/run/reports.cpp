// The run's reports: the report built from the collector's facts, the
// flight-recorder snapshots (the report rewritten, incomplete, every
// STEPSCOPE_SNAPSHOT_S; to the private fallback file when its path cannot be
// written), and the final report of every ending: finish(), the exit handler,
// and a signal's request (endings.cpp), written on the collector thread.
#include "run/runtime_state.hpp"

#include "run/endings.hpp"

#include "core/atomic_file.hpp"
#include "stats/utc_time.hpp"
#include "text/printable.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/stepscope.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Run-time-named sites (<stepscope/site.hpp>): their counts, and a warning
// when the bound folded names together.
static void add_runtime_site_counts(Report& report) {
  const RuntimeSiteCounts counts = runtime_site_counts();
  report.runtime_sites.sites = counts.sites;
  report.runtime_sites.overflow = counts.overflow;
  report.runtime_sites.truncated = counts.truncated;
  if (counts.overflow != 0)
    report.warnings.push_back(std::to_string(counts.overflow) + " run-time phase name lookups found the table full (" +
                              std::to_string(kMaxRuntimeSites) +
                              " sites): their phases are merged under \"(other run-time names)\"");
}

namespace {

// What a report says of the run that other threads change under rt.mutex
// (set_config, set_rank, set_frontend, warn): copied with it held, so that a
// snapshot is built and written without it (see write_snapshot).
struct RunStamp {
  int rank = -1, world_size = 1;
  std::map<std::string, std::string> config, config_types;
  std::string frontend;
  std::vector<std::string> warnings;
};

RunStamp run_stamp(const Runtime& rt) {
  return RunStamp{rt.rank, rt.world_size, rt.config, rt.config_types, rt.frontend, rt.warnings};
}

Report build_stamped_report(bool final_report, const RunStamp& stamp) {
  Runtime& rt = runtime();
  Report report;
  if (rt.collector) {
    if (final_report) rt.collector->stop();
    report = rt.collector->facts();
  }
  const std::uint64_t lost = rt.lost_records.load(std::memory_order_relaxed);
  report.dropped_records += lost;
  report.total_records += lost;
  report.steps.next_step_ignored = detail::next_steps_ignored();
  report.run.library_version = STEPSCOPE_VERSION_STRING;
  report.run.time_utc = utc_now_iso();
  report.run.host = host_name();
  report.run.pid = static_cast<std::int64_t>(::getpid());
  report.run.rank = stamp.rank;
  report.run.world_size = stamp.world_size;
  report.run.local_ranks = rt.settings.local_ranks > 0
                               ? rt.settings.local_ranks
                               : detail::local_ranks_from_rendezvous(stamp.world_size, report.run.host);
  report.run.source = "live";
  report.run.config = stamp.config;
  report.run.config_types = stamp.config_types;
  if (const int threads = detail::torch_intra_op_threads();
      threads > 0 && report.run.config.count("intra_op_threads") == 0) {
    report.run.config["intra_op_threads"] = std::to_string(threads);  // a libtorch program's (steps() read it)
    report.run.config_types["intra_op_threads"] = "number";
  }
  for (const auto& [key, value] : rt.settings.knobs) {
    // What torch made of OMP_NUM_THREADS, where stepscope.torch recorded it,
    // is the one setting: a thread change is one change in `stepscope diff`.
    if (report.run.config.count("intra_op_threads") > 0 &&
        (key == "env:OMP_NUM_THREADS" || key == "env:MKL_NUM_THREADS"))
      continue;
    if (report.run.config.emplace(key, value).second) report.run.config_types[key] = "string";
  }
  report.run.build = build_options();
  if (!stamp.frontend.empty()) report.run.build["frontend"] = stamp.frontend;
  report.run.warmup_steps = rt.settings.warmup_steps;
  report.run.warmup_source = rt.settings.warmup_from_env ? "env" : "default";
  for (const auto& w : stamp.warnings) report.warnings.push_back(w);
  if (const int sig = g_first_signal.load(); sig != 0) {
    const std::uint64_t at = g_first_signal_ns.load();
    report.interrupted = Report::Interruption{
        ending_name(sig), at > rt.recording_started_ns ? static_cast<double>(at - rt.recording_started_ns) / 1e9 : 0.0};
  }
  std::string exception_type, exception_message;
  if (std::uint64_t at = 0; noted_exception(exception_type, exception_message, at)) {
    report.exception = Report::UncaughtException{
        printable(exception_type, kExceptionTypeBytes), printable(exception_message, kExceptionMessageBytes),
        at > rt.recording_started_ns ? static_cast<double>(at - rt.recording_started_ns) / 1e9 : 0.0};
  }
  add_runtime_site_counts(report);
  if (const std::uint32_t first = rt.collective_first_step.load(std::memory_order_relaxed); first > 0) {
    // The communicating stretch: from the first noting step to the last, and
    // one period after it (n notes every k steps span (n - 1) k + 1 steps).
    const double span = rt.collective_last_step.load(std::memory_order_relaxed) - first;
    const double noted = static_cast<double>(rt.collective_steps.load(std::memory_order_relaxed));
    report.communication = CommunicationVolume{
        rt.collectives.load(std::memory_order_relaxed), rt.collective_bytes.load(std::memory_order_relaxed),
        noted > 1 ? static_cast<std::uint64_t>(std::llround(span * noted / (noted - 1))) : 1};
  }
  if (report.device.status.empty()) {
    report.device.status = "unknown";
    report.device.reason = "no device backend reported";
  }
  analyze(report);
  return report;
}

}  // namespace

Report build_report(bool final_report) {
  return build_stamped_report(final_report, run_stamp(runtime()));
}

Settings run_settings() noexcept {
  try {
    Runtime& rt = runtime();
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      if (rt.ready && rt.collector) return rt.settings;
    }
    // Recording never started (STEPSCOPE=0, nothing recorded yet): read now;
    // the run time words the warnings when it starts.
    std::vector<std::string> ignored;
    return read_settings(ignored);
  } catch (...) {
    return Settings{};
  }
}

namespace {

// A run that finish() or the exit handler was ending when a signal of ours
// came: it dies of that signal (the handler re-raises it once the report is out).
void mark_ended_by_signal(Runtime& rt, Report& report, int sig) {
  report.ended_by = ending_name(sig);
  if (!report.interrupted) {
    const std::uint64_t now = monotonic_ns();
    report.interrupted = Report::Interruption{
        report.ended_by,
        now > rt.recording_started_ns ? static_cast<double>(now - rt.recording_started_ns) / 1e9 : 0.0};
  }
}

// The final report (rt.mutex held, the collector's loop ended): trace first,
// so that its warnings are in the report. Returns the path written.
// from_finish: finish() or the exit handler wrote it (not a signal's request).
std::string write_final_report(Runtime& rt, const char* ended_by, bool from_finish) {
  const std::string path = report_path(rt);
  Report report = build_report(true);
  report.complete = true;
  report.ended_by = ended_by;
  // finish() or the exit handler with a signal of ours under way: the
  // process dies of it once this report is out, and the report says so.
  int fatal = from_finish ? fatal_signal_now() : 0;
  if (fatal != 0) mark_ended_by_signal(rt, report, fatal);
  if (report.total_records == 0) {
    // Nothing recorded (stepscope imported or started, no phase ever ended):
    // no report, and above all none over a file that is someone else's.
    if (!rt.settings.quiet)
      std::fputs("stepscope: nothing was recorded in this process (no phase ended): no report written\n", stderr);
    return rt.written_path = "";
  }
  write_trace_if_enabled(*rt.collector, report, rt.settings, path, rt.child_pid);
  rt.written_path = write_report_with_fallback(rt.report_file, report, path, rt.rank, rt.fallback_path);
  if (from_finish && fatal == 0 && (fatal = fatal_signal_now()) != 0) {
    // The signal came while the report was written: written again, so that
    // neither the file nor the summary reads as a run that ended by itself.
    mark_ended_by_signal(rt, report, fatal);
    rt.written_path = write_report_with_fallback(rt.report_file, report, path, rt.rank, rt.fallback_path);
  }
  if (!rt.settings.quiet) {
    (void)write_to_descriptor(STDERR_FILENO, format_summary(report));  // a stalled reader costs seconds, not a hang
    // After a signal the collector's own line says where (write_final_after_signal).
    if (from_finish && rt.written_path != "<stderr>")
      std::fprintf(stderr, "stepscope: report written to %s\n", printable(rt.written_path, kMaxWarningChars).c_str());
  }
  return rt.written_path;
}

}  // namespace

// Collector thread, every STEPSCOPE_SNAPSHOT_S: the report so far, marked
// incomplete, over the report path. Never waits for rt.mutex (finish() holds
// it while it joins this thread): a busy mutex skips this snapshot. Holds it
// only to copy what other threads change: the path's file-system calls and
// the report's build (seconds for a large one; forever on a hung network
// mount) run without it, since fork() (before_fork), set_config and finish()
// wait for that mutex. Not fsync'ed: a snapshot is for a process that dies,
// whose written pages the kernel keeps; syncing every few seconds would only
// cost the disk.
bool write_snapshot(Runtime& rt) noexcept {
  try {
    if (rt.snapshots_off || g_final_state.load() != kFinalNone) return true;
    std::unique_lock<std::mutex> lock(rt.mutex, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (rt.finished) return true;
    const RunStamp stamp = run_stamp(rt);
    lock.unlock();
    std::string note;
    const std::string path =
        process_output_path(rt.settings.out, "stepscope-report.json", stamp.rank, stamp.world_size, rt.child_pid, note);
    if (!note.empty() && lock.try_lock()) {
      if (!rt.path_note_given) {
        rt.path_note_given = true;
        warn(rt, note);
      }
      lock.unlock();
    }
    if (is_stream_target(path)) {  // a FIFO or device takes one report, the final one
      rt.snapshots_off = true;
      return true;
    }
    Report report = build_stamped_report(false, stamp);
    if (report.total_records == 0) return false;  // nothing to tell yet (retried soon): no file over anyone's
    report.complete = false;
    report.snapshot_time_utc = report.run.time_utc;
    std::string error, written;
    if (!rt.report_file.write(path, report, /*durable=*/false, written, error)) {
      // Snapshots go to the private fallback file until the final report
      // (which tries the path again): a crash still leaves one.
      std::string fallback_error;
      if ((!rt.fallback_path.empty() || reserve_fallback(rt.rank, rt.fallback_path, fallback_error)) &&
          write_file_atomically(rt.fallback_path, report_to_json(report) + "\n", fallback_error, /*durable=*/false)) {
        if (!rt.fallback_said)
          std::fprintf(stderr,
                       "stepscope: warning: cannot write a snapshot of the report to '%s' (%s); snapshots go to '%s' "
                       "(the final report tries '%s' again)\n",
                       printable(written, kMaxWarningChars).c_str(), printable(error).c_str(),
                       printable(rt.fallback_path, kMaxWarningChars).c_str(),
                       printable(written, kMaxWarningChars).c_str());
        rt.fallback_said = true;
      } else {
        rt.snapshots_off = true;
        std::fprintf(stderr,
                     "stepscope: warning: cannot write a snapshot of the report to '%s' (%s) nor to a fallback "
                     "file (%s); no more snapshots\n",
                     printable(written, kMaxWarningChars).c_str(), printable(error).c_str(),
                     printable(fallback_error).c_str());
      }
    }
    return true;
  } catch (...) {
    // Out of memory: the next snapshot retries.
  }
  return false;
}

// Collector thread, its loop ended by a termination signal (or std::terminate:
// `pending` as in g_pending_signal): the final report unless finish() is
// writing it already. A thread interrupted by the signal
// may hold rt.mutex (set_config, snapshot()): wait for it a bounded time, then
// give up (the last snapshot remains) rather than miss the handler's deadline.
void write_final_after_signal(Runtime& rt, int pending) noexcept {
  std::uint32_t none = kFinalNone;
  if (!g_final_state.compare_exchange_strong(none, kFinalWriting)) return;
  g_mode.store(kModeDisabled, std::memory_order_release);
  try {
    std::unique_lock<std::mutex> lock(rt.mutex, std::defer_lock);
    for (int tries = 0; tries < 40 && !lock.try_lock(); ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!lock.owns_lock() || rt.finished || !rt.collector) {
      set_final_state(kFinalAbandoned);
      return;
    }
    rt.finished = true;
    rt.thread_joined = true;  // this thread: nothing for finish() to join (it would wait on itself)
    const std::string path = write_final_report(rt, ending_name(pending), /*from_finish=*/false);
    if (!rt.settings.quiet && !path.empty())
      std::fprintf(stderr, "stepscope: %s: report written to %s\n", ending_name(pending),
                   printable(path, kMaxWarningChars).c_str());
    set_final_state(kFinalWritten);
  } catch (...) {
    set_final_state(kFinalAbandoned);
  }
}

namespace {

// finish() and the exit handler never wait without end: the thread that calls
// exit() may be a signal handler's, interrupting this very thread inside
// stepscope with rt.mutex held (it would wait for itself), and the collector
// may be stuck in a write to a hung network mount. Past these bounds the run
// ends without its final report (the last snapshot stays) and says why.
constexpr auto kFinishLockBound = std::chrono::seconds(10);
constexpr int kFinishJoinBoundS = 30;

bool lock_within_bound(std::unique_lock<std::mutex>& lock) {
  const auto deadline = std::chrono::steady_clock::now() + kFinishLockBound;
  while (!lock.try_lock()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Joins the collector thread, at most kFinishJoinBoundS seconds. False: it
// did not end (left running; the process's exit ends it).
bool join_collector(Runtime& rt) {
  if (rt.thread_joined) return true;
  timespec deadline{};
  ::clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += kFinishJoinBoundS;
  if (::pthread_timedjoin_np(rt.thread, nullptr, &deadline) != 0) {
    std::fprintf(stderr,
                 "stepscope: error: the collector thread did not stop within %d s (a write of the report stuck "
                 "on a slow or hung file system?): no final report; the last snapshot, if any, stays\n",
                 kFinishJoinBoundS);
    return false;
  }
  rt.thread_joined = true;
  return true;
}

}  // namespace

std::string finish_run(const char* ended_by) noexcept {
  try {
    auto& rt = runtime();
    std::unique_lock<std::mutex> lock(rt.mutex, std::defer_lock);
    static std::atomic<bool> gave_up{false};  // the exit handler runs twice (see start_collector): say it once
    if (gave_up.load() || !lock_within_bound(lock)) {
      if (gave_up.exchange(true)) return "";
      std::fputs(
          "stepscope: error: the run could not be ended: stepscope's lock stayed busy (exit() called from a "
          "signal handler that interrupted stepscope?): no final report\n",
          stderr);
      return "";
    }
    if (rt.finished || rt.forked_child) return rt.written_path;
    // A termination signal now must not interrupt this thread's write (its
    // handler would wait for this very report): blocked here, it goes to
    // another thread, or waits until the report is written.
    sigset_t previous;
    block_termination_signals(&previous);
    // A SIGPIPE that the report's own writes raise (stderr or the report on
    // a closed pipe) is dropped, not delivered when the mask is restored.
    struct RestoreMask {
      sigset_t mask;
      bool sigpipe_was_pending;
      ~RestoreMask() {
        consume_own_sigpipe(sigpipe_was_pending);
        ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
      }
    } restore{previous, sigpipe_pending()};
    std::uint32_t none = kFinalNone;
    if (!g_final_state.compare_exchange_strong(none, kFinalWriting)) {
      // The collector thread is writing the report a signal asked for.
      lock.unlock();
      (void)wait_for_final_report(2 * kSignalReportBudgetMs);
      lock.lock();
      return rt.written_path;
    }
    rt.finished = true;
    // The calling thread's last next_step() step ends here (before the
    // collector's final drain); other threads' end when they exit.
    close_next_step(t_thread_state);
    // Scopes opened from now on do not record; scopes already open still
    // push into their rings, which nobody drains any more (harmless).
    const bool never_started = g_mode.exchange(kModeDisabled, std::memory_order_acq_rel) == kModeUninitialised;
    if (!wait_until_ready(rt, lock)) {
      if (rt.thread_started && !rt.ready) {
        std::fprintf(stderr,
                     "stepscope: error: the collector thread did not start within %d s (its device probe stuck in "
                     "the driver?): no report (STEPSCOPE_START_WAIT_S sets the wait)\n",
                     static_cast<int>(rt.start_wait.count()));
      } else {
        if (never_started && g_api_used.load() && read_early_settings().enabled) say_nothing_was_recorded("");
        if (rt.thread_started) (void)join_collector(rt);
      }
      set_final_state(kFinalAbandoned);
      return "";
    }
    rt.collector->request_stop();
    if (!join_collector(rt)) {
      set_final_state(kFinalAbandoned);
      return "";
    }
    write_final_report(rt, ended_by, /*from_finish=*/true);
    set_final_state(kFinalWritten);
    return rt.written_path;
  } catch (...) {
    std::fputs("stepscope: error: could not build the report (out of memory?)\n", stderr);
    set_final_state(kFinalAbandoned);
    return "";
  }
}

}  // namespace detail

Report snapshot() noexcept {
  try {
    auto& rt = detail::runtime();
    std::unique_lock<std::mutex> lock(rt.mutex);
    if (rt.forked_child || !detail::wait_until_ready(rt, lock)) return Report{};
    Report report = detail::build_report(false);
    if (!rt.finished) {  // the run goes on: what a snapshot on disk would say
      report.complete = false;
      report.snapshot_time_utc = report.run.time_utc;
    }
    return report;
  } catch (...) {
    return Report{};
  }
}

std::string finish() noexcept {
  return detail::finish_run("finish");
}

}  // namespace v1
}  // namespace stepscope
