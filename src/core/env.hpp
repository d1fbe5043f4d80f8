// Settings read from the environment at start-up. Every bad value gets one
// clear warning and a safe default; nothing here ever stops the run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Warm-up steps left out of the statistics unless STEPSCOPE_WARMUP says
// otherwise. The first steps of a training run pay one-off costs (lazy
// initialisation, allocator growth, cuDNN/cuBLAS autotuning, JIT, cold page
// cache) that say nothing about the steady state; 5 steps covers those in
// the frameworks we looked at while costing little on runs of hundreds of
// steps. The warm-up steps are still reported separately (steps.warmup_wall_ms).
inline constexpr std::uint64_t kDefaultWarmupSteps = 5;

// Default STEPSCOPE_SNAPSHOT_S (see Settings::snapshot_interval_s).
inline constexpr double kDefaultSnapshotSeconds = 10;

// The device backend's switches (STEPSCOPE_CUDA, STEPSCOPE_NVTX,
// STEPSCOPE_CUPTI): read here with the others, handed to make_device_backend().
struct DeviceSwitches {
  bool cuda = true;   // STEPSCOPE_CUDA=0: no device timing (the device is not even probed)
  bool nvtx = false;  // STEPSCOPE_NVTX=1: an NVTX range per timed scope
  bool cupti = true;  // STEPSCOPE_CUPTI=0: phase device times from CUDA events only
  // STEPSCOPE_CUPTI_WINDOW=K/N|always: CUPTI activity collected in K of every
  // N measured steps (default 5/200: +50% in a window is +1.3% on the run;
  // "always" is K = N = 1).
  std::uint32_t cupti_window_steps = 5;
  std::uint32_t cupti_window_period = 200;
  // Not from the environment: the run time sets it in a forked child (a
  // DataLoader worker under STEPSCOPE_CHILDREN=1), which never probes a
  // device its parent's CUDA driver already holds.
  bool forked_child = false;
};

// Every switch (STEPSCOPE, STEPSCOPE_QUIET, STEPSCOPE_CUDA, ...) is read by
// parse_switch: 1/0, on/off, true/false, yes/no in any case.
struct Settings {
  bool enabled = true;                               // STEPSCOPE (0/off/false disables)
  std::string out;                                   // STEPSCOPE_OUT, "" = default name
  std::uint64_t warmup_steps = kDefaultWarmupSteps;  // STEPSCOPE_WARMUP
  bool warmup_from_env = false;
  std::uint32_t ring_capacity = 16384;  // STEPSCOPE_RING_RECORDS (power of two, 64..4M)
  // Collector wake-ups: adaptive by default, every 200 ms while the rings
  // stay nearly empty (a wake-up's fixed cost is most of the collector's:
  // docs/benchmarks.md), down to 1 ms when they fill, and at once when a ring
  // is half full; STEPSCOPE_INTERVAL_MS (1..1000) fixes the interval.
  std::uint32_t interval_ms = 200;
  bool interval_from_env = false;
  std::string clock;                        // STEPSCOPE_CLOCK (tsc | monotonic)
  bool quiet = false;                       // STEPSCOPE_QUIET=1: no summary on stderr
  std::string trace;                        // STEPSCOPE_TRACE: step window to export ("" = none)
  std::string trace_out;                    // STEPSCOPE_TRACE_OUT ("" = stepscope-trace[.rankN].json.gz)
  std::uint32_t trace_max_events = 200000;  // STEPSCOPE_TRACE_MAX_EVENTS
  double live_interval_s = 0;               // STEPSCOPE_LIVE: seconds between progress lines (0 = off)
  bool live_forced = false;                 // STEPSCOPE_LIVE_FORCE=1: print even when stderr is not a terminal
  int rank = -1, world_size = 1;            // RANK / OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID
  // This job's processes on this host (LOCAL_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_SIZE / MPI_LOCALNRANKS); 0: unknown.
  int local_ranks = 0;
  // STEPSCOPE_SNAPSHOT_S: seconds between flight-recorder snapshots of the
  // report (0 = off). Why 10 s (docs/benchmarks.md, "Flight recorder"): one
  // snapshot costs the collector thread about 1 ms of CPU for 30 phases and
  // 20 ms for 1k phases, so every 10 s is 0.01-0.2% of one core, and a killed
  // run loses at most its last 10 s. Larger reports (100k phases: ~4 s) are
  // spaced out by the collector so the cost stays under 1% of a core.
  double snapshot_interval_s = kDefaultSnapshotSeconds;
  bool signals = true;     // STEPSCOPE_SIGNALS=0: leave SIGINT/SIGTERM/SIGHUP alone
  bool children = false;   // STEPSCOPE_CHILDREN=1: forked children write their own reports
  std::string merged_out;  // STEPSCOPE_MERGED_OUT: stepscope::mpi's merged report ("" = its default name)
  DeviceSwitches device;   // STEPSCOPE_CUDA, STEPSCOPE_NVTX, STEPSCOPE_CUPTI
  // The performance knobs the environment set (threads, allocator, CUDA,
  // NCCL): run.config's "env:" keys, so `stepscope diff` names a change of
  // them. glibc's malloc settings are one key (the allocator advice sets
  // three together: one change).
  std::map<std::string, std::string> knobs;
};

