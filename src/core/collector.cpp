#include "core/collector.hpp"

#include <stepscope/clock.hpp>
#include <stepscope/phase.hpp>

#include <linux/futex.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

Collector::Collector(CollectorOptions options, std::unique_ptr<DeviceBackend> device, ThreadRegistry* registry)
    : options_(options),
      own_registry_(registry == nullptr ? std::make_unique<ThreadRegistry>(options.ring_capacity) : nullptr),
      registry_(registry == nullptr ? own_registry_.get() : registry),
      device_(std::move(device)),
      aggregator_(options.aggregator, &clock_),
      trace_(options.trace, options.trace_max_events, &clock_) {
  clock_.start();
  // The settings reach the backend here, before its first poll: it may have
  // been built before they were read (DeviceBackend::configure).
  if (device_) {
    DeviceSettings device_settings;
    device_settings.warmup_steps = options_.aggregator.warmup_steps;
    device_settings.quiet = options_.quiet;
    device_->configure(device_settings);
  }
  start_ns_ = static_cast<std::int64_t>(monotonic_ns());
  if (options_.sample_system) {
    sampler_.start(start_ns_);
    const auto warmup = static_cast<std::uint32_t>(std::min<std::uint64_t>(options_.aggregator.warmup_steps, 1u << 30));
    g_drain_at_step.store(std::max<std::uint32_t>(warmup, 1) + 1, std::memory_order_relaxed);
  }
  if (options_.live_interval_s > 0) {
    live_terminal_ = ::isatty(STDERR_FILENO) == 1;
    live_active_ = (live_terminal_ || options_.live_forced) && options_.live_line;
    live_next_ns_ = start_ns_ + static_cast<std::int64_t>(options_.live_interval_s * 1e9);
  }
  if (options_.start_thread) thread_ = std::thread([this] { run_loop(); });
}

Collector::~Collector() {
  stop();
}

ThreadRing* Collector::register_thread(std::int64_t os_tid) noexcept {
  return registry_->add(os_tid);
}

void Collector::retire(ThreadRing* ring) noexcept {
  registry_->retire(ring);
}

namespace {
std::uint64_t thread_cpu_ns() noexcept;
// The flight recorder's share of a core is at most 1 / kSnapshotCostFactor.
constexpr std::int64_t kSnapshotCostFactor = 100;
}  // namespace

std::atomic<std::uint32_t> Collector::wake_word_{0};

namespace {
// A ring's producer asked for a drain and no loop has drained since: the
// next half-full ring does not ask again (one system call per drain).
std::atomic<bool> g_drain_requested{false};
}  // namespace

void Collector::wake() noexcept {
  wake_word_.fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&wake_word_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void Collector::request_stop() noexcept {
  stop_requested_.store(true, std::memory_order_release);
  wake();
}

void request_drain() noexcept {
  if (!g_drain_requested.exchange(true, std::memory_order_acq_rel)) Collector::wake();
}

void Collector::run_loop() noexcept {
  std::chrono::milliseconds wait = options_.interval;
  const std::chrono::milliseconds shortest = std::min(options_.min_interval, options_.interval);
  const auto snapshot_every_ns = static_cast<std::int64_t>(options_.snapshot_interval_s * 1e9);
  const auto first_snapshot_ns = static_cast<std::int64_t>(
      (options_.first_snapshot_s > 0 ? options_.first_snapshot_s : options_.snapshot_interval_s) * 1e9);
  if (snapshot_every_ns > 0) next_snapshot_ns_ = start_ns_ + first_snapshot_ns;
  measure_scope_floor();
  // A fixed timer (STEPSCOPE_INTERVAL_MS) stays fixed; else the quiet wait
  // follows what a wake-up costs here (a running mean of its CPU time, the
  // snapshots apart: they bound their own cost), once the sampler has the
  // samples the step's large parts need.
  const bool fixed_timer = shortest >= options_.interval;
  std::chrono::milliseconds longest = options_.interval;
  std::uint64_t wake_cpu_ns = 0;
  note_loop_cpu();
  while (!stop_requested_.load(std::memory_order_acquire)) {
    // The word is read before the flag is checked again: a request_stop()
    // in between changes it, and the wait returns at once.
    const std::uint32_t seen = wake_word_.load(std::memory_order_acquire);
    const std::uint64_t cpu_start = loop_cpu_ns_.load(std::memory_order_relaxed);
    if (stop_requested_.load(std::memory_order_acquire)) break;
    const std::chrono::milliseconds sleep = until_deadline(wait);
    const timespec timeout{static_cast<time_t>(sleep.count() / 1000),
                           static_cast<long>(sleep.count() % 1000) * 1000000L};
    // A drain asked for before `seen` was read (its wake is already spent): no wait.
    if (!g_drain_requested.load(std::memory_order_acquire))
      ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&wake_word_), FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr,
                0);
    if (stop_requested_.load(std::memory_order_acquire)) break;
    g_drain_requested.store(false,
                            std::memory_order_release);  // before the drain: a ring refilling during it asks again
    try {
      drain_all();
    } catch (...) {
      // Out of memory while aggregating: skip this tick rather than take the
      // training process down (std::terminate); records stay in the rings.
      collector_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    if (live_active_) maybe_print_live();
    std::uint64_t snapshot_ns = 0;
    if (snapshot_every_ns > 0 && options_.on_snapshot && static_cast<std::int64_t>(monotonic_ns()) >= next_snapshot_ns_)
      snapshot_ns = take_snapshot(snapshot_every_ns, first_snapshot_ns);
    note_loop_cpu();
    const std::uint64_t spent = loop_cpu_ns_.load(std::memory_order_relaxed) - cpu_start;
    if (!fixed_timer && spent > snapshot_ns) {
      wake_cpu_ns = wake_cpu_ns == 0 ? spent - snapshot_ns : (wake_cpu_ns * 3 + (spent - snapshot_ns)) / 4;
      bool sampling = false;
      if (options_.sample_system) {  // facts() drains, and so samples, on other threads too
        std::lock_guard<std::mutex> state(state_mutex_);
        sampling = sampler_.wants_samples();
      }
      longest = sampling ? options_.interval : quiet_ceiling(wake_cpu_ns, options_.interval);
    }
    wait = next_interval(wait, last_fill_.load(std::memory_order_relaxed), shortest, longest);
  }
  note_loop_cpu();
}

