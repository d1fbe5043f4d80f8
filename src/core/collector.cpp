#include "core/collector.hpp"

#include <stepscope/clock.hpp>

#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <new>
#include <string>
#include <utility>

namespace stepscope::detail {

Collector::Collector(CollectorOptions options, std::unique_ptr<DeviceBackend> device)
    : options_(options),
      device_(std::move(device)),
      aggregator_(options.aggregator, &clock_),
      trace_(options.trace, options.trace_max_events, &clock_) {
  clock_.start();
  start_ns_ = static_cast<std::int64_t>(monotonic_ns());
  if (options_.sample_system) sampler_.start(start_ns_);
  if (options_.live_interval_s > 0) {
    live_terminal_ = ::isatty(STDERR_FILENO) == 1;
    live_active_ = live_terminal_ || options_.live_forced;
    live_next_ns_ = start_ns_ + static_cast<std::int64_t>(options_.live_interval_s * 1e9);
  }
  if (options_.start_thread) thread_ = std::thread([this] { run(); });
}

Collector::~Collector() {
  stop();
}

void RingUnmap::operator()(PhaseRecord* p) const noexcept {
  if (p != nullptr) ::munmap(p, bytes);
}

ThreadRing* Collector::register_thread(std::int64_t os_tid) noexcept {
  try {
    auto entry = std::make_unique<RingEntry>();
    const std::size_t bytes = sizeof(PhaseRecord) * options_.ring_capacity;
    void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return nullptr;
    entry->storage = std::unique_ptr<PhaseRecord, RingUnmap>(static_cast<PhaseRecord*>(memory), RingUnmap{bytes});
    entry->ring = std::make_unique<ThreadRing>(entry->storage.get(), options_.ring_capacity);
    entry->os_tid = os_tid;
    ThreadRing* ring = entry->ring.get();
    {
      // Aggregator thread ids are handed out under the state lock, the
      // registry entry under the registry lock (order: state, then registry).
      std::lock_guard<std::mutex> state(state_mutex_);
      entry->thread = aggregator_.add_thread(os_tid);
      std::lock_guard<std::mutex> lock(registry_mutex_);
      rings_.push_back(std::move(entry));
    }
    return ring;
  } catch (...) {
    return nullptr;
  }
}

void Collector::retire(ThreadRing* ring) noexcept {
  std::lock_guard<std::mutex> lock(registry_mutex_);
  for (auto& e : rings_)
    if (e->ring.get() == ring) e->retiring.store(true, std::memory_order_release);
}

void Collector::run() {
  std::unique_lock<std::mutex> lock(wake_mutex_);
  while (!stop_requested_) {
    wake_.wait_for(lock, options_.interval, [this] { return stop_requested_; });
    if (stop_requested_) break;
    lock.unlock();
    try {
      drain_all();
    } catch (...) {
      // Out of memory while aggregating: skip this tick rather than take the
      // training process down (std::terminate); records stay in the rings.
      collector_errors_.fetch_add(1, std::memory_order_relaxed);
    }
    if (live_active_) maybe_print_live();
    lock.lock();
  }
}

void Collector::drain_all() {
  std::lock_guard<std::mutex> state(state_mutex_);
  drain_locked();
}

void Collector::drain_locked() {
  clock_.recalibrate();
  drain_list_.clear();
  {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    for (auto& e : rings_) drain_list_.push_back(e.get());
  }
  // A ring marked retiring before this point has no more pushes coming:
  // after this drain it is empty and can be freed.
  std::vector<RingEntry*> finished;
  const double median_step_ms = trace_.enabled() ? aggregator_.median_step_ms() : 0;
  for (RingEntry* e : drain_list_) {
    const bool retiring = e->retiring.load(std::memory_order_acquire);
    const Aggregator::ThreadId thread = e->thread;
    const bool tracing = trace_.enabled();
    // Whole runs of records at a time: the aggregator's loop is the
    // collector's hot path. The device backend and the trace only look at
    // each record (device times are resolved by poll(), after the drain).
    e->ring->drain_batches([&](const PhaseRecord* records, std::size_t count) {
      if (device_)
        for (std::size_t i = 0; i < count; ++i)
          if (records[i].device_slot != 0) device_->on_record(records[i]);
      aggregator_.consume(thread, records, count);
      if (tracing)
        for (std::size_t i = 0; i < count; ++i) trace_.on_record(e->os_tid, e->ran_steps, records[i], median_step_ms);
    });
    e->ran_steps = aggregator_.ran_steps(thread);
    if (retiring) finished.push_back(e);
  }
  if (device_) device_->poll(aggregator_);
  if (options_.sample_system) {
    sample_list_.clear();
    for (RingEntry* e : drain_list_)
      if (e->ran_steps && !e->retiring.load(std::memory_order_relaxed))
        sample_list_.push_back({e->os_tid, e->ring->current_kind.load(std::memory_order_relaxed)});
    sampler_.sample(sample_list_);
    aggregator_.set_rss_mb(sampler_.rss_mb());
  }
  if (!finished.empty()) {
    for (RingEntry* e : finished) aggregator_.retire_thread(e->thread);
    std::lock_guard<std::mutex> lock(registry_mutex_);
    for (RingEntry* e : finished) {
      retired_dropped_ += e->ring->dropped();
      for (auto it = rings_.begin(); it != rings_.end(); ++it) {
        if (it->get() == e) {
          rings_.erase(it);
          break;
        }
      }
    }
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
    const LiveStatus status = live_.update(snapshot, static_cast<double>(now - start_ns_) * 1e-9);
    std::size_t width = 0;
    if (live_terminal_) {
      winsize size{};
      // One column less than the terminal: a line that fills it exactly wraps on some terminals.
      if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) width = size.ws_col - 1;
    }
    const std::string line = format_live_line(status, width);
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
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (live_printed_ && live_terminal_) {
    // End the in-place line so what follows (the summary) starts on its own line.
    std::fputs("\n", stderr);
    live_printed_ = false;
  }
  try {
    std::lock_guard<std::mutex> state(state_mutex_);
    if (stopped_) return;
    stopped_ = true;
    drain_locked();
    if (device_ && !device_finished_) {
      device_->finish(aggregator_, device_info_);
      device_finished_ = true;
    }
    drain_locked();  // records pushed while the device backend finished
    aggregator_.flush_pending();
    if (options_.sample_system) final_system_ = sampler_.finish(static_cast<std::int64_t>(monotonic_ns()));
  } catch (...) {
    // Out of memory while aggregating: the report will show what was counted.
  }
}

TraceCapture Collector::take_trace() {
  std::lock_guard<std::mutex> state(state_mutex_);
  return trace_.take();
}

std::uint64_t Collector::dropped_records() const {
  std::lock_guard<std::mutex> lock(registry_mutex_);
  std::uint64_t dropped = retired_dropped_;
  for (const auto& e : rings_) dropped += e->ring->dropped();
  return dropped;
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
  report.device = device_info_;
  report.run.clock_source = clock_.tsc() ? "tsc" : "clock_monotonic";
  report.run.clock_tsc_ghz = clock_.ghz();
  report.run.clock_error_ppm = clock_.error_ppm();
  return report;
}

}  // namespace stepscope::detail