// getenv_fn lets tests supply their own environment.
using GetEnv = const char* (*)(const char*);
Settings read_settings(std::vector<std::string>& warnings, GetEnv getenv_fn = nullptr);

// A job whose launcher names no local size (torch.multiprocessing.spawn, a
// hand-rolled launcher) but whose rendezvous address, MASTER_ADDR as the
// program left it by the end of the run, is this host (localhost, 127.x,
// ::1, or `host`): all of its `world_size` ranks are here. 0: unknown.
int local_ranks_from_rendezvous(int world_size, const std::string& host, GetEnv getenv_fn = nullptr) noexcept;

// The part of the settings that the first record needs, read without
// allocating anything: it runs on the user's thread inside its first scope.
// read_settings() reads the same values and words the warnings.
inline constexpr std::uint32_t kDefaultStartWaitSeconds = 30;

struct EarlySettings {
  bool enabled = true;                  // STEPSCOPE
  bool enabled_invalid = false;         // STEPSCOPE set to something else than a switch: enabled
  std::uint32_t ring_capacity = 16384;  // STEPSCOPE_RING_RECORDS
  bool ring_capacity_invalid = false;
  const char* clock = nullptr;  // STEPSCOPE_CLOCK, as set
  bool children = false;        // STEPSCOPE_CHILDREN=1 (read_settings words a bad value)
  bool signals = true;          // STEPSCOPE_SIGNALS: the handlers go in with the first scope
  bool quiet = false;           // STEPSCOPE_QUIET: for what is said before the first scope
  DeviceSwitches device;        // the device backend may be built before read_settings (device_in_use)
  // STEPSCOPE_START_WAIT_S (1..600): how long the exit, a fork or a snapshot
  // waits for a collector thread still starting (its device probe can hang
  // in a driver) before it gives up on it.
  std::uint32_t start_wait_s = kDefaultStartWaitSeconds;
};
EarlySettings read_early_settings(GetEnv getenv_fn = nullptr) noexcept;

// The one parser of on/off switches: 1/0, on/off, true/false, yes/no in any
// case. False (out untouched) for anything else. Allocates nothing.
bool parse_switch(const char* text, bool& out) noexcept;

// STEPSCOPE_CUPTI_WINDOW: "always", or "K/N" (1 <= K <= N <= 1000000).
// False (switches untouched) for anything else. Allocates nothing.
bool parse_cupti_window(const char* text, DeviceSwitches& out) noexcept;

// Parses a non-negative integer in [min, max]; false on anything else.
bool parse_uint(const char* text, std::uint64_t min, std::uint64_t max, std::uint64_t& out);

// Report path: STEPSCOPE_OUT with {rank} expanded, or the default name
// (stepscope-report.json, stepscope-report.rank{rank}.json when ranked).
std::string resolve_report_path(const std::string& out, int rank);
// The path this process writes `out` to (STEPSCOPE_OUT, STEPSCOPE_TRACE_OUT;
// "" = default_name): {rank} and {pid} expanded. Two processes must never
// share one file, so a multi-rank run (rank known, world_size > 1) whose path
// lacks {rank} gets ".rank<N>" before the extension, and a forked child
// (child_pid > 0) whose path lacks {pid} gets ".pid<N>"; `note` then says so
// (else it is left empty). A stream (/dev/..., /proc/self/fd/N, an existing
// FIFO, socket or device) is kept as it is.
std::string process_output_path(const std::string& out, const std::string& default_name, int rank, int world_size,
                                long child_pid, std::string& note);
// "dir/report.json" + ".pid7" -> "dir/report.pid7.json": the tag before the
// file name's extension (".json.gz" counts as one), or at its end.
std::string with_file_tag(const std::string& path, const std::string& tag);
// Where a report goes when its path cannot be written: $TMPDIR (or /tmp),
// named with the pid so concurrent runs do not collide.
std::string fallback_report_path(int rank, long pid);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
