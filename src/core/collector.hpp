// The collector: the only consumer of the threads' rings (which the
// ThreadRegistry holds) and the owner of all aggregation state. Its loop
// (its own thread, or the run time's collector thread: start_thread = false)
// wakes on a timer (it never spins), drains the rings in batches and feeds
// the aggregator, the system sampler and the device backend.
#pragma once

#include "core/aggregator.hpp"
#include "core/device_backend.hpp"
#include "core/registry.hpp"
#include "core/system_sampler.hpp"
#include "core/trace_recorder.hpp"
#include "stats/clock.hpp"

#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

struct CollectorOptions {
  std::uint32_t ring_capacity = 16384;  // records per thread (power of two)
  // Wait between drains: `interval` while the rings stay nearly empty; when a
  // drain finds a ring over an eighth full the wait shrinks in proportion
  // (the fill it would reach at that rate), down to min_interval, and doubles
  // back once they are quiet. min_interval equal to interval: a fixed timer.
  // A wake-up's fixed cost is most of the collector's, so the quiet wait is
  // long (STEPSCOPE_INTERVAL_MS's default), and longer where wake-ups cost
  // more (quiet_ceiling); snapshots, the progress line, finish() and signals
  // do not wait for it (they have deadlines or wake it).
  std::chrono::milliseconds interval{5};
  std::chrono::milliseconds min_interval{5};
  AggregatorOptions aggregator;
  bool quiet = false;  // STEPSCOPE_QUIET: handed to the device backend (no stderr lines)
  bool sample_system = true;
  bool start_thread = true;  // false: the owner calls drain_all() or run_loop() itself
  TraceWindow trace;         // STEPSCOPE_TRACE
  std::size_t trace_max_events = 200000;
  double live_interval_s = 0;  // STEPSCOPE_LIVE: seconds between progress lines on stderr (0 = off)
  bool live_forced = false;    // STEPSCOPE_LIVE_FORCE: print even when stderr is not a terminal
  // The progress line's text for the facts so far, `elapsed_s` seconds into
  // the run, at most `max_width` characters (0 = no limit). The run time
  // supplies it (the report layer's LiveTracker + format_live_line): core
  // never calls a writer. No line is printed without it.
  std::function<std::string(const Report& facts, double elapsed_s, std::size_t max_width)> live_line;
  // Flight recorder (STEPSCOPE_SNAPSHOT_S): the loop thread calls
  // on_snapshot() after its drain first_snapshot_s into the run, then every
  // snapshot_interval_s seconds (0 = never); every first_snapshot_s while it
  // returns false (nothing to write yet). The run time's callback writes the
  // report marked incomplete.
  double first_snapshot_s = 0;
  double snapshot_interval_s = 0;
  std::function<bool()> on_snapshot;
};

class Collector {
 public:
  // registry: where the threads' rings are registered; null = a registry of
  // its own (options.ring_capacity). The run time passes its own, which
  // exists before the collector does (threads may record while it starts).
  explicit Collector(CollectorOptions options, std::unique_ptr<DeviceBackend> device = nullptr,
                     ThreadRegistry* registry = nullptr);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // Any thread, cold path (its first record). Returns null on allocation failure.
  ThreadRing* register_thread(std::int64_t os_tid) noexcept;
  // The ring's thread is exiting: drain what it left, then free the ring.
  void retire(ThreadRing* ring) noexcept;

  // The timer loop: drains every interval until request_stop(). Runs on the
  // collector's own thread, or on one the owner started (start_thread = false).
  void run_loop() noexcept;
  // Asks the loop to return (does not wait). Async-signal-safe (an atomic
  // store and a futex wake), so a signal handler may call it.
  void request_stop() noexcept;
  // Stops the loop, joins the collector's own thread (an owner's thread must
  // have returned from run_loop() first) and drains everything left. Idempotent.
  void stop() noexcept;
  // Drains all rings once. Collector thread, or the owner when no thread runs.
  void drain_all();

  // The adaptive timer: the next wait after a drain that found the fullest
  // ring at fill_1024/1024 of its capacity (or of the device's per-drain
  // budget, device_records_per_drain(), when that is fuller).
  // Wakes every collector loop now (any thread; async-signal-safe).
  static void wake() noexcept;
  static std::chrono::milliseconds next_interval(std::chrono::milliseconds wait, std::uint32_t fill_1024,
                                                 std::chrono::milliseconds shortest,
                                                 std::chrono::milliseconds longest) noexcept;
  // The longest quiet wait when a wake-up costs wake_cpu_ns of the
  // collector's CPU time: quiet wake-ups take at most 1/kWakeCostFactor of a
  // core, never waiting less than `interval` nor more than kLongestQuietWait.
  // A wake-up costs ~20-80 us in a small process but 0.3-1.3 ms in a PyTorch
  // one on this paravirtualised VM (docs/benchmarks.md).
  static constexpr std::uint64_t kWakeCostFactor = 5000;
  static constexpr std::chrono::milliseconds kLongestQuietWait{2000};
  static std::chrono::milliseconds quiet_ceiling(std::uint64_t wake_cpu_ns,
                                                 std::chrono::milliseconds interval) noexcept;