void Collector::measure_scope_floor() noexcept {
  const double used = scope_floor_ns(clock_.tsc());
  const double tsc = clock_.tsc() ? used : scope_floor_ns(true);
  std::lock_guard<std::mutex> state(state_mutex_);
  scope_ns_ = used;
  tsc_scope_ns_ = tsc;
}

std::chrono::milliseconds Collector::until_deadline(std::chrono::milliseconds wait) const noexcept {
  const auto now = static_cast<std::int64_t>(monotonic_ns());
  std::int64_t due = -1;
  if (options_.snapshot_interval_s > 0 && options_.on_snapshot) due = next_snapshot_ns_;
  if (live_active_ && (due < 0 || live_next_ns_ < due)) due = live_next_ns_;
  if (due < 0) return wait;
  // Rounded up to the next millisecond: waking just before the deadline would be a wasted wake-up.
  const auto left = std::chrono::milliseconds(std::max<std::int64_t>(1, (due - now + 999999) / 1000000));
  return std::min(wait, left);
}

std::uint64_t Collector::take_snapshot(std::int64_t every_ns, std::int64_t retry_ns) noexcept {
  note_loop_cpu();  // the snapshot's facts include the loop's CPU time so far
  const std::uint64_t cpu_before = thread_cpu_ns();
  bool written = false;
  try {
    written = options_.on_snapshot();
  } catch (...) {
    // A snapshot is never worth disturbing the run; the next one retries.
  }
  if (!written) every_ns = std::min(every_ns, retry_ns);
  // Bounded cost: the next snapshot waits at least kSnapshotCostFactor
  // times what this one cost (CPU), so the flight recorder never takes
  // more than 1% of a core, however large the report (a 100k-phase
  // report costs seconds; docs/benchmarks.md).
  const std::uint64_t cost_ns = thread_cpu_ns() - cpu_before;
  const auto wait_ns = std::max<std::int64_t>(every_ns, static_cast<std::int64_t>(cost_ns) * kSnapshotCostFactor);
  next_snapshot_ns_ = static_cast<std::int64_t>(monotonic_ns()) + wait_ns;
  return cost_ns;
}

std::chrono::milliseconds Collector::next_interval(std::chrono::milliseconds wait, std::uint32_t fill_1024,
                                                   std::chrono::milliseconds shortest,
                                                   std::chrono::milliseconds longest) noexcept {
  // Busy rings: drain sooner, in proportion, so that at the rate they filled
  // the fullest reaches an eighth (a full ring drops records); quiet ones:
  // wake less often, doubling (each wake-up costs the process CPU time), so
  // a burst after a quiet spell meets a wait that grew gradually.
  constexpr std::uint32_t kTarget = 1024 / 8;
  if (fill_1024 > kTarget) {
    const auto proportional = std::chrono::milliseconds(wait.count() * kTarget / fill_1024);
    return std::max(shortest, std::min(proportional, wait / 2));
  }
  if (fill_1024 < 1024 / 16) return std::min(longest, std::max(wait * 2, shortest));
  return wait;
}

