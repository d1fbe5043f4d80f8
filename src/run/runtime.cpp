// Process-wide run time: initialisation from the environment, thread
// registration, configuration, finish() and the report at exit, fork safety,
// and every other ending: flight-recorder snapshots (the report rewritten,
// incomplete, every STEPSCOPE_SNAPSHOT_S) and the final report a signal's
// handler asks for (endings.cpp), written here on the collector thread.
#include "run/runtime.hpp"

#include "run/endings.hpp"

#include "core/atomic_file.hpp"
#include "core/collector.hpp"
#include "core/env.hpp"
#include "core/registry.hpp"
#include "stats/clock.hpp"
#include "stats/utc_time.hpp"
#include "text/printable.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/stepscope.hpp>
#include "core/trace.hpp"
#include "report/live.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::atomic<std::uint8_t> g_mode{kModeUninitialised};
std::atomic<std::uint32_t> g_steps_started{0};
std::atomic<DeviceBeginHook> g_device_begin{nullptr};
std::atomic<DeviceEndHook> g_device_end{nullptr};
std::atomic<DeviceAbandonHook> g_device_abandon{nullptr};

void device_slot_dropped(std::uint16_t slot) noexcept {
  if (DeviceAbandonHook hook = g_device_abandon.load(std::memory_order_acquire)) hook(slot);
}

