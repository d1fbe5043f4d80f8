// The collector: owns every thread's ring and all aggregation state. One
// background thread wakes on a timer (it never spins), drains the rings in
// batches, feeds the aggregator, the system sampler and the device backend.
#pragma once

#include "core/aggregator.hpp"
#include "core/clock.hpp"
#include "core/device_backend.hpp"
#include "core/system_sampler.hpp"
#include "core/trace_recorder.hpp"

#include <stepscope/live.hpp>
#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace stepscope::detail {

struct CollectorOptions {
  std::uint32_t ring_capacity = 16384;  // records per thread (power of two)
  std::chrono::milliseconds interval{5};
  AggregatorOptions aggregator;
  bool sample_system = true;
  bool start_thread = true;  // false: the owner calls drain_all() itself (tests, benchmarks)
  TraceWindow trace;                    // STEPSCOPE_TRACE
  std::size_t trace_max_events = 200000;
  double live_interval_s = 0;  // STEPSCOPE_LIVE: seconds between progress lines on stderr (0 = off)
  bool live_forced = false;    // STEPSCOPE_LIVE_FORCE: print even when stderr is not a terminal
};

// Deleter of ring memory obtained with mmap.
struct RingUnmap {
  std::size_t bytes = 0;
  void operator()(PhaseRecord* p) const noexcept;
};

class Collector {
 public:
  explicit Collector(CollectorOptions options, std::unique_ptr<DeviceBackend> device = nullptr);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // Any thread, cold path (its first record). Returns null on allocation failure.
  ThreadRing* register_thread(std::int64_t os_tid) noexcept;
  // The ring's thread is exiting: drain what it left, then free the ring.
  void retire(ThreadRing* ring) noexcept;

  // Stops the thread (if running) and drains everything left. Idempotent.
  void stop() noexcept;
  // Drains all rings once. Collector thread, or the owner when no thread runs.
  void drain_all();

  // Facts gathered so far (steps, phases, records, drops, system, device).
  // Safe from any thread: serialised with the collector's own drains.
  Report facts();

  const TickConverter& clock() const { return clock_; }
  // The raw intervals kept for the trace export (empty when not enabled).
  TraceCapture take_trace();
  std::uint64_t dropped_records() const;

 private:
  struct RingEntry {
    // Ring memory comes straight from mmap, never from malloc, so the
    // profiler's largest buffers stay out of the application's heap.
    std::unique_ptr<PhaseRecord, RingUnmap> storage;
    std::unique_ptr<ThreadRing> ring;
    std::int64_t os_tid = 0;
    Aggregator::ThreadId thread = 0;
    std::atomic<bool> retiring{false};
    bool ran_steps = false;
  };
  void run();
  void drain_locked();  // state_mutex_ held
  // Collector thread: prints the progress line when its interval has passed.
  void maybe_print_live() noexcept;

  CollectorOptions options_;
  TickConverter clock_;
  SystemSampler sampler_;
  std::unique_ptr<DeviceBackend> device_;
  DeviceInfo device_info_;
  bool device_finished_ = false;

  // Registry: guarded by registry_mutex_ (never taken on the hot path).
  mutable std::mutex registry_mutex_;
  std::vector<std::unique_ptr<RingEntry>> rings_;
  std::uint64_t retired_dropped_ = 0;

  // Aggregation state: guarded by state_mutex_, held while draining.
  std::mutex state_mutex_;
  Aggregator aggregator_;
  TraceRecorder trace_;
  std::vector<RingEntry*> drain_list_;
  std::vector<SystemSampler::ThreadSample> sample_list_;
  std::int64_t start_ns_ = 0;
  SystemSignals final_system_;
  bool stopped_ = false;

  std::atomic<std::uint64_t> collector_errors_{0};

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stop_requested_ = false;
  std::thread thread_;

  // Live progress line (collector thread only, except live_printed_ read after join).
  bool live_active_ = false;    // interval set and (stderr is a terminal or forced)
  bool live_terminal_ = false;  // rewrite one line in place with \r
  bool live_printed_ = false;
  std::int64_t live_next_ns_ = 0;  // monotonic ns of the next line
  LiveTracker live_;
};

}  // namespace stepscope::detail