std::chrono::milliseconds Collector::quiet_ceiling(std::uint64_t wake_cpu_ns,
                                                   std::chrono::milliseconds interval) noexcept {
  const auto affordable = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(std::min<std::uint64_t>(wake_cpu_ns, 1ull << 40) * kWakeCostFactor));
  return std::max(interval, std::min(affordable, std::max(interval, kLongestQuietWait)));
}

namespace {

// CPU time of the calling thread, ns. getrusage rather than
// clock_gettime(CLOCK_THREAD_CPUTIME_ID), which under ThreadSanitizer (GCC
// 12) left the thread flagged as inside a signal handler (false
// "signal-unsafe call" reports afterwards). 0 when unavailable.
std::uint64_t thread_cpu_ns() noexcept {
  rusage usage{};
  if (::getrusage(RUSAGE_THREAD, &usage) != 0) return 0;
  const auto us = [](const timeval& t) {
    return static_cast<std::uint64_t>(t.tv_sec) * 1000000ull + static_cast<std::uint64_t>(t.tv_usec);
  };
  return (us(usage.ru_utime) + us(usage.ru_stime)) * 1000ull;
}

}  // namespace

void Collector::note_loop_cpu() noexcept {
  if (const std::uint64_t ns = thread_cpu_ns(); ns > 0) loop_cpu_ns_.store(ns, std::memory_order_relaxed);
}

void Collector::drain_all() {
  std::lock_guard<std::mutex> state(state_mutex_);
  drain_locked();
}

void Collector::drain_locked() {
  clock_.recalibrate();
  drain_list_.clear();
  registry_->for_each([this](RingEntry& e) { drain_list_.push_back(&e); });
  // A ring marked retiring before this point has no more pushes coming:
  // after this drain it is empty and can be freed.
  std::vector<RingEntry*> finished;
  std::uint32_t fullest = 0;
  const std::uint32_t device_budget = device_ ? device_->device_records_per_drain() : 0;
  const double median_step_ms = trace_.enabled() ? aggregator_.median_step_ms() : 0;
  for (RingEntry* e : drain_list_) {
    const bool retiring = e->retiring.load(std::memory_order_acquire);
    // Threads register without the collector (no lock, no allocation on
    // their side); they get their aggregator id when first drained.
    if (e->thread == RingEntry::kUnassigned) e->thread = aggregator_.add_thread(e->os_tid);
    const Aggregator::ThreadId thread = e->thread;
    const bool tracing = trace_.enabled();
    // Whole runs of records at a time: the aggregator's loop is the
    // collector's hot path. The device backend and the trace only look at
    // each record (device times are resolved by poll(), after the drain).
    std::size_t device_records = 0;
    const std::size_t drained = e->ring.drain_batches([&](const PhaseRecord* records, std::size_t count) {
      if (device_) {
        const bool every = device_->wants_every_record();
        for (std::size_t i = 0; i < count; ++i) {
          device_records += records[i].device_slot != 0;
          if (every || records[i].device_slot != 0) device_->on_record(records[i]);
        }
      }
      aggregator_.consume(thread, records, count);
      if (tracing)
        for (std::size_t i = 0; i < count; ++i) trace_.on_record(e->os_tid, e->ran_steps, records[i], median_step_ms);
    });
    fullest = std::max(fullest, static_cast<std::uint32_t>(drained * 1024 / e->ring.capacity()));
    if (device_records > 0 && device_budget > 0)
      fullest = std::max(
          fullest, static_cast<std::uint32_t>(std::min<std::size_t>(device_records * 1024 / device_budget, 1u << 20)));
    e->ran_steps = aggregator_.ran_steps(thread);
    if (retiring) finished.push_back(e);
  }
  last_fill_.store(fullest, std::memory_order_relaxed);
  registry_->end_startup();  // rings registered from now on are drained in time
  if (device_) device_->poll(aggregator_);
  if (options_.sample_system) {
    sample_list_.clear();
    for (RingEntry* e : drain_list_)
      if (e->ran_steps && !e->retiring.load(std::memory_order_relaxed))
        sample_list_.push_back({e->os_tid, e->ring.current_kind.load(std::memory_order_relaxed), e->sched_at_start});
    const std::uint64_t completed = aggregator_.steps_completed();
    sampler_.sample(sample_list_,
                    {completed > 0 && completed >= options_.aggregator.warmup_steps, aggregator_.measured_steps()});
    aggregator_.set_rss_mb(sampler_.rss_mb());
  }
  if (!finished.empty()) {
    for (RingEntry* e : finished) aggregator_.retire_thread(e->thread);
    for (RingEntry* e : finished) registry_->remove(e);
  }
}