namespace {

// The first flight-recorder snapshot comes this early (s), whatever
// STEPSCOPE_SNAPSHOT_S says: a run killed in its first seconds (SIGKILL, the
// OOM killer, _exit, a stack overflow) still leaves a report, and from then on
// the file is at most STEPSCOPE_SNAPSHOT_S old (docs/benchmarks.md: one costs
// about 1 ms of the collector's CPU for 30 phases).
constexpr double kFirstSnapshotSeconds = 1.0;

// Start-up is split in two so that the first record allocates nothing in the
// application's heap. On the thread of the first scope, initialise_runtime()
// reads the few settings it needs without allocating, picks the clock,
// places the thread registry in static storage and starts the collector
// thread: that thread then reads the full settings, probes the device and
// builds the collector, all in its own malloc arena. Why it matters:
// docs/benchmarks-libtorch.md (glibc's trim decisions in a libtorch loop).
//
// Who writes what: "mutex" below is Runtime::mutex; a member marked so is
// read and written only with it held. Lock order: mutex, then the
// collector's own state_mutex_ (Collector::facts()); never the reverse.
struct Runtime {
  std::mutex mutex;                  // initialisation, configuration, finish; see each member
  std::condition_variable ready_cv;  // with mutex: the collector thread has started (or failed to)
  // Written by the collector thread (start_collector), mutex held, before
  // `ready`; read with mutex held (build_report, run_settings). Passed down
  // from here: the device backend gets its part by DeviceBackend::configure().
  Settings settings;
  // set_config (any thread), mutex held; read by build_report, mutex held.
  std::map<std::string, std::string> config, config_types;
  // set_frontend (any thread, the Python package at import), mutex held; read
  // by build_report, mutex held. Empty: C++.
  std::string frontend;
  // set_rank (any thread) or start_collector (from the environment), mutex held.
  int rank = -1, world_size = 1;
  // Set on the first record's thread (initialise_runtime, mutex held), before
  // the mode becomes enabled (release); read lock-free after an acquire load
  // of g_mode (register_thread, on_thread_exit).
  ThreadRegistry* registry = nullptr;
  ClockChoice clock;  // initialise_runtime, mutex held; read-only after
  // Built on the first scope's thread when the program already used the
  // device (see device_in_use); otherwise by the collector thread. Both
  // mutex held; the collector thread takes it (moves it out).
  std::unique_ptr<DeviceBackend> early_device;
  std::string early_device_notice;
  // The collector thread's handle: initialise_runtime starts it, finish_run
  // (or write_final_after_signal, on that very thread) marks it joined; mutex held.
  bool thread_started = false;
  bool thread_joined = false;
  pthread_t thread{};
  // Set by the collector thread when it has started (mutex held; ready_cv).
  bool ready = false;
  // Published by the collector thread with `ready` (mutex held); the
  // Collector synchronises its own state. Destroyed never (static storage).
  std::unique_ptr<Collector> collector;
  bool finished = false;  // the final report is written or being written; mutex held
  // Set in the child by after_fork_child (the forking thread, which holds
  // mutex from before_fork), cleared by adopt_forked_child (mutex held).
  // on_thread_exit reads it without the lock (a thread exits in the child
  // only after the fork returned).
  bool forked_child = false;
  // Set in the child by after_fork_child when the forking thread had scopes
  // open across the fork (a DataLoader worker forked inside the parent's
  // step and fetch): its ring is the parent's. A child that records gives it
  // a ring of its own (initialise_runtime). Mutex held.
  ThreadState* forking_thread = nullptr;
  // In a forked child that records (STEPSCOPE_CHILDREN=1): its pid, which
  // names its report; 0 otherwise. Written by the child's first scope (mutex held).
  long child_pid = 0;
  // monotonic_ns() when recording started (the first scope, mutex held):
  // the origin of the report's interrupted.after_s.
  std::uint64_t recording_started_ns = 0;
  // The "no {rank} in STEPSCOPE_OUT" note was given (mutex held).
  bool path_note_given = false;
  std::string written_path;  // the final report's path; mutex held
  // Snapshots (collector thread), then the final report (after the collector
  // stopped, or on its thread after a signal): never two writers at once.
  ReportFile report_file;
  std::vector<std::string> warnings;  // warn(), mutex held; copied into each report
  std::string device_notice;          // collector thread, mutex held
  // Records that could not be kept: thread past its exit handler, or no ring
  // (allocation failed). Counted as dropped in the report. Any thread, atomic.
  std::atomic<std::uint64_t> lost_records{0};
  // Flight recorder: off after the first failed snapshot or when the report
  // goes to a FIFO or device. Collector thread only (no lock).
  bool snapshots_off = false;
  // Where snapshots go when the report's path cannot be written (reserved at
  // the first failure; the final report uses it too, or removes it).
  std::string fallback_path;
  bool fallback_said = false;
  // monotonic_ns() from which the next snapshot is due: 0 until the first
  // (kFirstSnapshotSeconds into the run). Collector thread only.
  std::uint64_t next_snapshot_ns = 0;
};

// Static storage, never destroyed: threads may still record while static
// objects are being destroyed at exit, so the run time must outlive them;
// and creating it must not allocate.
alignas(Runtime) unsigned char g_runtime_storage[sizeof(Runtime)];
alignas(ThreadRegistry) unsigned char g_registry_storage[sizeof(ThreadRegistry)];

Runtime& runtime() {
  static Runtime* instance = new (g_runtime_storage) Runtime;
  return *instance;
}

std::int64_t current_tid() {
  return static_cast<std::int64_t>(::syscall(SYS_gettid));
}

// A warning of the run time: in every report, and once on stderr. Its
// values and paths come from the environment and the file system: made
// printable (no raw newline or escape sequence reaches the terminal).
void warn(Runtime& rt, const std::string& message) {
  rt.warnings.push_back(printable(message, kMaxWarningChars));
  std::fprintf(stderr, "stepscope: warning: %s\n", rt.warnings.back().c_str());
}

void at_exit_handler() {
  (void)finish_run("exit");
}

// fork(): the child has no collector thread. By default it records nothing
// and writes no report (its parent's report is the run's), and its first
// scope says so on stderr; with STEPSCOPE_CHILDREN=1 its first scope starts
// a run time of its own and it writes its own report (see docs/report-schema.md).
void before_fork() {
  Runtime& rt = runtime();
  rt.mutex.lock();
  if (rt.registry != nullptr) rt.registry->lock_for_fork();
}
void after_fork_parent() {
  Runtime& rt = runtime();
  if (rt.registry != nullptr) rt.registry->unlock_after_fork();
  rt.mutex.unlock();
}
void after_fork_child() {
  Runtime& rt = runtime();
  rt.forked_child = true;
  if (rt.registry != nullptr) rt.registry->unlock_after_fork();
  // CUDA must not be used in a forked child before exec: scopes open across
  // the fork close without their device hooks (they load them at close).
  g_device_begin.store(nullptr, std::memory_order_relaxed);
  g_device_end.store(nullptr, std::memory_order_relaxed);
  g_device_abandon.store(nullptr, std::memory_order_relaxed);
  // No collector thread here: a signal, crash or std::terminate in the child
  // must not wait for a report nobody writes (multiprocessing's
  // Pool.terminate() and Process.terminate() send SIGTERM; each child waited
  // the whole 5 s budget). adopt_forked_child resets both when the child records.
  forget_collector_after_fork();
  // The next scope decides (initialise_runtime): recording was on, or not
  // started yet. Off (STEPSCOPE=0, finished) stays off.
  if (g_mode.load(std::memory_order_relaxed) == kModeEnabled) {
    g_mode.store(kModeUninitialised, std::memory_order_relaxed);
    // This thread's ring is the parent's: registered anew on the next scope,
    // unless scopes are open across the fork (their ends need a ring; what
    // they record in the child is lost).
    ThreadState& ts = t_thread_state;
    if (ts.depth == 0)
      ts.ring = nullptr;
    else
      rt.forking_thread = &ts;
  }
  rt.mutex.unlock();
}

// A forked child's first scope (rt.mutex held): false when the child does not
// record (one line on stderr says so), true when it starts its own run time.
// Async-signal-safe calls only until it decides to record: no allocation.
bool adopt_forked_child(Runtime& rt, const EarlySettings& early) noexcept {
  if (!early.children) {
    char line[200];
    const int n = std::snprintf(line, sizeof line,
                                "stepscope: process %ld is a forked child: its phases are not recorded "
                                "(STEPSCOPE_CHILDREN=1 gives each child its own report)\n",
                                static_cast<long>(::getpid()));
    if (n > 0)
      (void)!::write(STDERR_FILENO, line,
                     static_cast<std::size_t>(n < static_cast<int>(sizeof line) ? n : sizeof line - 1));
    return false;
  }
  // The parent's collector thread does not exist here: forget it (its memory
  // is the parent's, shared copy-on-write; destroying it would join a thread
  // that is not there) and start afresh.
  // Kept reachable on purpose (a deliberate, bounded leak of one parent's
  // state per fork): LeakSanitizer must not report it, and nothing frees it.
  static Collector* inherited_collector = nullptr;
  static DeviceBackend* inherited_device = nullptr;
  inherited_collector = rt.collector.release();
  inherited_device = rt.early_device.release();
  (void)inherited_collector;
  (void)inherited_device;
  rt.thread_started = rt.thread_joined = rt.ready = rt.finished = false;
  rt.path_note_given = false;
  rt.snapshots_off = false;
  rt.fallback_path.clear();
  rt.fallback_said = false;
  rt.next_snapshot_ns = 0;
  rt.written_path.clear();
  rt.warnings.clear();
  rt.lost_records.store(0, std::memory_order_relaxed);
  rt.child_pid = static_cast<long>(::getpid());
  rt.forked_child = false;
  rt.registry = nullptr;  // a new one below (the parent's rings are the parent's)
  reset_endings_in_child();
  return true;
}

// A recording thread's exit: its ring is marked for retirement. A pthread key
// rather than a thread_local object, because registering a thread_local
// destructor allocates; the key's value lives in the thread descriptor.
// (The main thread is not registered: its exit is the process's, and
// finish() drains every ring.)
pthread_key_t g_exit_key;
bool g_exit_key_ok = false;

void on_thread_exit(void* value) {
  auto* state = static_cast<ThreadState*>(value);
  if (state == nullptr || state->ring == nullptr) return;
  close_next_step(*state);  // the thread's last next_step() step ends with it
  Runtime& rt = runtime();
  if (rt.registry != nullptr && !rt.forked_child) rt.registry->retire(state->ring);
  state->ring = nullptr;
  state->exited = true;
}

// Registered when the library is loaded, in every process that links it,
// whether stepscope is on or off: so turning it on registers nothing new
// (each of these may allocate) at the first record. The exit handler is
// registered once more by the collector thread after the device probe (see
// start_collector); this one only covers a process that exits before that.
struct LoadTimeRegistration {
  LoadTimeRegistration() noexcept {
    g_exit_key_ok = pthread_key_create(&g_exit_key, on_thread_exit) == 0;
    std::atexit(at_exit_handler);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    // An uncaught exception before the first scope (a dataset not found)
    // says that nothing was recorded (on_terminate), then ends as before.
    const EarlySettings early = read_early_settings();
    if (early.enabled && early.signals) {
      const std::terminate_handler previous = std::set_terminate(on_terminate);
      if (previous != on_terminate) g_previous_terminate.store(previous);
    }
  }
};
const LoadTimeRegistration g_load_time_registration;

// This process's report path (rt.mutex held); the first time a rank or
// child-pid tag is added to STEPSCOPE_OUT, one warning says so.
std::string report_path(Runtime& rt) {
  std::string note;
  std::string path =
      process_output_path(rt.settings.out, "stepscope-report.json", rt.rank, rt.world_size, rt.child_pid, note);
  if (!note.empty() && !rt.path_note_given) {
    rt.path_note_given = true;
    warn(rt, note);
  }
  return path;
}

void write_snapshot(Runtime& rt) noexcept;
void write_final_after_signal(Runtime& rt, int pending) noexcept;

// The collector thread: finishes the start-up (everything that allocates),
// publishes the collector, then drains until finish() stops it. Returns the
// collector (owned by the run time; finish() joins this thread before it
// stops and reads it).
Collector* start_collector(Runtime& rt) {
  std::vector<std::string> env_warnings;
  Settings settings = read_settings(env_warnings);
  long child_pid = 0;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    child_pid = rt.child_pid;
    // install_signal_handlers ran in the first scope (initialise_runtime).
    if (settings.signals) {
      if (rt.frontend == "python") observe_signal_handlers();
      // In front of the handler the program has now (one it set after the
      // load-time install replaced ours); on_terminate already: keep the one
      // it calls.
      const std::terminate_handler previous = std::set_terminate(on_terminate);
      if (previous != on_terminate) g_previous_terminate.store(previous);
    }
  }
  // A forked child that records (STEPSCOPE_CHILDREN=1), a DataLoader worker
  // above all, runs no steps of its own: its step number stays its parent's
  // at the fork (0 for workers started with the first epoch), and every record
  // would count as warm-up. Its phases count from its first record unless
  // STEPSCOPE_WARMUP says otherwise.
  if (child_pid > 0 && !settings.warmup_from_env) settings.warmup_steps = 0;
  CollectorOptions options;
  options.ring_capacity = rt.registry->ring_capacity();
  options.interval = std::chrono::milliseconds(settings.interval_ms);
  options.min_interval = settings.interval_from_env ? options.interval : std::chrono::milliseconds(1);
  options.aggregator.warmup_steps = settings.warmup_steps;
  const bool trace_valid = parse_trace_window(settings.trace, options.trace);
  if (!trace_valid) options.trace = TraceWindow{};
  options.trace_max_events = settings.trace_max_events;
  options.live_interval_s = settings.live_interval_s;
  options.live_forced = settings.live_forced;
  options.live_line = [tracker = LiveTracker{}](const Report& facts, double elapsed_s, std::size_t max_width) mutable {
    return format_live_line(tracker.update(facts, elapsed_s), max_width);
  };
  options.start_thread = false;  // this thread runs the loop
  // The collector offers a snapshot every kFirstSnapshotSeconds at most;
  // write_snapshot keeps to STEPSCOPE_SNAPSHOT_S after the first.
  options.snapshot_interval_s = std::min(settings.snapshot_interval_s, kFirstSnapshotSeconds);
  options.quiet = settings.quiet;
  options.on_snapshot = [&rt] { write_snapshot(rt); };
  std::string device_notice;
  std::unique_ptr<DeviceBackend> device;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    device = std::move(rt.early_device);
    device_notice = rt.early_device_notice;
  }
  if (!device) device = make_device_backend(settings.device, device_notice);
  auto collector = std::make_unique<Collector>(options, std::move(device), rt.registry);
  Collector* published = collector.get();
  // Exit handlers run in reverse order of registration: registered after the
  // device probe, finish() runs before the CUDA runtime's own exit handler
  // (registered when the probe or the program first used CUDA) tears it down.
  // From this thread, so that any block glibc allocates for the list comes
  // from this thread's arena.
  std::atexit(at_exit_handler);
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    for (const auto& w : env_warnings) warn(rt, w);
    if (rt.clock.override_invalid)
      warn(rt, "STEPSCOPE_CLOCK='" + printable(settings.clock, kMaxQuotedValueChars) +
                   "' is not 'tsc' or 'monotonic'; using the default");
    if (!trace_valid)
      warn(rt, "STEPSCOPE_TRACE='" + printable(settings.trace, kMaxQuotedValueChars) +
                   "' is invalid (expected A-B, N, slow or slow:MS); no trace is written");
    // In the report's device section only: a CPU-only run of a CUDA build is
    // no news worth a line on every run's stderr.
    rt.device_notice = device_notice;
    if (rt.rank < 0) {
      rt.rank = settings.rank;
      rt.world_size = settings.world_size;
    }
    rt.settings = std::move(settings);
    rt.collector = std::move(collector);
    rt.ready = true;
  }
  rt.ready_cv.notify_all();
  // After a signal that came before the collector existed, the loop returns at once.
  g_signal_collector.store(published);
  if (g_pending_signal.load() != 0) published->request_stop();
  return published;
}

