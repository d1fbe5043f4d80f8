// src/timeline/timeline.hpp (not installed) — the device timeline model and the analyses on it.
//
// A Timeline is what one rank's GPU (and the host threads feeding it) did
// during the profiled steps: device intervals (kernels, copies, memsets,
// syncs), host intervals (runtime calls, framework ops, annotations), the
// ProfilerStep windows and the user's phases. It is usually produced by
// stepscope::import_kineto_trace() (import/trace_import.hpp), but every analysis
// is a pure function of a Timeline, so tests and other backends can build one
// by hand:
//
//   stepscope::ImportResult imported = stepscope::import_kineto_trace("trace.json.gz");
//   if (!imported.ok) { std::cerr << imported.error << '\n'; return 1; }
//   const stepscope::timeline::Timeline& tl = imported.trace;
//   auto temporal = stepscope::timeline::temporal_breakdown(tl);
//   std::printf("GPU idle %.2f%%\n", temporal.idle_percent());
//   stepscope::timeline::DeviceFacts facts = stepscope::timeline::device_facts(tl);
//
// Times are integer nanoseconds on the trace's own clock. The importer applies
// Holistic Trace Analysis' microsecond rounding by default (see
// docs/timeline.md) so the analyses reproduce HTA's numbers exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stepscope/export.hpp"