void Collector::maybe_print_live() noexcept {
  try {
    const auto now = static_cast<std::int64_t>(monotonic_ns());
    if (now < live_next_ns_) return;
    const auto interval_ns = static_cast<std::int64_t>(options_.live_interval_s * 1e9);
    live_next_ns_ = now + interval_ns;
    // facts() + classify cost well under a millisecond for a few dozen
    // phases, once per interval, on this thread: never on the hot path.
    const Report snapshot = facts();
    std::size_t width = 0;
    if (live_terminal_) {
      winsize size{};
      // One column less than the terminal: a line that fills it exactly wraps on some terminals.
      if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) width = size.ws_col - 1;
    }
    const std::string line = options_.live_line(snapshot, static_cast<double>(now - start_ns_) * 1e-9, width);
    if (live_terminal_)
      std::fprintf(stderr, "\r%s\x1b[K", line.c_str());  // rewrite in place, clear the rest of the old line
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    live_printed_ = true;
  } catch (...) {
    // A progress line is never worth disturbing the run.
  }
}

void Collector::stop() noexcept {
  request_stop();
  if (thread_.joinable()) thread_.join();
  if (live_printed_ && live_terminal_) {
    // End the in-place line so what follows (the summary) starts on its own line.
    std::fputs("\n", stderr);
    live_printed_ = false;
  }
  // The final drain runs on the caller's thread (finish(), or the loop's own
  // thread after a signal): its CPU time is the collector's too.
  const std::uint64_t cpu_before = thread_cpu_ns();
  try {
    std::lock_guard<std::mutex> state(state_mutex_);
    if (stopped_) return;
    stopped_ = true;
    // The OS counters' window of the measured steps ends at the last drain
    // that saw them progress, not at this one, which may come long after the
    // loop (evaluation, checkpoints); unless the last step ended within a
    // collector wait of now, as a timed drain would have (a run shorter than
    // the wait has no other end).
    sampler_.end_window();
    drain_locked();
    const std::uint64_t last_end = aggregator_.last_step_end_ticks();
    const auto now = static_cast<std::int64_t>(monotonic_ns());
    if (last_end != 0 && now - clock_.to_ns(last_end) <= std::chrono::nanoseconds(options_.interval).count())
      sampler_.end_window_at(now, aggregator_.measured_steps());
    g_drain_at_step.store(0, std::memory_order_relaxed);
    if (device_ && !device_finished_) {
      device_->finish(aggregator_, device_info_);
      device_finished_ = true;
    }
    drain_locked();  // records pushed while the device backend finished
    aggregator_.flush_pending();
    if (options_.sample_system)
      final_system_ = sampler_.finish(static_cast<std::int64_t>(monotonic_ns()), aggregator_.measured_steps());
  } catch (...) {
    // Out of memory while aggregating: the report will show what was counted.
  }
  const std::uint64_t cpu_after = thread_cpu_ns();
  if (cpu_after > cpu_before) final_drain_cpu_ns_.store(cpu_after - cpu_before, std::memory_order_relaxed);
}

TraceCapture Collector::take_trace() {
  std::lock_guard<std::mutex> state(state_mutex_);
  return trace_.take();
}

std::uint64_t Collector::dropped_records() const {
  return registry_->dropped();
}

Report Collector::facts() {
  std::lock_guard<std::mutex> state(state_mutex_);
  if (!stopped_) drain_locked();
  Report report;
  aggregator_.fill_report(report);
  report.dropped_records = dropped_records();
  report.total_records = aggregator_.records() + report.dropped_records;
  for (auto& note : aggregator_.notes()) report.warnings.push_back(std::move(note));
  if (const auto errors = collector_errors_.load(std::memory_order_relaxed); errors > 0)
    report.warnings.push_back("the collector failed to aggregate " + std::to_string(errors) +
                              " times (out of memory?); statistics may be incomplete");
  report.system = stopped_ ? final_system_ : SystemSignals{};
  if (!stopped_ && options_.sample_system) {
    report.system.available = false;
    report.system.rss_end_mb = sampler_.rss_mb();
  }
  report.system.collector_cpu_ms = static_cast<double>(loop_cpu_ns_.load(std::memory_order_relaxed) +
                                                       final_drain_cpu_ns_.load(std::memory_order_relaxed)) *
                                   1e-6;
  report.device = device_info_;
  report.run.clock_source = clock_.tsc() ? "tsc" : "clock_monotonic";
  report.run.clock_reason = clock_reason();
  report.overhead.scope_ns = scope_ns_;
  report.overhead.tsc_scope_ns = tsc_scope_ns_;
  const double wall_s = static_cast<double>(static_cast<std::int64_t>(monotonic_ns()) - start_ns_) * 1e-9;
  if (wall_s > 0) report.overhead.collector_core_fraction = report.system.collector_cpu_ms * 1e-3 / wall_s;
  if (device_) device_->describe_overhead(report.overhead);
  report.run.clock_tsc_ghz = clock_.ghz();
  report.run.clock_error_ppm = clock_.error_ppm();
  return report;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