void* collector_thread_main(void*) {
  Runtime& rt = runtime();
  (void)pthread_setname_np(pthread_self(), "stepscope");
  // Termination signals go to the application's threads: this thread writes
  // the final report a handler asks for, so it must not be the one waiting.
  block_termination_signals(nullptr);
  g_collector_tid.store(current_tid());
  // This thread never blocks on rt.mutex while it runs the loop: finish()
  // holds it while it joins this thread (start_collector takes it only
  // briefly, before the loop; snapshots and the signal path only try_lock).
  Collector* collector = nullptr;
  try {
    collector = start_collector(rt);
  } catch (...) {
    // Out of memory while starting: stay out of the way for the rest of the run.
    g_mode.store(kModeDisabled, std::memory_order_release);
    std::fputs("stepscope: error: could not start (out of memory?); nothing is recorded in this run\n", stderr);
    set_final_state(kFinalAbandoned);  // a signal's handler waits for no report
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      rt.ready = true;
    }
    rt.ready_cv.notify_all();
    return nullptr;
  }
  collector->run_loop();
  if (const int pending = g_pending_signal.load(); pending != 0) write_final_after_signal(rt, pending);
  return nullptr;
}

// Waits until the collector thread has started (or failed to); rt.mutex held
// through `lock`. True when there is a collector.
bool wait_until_ready(Runtime& rt, std::unique_lock<std::mutex>& lock) {
  if (!rt.thread_started) return false;
  rt.ready_cv.wait(lock, [&rt] { return rt.ready; });
  return rt.collector != nullptr;
}

}  // namespace

// Runs inside the first scope of the process, on the user's thread. It must
// not allocate (see the comment on Runtime): only getenv, a file read with
// open/read, sigaction, static storage and pthread_create (whose one small calloc, the
// new thread's TLS vector, glibc makes on the creating thread). The one
// exception: a program that already uses the device (device_in_use).
bool initialise_runtime() noexcept {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const std::uint8_t mode = g_mode.load(std::memory_order_acquire);
  if (mode != kModeUninitialised) return mode == kModeEnabled;
  const EarlySettings early = read_early_settings();
  if (!early.enabled || (rt.forked_child && !adopt_forked_child(rt, early))) {
    g_mode.store(kModeDisabled, std::memory_order_release);
    return false;
  }
  rt.clock = choose_clock(early.clock);  // before any record: it decides what a tick is
  // With start-up rings: what the first threads record before the
  // collector's first drain is kept (see kStartupRingRecords).
  rt.registry = new (g_registry_storage) ThreadRegistry(early.ring_capacity, /*startup_burst=*/true);
  // A program that already runs device work gets device timing from its
  // first step: the backend (and its hooks) are ready before this scope
  // records. This allocates, but such a program's heap is shaped by the
  // device runtime anyway.
  if (device_in_use()) rt.early_device = make_device_backend(early.device, rt.early_device_notice);
  if (pthread_create(&rt.thread, nullptr, collector_thread_main, nullptr) != 0) {
    std::fputs("stepscope: warning: cannot start the collector thread; nothing is recorded in this run\n", stderr);
    g_mode.store(kModeDisabled, std::memory_order_release);
    return false;
  }
  rt.thread_started = true;
  rt.recording_started_ns = monotonic_ns();
  g_mode.store(kModeEnabled, std::memory_order_release);
  // The handlers go in with the first scope, not when the collector thread
  // gets to run: a signal before the collector exists asks for the final
  // report, which the collector writes as soon as it is published. Installed
  // by the collector thread, a signal in the first steps of a loaded
  // machine's run (CI, under ASan) ended it with no report.
  if (early.signals) install_signal_handlers();
  if (ThreadState* ts = std::exchange(rt.forking_thread, nullptr)) {
    // The forking thread (the child's main thread, tid = pid) records into a
    // ring of its own; its scopes open across the fork are the parent's, and
    // the child's scopes do not nest in them. Without a ring the parent's
    // copy stays: the open scopes' ends go there, drained by nobody.
    ts->depth = ts->step_depth = 0;
    ts->next_step.active = false;
    if (ThreadRing* ring = rt.registry->add(static_cast<std::int64_t>(::getpid()))) ts->ring = ring;
  }
  return true;
}