namespace stepscope {
inline namespace v1 {

struct DeviceFactsSection;  // stepscope/report.hpp

namespace timeline {

// Index into Timeline::names. Names are interned: kernel names are often
// kilobytes long and repeat thousands of times.
using NameId = std::uint32_t;

// What a device interval is, from the trace category.
enum class DeviceOpKind : std::uint8_t {
  kernel,  // cat "kernel"
  memcpy,  // cat "gpu_memcpy"
  memset,  // cat "gpu_memset"
  sync,    // cat "cuda_sync" (Stream Sync, Stream Wait Event, Context Sync, ...)
  other,   // any other event that carries a device stream (e.g. triton cpu_op)
};

// Kernel type, classified by name exactly as HTA's get_kernel_type() does.
enum class KernelClass : std::uint8_t { computation, communication, memory, other };

enum class MemcpyDirection : std::uint8_t {
  unknown,
  host_to_device,
  device_to_host,
  device_to_device,
  peer_to_peer,
  host_to_host,
};

// Host side of a copy, when the trace says ("Memcpy HtoD (Pageable -> Device)").
// Pageable copies are staged by the driver and block the host.
enum class HostMemoryKind : std::uint8_t { unknown, pageable, pinned };

struct DeviceInterval {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;  // >= start_ns; zero-length intervals happen after rounding
  std::int64_t stream = -1;
  std::int64_t correlation = -1;  // links to the host runtime call that launched it
  std::int32_t device = -1;
  NameId name = 0;
  DeviceOpKind kind = DeviceOpKind::other;
  KernelClass cls = KernelClass::other;
  MemcpyDirection direction = MemcpyDirection::unknown;  // copies only
  HostMemoryKind host_memory = HostMemoryKind::unknown;  // copies only
  std::int64_t bytes = -1;                               // copies/memsets, -1 when unknown

  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

enum class HostOpKind : std::uint8_t {
  runtime_launch,  // cudaLaunchKernel*, cudaMemcpyAsync, cudaMemsetAsync, hip equivalents
  runtime_sync,    // calls that block the host until the device catches up
  runtime_other,   // every other runtime/driver call
  framework_op,    // cpu_op (aten::..., autograd)
  annotation,      // user_annotation other than ProfilerStep#N
  step,            // ProfilerStep#N
  python,          // python_function
  other,
};

struct HostInterval {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t pid = -1;
  std::int64_t tid = -1;
  std::int64_t correlation = -1;  // runtime calls only
  NameId name = 0;
  HostOpKind kind = HostOpKind::other;

  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

// One ProfilerStep#N window (host side).
struct Step {
  std::int64_t number = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t tid = -1;  // the thread that ran it, where no ProfilerStep range says (inferred iterations)
};

// A user annotation (record_function / NVTX-like range).
struct Phase {
  NameId name = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t tid = -1;
  bool on_device = false;  // gpu_user_annotation: the range as seen on a stream
};

struct DeviceProperties {
  int id = -1;
  std::string name;
  std::int64_t total_memory_bytes = -1;
  int compute_major = -1;
  int compute_minor = -1;
  int multiprocessor_count = -1;
};

struct Timeline {
  std::vector<std::string> names;  // NameId -> text
  std::vector<DeviceInterval> device_ops;
  std::vector<HostInterval> host_ops;
  std::vector<Step> steps;  // sorted by start; only the steps kept for analysis
  std::vector<Phase> phases;
  std::vector<DeviceProperties> devices;
  int rank = 0;  // distributedInfo.rank, else 0 (as HTA)
  int world_size = 1;
  bool has_distributed_info = false;
  std::string distributed_backend;

  const std::string& name_of(NameId id) const { return names[id]; }
  // Adds (or finds) a name; used by importers and hand-built test timelines.
  STEPSCOPE_API NameId intern(std::string_view text);
};

// ---------------------------------------------------------------------------
// Classification helpers (HTA's regexes, hta/common/types.py, reimplemented
// without <regex>).
STEPSCOPE_API KernelClass classify_kernel(std::string_view name);
STEPSCOPE_API HostOpKind classify_runtime_call(std::string_view name);
STEPSCOPE_API const char* to_string(KernelClass cls);
STEPSCOPE_API const char* to_string(DeviceOpKind kind);

// ---------------------------------------------------------------------------
// Temporal breakdown (HTA get_temporal_breakdown): over every device interval,
// span = last end - first start, idle = span - |union|, compute = |union of
// COMPUTATION intervals|, non_compute = the rest.
struct TemporalBreakdown {
  std::int64_t span_ns = 0;
  std::int64_t idle_ns = 0;
  std::int64_t compute_ns = 0;
  std::int64_t non_compute_ns = 0;

  double idle_percent() const { return percent(idle_ns); }
  double compute_percent() const { return percent(compute_ns); }
  double non_compute_percent() const { return percent(non_compute_ns); }

 private:
  double percent(std::int64_t part) const {
    return span_ns > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(span_ns) : 0.0;
  }
};
STEPSCOPE_API TemporalBreakdown temporal_breakdown(const Timeline& timeline);

// Kernel-type breakdown (HTA get_gpu_kernel_breakdown, kernel_type table with
// memory kernels included): exclusive slices of the union of COMPUTATION,
// COMMUNICATION and MEMORY busy time. A slice is identified by the set of
// classes running at once, e.g. computation|communication is labelled
// "COMPUTATION overlapping COMMUNICATION".
enum KernelClassMask : unsigned {
  kComputationBit = 1u,
  kCommunicationBit = 2u,
  kMemoryBit = 4u,
};
struct KernelTypeSlice {
  unsigned classes = 0;  // KernelClassMask bits
  std::string label;     // HTA's label
  std::int64_t time_ns = 0;
  double percent = 0.0;  // of the total over all slices (not rounded)
};
// Sorted by time, largest first.
STEPSCOPE_API std::vector<KernelTypeSlice> kernel_type_breakdown(const Timeline& timeline);

// Communication / computation overlap. overlap_percent is HTA's
// comp_comm_overlap_pctg; exposed_communication_ns is stepscope's addition:
// communication time during which no computation kernel runs, i.e. the part
// of the collectives the step actually waits for.
struct CommComputeOverlap {
  bool has_communication = false;
  std::int64_t communication_ns = 0;          // |union(COMM)|
  std::int64_t computation_ns = 0;            // |union(COMP)|
  std::int64_t overlapped_ns = 0;             // |union(COMM) ∩ union(COMP)|
  std::int64_t exposed_communication_ns = 0;  // communication_ns - overlapped_ns

  double overlap_percent() const {
    return communication_ns > 0 ? 100.0 * static_cast<double>(overlapped_ns) / static_cast<double>(communication_ns)
                                : 0.0;
  }
};
STEPSCOPE_API CommComputeOverlap comm_compute_overlap(const Timeline& timeline);

// Idle time between consecutive kernels/copies/memsets of one stream (HTA
// get_idle_time_breakdown). A gap is host_wait when the runtime call that
// launched the next op started after the previous op ended (the host was
// late), kernel_wait when the gap is shorter than the threshold (launch
// latency between back-to-back kernels), other otherwise.
struct StreamIdleBreakdown {
  std::int64_t stream = -1;
  std::int64_t host_wait_ns = 0;
  std::int64_t kernel_wait_ns = 0;
  std::int64_t other_ns = 0;
  // How many ops fell in each category (HTA prints a row only for non-zero counts).
  std::int64_t host_wait_count = 0;
  std::int64_t kernel_wait_count = 0;
  std::int64_t other_count = 0;  // includes the first op of the stream

  std::int64_t total_ns() const { return host_wait_ns + kernel_wait_ns + other_ns; }
};
inline constexpr std::int64_t kDefaultKernelWaitThresholdNs = 30'000;  // HTA's 30 us
// Ordered by first appearance of the stream in the timeline.
STEPSCOPE_API std::vector<StreamIdleBreakdown> idle_time_breakdown(
    const Timeline& timeline, std::int64_t kernel_wait_threshold_ns = kDefaultKernelWaitThresholdNs);

// Launch statistics (HTA cuda_kernel_launch_stats + its plot definitions).
struct LaunchStatsOptions {
  std::int64_t runtime_cutoff_ns = 50'000;        // HTA runtime_cutoff = 50 us
  std::int64_t launch_delay_cutoff_ns = 100'000;  // HTA launch_delay_cutoff = 100 us
  // Also pair ROCm's launch calls (hipLaunchKernel, hipExtModuleLaunchKernel,
  // ...) with what they launched. HTA matches only the CUDA names, so its
  // tables (device.hta) leave this off; the verdict's facts turn it on, or an
  // MI300 trace would have no short-kernel evidence. ROCm pairs count in
  // pairs / short_kernels / runtime_outliers but not in the launch-delay
  // figures: a ROCm trace's host and device clocks need not agree (the
  // MI300X ResNet trace of tests/data/traces/corpus has every delay between
  // 21 and 39 ms in 16 ms steps while its GPU idles 63%).
  bool include_hip_launches = false;
};
struct LaunchPair {
  std::int64_t correlation = -1;
  std::int64_t cpu_duration_ns = 0;  // the runtime call
  std::int64_t gpu_duration_ns = 0;  // the op it launched
  std::int64_t launch_delay_ns = 0;  // max(0, gpu start - runtime end)
  bool hip = false;                  // a ROCm launch call (LaunchStatsOptions::include_hip_launches)
};
struct LaunchStats {
  std::int64_t pairs = 0;
  // cpu_duration <= runtime cutoff and gpu_duration < cpu_duration: the
  // kernel ran shorter than it took to launch it.
  std::int64_t short_kernels = 0;
  std::int64_t runtime_outliers = 0;       // cpu_duration > runtime cutoff
  std::int64_t launch_delay_outliers = 0;  // launch_delay > launch delay cutoff (CUDA launches only)
  double launch_delay_p50_ns = 0, launch_delay_p90_ns = 0, launch_delay_p99_ns = 0;
  double runtime_p50_ns = 0, runtime_p90_ns = 0;
  double launches_per_step = 0;  // pairs / steps (pairs when no steps)
};
STEPSCOPE_API std::vector<LaunchPair> launch_pairs(const Timeline& timeline, const LaunchStatsOptions& options = {});
STEPSCOPE_API LaunchStats launch_statistics(const Timeline& timeline, const LaunchStatsOptions& options = {});

// Per-step device usage with GPU idle time attributed to what the host was
// doing meanwhile. Precedence when host activities overlap: sync > input >
// launch/framework work > nothing.
struct SyncIdle {
  std::string phase;  // innermost user annotation around the sync call, else the top framework op
  std::int64_t idle_ns = 0;
};
struct StepDeviceUsage {
  std::int64_t step = -1;  // ProfilerStep number; -1 for the whole-trace window
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t busy_ns = 0;  // |union of all device intervals| within the window
  std::int64_t idle_ns = 0;
  std::int64_t idle_host_input_ns = 0;       // host in a data/input phase -> io
  std::int64_t idle_host_scheduling_ns = 0;  // host busy launching / in framework ops
  std::int64_t idle_host_sync_ns = 0;        // host blocked in a sync call
  std::int64_t idle_unattributed_ns = 0;     // host did nothing we saw
  std::vector<SyncIdle> sync_by_phase;       // sorted by idle_ns, largest first
  std::int64_t compute_ns = 0;               // |union COMP| in window
  std::int64_t communication_ns = 0;
  std::int64_t exposed_communication_ns = 0;
  std::int64_t memcpy_ns = 0;           // |union of memcpy ops|
  std::int64_t pageable_memcpy_ns = 0;  // |union of pageable memcpy ops|
  std::int64_t kernels = 0;             // kernel-kind ops starting in the window

  std::int64_t span_ns() const { return end_ns - start_ns; }
};
struct AttributionOptions {
  // Case-insensitive substrings that mark an input/data phase in a user
  // annotation's name; empty: the kind its name gives (default_phase_kind,
  // the rule of the report's phases). Operators and Python frames count as
  // input only when their name contains "dataloader" (docs/timeline.md).
  std::vector<std::string> input_phase_markers;
  // A device behind the host: busy at least device_behind_busy of its own
  // span (first to last device op, the device's clock only) while the host's
  // step windows see it idle at least device_behind_window_idle. Its work
  // runs queued steps after the host launched it (an MI300X DDP trace: busy
  // 97% of its span, kernels 22-32 ms after their launch in 16 ms steps,
  // the windows idle 93%), over a span at least device_behind_min_span of the
  // windows' total: the windows measure the host, not the device, and
  // the facts are taken over the device's span instead (docs/timeline.md).
  double device_behind_busy = 0.90;
  double device_behind_window_idle = 0.50;
  double device_behind_min_span = 0.50;  // the device's span against the windows' total
};
// The window a trace without ProfilerStep#N ranges is analysed as: from the
// first to the last moment any host or device event covers, as step -1.
// Empty (end_ns <= start_ns) when the trace holds no event.
Step whole_trace_window(const Timeline& tl);

// One entry per kept step; one whole-trace entry (step -1) when the trace has no steps.
STEPSCOPE_API std::vector<StepDeviceUsage> per_step_device_usage(const Timeline& timeline,
                                                                 const AttributionOptions& options = {});

// Compact facts for the bottleneck analyzer. Fractions are of total step
// time (sum of analysed windows) unless said otherwise; all in [0, 1].
struct DeviceFacts {
  bool has_device_activity = false;
  int rank = 0;
  int world_size = 1;
  std::int64_t steps = 0;  // analysed windows
  double step_time_mean_ns = 0;
  double device_busy_fraction = 0;  // union of all device ops
  double device_idle_fraction = 0;
  double idle_host_input_fraction = 0;         // io evidence
  double idle_host_launch_bound_fraction = 0;  // scheduling evidence
  double idle_sync_fraction = 0;               // the host synced and the device had nothing queued
  double idle_unattributed_fraction = 0;
  std::string top_sync_phase;                 // phase responsible for most sync idle
  double compute_fraction = 0;                // union of COMPUTATION
  double communication_fraction = 0;          // union of COMMUNICATION
  double exposed_communication_fraction = 0;  // COMM not hidden behind COMP
  double comm_compute_overlap_fraction = 0;   // HTA overlap / 100, of COMM time
  double memcpy_fraction = 0;
  double pageable_memcpy_fraction = 0;
  double kernels_per_step = 0;
  double launches_per_step = 0;
  double short_kernel_fraction = 0;     // of launch pairs
  double runtime_outlier_fraction = 0;  // of launch pairs
  double launch_delay_p50_ns = 0;
  double launch_delay_p90_ns = 0;
  double host_wait_idle_fraction = 0;  // of HTA per-stream idle time summed over streams
  double kernel_wait_idle_fraction = 0;
  // Busy over the device's own span (first to last device op); and, when the
  // device ran behind the host (AttributionOptions), the step windows' idle
  // fraction before the facts above were taken over that span instead (-1: not).
  double device_span_busy_fraction = 0;
  double host_window_idle_fraction = -1;
};
STEPSCOPE_API DeviceFacts device_facts(const Timeline& timeline, const AttributionOptions& options = {});
// The facts as the report holds them (report.device.facts, in its
// units: ms, us), shared by the Kineto import and the live CUPTI backend so
// the analyzer reads both alike.
STEPSCOPE_API void add_device_facts(const DeviceFacts& facts, DeviceFactsSection& out);

// ---------------------------------------------------------------------------
// PyTorch's own ranges as phases (docs/timeline.md, "Phases without
// annotations"). A trace recorded with torch.profiler names the step
// (ProfilerStep#N), the input fetch (enumerate(DataLoader)#...), the
// optimizer (Optimizer.step#..., Optimizer.zero_grad#...) and the autograd
// engine's backward work (autograd::engine::evaluate_function: ...) without
// any annotation from the user; the rest of the step's top-level work on the
// step's thread is the forward pass. The user's own record_function ranges
// win: time they cover on the step's thread is theirs, not a framework phase.
enum class FrameworkPhase : std::uint8_t { data, forward, backward, optimizer };
inline constexpr std::size_t kFrameworkPhaseCount = 4;
// "data", "forward", "backward", "optimizer": stepscope's standard phase names.
STEPSCOPE_API const char* to_string(FrameworkPhase phase);
// True for a range PyTorch itself records (ProfilerStep*, enumerate(DataLoader)#..., Optimizer.step#...,
// Optimizer.zero_grad#..., DDP's and FSDP's "...DataParallel.forward"), i.e. not a user annotation.
STEPSCOPE_API bool is_pytorch_range(std::string_view name);

struct StepFrameworkPhases {
  std::int64_t step = -1;                            // ProfilerStep number
  std::int64_t tid = -1;                             // the thread that ran the step
  std::int64_t span_ns = 0;                          // the step's wall time
  std::int64_t user_ns = 0;                          // covered by the user's own annotations on the step's thread
  std::int64_t phase_ns[kFrameworkPhaseCount] = {};  // by FrameworkPhase, disjoint from user_ns
  std::int64_t unattributed_ns = 0;                  // span - user - phases (>= 0)
};
// One entry per kept step (none when the trace has no ProfilerStep#N).
STEPSCOPE_API std::vector<StepFrameworkPhases> framework_phases(const Timeline& timeline);

// ---------------------------------------------------------------------------
// Interval helpers, public because other analyses reuse them.
struct Interval {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};
// Sorts and merges (touching intervals merge, as in HTA's merge_kernel_intervals).
STEPSCOPE_API std::vector<Interval> merge_intervals(std::vector<Interval> intervals);
STEPSCOPE_API std::int64_t total_length(const std::vector<Interval>& merged);
// Length of the intersection of two merged lists.
STEPSCOPE_API std::int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope
