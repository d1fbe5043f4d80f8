// Process-wide run time, start-up and configuration: initialisation from the
// environment at the first scope, the collector thread's start, thread
// registration, fork safety, set_config/set_rank. Its state is in
// runtime_state.hpp; the reports that end a run are in reports.cpp, the
// endings' handlers in endings.cpp.
#include "run/runtime_state.hpp"

#include "run/endings.hpp"

#include "core/atomic_file.hpp"
#include "core/collector.hpp"
#include "core/env.hpp"
#include "core/registry.hpp"
#include "stats/clock.hpp"
#include "text/printable.hpp"

#include <stepscope/stepscope.hpp>
#include "core/trace.hpp"
#include "run/live.hpp"

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

// Static storage, never destroyed: threads may still record while static
// objects are being destroyed at exit, so the run time must outlive them;
// and creating it must not allocate.
alignas(Runtime) unsigned char g_runtime_storage[sizeof(Runtime)];
alignas(ThreadRegistry) unsigned char g_registry_storage[sizeof(ThreadRegistry)];

Runtime& runtime() {
  static Runtime* instance = new (g_runtime_storage) Runtime;
  return *instance;
}

// A warning of the run time: in every report, and once on stderr. Its
// values and paths come from the environment and the file system: made
// printable (no raw newline or escape sequence reaches the terminal).
void warn(Runtime& rt, const std::string& message) {
  rt.warnings.push_back(printable(message, kMaxWarningChars));
  std::fprintf(stderr, "stepscope: warning: %s\n", rt.warnings.back().c_str());
}

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

// Waits until the collector thread has started (or failed to), at most
// rt.start_wait: its start-up probes the device, and a driver can hang
// there; the program's exit or snapshot() must not. rt.mutex held through
// `lock`. True when there is a collector; false with rt.ready unset: it
// did not start in time.
bool wait_until_ready(Runtime& rt, std::unique_lock<std::mutex>& lock) {
  if (!rt.thread_started) return false;
  return rt.ready_cv.wait_for(lock, rt.start_wait, [&rt] { return rt.ready; }) && rt.collector != nullptr;
}

namespace {

std::int64_t current_tid() {
  return static_cast<std::int64_t>(::syscall(SYS_gettid));
}

void at_exit_handler() {
  (void)finish_run("exit");
}

// fork(): the child has no collector thread. By default it records nothing
// and writes no report (its parent's report is the run's), and its first
// scope says so on stderr; with STEPSCOPE_CHILDREN=1 its first scope starts
// a run time of its own and it writes its own report (see docs/report-schema.md).
//
// A collector thread still starting registers the exit handler and may load
// the device runtime, which registers its own: glibc does not reset the lock
// of its exit-handler list in a child, so a fork at that moment leaves a
// child that hangs at its first atexit() or static object (a DataLoader
// worker forked as the first epoch starts: tests/python's slow-data loop hung
// so in a full test run). The fork waits for the start (milliseconds; the
// device probe's time on a GPU machine whose program has not used CUDA yet),
// once at most rt.start_wait; not when the probe itself forks.
void before_fork() {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  if (rt.thread_started && !rt.ready && !rt.start_overdue && g_collector_tid.load() != current_tid() &&
      !rt.ready_cv.wait_for(lock, rt.start_wait, [&rt] { return rt.ready; }))
    rt.start_overdue = true;
  (void)lock.release();  // held across the fork: after_fork_parent and after_fork_child unlock it
  if (rt.registry != nullptr) rt.registry->lock_for_fork();
  lock_step_sites_for_fork();
  lock_sites_for_fork();
}
void unlock_after_fork(Runtime& rt) {
  unlock_sites_after_fork();
  unlock_step_sites_after_fork();
  if (rt.registry != nullptr) rt.registry->unlock_after_fork();
}
void after_fork_parent() {
  Runtime& rt = runtime();
  unlock_after_fork(rt);
  rt.mutex.unlock();
}
void after_fork_child() {
  Runtime& rt = runtime();
  rt.forked_child = true;
  unlock_after_fork(rt);
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
  options.first_snapshot_s = std::min(settings.snapshot_interval_s, kFirstSnapshotSeconds);
  options.snapshot_interval_s = settings.snapshot_interval_s;
  options.quiet = settings.quiet;
  options.on_snapshot = [&rt] { return write_snapshot(rt); };
  std::string device_notice;
  std::unique_ptr<DeviceBackend> device;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    device = std::move(rt.early_device);
    device_notice = rt.early_device_notice;
  }
  if (!device) {
    DeviceSwitches switches = settings.device;
    switches.forked_child = child_pid > 0;
    device = make_device_backend(switches, device_notice);
  }
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
  rt.start_wait = std::chrono::seconds(early.start_wait_s);
  // With start-up rings: what the first threads record before the
  // collector's first drain is kept (see kStartupRingRecords).
  rt.registry = new (g_registry_storage) ThreadRegistry(early.ring_capacity, /*startup_burst=*/true);
  // A program that already runs device work gets device timing from its
  // first step: the backend (and its hooks) are ready before this scope
  // records. This allocates, but such a program's heap is shaped by the
  // device runtime anyway. Not in a forked child: see DeviceSwitches::forked_child.
  if (device_in_use() && rt.child_pid <= 0) rt.early_device = make_device_backend(early.device, rt.early_device_notice);
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
    ts->depth = ts->step_depth = ts->outer_steps = 0;
    ts->next_step.active = ts->deferred.active = false;
    if (ThreadRing* ring = rt.registry->add(static_cast<std::int64_t>(::getpid()), own_sched_times())) ts->ring = ring;
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
  ThreadRing* ring = rt.registry->add(tid, own_sched_times());
  if (ring == nullptr) {
    rt.lost_records.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (g_exit_key_ok && tid != static_cast<std::int64_t>(::getpid())) (void)pthread_setspecific(g_exit_key, &state);
  state.ring = ring;
  return ring;
}

// The program's first call of set_config or set_rank: an exit before its
// first scope says that nothing was recorded (finish_run). A process that
// only links the library (the CLI, a test) says nothing.
std::atomic<bool> g_api_used{false};
void note_api_use() noexcept {
  g_api_used.store(true, std::memory_order_relaxed);
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

void note_collectives(std::uint64_t count, std::uint64_t bytes) noexcept {
  if (count == 0) return;
  auto& rt = detail::runtime();
  rt.collectives.fetch_add(count, std::memory_order_relaxed);
  rt.collective_bytes.fetch_add(bytes, std::memory_order_relaxed);
  // Step 0 (before the first) counts as step 1: a first note there is not "none".
  const std::uint32_t step = std::max<std::uint32_t>(detail::g_steps_started.load(std::memory_order_relaxed), 1);
  std::uint32_t first = 0;
  rt.collective_first_step.compare_exchange_strong(first, step, std::memory_order_relaxed);
  std::uint32_t last = rt.collective_last_step.load(std::memory_order_relaxed);
  while (last < step && !rt.collective_last_step.compare_exchange_weak(last, step, std::memory_order_relaxed)) {
  }
  if (rt.collective_seen_step.exchange(step, std::memory_order_relaxed) != step)
    rt.collective_steps.fetch_add(1, std::memory_order_relaxed);
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

}  // namespace v1
}  // namespace stepscope