ThreadRing* register_thread(ThreadState& state) noexcept {
  Runtime& rt = runtime();
  // The acquire load pairs with initialise_runtime's release store: only
  // after it may rt.registry be read (the hot path's relaxed load does not
  // order it).
  if (g_mode.load(std::memory_order_acquire) != kModeEnabled || state.exited || rt.registry == nullptr) {
    rt.lost_records.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  const std::int64_t tid = current_tid();
  ThreadRing* ring = rt.registry->add(tid);
  if (ring == nullptr) {
    rt.lost_records.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (g_exit_key_ok && tid != static_cast<std::int64_t>(::getpid())) (void)pthread_setspecific(g_exit_key, &state);
  state.ring = ring;
  return ring;
}

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

Report build_report(bool final_report) {
  Runtime& rt = runtime();
  Report report;
  if (rt.collector) {
    if (final_report) rt.collector->stop();
    report = rt.collector->facts();
  }
  const std::uint64_t lost = rt.lost_records.load(std::memory_order_relaxed);
  report.dropped_records += lost;
  report.total_records += lost;
  report.run.library_version = STEPSCOPE_VERSION_STRING;
  report.run.time_utc = utc_now_iso();
  report.run.host = host_name();
  report.run.pid = static_cast<std::int64_t>(::getpid());
  report.run.rank = rt.rank;
  report.run.world_size = rt.world_size;
  report.run.source = "live";
  report.run.config = rt.config;
  report.run.config_types = rt.config_types;
  report.run.build = build_options();
  if (!rt.frontend.empty()) report.run.build["frontend"] = rt.frontend;
  report.run.warmup_steps = rt.settings.warmup_steps;
  report.run.warmup_source = rt.settings.warmup_from_env ? "env" : "default";
  for (const auto& w : rt.warnings) report.warnings.push_back(w);
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
  if (report.device.status.empty()) {
    report.device.status = "unknown";
    report.device.reason = "no device backend reported";
  }
  analyze(report);
  return report;
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
    std::fputs(format_summary(report).c_str(), stderr);
    // After a signal the collector's own line says where (write_final_after_signal).
    if (from_finish && rt.written_path != "<stderr>")
      std::fprintf(stderr, "stepscope: report written to %s\n", printable(rt.written_path, kMaxWarningChars).c_str());
  }
  return rt.written_path;
}

// Collector thread, every STEPSCOPE_SNAPSHOT_S: the report so far, marked
// incomplete, over the report path. Never waits for rt.mutex (finish() holds
// it while it joins this thread): a busy mutex skips this snapshot. Not
// fsync'ed: a snapshot is for a process that dies, whose written pages the
// kernel keeps; syncing every few seconds would only cost the disk.
void write_snapshot(Runtime& rt) noexcept {
  try {
    const std::uint64_t now = monotonic_ns();
    if (rt.snapshots_off || g_final_state.load() != kFinalNone || now < rt.next_snapshot_ns) return;
    std::unique_lock<std::mutex> lock(rt.mutex, std::try_to_lock);
    if (!lock.owns_lock() || rt.finished) return;
    const std::string path = report_path(rt);
    if (is_stream_target(path)) {  // a FIFO or device takes one report, the final one
      rt.snapshots_off = true;
      return;
    }
    Report report = build_report(false);
    lock.unlock();
    if (report.total_records == 0) return;  // nothing to tell yet (the next offer retries): no file over anyone's
    report.complete = false;
    rt.next_snapshot_ns = now + static_cast<std::uint64_t>(rt.settings.snapshot_interval_s * 1e9);
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
  } catch (...) {
    // Out of memory: the next snapshot retries.
  }
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

}  // namespace

// The program's first call of set_config or set_rank: an exit before its
// first scope says that nothing was recorded (finish_run). A process that
// only links the library (the CLI, a test) says nothing.
namespace {
std::atomic<bool> g_api_used{false};
}  // namespace
void note_api_use() noexcept {
  g_api_used.store(true, std::memory_order_relaxed);
}

std::string finish_run(const char* ended_by) noexcept {
  try {
    auto& rt = runtime();
    std::unique_lock<std::mutex> lock(rt.mutex);
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
      if (never_started && g_api_used.load() && read_early_settings().enabled) say_nothing_was_recorded("");
      if (rt.thread_started && !rt.thread_joined) {
        pthread_join(rt.thread, nullptr);
        rt.thread_joined = true;
      }
      set_final_state(kFinalAbandoned);
      return "";
    }
    rt.collector->request_stop();
    if (!rt.thread_joined) {
      pthread_join(rt.thread, nullptr);
      rt.thread_joined = true;
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

void set_config(const std::string& key, const std::string& value) noexcept {
  detail::note_api_use();
  try {
    auto& rt = detail::runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    rt.config[key] = value;
    rt.config_types[key] = "string";
  } catch (...) {
  }
}

void set_frontend(const char* name) noexcept {
  try {
    auto& rt = detail::runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    rt.frontend = name != nullptr ? detail::printable(name, 32) : "";
  } catch (...) {
  }
}

void set_config(const std::string& key, const char* value) noexcept {
  set_config(key, std::string(value != nullptr ? value : ""));
}

void set_config(const std::string& key, double value) noexcept {
  detail::note_api_use();
  try {
    auto& rt = detail::runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    rt.config[key] = buf;
    rt.config_types[key] = "number";
  } catch (...) {
  }
}

void set_rank(int rank, int world_size) noexcept {
  detail::note_api_use();
  auto& rt = detail::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  rt.rank = rank;
  rt.world_size = world_size > 0 ? world_size : 1;
}

bool enabled() noexcept {
  return detail::g_mode.load(std::memory_order_relaxed) == detail::kModeEnabled ||
         (detail::g_mode.load(std::memory_order_relaxed) == detail::kModeUninitialised && detail::initialise_runtime());
}

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
