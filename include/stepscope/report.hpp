// stepscope/report.hpp — the report model: what a run measured and concluded.
//
// A live run, an imported PyTorch-profiler trace and a merged multi-rank job
// all produce this same structure; the JSON report (docs/report-schema.md) is
// its serialisation, so tools can load a report back and compare or merge it.
//
//   stepscope::Report a, b;
//   std::string error;
//   if (stepscope::load_report("base.json", a, error) &&
//       stepscope::load_report("new.json", b, error)) {
//     stepscope::Comparison c = stepscope::compare_reports(a, b);
//   }
//
// Times are milliseconds unless a field name says otherwise.
#pragma once

#include <stepscope/export.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stepscope {
inline namespace v1 {

// Version of the JSON report layout. Bumped when a field changes meaning or is
// removed; adding fields keeps the version.
inline constexpr int kReportSchemaVersion = 1;

// What a phase spends its time on; it decides where the phase's time goes in
// the step breakdown and which bottleneck category it is evidence for.
enum class PhaseKind : std::uint8_t { input, compute, memory, communication, other };

// ---- the phase kinds as one table: their order, their names, and PerKind ----

inline constexpr std::size_t kPhaseKindCount = static_cast<std::size_t>(PhaseKind::other) + 1;

// Report order: the breakdown's parts in the summary table and the HTML page,
// and the charts' stacking order (bottom to top).
inline constexpr std::array<PhaseKind, kPhaseKindCount> kPhaseKinds = {
    PhaseKind::input, PhaseKind::compute, PhaseKind::memory, PhaseKind::communication, PhaseKind::other};

// The names the report uses (phases[].kind, and "<name>_ms" for the
// breakdown's parts), indexed by kind. The only copy of them.
inline constexpr std::array<const char*, kPhaseKindCount> kPhaseKindNames = {"input", "compute", "memory",
                                                                             "communication", "other"};

namespace detail {
// A kind's index in the tables above; a value outside the enum (a corrupt
// record) counts as `other`, as everywhere else in the report.
constexpr std::size_t kind_index(PhaseKind kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return i < kPhaseKindCount ? i : kPhaseKindCount - 1;
}
static_assert(kind_index(PhaseKind::input) == 0 && kind_index(PhaseKind::other) == kPhaseKindCount - 1,
              "kPhaseKinds follows the enum's order");
}  // namespace detail

constexpr const char* phase_kind_name(PhaseKind kind) noexcept {
  return kPhaseKindNames[detail::kind_index(kind)];
}

// One value per phase kind, indexed by PhaseKind; iterates in kPhaseKinds'
// order. What a struct holds per kind (ms per step, a series) is one of these:
//
//   for (PhaseKind k : kPhaseKinds) line(phase_kind_name(k), breakdown.kind_ms[k]);
template <class T>
struct PerKind {
  std::array<T, kPhaseKindCount> values{};

  constexpr T& operator[](PhaseKind kind) noexcept { return values[detail::kind_index(kind)]; }
  constexpr const T& operator[](PhaseKind kind) const noexcept { return values[detail::kind_index(kind)]; }
  constexpr auto begin() noexcept { return values.begin(); }
  constexpr auto end() noexcept { return values.end(); }
  constexpr auto begin() const noexcept { return values.begin(); }
  constexpr auto end() const noexcept { return values.end(); }
};

// Where a phase ran relative to the training step.
//  step         — inside a STEPSCOPE_STEP scope, on the thread running it: the
//                 step waited for it (critical path).
//  outside_step — on a thread that runs steps, but between or before steps.
//  background   — on a thread that never runs steps (loader workers, ...):
//                 the step did not wait for it directly.
enum class ThreadRole : std::uint8_t { step, outside_step, background };

// The model's names, with the model: every layer (the hot path's collector,
// the analyzer, the writers) reads them from here.
constexpr const char* to_string(PhaseKind kind) noexcept {
  return phase_kind_name(kind);
}
constexpr const char* to_string(ThreadRole role) noexcept {
  return role == ThreadRole::step ? "step" : role == ThreadRole::outside_step ? "outside_step" : "background";
}
STEPSCOPE_API bool parse_phase_kind(const std::string& text, PhaseKind& out) noexcept;
STEPSCOPE_API bool parse_thread_role(const std::string& text, ThreadRole& out) noexcept;

// Summary of a distribution of durations, in milliseconds. Percentiles come
// from a bounded log-linear histogram (relative error below 0.4%).
struct Distribution {
  std::uint64_t count = 0;
  double total = 0, mean = 0, stddev = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p99 = 0;
};

// Compact histogram of a distribution, stored in the report so two reports
// can be compared with their noise and merged across ranks.
// Bucket i (see src/core/histogram.hpp) holds counts[i] samples.
struct HistogramData {
  int sub_bucket_bits = 0;                                       // log-linear layout parameter
  std::vector<std::pair<std::uint32_t, std::uint64_t>> buckets;  // (index, count), count > 0
};

// One call site of a phase whose name is used at several (DCGAN's generator
// and discriminator `backward`): where, and its own inclusive times.
struct PhaseCallSite {
  std::string file;  // as the compiler spelled __FILE__; "(other call sites)" for the merged rest
  int line = 0;
  Distribution host_ms;
};

// Imported traces: one operator's time inside one phase (JSON
// phases[].top_operators; src/import/phase_operators.cpp says how it is attributed).
struct OperatorTime {
  std::string name;         // "aten::addmm", or the kernel's name
  std::string kind;         // "cpu_op": host self time (minus nested cpu_ops); "kernel": device time
  std::uint64_t count = 0;  // occurrences in the phase, over the measured steps
  double self_ms = 0;       // total over the measured steps
};

struct PhaseSummary {
  std::string name;
  PhaseKind kind = PhaseKind::other;
  ThreadRole thread_role = ThreadRole::step;
  std::uint64_t count = 0;  // measured (non-warm-up) occurrences
  Distribution host_ms;     // inclusive wall time of each occurrence (host clock)
  Distribution self_ms;     // exclusive of nested phases on the same thread
  // Self time of this phase as a fraction of the measured steps' wall time
  // (0 for background phases: the step did not wait for them).
  double share_of_step = 0;
  // Background phases: fraction of their time that overlapped a step.
  std::optional<double> overlap_with_steps;
  // Device time between the phase's CUDA events (GPU runs only).
  std::optional<Distribution> device_ms;
  std::uint32_t threads = 0;  // distinct threads that ran this phase
  HistogramData histogram;    // of host_ms, for comparisons and merges
  // Per call site, most time first; only when more than one site ran it.
  std::vector<PhaseCallSite> sites;
  // Call sites past the per-phase cap, counted in the "(other call sites)" row.
  std::uint64_t sites_merged = 0;
  // Imported traces: the phase's top cpu_ops, then its top kernels, each by self time.
  std::vector<OperatorTime> top_operators;
  // With StepStats::clock "device": share_of_step is the phase's device time
  // (outermost phases: the device time it accounts for, the GPU idle it
  // causes included) over the device-paced step, and this is its host self
  // time's share, kept beside it. Absent on host-clocked runs.
  std::optional<double> host_share_of_step;
};

// Mean milliseconds per measured step, by what the step thread was doing.
// Nested phases count once (self time); the parts add up to wall_ms.
// The step thread's time between a step and the one before it belongs to the
// step that follows: wall_ms is the step's own time plus that gap, its input
// phases are in the input part (between_steps_input_ms of it) and the rest is
// between_steps_ms. With steps that cover the loop both are 0.
struct StepBreakdown {
  double wall_ms = 0;
  // Self time per step in the phases of each kind, ms (JSON "<kind>_ms").
  PerKind<double> kind_ms;
  double unattributed_ms = 0;  // in the step but in no phase (framework / scheduling)
  // Set by the analyzer: how much of the parts above is not what their kind
  // says. cpu_wait_ms: the step threads' time runnable but not running
  // (schedstat) inside phases — a scheduling cost; page_fault_ms: kernel time
  // faulting fresh pages (a page-fault storm) beyond the memory part — a memory
  // cost. The parts above stay as measured (they add up to wall_ms);
  // settled_breakdown() (analysis.hpp) gives the accounting every output
  // shows, with these two carved out of them as parts of their own.
  double cpu_wait_ms = 0;
  double page_fault_ms = 0;
  double between_steps_input_ms = 0;  // of the input part: input phases between steps (a fetch in the loop header)
  double between_steps_ms = 0;        // between steps, in no input phase (uninstrumented fetch, eval, ...)
};

// Per-step time series, downsampled so it stays bounded: each point is the
// mean over `stride` consecutive steps starting at `first_step`.
struct StepSeries {
  std::uint32_t stride = 1;
  std::vector<std::uint64_t> first_step;
  std::vector<double> wall_ms;
  PerKind<std::vector<double>> kind_ms;  // as StepBreakdown::kind_ms, ms per step (JSON "<kind>_ms")
  std::vector<double> unattributed_ms;
  std::vector<double> between_steps_ms;  // as in StepBreakdown (empty in reports that predate it)
  std::vector<double> rss_mb;            // process RSS at the end of the point's last step (0: unknown)
};

// One of the slowest measured steps (StepStats::slowest), with where its
// time went, as StepBreakdown divides a step.
struct SlowStep {
  std::uint64_t step = 0;  // its number: steps in the order they started, on every thread, warm-up included
  double wall_ms = 0;      // the step and the gap before it (as StepBreakdown::wall_ms)
  PerKind<double> kind_ms;
  double unattributed_ms = 0;
  double between_steps_ms = 0;  // of wall_ms: the gap before it, in no input phase
};

// The phase occurrences each measured step ran on its thread, and how much of
// the step time's variance their number explains: steps that do different
// amounts of work (an RL episode per step, a model called once per token)
// vary by design, not by noise.
struct CallsPerStep {
  double min = 0, max = 0, mean = 0;  // occurrences per step
  double explained_variance = 0;      // squared correlation of that number with the step's time
  std::string phase;                  // the phase that ran most often per step, where more than once ("": none)
  double phase_mean = 0;              // its occurrences per step
};

struct StepStats {
  std::uint64_t count = 0;            // measured steps
  std::uint64_t warmup_excluded = 0;  // steps left out as warm-up
  Distribution wall_ms;               // measured steps
  Distribution warmup_wall_ms;        // the warm-up steps, so they are not hidden
  // next_step() steps that no next call ended (closed by finish() or their
  // thread's exit: they hold what ran after the loop), left out; their wall.
  std::uint64_t unended_excluded = 0;
  double unended_wall_ms = 0;
  // Steps that held steps on their thread (a steps() loop around another, a
  // steps() iteration around a step()): loops of steps, left out; the steps
  // in them are the steps.
  std::uint64_t outer_excluded = 0;
  // steps() loops whose steps evaluated a model instead of training it (the
  // Python package's instrument() saw a forward with gradients off and no
  // backward or optimizer step, on a thread that trained before): not
  // steps; their time is in between_loops_ms.
  std::uint64_t evaluation_loops = 0;
  // next_step() calls made inside a step that steps() or a step scope opened
  // on the same thread: that one marks the steps, the calls did nothing.
  std::uint64_t next_step_ignored = 0;
  HistogramData histogram;  // of wall_ms
  StepBreakdown breakdown;
  // Set by analyze() (and merge): the breakdown with its carved parts taken
  // out of the others (settled_breakdown(), analysis.hpp): what the verdict,
  // the summary table, HTML and JSON show. Absent in a report no analyzer
  // has seen; shown_breakdown() then gives the measured one.
  std::optional<StepBreakdown> settled_breakdown;
  StepSeries series;
  // Of the step threads' wall time from each one's first step's start to its
  // last step's end, the fraction inside steps (warm-up steps included).
  // Absent when no thread completed two steps.
  std::optional<double> coverage;
  double between_steps_ms = 0;  // total over the run of that time outside steps
  // Gaps after a steps() loop ended and before the thread's next step (epoch
  // boundaries: evaluation, checkpointing), and their total: outside every
  // step, in neither the breakdown nor the coverage.
  std::uint64_t loop_boundaries = 0;
  double between_loops_ms = 0;
  // Of the measured steps, those that opened a steps() loop after another
  // (the first step of each later epoch: a DataLoader restarts its workers
  // there) and their total wall time (in wall_ms too).
  std::uint64_t loop_first_steps = 0;
  double loop_first_ms = 0;
  // Of those, the ones whose loop had more steps (a loop's first step is
  // judged against its own loop, not against another loop's steps; a loop of
  // one step, an evaluation pass over one batch, is no epoch start): their
  // count, total, slowest, and the total of the mean of the rest of each
  // one's loop.
  std::uint64_t loop_first_compared = 0;
  double loop_first_compared_ms = 0;
  double loop_first_max_ms = 0;
  double loop_first_rest_ms = 0;
  // The standard deviation of the measured steps about their own steps()
  // loop's mean, pooled over the loops: beside wall_ms.stddev it says whether
  // steps vary inside a loop or between loops that run different work.
  // Absent with fewer than two loops, in imports and in older reports.
  std::optional<double> within_loop_stddev_ms;
  std::optional<CallsPerStep> calls_per_step;  // absent in imports and in reports that predate it
  double between_steps_input_ms = 0;           // of it, in input phases on the step thread
  // The slowest outermost measured steps, slowest first (at most
  // kSlowestStepsKept), where a period in their numbers shows work a loop
  // does every N steps (finding periodic_slow_steps). Left out: the steps
  // that opened a later steps() loop (counted in loop_first_*). Empty in
  // imported traces and in reports that predate it.
  static constexpr std::size_t kSlowestStepsKept = 32;
  std::vector<SlowStep> slowest;
  // Which clock paces wall_ms, histogram and breakdown: "host", or "device"
  // when the steps have device time (a GPU run timed by CUDA events): then a
  // step is what the device's step boundaries say, its parts are the device
  // time each kind accounts for (docs/gpu.md, "Device-true accounting"), and
  // the host-clocked figures are kept beside them (below). On a loop that
  // launches without waiting the host runs ahead and pays for the backlog
  // wherever it blocks, so its clock misplaces time; the device's does not.
  std::string clock = "host";
  std::optional<Distribution> host_wall_ms;     // clock "device": the host-paced step times
  std::optional<StepBreakdown> host_breakdown;  // clock "device": the host-clocked breakdown

  // The breakdown the writers print: the settled one where the analyzer set it.
  const StepBreakdown& shown_breakdown() const noexcept { return settled_breakdown ? *settled_breakdown : breakdown; }
};

// Host and operating-system signals gathered off the hot path.
struct SystemSignals {
  bool available = false;
  double wall_s = 0;  // from first to last record
  double cpu_user_s = 0, cpu_system_s = 0;
  int cores_available = 0;     // sched_getaffinity
  double cpu_utilization = 0;  // (user+system) / (wall * cores)
  std::uint64_t minor_faults = 0, major_faults = 0;
  std::uint64_t voluntary_switches = 0, involuntary_switches = 0;
  std::uint64_t read_bytes = 0, write_bytes = 0;  // storage I/O (/proc/self/io)
  double io_wait_s = 0;                           // block I/O delay of the process (delayacct), when exposed
  double runqueue_wait_s = 0;                     // time runnable but not running (schedstat), step threads
  double step_threads_on_cpu_s = -1;              // time running (schedstat), step threads; <0: not measured
  double rss_start_mb = 0, rss_peak_mb = 0, rss_end_mb = 0;
  // Sampled on the step thread: of the time spent in input phases, the
  // fraction it was on a CPU (working) vs off it (waiting). <0: not measured.
  double input_on_cpu_fraction = -1;
  double compute_on_cpu_fraction = -1;
  // The same for the step's time in none of its phases (a sleep there waits
  // for no CPU).
  double unattributed_on_cpu_fraction = -1;
  // Of the input-phase samples, the fraction in uninterruptible sleep (state
  // D: usually waiting for storage). <0: not measured.
  double input_disk_wait_fraction = -1;
  std::uint64_t input_samples = 0;  // samples taken while the step thread was in an input phase
  std::uint64_t samples = 0;
  double sampling_cost_ms = 0;  // time the sampler itself took
  // CPU time of stepscope's collector thread (start-up, draining, sampling,
  // device polling): the library's whole background cost. 0 when unknown.
  double collector_cpu_ms = 0;
  // The machine around the run, so two runs can be compared on equal terms.
  // 1-minute load average (/proc/loadavg) when sampling started and ended;
  // <0: not measured.
  double load_average_start = -1, load_average_end = -1;
  int cores_online = 0;  // online CPUs of the machine (sysconf), 0: unknown
  // CPU time all other processes used during the run: machine-wide busy time
  // (/proc/stat) minus this process' user+system time. <0: not measured.
  double other_processes_cpu_s = -1;
  // CPU time of this process's descendants during the run (DataLoader worker
  // processes, spawned helpers): the live ones' /proc/<pid>/stat, the ones
  // already waited for from RUSAGE_CHILDREN. Not in other_processes_cpu_s
  // (the job's own workers are not another job). <0: not measured.
  double children_cpu_s = -1;
  int child_processes = 0;  // live descendants seen at the last reading
  // Of other_processes_cpu_s, the CPU time of this process's siblings: its
  // parent's other children running the same program (mp.Process trainers,
  // a launcher's ranks), the job's own. <0: not measured (no such parent).
  double siblings_cpu_s = -1;
  int sibling_processes = 0;  // the most siblings seen using CPU at a reading (an idle helper is not one)
  // Per-step figures come from the steps they are per. The counters above
  // (wall_s to other_processes_cpu_s, runqueue_wait_s included) cover the
  // measured steps: read at the collector's first tick after the warm-up
  // ended and at its last tick that saw a measured step end, then scaled from
  // the window_steps measured steps that window held to steps.count. 0: no
  // tick fell inside the measured steps; the counters cover the whole run.
  double window_steps = 0;
  double run_wall_s = 0;  // the whole run: sampling start to its end
  // Before the measured steps (start-up, the warm-up steps, lazy
  // initialisation in the first step): charged to no step, reported as such.
  double before_steps_wall_s = 0, before_steps_cpu_system_s = 0;
  std::uint64_t before_steps_minor_faults = 0;
  // Wall time of one first touch of a fresh page on this machine (us),
  // measured at the end when the measured steps faulted 64 pages or more (min
  // of a few rounds); <0: not measured. On a
  // virtual machine part of it is the hypervisor's and shows as user time.
  double page_fault_us = -1;
};

// One signal the analyzer looked at.
struct Evidence {
  std::string signal;  // machine-readable name, e.g. "input_share"
  double value = 0;
  double threshold = 0;
  std::string comparison;  // ">=", "<", ...
  // true when the signal crossed its threshold AND points to the verdict's
  // category: it is evidence *for* the verdict. A signal that crossed its
  // threshold for another category is not (crossed is true, supports false).
  bool supports = false;
  bool crossed = false;  // the signal crossed its threshold (whatever the verdict)
  std::string sentence;  // human-readable explanation
};

// What holds a step back: the categories a verdict names and ranks, in the
// order it ranks equal costs. A verdict holds the name (bottleneck_name), as
// the JSON report does; "unknown" is no category.
enum class Bottleneck : std::uint8_t { io, compute, memory, communication, scheduling };
inline constexpr std::size_t kBottleneckCount = 5;
inline constexpr std::array<Bottleneck, kBottleneckCount> kBottlenecks = {
    Bottleneck::io, Bottleneck::compute, Bottleneck::memory, Bottleneck::communication, Bottleneck::scheduling};
inline constexpr std::array<const char*, kBottleneckCount> kBottleneckNames = {"io", "compute", "memory",
                                                                               "communication", "scheduling"};

constexpr const char* bottleneck_name(Bottleneck b) noexcept {
  return kBottleneckNames[static_cast<std::size_t>(b)];
}
// The category a name stands for; none for "unknown" and any other text.
constexpr std::optional<Bottleneck> bottleneck_named(std::string_view name) noexcept {
  for (Bottleneck b : kBottlenecks)
    if (name == bottleneck_name(b)) return b;
  return std::nullopt;
}

struct Verdict {
  std::string category = "unknown";  // bottleneck_name() of the category, or "unknown"
  // The category, none when the verdict is unknown.
  std::optional<Bottleneck> bottleneck() const noexcept { return bottleneck_named(category); }
  double confidence = 0;  // [0, 1]
  std::string severity;   // "highly", "moderately", "mildly" or "" (unknown)
  std::string summary;    // one sentence
  std::vector<Evidence> evidence;
  std::vector<std::string> recommendations;
  // What each category costs the step (fraction of step time), ranked.
  std::vector<std::pair<std::string, double>> ranking;
};

struct Finding {
  std::string kind;      // "memory_growth", "jitter", "warmup_slow", "dropped_records", ...
  std::string severity;  // "info", "warning", "critical"
  std::string message;
  std::map<std::string, double> values;
};

// Amdahl projection: the step if `target` were `speedup`× faster (0: free).
struct WhatIf {
  std::string target;  // phase name or kind
  double share = 0;    // of step time
  double speedup = 0;  // 2 = twice as fast; 0 = takes no time
  double step_ms_now = 0, step_ms_projected = 0;
  double step_change_pct = 0;  // negative = faster
  std::string note;            // e.g. overlap caveats
};

// Device (GPU) side of the run.
// Holistic Trace Analysis' tables for one rank of an imported trace, under
// HTA 0.6.1's names and definitions (docs/timeline.md, "HTA's tables"), so an
// HTA user finds the numbers HTA prints. Times in microseconds; percentages
// (0-100) of HTA's own denominators, not of step time.
struct HtaTemporalBreakdown {  // over the kernel span: first device op start to last end
  double idle_us = 0, compute_us = 0, non_compute_us = 0, kernel_time_us = 0;
  double idle_pctg = 0, compute_pctg = 0, non_compute_pctg = 0;
};
struct HtaKernelTypeRow {   // exclusive slices of the COMPUTATION/COMMUNICATION/MEMORY union
  std::string kernel_type;  // "COMPUTATION", "COMPUTATION overlapping COMMUNICATION", ...
  double sum_us = 0;
  double percentage = 0;  // of the union
};
struct HtaIdleRow {  // per stream; a category with no ops has no row, except "other"
  std::int64_t stream = -1;
  std::string idle_category;  // "host_wait", "kernel_wait", "other"
  double idle_time_us = 0;
  double idle_time_ratio = 0;  // of the stream's idle time, 0-1
};
struct HtaLaunchStats {  // cudaLaunchKernel/Memcpy/Memset calls paired with the op they launched
  std::int64_t pairs = 0;
  std::int64_t short_kernels = 0;          // ran shorter than its launch call (call <= runtime cutoff)
  std::int64_t runtime_outliers = 0;       // launch call longer than the runtime cutoff
  std::int64_t launch_delay_outliers = 0;  // queued longer than the launch-delay cutoff
  double runtime_cutoff_us = 50;
  double launch_delay_cutoff_us = 100;
};
struct HtaTables {
  bool present = false;  // only imported traces with device activity have them
  int rank = 0;
  HtaTemporalBreakdown temporal_breakdown;
  std::vector<HtaKernelTypeRow> kernel_type_breakdown;
  std::optional<double> comp_comm_overlap_pctg;  // absent without communication kernels
  std::vector<HtaIdleRow> idle_time_breakdown;
  HtaLaunchStats launch_stats;
  std::vector<std::int64_t> steps_kept;  // ProfilerStep numbers analysed (HTA drops the last)
};

// ---- device facts (JSON device.facts; docs/report-schema.md, "device") ----
//
// Every fact is optional: absent means "not measured" (no device timeline, or
// STEPSCOPE_CUPTI=0 for the call counts), never 0. Counts are held as double
// because a merged report's facts are means over the ranks that have them.
// The JSON keys are the member names; for_each_device_fact() below is the one
// list of them (the JSON writer and reader, the HTML page and the merge walk it).

struct DeviceFactsSection {
  // -- The device timeline analysis (timeline::device_facts over a Kineto
  // import or the live CUPTI activity; written by timeline::add_device_facts).
  // Fractions are of the analysed steps' time unless the name says otherwise.
  std::optional<double> steps;                 // step windows analysed (count)
  std::optional<double> step_time_mean_ms;     // their mean length
  std::optional<double> device_busy_fraction;  // union of all device ops
  std::optional<double> device_idle_fraction;
  std::optional<double> idle_host_input_fraction;         // idle while the host was in an input phase
  std::optional<double> idle_host_launch_bound_fraction;  // idle while the host was launching / in framework ops
  std::optional<double> idle_sync_fraction;               // idle while the host synced with nothing queued
  std::optional<double> idle_unattributed_fraction;
  std::optional<double> compute_fraction;                // union of compute kernels
  std::optional<double> communication_fraction;          // union of communication kernels
  std::optional<double> exposed_communication_fraction;  // communication not hidden behind compute
  std::optional<double> comm_compute_overlap_fraction;   // HTA's overlap / 100, of communication time
  std::optional<double> memcpy_fraction;
  std::optional<double> pageable_memcpy_fraction;  // copies from pageable host memory
  std::optional<double> kernels_per_step;
  std::optional<double> launches_per_step;
  std::optional<double> short_kernel_fraction;     // of launch pairs: ran shorter than the launch call
  std::optional<double> runtime_outlier_fraction;  // of launch pairs
  std::optional<double> launch_delay_p50_us;       // launch call to kernel start
  std::optional<double> launch_delay_p90_us;
  std::optional<double> host_wait_idle_fraction;  // of HTA's per-stream idle time, summed over streams
  std::optional<double> kernel_wait_idle_fraction;
  std::optional<double> device_span_busy_fraction;  // of the device's own span, first to last device op
  // Present when the device ran behind the host (busy >= 90% of its span,
  // the step windows >= 50% idle): the windows' idle fraction; the facts above
  // are then taken over the device's span (docs/timeline.md).
  std::optional<double> host_window_idle_fraction;

  // -- The live CUDA backend's phase timing by CUDA events (src/cuda, docs/gpu.md).
  std::optional<double> device_times_resolved;           // phases given a device time
  std::optional<double> device_times_unresolved;         // events still pending at the end
  std::optional<double> event_pool_exhausted;            // phases left without device time: no free event pair
  std::optional<double> event_slots_of_dropped_records;  // taken back by their thread (not leaked)
  std::optional<double> event_slots_leaked;              // must stay 0
  std::optional<double> event_pool_threads;
  std::optional<double> phases_in_graph_capture;
  std::optional<double> event_record_failed;
  std::optional<double> device_times_unbound_stream;  // timed on the per-thread default stream
  std::optional<double> phases_after_device_gone;     // only after a device loss or cudaDeviceReset
  std::optional<double> device_reset_by_application;  // 1 when the application reset the device
  std::optional<double> nvtx;                         // 1 when NVTX ranges were emitted
  std::optional<double> memory_in_use_mb_last;        // last device memory sample

  // -- The live CUDA backend's CUPTI callbacks and activity records. The call
  // counts are present only when the callbacks ran (cupti_callbacks = 1).
  std::optional<double> cupti_callbacks;
  std::optional<double> sync_calls;
  std::optional<double> sync_calls_in_steps;
  std::optional<double> cuda_malloc_calls;
  std::optional<double> cuda_free_calls;
  std::optional<double> cuda_malloc_calls_per_step;  // measured steps only
  std::optional<double> cuda_free_calls_per_step;
  std::optional<double> kernel_launch_calls;
  std::optional<double> graph_launch_calls;
  std::optional<double> cupti_kernels;
  std::optional<double> cupti_nccl_kernels;
  std::optional<double> cupti_memcpys;
  std::optional<double> cupti_pageable_memcpys;
  std::optional<double> cupti_memsets;
  std::optional<double> cupti_sync_records;
  std::optional<double> cupti_sync_ms;
  std::optional<double> cupti_runtime_records;
  std::optional<double> cupti_over_limit;  // 1: activity past the record limit was not collected
  std::optional<double> cupti_records_not_kept;
  std::optional<double> cupti_records_dropped;     // cuptiActivityGetNumDroppedRecords
  std::optional<double> cupti_records_incomplete;  // zero timestamp at the final flush; skipped
  std::optional<double> cupti_steps;               // step windows analysed, warm-up left out
  std::optional<double> cupti_other_device_ops;    // the process's other GPUs, left out of the facts
  std::optional<double> cupti_analysis_failed;     // 1: the timeline analysis threw (out of memory)
};

// Calls fn(key, member...) for every device fact, `key` its JSON name, with
// the same member of each of `sections` (one to read or write a report, more
// to combine them, as the merge does). The one list of the facts' keys.
template <class Fn, class... Sections>
void for_each_device_fact(Fn&& fn, Sections&... sections) {
#define STEPSCOPE_DETAIL_FACT(name) fn(#name, sections.name...)
  STEPSCOPE_DETAIL_FACT(steps);
  STEPSCOPE_DETAIL_FACT(step_time_mean_ms);
  STEPSCOPE_DETAIL_FACT(device_busy_fraction);
  STEPSCOPE_DETAIL_FACT(device_idle_fraction);
  STEPSCOPE_DETAIL_FACT(idle_host_input_fraction);
  STEPSCOPE_DETAIL_FACT(idle_host_launch_bound_fraction);
  STEPSCOPE_DETAIL_FACT(idle_sync_fraction);
  STEPSCOPE_DETAIL_FACT(idle_unattributed_fraction);
  STEPSCOPE_DETAIL_FACT(compute_fraction);
  STEPSCOPE_DETAIL_FACT(communication_fraction);
  STEPSCOPE_DETAIL_FACT(exposed_communication_fraction);
  STEPSCOPE_DETAIL_FACT(comm_compute_overlap_fraction);
  STEPSCOPE_DETAIL_FACT(memcpy_fraction);
  STEPSCOPE_DETAIL_FACT(pageable_memcpy_fraction);
  STEPSCOPE_DETAIL_FACT(kernels_per_step);
  STEPSCOPE_DETAIL_FACT(launches_per_step);
  STEPSCOPE_DETAIL_FACT(short_kernel_fraction);
  STEPSCOPE_DETAIL_FACT(runtime_outlier_fraction);
  STEPSCOPE_DETAIL_FACT(launch_delay_p50_us);
  STEPSCOPE_DETAIL_FACT(launch_delay_p90_us);
  STEPSCOPE_DETAIL_FACT(host_wait_idle_fraction);
  STEPSCOPE_DETAIL_FACT(kernel_wait_idle_fraction);
  STEPSCOPE_DETAIL_FACT(device_span_busy_fraction);
  STEPSCOPE_DETAIL_FACT(host_window_idle_fraction);
  STEPSCOPE_DETAIL_FACT(device_times_resolved);
  STEPSCOPE_DETAIL_FACT(device_times_unresolved);
  STEPSCOPE_DETAIL_FACT(event_pool_exhausted);
  STEPSCOPE_DETAIL_FACT(event_slots_of_dropped_records);
  STEPSCOPE_DETAIL_FACT(event_slots_leaked);
  STEPSCOPE_DETAIL_FACT(event_pool_threads);
  STEPSCOPE_DETAIL_FACT(phases_in_graph_capture);
  STEPSCOPE_DETAIL_FACT(event_record_failed);
  STEPSCOPE_DETAIL_FACT(device_times_unbound_stream);
  STEPSCOPE_DETAIL_FACT(phases_after_device_gone);
  STEPSCOPE_DETAIL_FACT(device_reset_by_application);
  STEPSCOPE_DETAIL_FACT(nvtx);
  STEPSCOPE_DETAIL_FACT(memory_in_use_mb_last);
  STEPSCOPE_DETAIL_FACT(cupti_callbacks);
  STEPSCOPE_DETAIL_FACT(sync_calls);
  STEPSCOPE_DETAIL_FACT(sync_calls_in_steps);
  STEPSCOPE_DETAIL_FACT(cuda_malloc_calls);
  STEPSCOPE_DETAIL_FACT(cuda_free_calls);
  STEPSCOPE_DETAIL_FACT(cuda_malloc_calls_per_step);
  STEPSCOPE_DETAIL_FACT(cuda_free_calls_per_step);
  STEPSCOPE_DETAIL_FACT(kernel_launch_calls);
  STEPSCOPE_DETAIL_FACT(graph_launch_calls);
  STEPSCOPE_DETAIL_FACT(cupti_kernels);
  STEPSCOPE_DETAIL_FACT(cupti_nccl_kernels);
  STEPSCOPE_DETAIL_FACT(cupti_memcpys);
  STEPSCOPE_DETAIL_FACT(cupti_pageable_memcpys);
  STEPSCOPE_DETAIL_FACT(cupti_memsets);
  STEPSCOPE_DETAIL_FACT(cupti_sync_records);
  STEPSCOPE_DETAIL_FACT(cupti_sync_ms);
  STEPSCOPE_DETAIL_FACT(cupti_runtime_records);
  STEPSCOPE_DETAIL_FACT(cupti_over_limit);
  STEPSCOPE_DETAIL_FACT(cupti_records_not_kept);
  STEPSCOPE_DETAIL_FACT(cupti_records_dropped);
  STEPSCOPE_DETAIL_FACT(cupti_records_incomplete);
  STEPSCOPE_DETAIL_FACT(cupti_steps);
  STEPSCOPE_DETAIL_FACT(cupti_other_device_ops);
  STEPSCOPE_DETAIL_FACT(cupti_analysis_failed);
#undef STEPSCOPE_DETAIL_FACT
}

// One GPU of a live CUDA run (JSON device.devices[]): every device the
// process timed phases on or that CUPTI saw activity on (review C14).
struct DeviceUsage {
  int id = -1;                // CUDA device ordinal (as the process sees it, after CUDA_VISIBLE_DEVICES)
  std::string name;           // empty when the process made no context on it
  bool phases_timed = false;  // phases were timed on it (a thread attached to it)
  bool steps_ran_on = false;  // phases inside steps were timed on it
  double memory_capacity_mb = 0;
  double memory_peak_mb = 0;  // whole device, sampled once per step; 0 when not sampled
  // CUPTI, over the measured steps' windows (-1: no CUPTI analysis).
  double busy_fraction = -1;  // of step time: union of its kernels, copies, memsets
  double busy_ms = 0;         // that union per measured step, ms
  // CUPTI record counts over the whole run (warm-up included).
  std::uint64_t kernels = 0;
  std::uint64_t memcpys = 0;       // host<->device and on-device copies (MEMCPY records)
  std::uint64_t peer_memcpys = 0;  // device<->device peer copies run by this device (MEMCPY2 records)
  double peer_memcpy_mb = 0;       // bytes of those peer copies, MiB
  std::uint64_t memsets = 0;
};

struct DeviceInfo {
  bool enabled = false;  // device timing was active
  std::string status;    // "ok", "no_cuda_build", "no_device", "no_driver", "cupti_unavailable", ...
  std::string reason;    // human-readable why
  std::string name;
  double memory_capacity_mb = 0;
  double memory_peak_mb = 0;
  DeviceFactsSection facts;          // JSON device.facts: timeline facts and the backend's counters
  HtaTables hta;                     // imported traces: HTA's tables (JSON device.hta)
  std::vector<HtaTables> hta_ranks;  // merged reports: each rank's HTA tables, by rank (device.hta_ranks)
  // Live CUDA runs: the device that `name`, the memory figures and the
  // timeline facts describe (the busiest device the steps ran on; -1 when
  // none), and every device's own figures (device.devices[], C14).
  int facts_device = -1;
  std::vector<DeviceUsage> devices;
  // Live CUDA runs: kernel launches whose activity records never reached
  // stepscope, even after the final flush; another CUPTI activity client
  // replaced the process-global buffer callbacks (review S3). 0: none.
  std::uint64_t cupti_launches_unrecorded = 0;
};

struct RunInfo {
  std::string library_version;
  std::string time_utc;  // ISO 8601, when the report was written
  std::string host;
  std::int64_t pid = 0;
  int rank = -1;  // -1: unknown / single process
  int world_size = 1;
  // The job's processes on this host (LOCAL_WORLD_SIZE, ...); 0: unknown.
  int local_ranks = 0;
  std::string source = "live";                      // "live", "kineto-import", "merge"
  std::map<std::string, std::string> config;        // set_config() values, stringified
  std::map<std::string, std::string> config_types;  // "string" or "number"
  std::map<std::string, std::string> build;         // build options
  std::string clock_source;                         // "tsc" or "clock_monotonic"
  double clock_tsc_ghz = 0;                         // calibrated TSC frequency (0 for clock_monotonic)
  double clock_error_ppm = 0;                       // estimated conversion error
  // Why clock_source is what it is (the kernel's clocksource and TSC verdict,
  // the CPU's invariant-TSC flag, STEPSCOPE_CLOCK). "" when not a live run.
  std::string clock_reason;
  std::uint64_t warmup_steps = 0;
  std::string warmup_source;  // "default", "env", "reduced"
};

// ---- multi-rank jobs (filled by merge_reports, include/stepscope/merge.hpp) ----

// One rank of a merged job. Times are means per measured step.
struct RankSummary {
  int rank = -1;
  std::string host;
  std::uint64_t steps = 0;  // measured steps
  double step_ms = 0;       // wall time
  double busy_ms = 0;       // wall time outside communication phases
  PerKind<double> kind_ms;  // the rank's breakdown parts, ms per step (JSON "<kind>_ms")
  double unattributed_ms = 0;
  double comm_wait_ms = 0;  // of the communication part: waiting for slower ranks (estimate)
  std::string verdict;      // the rank's own bottleneck category
  bool straggler = false;
  // The stragglers this rank waits for in communication (its comm_wait_ms is
  // material and another rank is a straggler); empty when none.
  std::vector<int> waits_for;
  // How the rank's run ended, from its report: complete = false for a
  // flight-recorder snapshot (the rank was killed, crashed or still running);
  // ended_by as in Report ("" for snapshots and imported traces);
  // interrupted: Report::interrupted's signal, "" when none came;
  // exception: Report::exception as "type: message" ("" when none).
  bool complete = true;
  std::string ended_by;
  std::string interrupted;
  std::string exception;
};

// A value compared across ranks: min / median / max and who holds the extremes.
struct AcrossRanks {
  double min = 0, median = 0, max = 0, mean = 0;
  int min_rank = -1, max_rank = -1;
  double imbalance = 0;  // max / mean - 1: what the slowest rank costs a synchronous job
};

// A step-thread phase across ranks: its self time per measured step.
struct PhaseAcrossRanks {
  std::string name;
  PhaseKind kind = PhaseKind::other;
  std::uint32_t ranks = 0;  // ranks that ran it
  AcrossRanks per_step_ms;
};

// One point of the aligned per-step series across ranks (same steps on every
// rank); values are the point's mean per step.
struct StepAcrossRanks {
  std::uint64_t first_step = 0;
  AcrossRanks wall_ms;
  AcrossRanks busy_ms;  // wall outside communication: where stragglers show
  AcrossRanks communication_ms;
};

// A rank that holds the others back. Found with robust statistics: its value
// against the median of the other ranks, in units of the ranks' spread
// (1.4826 x median absolute deviation, floored by the measurement noise), and
// only when the excess is a material share of the step.
struct Straggler {
  int rank = -1;
  std::string phase;                      // where it is slow: a phase name, or "step" (outside communication)
  double rank_ms = 0;                     // its mean per step there
  double median_ms = 0;                   // the other ranks' median
  double excess_ms = 0;                   // rank_ms - median_ms
  double robust_z = 0;                    // excess / spread
  double slow_step_fraction = 0;          // of the aligned step points, where it was materially slower
  std::string pattern;                    // "chronic" (most steps) or "one-off" (a few steps)
  std::vector<std::uint64_t> slow_steps;  // first steps of its worst points (at most 8)
  // Why it is slow, from the composition of its step: "input" (its data
  // phase: the loader), "phase" (extra time in the phase `phase`),
  // "unattributed" (time outside any phase; `phase` is "(unattributed)"),
  // "step" (its whole step, no one part stands out), "cpu_wait" (its step
  // threads waited for a CPU, beyond the median rank's wait, at least half
  // its excess: its host's cores, wherever the wait fell).
  std::string cause;
};

struct MultiRank {
  int world_size = 0;              // ranks in the job
  int ranks_merged = 0;            // reports merged
  std::vector<int> missing_ranks;  // ranks in [0, world_size) without a report (at most 64 listed)
  std::vector<RankSummary> ranks;  // by rank
  std::vector<PhaseAcrossRanks> phases;
  std::vector<StepAcrossRanks> steps;  // aligned series (bounded)
  std::uint32_t step_stride = 1;       // steps per point of `steps`
  AcrossRanks step_ms, busy_ms, compute_ms, communication_ms;
  // Communication split (means per step over ranks): the collective itself
  // (what the last rank to arrive spends in it) and waiting for slower ranks.
  double comm_ms = 0, comm_collective_ms = 0, comm_wait_ms = 0;
  double comm_wait_fraction = 0;  // comm_wait_ms / comm_ms
  // Waiting the compute imbalance predicts: mean over ranks of (slowest busy - own busy).
  double expected_wait_from_imbalance_ms = 0;
  std::vector<Straggler> stragglers;
  std::string method;  // how stragglers and waiting were estimated, in words
};

// What stepscope cost the run it measured (JSON "overhead"). Live runs fill
// it; other reports leave the defaults.
struct Overhead {
  // One enabled scope's host cost on this machine, measured at start-up on
  // the collector thread: two reads of the clock in use and the 32-byte
  // store (bench/overhead_bench holds a scope within 1.10x of it), and the
  // same with the TSC (0 where the CPU has none). ns; 0 unknown.
  double scope_ns = 0;
  double tsc_scope_ns = 0;
  // The collector thread's CPU time over the run's wall time; <0 unknown.
  double collector_core_fraction = -1;
  // CUDA runs: how CUPTI activity was collected: "windows" (window_steps of
  // every window_period measured steps), "always", "off", "" without a
  // device backend.
  std::string device_mode;
  std::uint64_t window_steps = 0, window_period = 0;
  // Measured steps wholly inside / wholly outside the collection windows,
  // and their median wall time (ms). Same run, same loop.
  std::uint64_t instrumented_steps = 0, uninstrumented_steps = 0;
  double instrumented_step_ms = 0, uninstrumented_step_ms = 0;
  // measured: both kinds of steps were seen. window_cost_pct: what
  // collecting costs a step (instrumented / uninstrumented - 1, %);
  // run_cost_pct: that times the share of steps collected.
  bool measured = false;
  double window_cost_pct = 0;
  double run_cost_pct = 0;
};

// Collectives noted by stepscope::note_collectives (stepscope.torch: a DDP
// model's gradient buckets) and the steps from the first that noted any to
// the last (JSON "communication"): gradient accumulation that all-reduces
// every 8th step has 1/8 collective per step. All 0: none noted (the advice
// then cannot tell latency from volume).
struct CommunicationVolume {
  std::uint64_t collectives = 0;
  std::uint64_t bytes = 0;
  std::uint64_t steps = 0;
};

struct Report {
  int schema_version = kReportSchemaVersion;
  RunInfo run;
  StepStats steps;
  std::vector<PhaseSummary> phases;
  std::uint64_t dropped_records = 0;
  std::uint64_t total_records = 0;  // produced = aggregated + dropped
  SystemSignals system;
  DeviceInfo device;
  Verdict bottleneck;
  std::vector<Finding> findings;
  std::vector<WhatIf> what_if;
  std::vector<std::string> warnings;  // configuration problems, fallbacks taken
  std::optional<MultiRank> ranks;     // merged multi-rank jobs only (run.source "merge")
  // How the run ended. A flight-recorder snapshot (written every
  // STEPSCOPE_SNAPSHOT_S seconds while the run goes on) has complete = false
  // and snapshot_time_utc set; if the process was killed, crashed or ran out
  // of memory, the last snapshot is the report that remains. The final report
  // has complete = true and ended_by "exit" (normal exit), "finish"
  // (stepscope::finish()), the signal's name ("SIGINT", "SIGTERM", "SIGHUP"),
  // or "terminate" (std::terminate: an uncaught C++ exception, see exception).
  bool complete = true;
  std::string ended_by;  // "" in a snapshot (and in reports that are not live)
  // The first termination signal the process received while recording,
  // whether or not it ended the run: from Python, a Ctrl-C that the program
  // or a library caught (torch.multiprocessing.spawn's workers swallow
  // KeyboardInterrupt and exit normally) leaves ended_by "exit", and this says
  // the run was interrupted all the same. after_s: seconds after recording
  // started. Live reports only.
  struct Interruption {
    std::string signal;  // "SIGINT", "SIGTERM", "SIGHUP"
    double after_s = 0;
  };
  std::optional<Interruption> interrupted;
  // The uncaught exception that ended the run, when one did: from Python,
  // the one Python printed before exiting (ended_by "exit": the interpreter
  // still ran its exit hooks); from C++, the one std::terminate was called
  // for (ended_by "terminate": an exception escaped main or a thread's
  // function, or a noexcept function; std::abort follows). type: Python's
  // qualified name ("torch.cuda.OutOfMemoryError", "RuntimeError") or the
  // demangled C++ type ("std::runtime_error"); message: the first line of
  // str(e) or what(), cut to 400 bytes, "" when there is none. after_s:
  // seconds after recording started. Live reports only; null otherwise, and
  // for a std::terminate() called with no exception in flight.
  struct UncaughtException {
    std::string type;
    std::string message;
    double after_s = 0;
  };
  std::optional<UncaughtException> exception;
  std::string snapshot_time_utc;  // ISO 8601; "" unless a snapshot
  // Phases named at run time (stepscope::site(), the Python module): distinct
  // sites interned, site() calls past the bound folded into "(other run-time
  // names)" (overflow), names cut to the length bound (truncated).
  struct RuntimeSites {
    std::uint64_t sites = 0;
    std::uint64_t overflow = 0;
    std::uint64_t truncated = 0;
  } runtime_sites;
  Overhead overhead;
  CommunicationVolume communication;
};

// Serialisation (src/report/json_report.cpp). Never throw.
STEPSCOPE_API std::string report_to_json(const Report& report, int indent = 2);
STEPSCOPE_API bool report_from_json(const std::string& text, Report& out, std::string& error);
STEPSCOPE_API bool load_report(const std::string& path, Report& out, std::string& error);
// Writes atomically (temporary file + rename). Returns false with `error` set.
STEPSCOPE_API bool write_report_file(const Report& report, const std::string& path, std::string& error);
// The human summary table with the verdict (what goes to stderr at exit).
STEPSCOPE_API std::string format_summary(const Report& report);

}  // namespace v1
}  // namespace stepscope
