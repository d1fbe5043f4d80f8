// Process-wide run time: initialisation from the environment, thread
// registration, configuration, finish() and the report at exit, fork safety.
#include "core/runtime.hpp"

#include "core/collector.hpp"
#include "core/clock.hpp"
#include "core/env.hpp"
#include "core/registry.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/stepscope.hpp>
#include <stepscope/trace.hpp>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <new>
#include <string>

namespace stepscope {
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

// Start-up is split in two so that the first record allocates nothing in the
// application's heap. On the thread of the first scope, initialise_runtime()
// reads the few settings it needs without allocating, picks the clock,
// places the thread registry in static storage and starts the collector
// thread: that thread then reads the full settings, probes the device and
// builds the collector, all in its own malloc arena. Why it matters:
// docs/benchmarks-libtorch.md (glibc's trim decisions in a libtorch loop).
struct Runtime {
  std::mutex mutex;  // initialisation, configuration, finish
  std::condition_variable ready_cv;  // the collector thread has started (or failed to)
  Settings settings;
  std::map<std::string, std::string> config, config_types;
  int rank = -1, world_size = 1;
  // Set on the first record's thread, before the mode becomes enabled.
  ThreadRegistry* registry = nullptr;
  ClockChoice clock;
  // Built on the first scope's thread when the program already used the
  // device (see device_in_use); otherwise by the collector thread.
  std::unique_ptr<DeviceBackend> early_device;
  std::string early_device_notice;
  bool thread_started = false;
  bool thread_joined = false;
  pthread_t thread{};
  // Set by the collector thread when it has started.
  bool ready = false;
  std::unique_ptr<Collector> collector;
  bool finished = false;
  bool forked_child = false;
  std::string written_path;
  std::vector<std::string> warnings;
  std::string device_notice;
  // Records that could not be kept: thread past its exit handler, or no ring
  // (allocation failed). Counted as dropped in the report.
  std::atomic<std::uint64_t> lost_records{0};
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

std::int64_t current_tid() { return static_cast<std::int64_t>(::syscall(SYS_gettid)); }

void warn(Runtime& rt, const std::string& message) {
  rt.warnings.push_back(message);
  std::fprintf(stderr, "stepscope: warning: %s\n", message.c_str());
}

void at_exit_handler() { (void)stepscope::finish(); }

// fork(): the child has no collector thread. It records nothing and writes no
// report (its parent's report is the run's); see docs/report-schema.md.
void before_fork() { runtime().mutex.lock(); }
void after_fork_parent() { runtime().mutex.unlock(); }
void after_fork_child() {
  Runtime& rt = runtime();
  rt.forked_child = true;
  g_mode.store(kModeDisabled, std::memory_order_relaxed);
  rt.mutex.unlock();
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
  }
};
const LoadTimeRegistration g_load_time_registration;

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::map<std::string, std::string> build_options() {
  std::map<std::string, std::string> build;
  build["enable"] = STEPSCOPE_ENABLE ? "ON" : "OFF";
#if defined(STEPSCOPE_WITH_CUDA) && STEPSCOPE_WITH_CUDA
  build["cuda"] = "ON";
#else
  build["cuda"] = "OFF";
#endif
#if defined(__clang__)
  build["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  build["compiler"] = std::string("gcc ") + __VERSION__;
#endif
#if defined(NDEBUG)
  build["assertions"] = "OFF";
#else
  build["assertions"] = "ON";
#endif
  return build;
}

// The collector thread: finishes the start-up (everything that allocates),
// publishes the collector, then drains until finish() stops it. Returns the
// collector (owned by the run time; finish() joins this thread before it
// stops and reads it).
Collector* start_collector(Runtime& rt) {
  std::vector<std::string> env_warnings;
  Settings settings = read_settings(env_warnings);
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
  options.start_thread = false;  // this thread runs the loop
  std::string device_notice;
  std::unique_ptr<DeviceBackend> device;
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    device = std::move(rt.early_device);
    device_notice = rt.early_device_notice;
  }
  if (!device) device = make_device_backend(device_notice);
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
      warn(rt, "STEPSCOPE_CLOCK='" + settings.clock + "' is not 'tsc' or 'monotonic'; using the default");
    if (!trace_valid)
      warn(rt, "STEPSCOPE_TRACE='" + settings.trace + "' is invalid (expected A-B, N, slow or slow:MS); no trace is written");
    rt.device_notice = device_notice;
    if (!device_notice.empty()) std::fprintf(stderr, "stepscope: %s\n", device_notice.c_str());
    if (rt.rank < 0) {
      rt.rank = settings.rank;
      rt.world_size = settings.world_size;
    }
    rt.settings = std::move(settings);
    rt.collector = std::move(collector);
    rt.ready = true;
  }
  rt.ready_cv.notify_all();
  return published;
}

