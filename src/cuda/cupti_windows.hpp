// CUPTI in windows: device activity is collected for `on` of every `period`
// measured steps (torch.profiler's schedule does the same), because on a
// launch-bound loop collecting every kernel costs the step (+50% on an H200:
// docs/gpu.md). The device facts come from the collected steps; the steps
// outside the windows are the same run's uninstrumented baseline, so the run
// measures what collecting cost it (the report's "overhead").
//
// Threads: follow() runs on the training threads (the device begin hook, one
// load and a compare when the step did not change) and on the collector; the
// first thread to see a step that starts or ends a window switches collection
// (a flag makes it one thread at a time) and logs the switch. Everything else
// is the collector's.
#pragma once

#include <stepscope/report.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {

// K steps collected of every N measured steps (core/env.hpp's DeviceSwitches
// holds STEPSCOPE_CUPTI_WINDOW as read; K == N is "always").
struct WindowSchedule {
  std::uint32_t on = 5;        // steps collected per window
  std::uint32_t period = 200;  // measured steps from one window's start to the next (2.5%: +50% in a window is +1.3%)
  bool always() const noexcept { return on >= period; }
};

// Where a step or phase ran relative to the windows.
enum class Collected { yes, no, partly };

class CollectionWindows {
 public:
  using Switch = void (*)(void* context, bool on) noexcept;

  // Before any follow(): the schedule, whether collection is on now, and the
  // call that switches it (CuptiActivity::set_collecting).
  void start(WindowSchedule schedule, bool collecting, Switch fn, void* context) noexcept;
  void set_warmup(std::uint64_t warmup_steps) noexcept { warmup_.store(warmup_steps, std::memory_order_relaxed); }
  // Any thread: the process is in step `step` (g_steps_started) now.
  void follow(std::uint32_t step) noexcept {
    if (fn_ == nullptr || step == seen_.load(std::memory_order_relaxed)) return;
    seen_.store(step, std::memory_order_relaxed);
    if (want(step) != on_.load(std::memory_order_relaxed)) switch_to(want(step));
  }
  // Any thread, once: collection stops for good (over its limits, or finish).
  void stop() noexcept;
  bool windowed() const noexcept { return fn_ != nullptr; }

  // Collector: an interval (CLOCK_MONOTONIC ns) against the switches so far.
  Collected classify(std::int64_t start_ns, std::int64_t end_ns) noexcept;
  // Collector: one measured step's wall time and where it ran.
  void add_step(Collected where, std::int64_t ns) noexcept;
  // Collector: the device part of the report's "overhead".
  void describe(Overhead& out, const char* mode) const;

 private:
  bool want(std::uint32_t step) const noexcept;
  void switch_to(bool on) noexcept;
  void read_log() noexcept;

  WindowSchedule schedule_;
  Switch fn_ = nullptr;  // null: not windowed (always on, or no CUPTI)
  void* context_ = nullptr;
  std::atomic<std::uint64_t> warmup_{5};
  std::atomic<std::uint32_t> seen_{0};
  std::atomic<bool> on_{false};
  std::atomic<bool> busy_{false};     // a thread is switching
  std::atomic<bool> stopped_{false};  // no more switches
  bool initially_on_ = false;

  // Switch log: written by the switching thread (busy_ held), published by
  // written_ (release), read by the collector. Switches are a few per
  // `period` steps: the collector reads them long before 256 more come.
  struct Entry {
    std::int64_t ns;  // after an enable / before a disable: collection is on within
    bool on;
  };
  std::array<Entry, 256> log_{};
  std::atomic<std::uint64_t> written_{0};

  // Collector only.
  std::uint64_t read_ = 0;
  std::vector<Entry> switches_;               // the newest, in time order
  std::vector<std::int64_t> on_ns_, off_ns_;  // step wall times, bounded
  std::uint64_t partly_ = 0;
};

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope
