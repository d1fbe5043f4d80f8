// Process-wide run time: initialisation from the environment, thread
// registration, configuration, finish() and the report at exit, fork safety.
#include "core/runtime.hpp"

#include "core/collector.hpp"
#include "core/env.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/stepscope.hpp>
#include <stepscope/trace.hpp>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
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

struct Runtime {
  std::mutex mutex;  // initialisation, configuration, finish
  Settings settings;
  std::map<std::string, std::string> config, config_types;
  int rank = -1, world_size = 1;
  std::unique_ptr<Collector> collector;
  std::string clock_source;
  bool finished = false;
  bool forked_child = false;
  std::string written_path;
  std::vector<std::string> warnings;
  std::string device_notice;
  // Records that could not be kept: thread past its exit handler, or no ring
  // (allocation failed). Counted as dropped in the report.
  std::atomic<std::uint64_t> lost_records{0};
};

// Leaked on purpose: threads may still record while static objects are being
// destroyed at exit, so the run time must outlive them.
Runtime& runtime() {
  static Runtime* instance = new Runtime;
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

// Marks the thread's ring for retirement when the thread exits. A
// function-local thread_local, so only threads that record pay for it.
struct ThreadExitGuard {
  ThreadState* state = nullptr;
  ~ThreadExitGuard() {
    if (state == nullptr || state->ring == nullptr) return;
    Runtime& rt = runtime();
    if (rt.collector && !rt.forked_child) rt.collector->retire(state->ring);
    state->ring = nullptr;
    state->exited = true;
  }
};

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

}  // namespace

bool initialise_runtime() noexcept {
  try {
    Runtime& rt = runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    const std::uint8_t mode = g_mode.load(std::memory_order_acquire);
    if (mode != kModeUninitialised) return mode == kModeEnabled;

    std::vector<std::string> env_warnings;
    rt.settings = read_settings(env_warnings);
    for (const auto& w : env_warnings) warn(rt, w);
    if (rt.rank < 0) {
      rt.rank = rt.settings.rank;
      rt.world_size = rt.settings.world_size;
    }
    if (!rt.settings.enabled) {
      g_mode.store(kModeDisabled, std::memory_order_release);
      return false;
    }
    std::string clock_warning;
    rt.clock_source = choose_clock(rt.settings.clock.c_str(), clock_warning);
    if (!clock_warning.empty()) warn(rt, clock_warning);

    CollectorOptions options;
    options.ring_capacity = rt.settings.ring_capacity;
    options.interval = std::chrono::milliseconds(rt.settings.interval_ms);
    options.aggregator.warmup_steps = rt.settings.warmup_steps;
    if (!parse_trace_window(rt.settings.trace, options.trace)) {
      warn(rt, "STEPSCOPE_TRACE='" + rt.settings.trace + "' is invalid (expected A-B, N, slow or slow:MS); no trace is written");
      options.trace = TraceWindow{};
    }
    options.trace_max_events = rt.settings.trace_max_events;
    options.live_interval_s = rt.settings.live_interval_s;
    options.live_forced = rt.settings.live_forced;
    std::unique_ptr<DeviceBackend> device = make_device_backend(rt.device_notice);
    if (!rt.device_notice.empty()) std::fprintf(stderr, "stepscope: %s\n", rt.device_notice.c_str());
    rt.collector = std::make_unique<Collector>(options, std::move(device));

    std::atexit(at_exit_handler);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    g_mode.store(kModeEnabled, std::memory_order_release);
    return true;
  } catch (...) {
    // Could not start (out of memory, no threads): stay out of the way.
    g_mode.store(kModeDisabled, std::memory_order_release);
    return false;
  }
}

ThreadRing* register_thread(ThreadState& state) noexcept {
  Runtime& rt = runtime();
  // The acquire load pairs with initialise_runtime's release store: only
  // after it may rt.collector be read (the hot path's relaxed load does not
  // order it).
  if (g_mode.load(std::memory_order_acquire) != kModeEnabled || state.exited || !rt.collector) {
    rt.lost_records.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ThreadRing* ring = rt.collector->register_thread(current_tid());
  if (ring == nullptr) {
    rt.lost_records.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  try {
    static thread_local ThreadExitGuard guard;
    guard.state = &state;
  } catch (...) {
  }
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
  if (!rt.clock_source.empty()) report.run.clock_source = rt.clock_source;
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
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (!rt.collector || rt.forked_child) return Report{};
    return detail::build_report(false);
  } catch (...) {
    return Report{};
  }
}

std::string finish() noexcept {
  try {
    auto& rt = detail::runtime();
    std::lock_guard<std::mutex> lock(rt.mutex);
    if (rt.finished || rt.forked_child) return rt.written_path;
    rt.finished = true;
    if (!rt.collector) {
      detail::g_mode.store(detail::kModeDisabled, std::memory_order_release);
      return "";
    }
    // Scopes opened from now on do not record; scopes already open still
    // push into their rings, which nobody drains any more (harmless).
    detail::g_mode.store(detail::kModeDisabled, std::memory_order_release);
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