void* collector_thread_main(void*) {
  Runtime& rt = runtime();
  (void)pthread_setname_np(pthread_self(), "stepscope");
  Collector* collector = nullptr;
  try {
    // Not under rt.mutex from here on: finish() holds it while it joins this thread.
    collector = start_collector(rt);
  } catch (...) {
    // Out of memory while starting: stay out of the way for the rest of the run.
    g_mode.store(kModeDisabled, std::memory_order_release);
    std::fputs("stepscope: error: could not start (out of memory?); nothing is recorded in this run\n", stderr);
    {
      std::lock_guard<std::mutex> lock(rt.mutex);
      rt.ready = true;
    }
    rt.ready_cv.notify_all();
    return nullptr;
  }
  collector->run_loop();
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
// open/read, static storage and pthread_create (whose one small calloc, the
// new thread's TLS vector, glibc makes on the creating thread). The one
// exception: a program that already uses the device (device_in_use).
bool initialise_runtime() noexcept {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const std::uint8_t mode = g_mode.load(std::memory_order_acquire);
  if (mode != kModeUninitialised) return mode == kModeEnabled;
  const EarlySettings early = read_early_settings();
  if (!early.enabled) {
    g_mode.store(kModeDisabled, std::memory_order_release);
    return false;
  }
  rt.clock = choose_clock(early.clock);  // before any record: it decides what a tick is
  rt.registry = new (g_registry_storage) ThreadRegistry(early.ring_capacity);
  // A program that already runs device work gets device timing from its
  // first step: the backend (and its hooks) are ready before this scope
  // records. This allocates, but such a program's heap is shaped by the
  // device runtime anyway.
  if (device_in_use()) rt.early_device = make_device_backend(rt.early_device_notice);
  if (pthread_create(&rt.thread, nullptr, collector_thread_main, nullptr) != 0) {
    std::fputs("stepscope: warning: cannot start the collector thread; nothing is recorded in this run\n", stderr);
    g_mode.store(kModeDisabled, std::memory_order_release);
    return false;
  }
  rt.thread_started = true;
  g_mode.store(kModeEnabled, std::memory_order_release);
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
  report.run.warmup_steps = rt.settings.warmup_steps;
  report.run.warmup_source = rt.settings.warmup_from_env ? "env" : "default";
  for (const auto& w : rt.warnings) report.warnings.push_back(w);
  if (report.device.status.empty()) {
    report.device.status = "unknown";
    report.device.reason = "no device backend reported";
  }
  analyze(report);
  return report;
}

const Settings& settings() { return runtime().settings; }

void write_trace_if_enabled(Collector& collector, const RunInfo& run, const Settings& s, int rank) {
  TraceCapture capture = collector.take_trace();
  if (s.trace.empty() || capture.window.empty()) return;
  std::string path = s.trace_out.empty() ? resolve_report_path("", rank) : resolve_report_path(s.trace_out, rank);
  if (s.trace_out.empty()) path.replace(0, std::string("stepscope-report").size(), "stepscope-trace");
  if (s.trace_out.empty()) path += ".gz";
  std::string error;
  if (write_chrome_trace(capture, run, path, error)) {
    if (!s.quiet)
      std::fprintf(stderr, "stepscope: trace of steps %s (%zu events%s) written to %s\n", capture.window.c_str(),
                   capture.events.size(), capture.events_over_limit ? ", some over the limit" : "", path.c_str());
    return;
  }
  const std::string fallback = fallback_report_path(rank, static_cast<long>(::getpid())) + ".trace.json.gz";
  std::fprintf(stderr, "stepscope: warning: cannot write the trace to '%s' (%s); writing it to '%s' instead\n", path.c_str(),
               error.c_str(), fallback.c_str());
  if (!write_chrome_trace(capture, run, fallback, error))
    std::fprintf(stderr, "stepscope: error: cannot write the trace to '%s' either (%s)\n", fallback.c_str(), error.c_str());
}

}  // namespace detail

void set_config(const std::string& key, const std::string& value) noexcept {
  try {
    auto& rt = detail::runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    rt.config[key] = value;
    rt.config_types[key] = "string";
  } catch (...) {
  }
}

void set_config(const std::string& key, const char* value) noexcept {
  set_config(key, std::string(value != nullptr ? value : ""));
}

void set_config(const std::string& key, double value) noexcept {
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
    return detail::build_report(false);
  } catch (...) {
    return Report{};
  }
}

std::string finish() noexcept {
  try {
    auto& rt = detail::runtime();
    std::unique_lock<std::mutex> lock(rt.mutex);
    if (rt.finished || rt.forked_child) return rt.written_path;
    rt.finished = true;
    // The calling thread's last next_step() step ends here (before the
    // collector's final drain); other threads' end when they exit.
    detail::close_next_step(detail::t_thread_state);
    // Scopes opened from now on do not record; scopes already open still
    // push into their rings, which nobody drains any more (harmless).
    detail::g_mode.store(detail::kModeDisabled, std::memory_order_release);
    if (!detail::wait_until_ready(rt, lock)) {
      if (rt.thread_started && !rt.thread_joined) {
        pthread_join(rt.thread, nullptr);
        rt.thread_joined = true;
      }
      return "";
    }
    rt.collector->request_stop();
    if (!rt.thread_joined) {
      pthread_join(rt.thread, nullptr);
      rt.thread_joined = true;
    }
    Report report = detail::build_report(true);
    rt.written_path = detail::write_report_with_fallback(report, rt.settings, rt.rank);
    detail::write_trace_if_enabled(*rt.collector, report.run, rt.settings, rt.rank);
    if (!rt.settings.quiet) std::fputs(format_summary(report).c_str(), stderr);
    return rt.written_path;
  } catch (...) {
    std::fputs("stepscope: error: could not build the report (out of memory?)\n", stderr);
    return "";
  }
}

}  // namespace stepscope