  // Facts gathered so far (steps, phases, records, drops, system, device).
  // Safe from any thread: serialised with the collector's own drains.
  Report facts();

  const TickConverter& clock() const { return clock_; }
  // The raw intervals kept for the trace export (empty when not enabled).
  TraceCapture take_trace();
  std::uint64_t dropped_records() const;

 private:
  void drain_locked();  // state_mutex_ held
  // Collector thread: prints the progress line when its interval has passed.
  void maybe_print_live() noexcept;
  // Loop thread: records its CPU time so far.
  void note_loop_cpu() noexcept;
  // Loop thread: the wait until the next snapshot or progress line is due
  // (`wait` when that is later).
  std::chrono::milliseconds until_deadline(std::chrono::milliseconds wait) const noexcept;
  // Loop thread: writes one snapshot and schedules the next.
  // Returns its CPU time (ns); the next comes every_ns later, retry_ns when
  // there was nothing to write.
  std::uint64_t take_snapshot(std::int64_t every_ns, std::int64_t retry_ns) noexcept;
  // Loop thread, once: the per-scope floors of the report's "overhead".
  void measure_scope_floor() noexcept;

  // Written by the constructor, read-only after: any thread.
  CollectorOptions options_;
  TickConverter clock_;
  std::unique_ptr<ThreadRegistry> own_registry_;
  ThreadRegistry* registry_;  // the registry synchronises itself (registry.hpp)

  // Aggregation state: guarded by state_mutex_, held while draining (the
  // loop thread, or the thread calling stop() or facts()). The device
  // backend and the sampler are only called with it held.
  std::mutex state_mutex_;
  SystemSampler sampler_;
  std::unique_ptr<DeviceBackend> device_;
  DeviceInfo device_info_;  // written once, by the final drain (stop())
  bool device_finished_ = false;
  Aggregator aggregator_;
  TraceRecorder trace_;
  std::vector<RingEntry*> drain_list_;
  std::vector<SystemSampler::ThreadSample> sample_list_;
  std::int64_t start_ns_ = 0;   // set by the constructor, read-only after
  SystemSignals final_system_;  // written once, by the final drain
  bool stopped_ = false;

  // Atomics: written by the loop thread (collector_errors_, loop_cpu_ns_,
  // last_fill_), read by any thread without a lock.
  std::atomic<std::uint64_t> collector_errors_{0};
  // CPU time of the thread running the loop, updated every tick (its own clock).
  std::atomic<std::uint64_t> loop_cpu_ns_{0};
  // Fullest ring at the last drain, in 1/1024 of its capacity.
  std::atomic<std::uint32_t> last_fill_{0};
  // The floor of one scope with the clock in use and with the TSC (ns),
  // measured once by the loop thread before its first wait; guarded by
  // state_mutex_.
  double scope_ns_ = 0, tsc_scope_ns_ = 0;

  // The loop sleeps in a futex wait on wake_word_ (with the interval as its
  // timeout) rather than on a condition variable, so that request_stop()
  // can wake it from a signal handler. Any thread writes both. One word for
  // every collector of the process, so that a ring half full
  // (request_drain(), any recording thread) needs no pointer to its
  // collector: another collector (tests make several) wakes for nothing.
  static std::atomic<std::uint32_t> wake_word_;
  std::atomic<bool> stop_requested_{false};
  std::thread thread_;  // started by the constructor, joined by stop() (the owner's thread)
  // CPU time (ns) the thread calling stop() spent in the final drain: part
  // of the collector's cost (system.collector_cpu_ms). Written once, by stop().
  std::atomic<std::uint64_t> final_drain_cpu_ns_{0};
  std::int64_t next_snapshot_ns_ = 0;  // loop thread only

  // Live progress line (collector thread only, except live_printed_ read after join).
  bool live_active_ = false;    // interval set and (stderr is a terminal or forced)
  bool live_terminal_ = false;  // rewrite one line in place with \r
  bool live_printed_ = false;
  std::int64_t live_next_ns_ = 0;  // monotonic ns of the next line
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
