// The run time's process-wide state (one Runtime in static storage) and what
// its two files share: runtime.cpp starts and configures the run (the first
// scope, the collector thread, fork, thread registration, set_config);
// reports.cpp ends it (snapshots, the final report of finish(), the exit
// handler or a signal). Internal to src/run.
#pragma once

#include "run/runtime.hpp"

#include "core/collector.hpp"
#include "core/env.hpp"
#include "core/registry.hpp"
#include "stats/clock.hpp"

#include <stepscope/phase.hpp>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// The first flight-recorder snapshot comes this early (s), whatever
// STEPSCOPE_SNAPSHOT_S says: a run killed in its first seconds (SIGKILL, the
// OOM killer, _exit, a stack overflow) still leaves a report, and from then on
// the file is at most STEPSCOPE_SNAPSHOT_S old (docs/benchmarks.md: one costs
// about 1 ms of the collector's CPU for 30 phases).
inline constexpr double kFirstSnapshotSeconds = 1.0;

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
  // A fork waited start_wait for the start in vain (before_fork): later
  // forks do not wait. Mutex held.
  bool start_overdue = false;
  // How long the exit, a fork or a snapshot waits for the start (STEPSCOPE_START_WAIT_S).
  std::chrono::seconds start_wait{kDefaultStartWaitSeconds};
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
  // note_collectives (any thread): collectives and bytes, the first and last
  // step (g_steps_started) that noted any and how many steps did: gradient
  // accumulation all-reduces every k-th step (the report's steps, reports.cpp).
  std::atomic<std::uint64_t> collectives{0}, collective_bytes{0}, collective_steps{0};
  std::atomic<std::uint32_t> collective_first_step{0}, collective_last_step{0}, collective_seen_step{0};
  // Flight recorder: off after the first failed snapshot or when the report
  // goes to a FIFO or device. Collector thread only (no lock).
  bool snapshots_off = false;
  // Where snapshots go when the report's path cannot be written (reserved at
  // the first failure; the final report uses it too, or removes it).
  std::string fallback_path;
  bool fallback_said = false;
};

Runtime& runtime();
// A warning of the run time: in every report, and once on stderr (printable).
void warn(Runtime& rt, const std::string& message);
// This process's report path (rt.mutex held); the first rank or pid tag added
// to STEPSCOPE_OUT is said once.
std::string report_path(Runtime& rt);
// Waits until the collector thread has started (or failed to), at most
// rt.start_wait; rt.mutex held through `lock`. True when there is a collector.
bool wait_until_ready(Runtime& rt, std::unique_lock<std::mutex>& lock);

// reports.cpp, on the collector thread: a flight-recorder snapshot when one
// is due; the final report a signal asked for.
bool write_snapshot(Runtime& rt) noexcept;  // false: nothing to write yet, retry soon
void write_final_after_signal(Runtime& rt, int pending) noexcept;

// Set by the program's first set_config or set_rank (note_api_use).
extern std::atomic<bool> g_api_used;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
