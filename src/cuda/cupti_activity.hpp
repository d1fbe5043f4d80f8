// CUPTI side of the CUDA backend: activity records (kernels, copies, memsets,
// synchronisation, runtime launch calls) become a timeline::Timeline whose
// analyses give the report's device facts; runtime-API callbacks count
// allocations, synchronisations and launches. Collector thread only, except
// the CUPTI callbacks themselves (see cupti_activity.cpp).
#pragma once

#include <stepscope/report.hpp>
#include "timeline/timeline.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {

// Bounds on what is kept for the analyses; beyond them activity collection is
// switched off and the report says so (facts cupti_over_limit = 1).
inline constexpr std::size_t kMaxDeviceOps = 400000;  // ~40 MB with host ops
inline constexpr std::size_t kMaxHostOps = 400000;
inline constexpr std::size_t kMaxSteps = 100000;
inline constexpr std::size_t kMaxPhases = 400000;

class CuptiActivity {
 public:
  // Subscribes and enables activity collection. False with a status
  // ("cupti_unavailable") and a reason when CUPTI cannot be used, e.g. when
  // another profiler holds it (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).
  // collect: activity on from the start; false: only once set_collecting(true)
  // (collection in windows, cupti_windows.hpp). The callbacks run either way.
  bool start(std::string& status, std::string& reason, bool collect) noexcept;
  bool active() const noexcept { return active_; }
  // Any thread (one at a time: CollectionWindows serialises): switches the
  // activity kinds on or off. A no-op once finished or over the limits.
  void set_collecting(bool on) noexcept;
  static void set_collecting_of(void* activity, bool on) noexcept {
    static_cast<CuptiActivity*>(activity)->set_collecting(on);
  }

  // Collector tick: hands completed activity buffers over (every ~100 ms).
  void poll(std::int64_t now_ns) noexcept;

  // Host windows on CLOCK_MONOTONIC ns (the clock CUPTI is told to use).
  void add_step(std::int64_t number, std::int64_t start_ns, std::int64_t end_ns) noexcept;
  void add_phase(const char* name, bool input_kind, std::int64_t start_ns, std::int64_t end_ns) noexcept;

  // Flushes, stops collection and writes the timeline facts and counters
  // into info.facts. Only steps numbered above `warmup_steps` are analysed.
  // Each device's activity is analysed on its own (info.devices[]: busy
  // time, record counts; entries are added for devices only CUPTI saw), and
  // info.facts are those of one device, info.facts_device: the busiest of
  // `step_devices` (bit d: phases inside steps were timed on device d), else
  // of `timed_devices`, else all activity together (-1). So a process's
  // other GPUs do not count as this one being busy (C14).
  void finish(DeviceInfo& info, std::uint64_t warmup_steps, std::uint64_t measured_steps, std::uint64_t step_devices,
              std::uint64_t timed_devices) noexcept;

  // Called from CUPTI's buffer-completed callback (any thread).
  void consume_buffer(std::uint8_t* buffer, std::size_t valid_size) noexcept;

 private:
  void stop_callbacks() noexcept;
  // finish()'s parts, under mutex_: the record counts; the steps past the
  // warm-up (and, over the limits, before the last record); the facts of
  // each device and of the one the steps ran on (bit d of `candidates`).
  void count_records(DeviceFactsSection& m) const;
  void keep_measured_steps(std::uint64_t warmup_steps);
  void analyse_devices(DeviceInfo& info, std::uint64_t candidates);

  bool active_ = false;
  std::atomic<bool> finished_{false};  // collector writes; set_collecting reads on any thread
  void* subscriber_ = nullptr;         // CUpti_SubscriberHandle while subscribed; released at finish (C5)
  std::int64_t last_flush_ns_ = 0;
  std::int64_t clock_offset_ns_ = 0;  // added to CUPTI timestamps when no timestamp callback

  std::mutex mutex_;  // timeline and counters below (buffers complete on CUPTI's thread)
  timeline::Timeline timeline_;
  std::vector<timeline::Step> steps_;
  bool over_limit_ = false;
  std::uint64_t kernels_ = 0, memcpys_ = 0, memsets_ = 0, syncs_ = 0, api_records_ = 0;
  std::uint64_t pageable_memcpys_ = 0, nccl_kernels_ = 0, peer_memcpys_ = 0;
  struct PerDevice {  // record counts of one device (CUPTI deviceId)
    std::uint64_t kernels = 0, memcpys = 0, peer_memcpys = 0, peer_bytes = 0, memsets = 0;
  };
  std::vector<std::pair<std::uint32_t, PerDevice>> per_device_;  // by first appearance; a handful of GPUs
  PerDevice& per_device(std::uint32_t device);
  std::int64_t sync_ns_ = 0;
  std::uint64_t launches_at_last_buffer_ = 0;  // kernel launch calls counted when our last buffer came back (S3)
  std::uint64_t dropped_records_ = 0;          // not kept: over the limits above
  std::uint64_t incomplete_records_ = 0;       // zero start or end (work still running at a forced flush)
};

// Runtime-API call counts from the CUPTI callback (relaxed atomics; the
// callback runs on the calling thread). "in_steps": made by a thread inside a
// STEPSCOPE_STEP; "measured": in a step past the warm-up.
struct ApiCounts {
  std::uint64_t sync_calls = 0, sync_calls_in_steps = 0;
  std::uint64_t malloc_calls = 0, malloc_calls_measured = 0;
  std::uint64_t free_calls = 0, free_calls_measured = 0;
  std::uint64_t launch_calls = 0, graph_launch_calls = 0;
};
ApiCounts api_counts() noexcept;
// Stream captures begun and not yet ended (cudaStreamBeginCapture[ToGraph]
// .. cudaStreamEndCapture, from the callbacks), while the callbacks run:
// with none open a phase's event needs no cudaStreamIsCapturing check. -1
// when the callbacks do not run (no CUPTI): always check.
int captures_open() noexcept;
void set_callback_warmup(std::uint64_t warmup_steps) noexcept;
// Called (on the destroying thread) when CUPTI reports that a CUDA context is
// about to be destroyed (cudaDeviceReset): the backend stops using its events.
void set_context_destroy_handler(void (*handler)() noexcept) noexcept;
// Subscribes the callbacks above (cupti_callbacks.cpp): the subscriber
// handle, or null with CUPTI's result in `result`; and releases them.
void* subscribe_callbacks(int& result) noexcept;
void unsubscribe_callbacks(void* subscriber) noexcept;

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope
