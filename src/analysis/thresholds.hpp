// src/analysis/thresholds.hpp — every number the analyzer compares against.
//
// One place, so a rule's threshold is never a literal buried in a branch and
// the tests can probe each rule just below, at and just above its threshold:
//
//   const auto& t = stepscope::detail::kThresholds;
//   if (input_share >= t.highly_bound) severity = "highly";
//
// Each constant's rationale and published source is in docs/classification.md;
// change both together. Fractions are of the measured steps' mean wall time
// unless the name says otherwise.
#pragma once

#include <cstdint>

namespace stepscope {
inline namespace v1 {
namespace detail {

struct Thresholds {
  // ---- enough data to say anything -------------------------------------
  // Fewer measured (post-warm-up) steps than this: verdict "unknown". Means and
  // shares of a handful of steps are dominated by the one slow step.
  std::uint64_t min_measured_steps = 10;
  // With a device timeline one analysed window suffices: its fractions come
  // from every kernel in it (hundreds to thousands), not from a few step
  // times, and imported PyTorch-profiler traces hold 1-5 ProfilerSteps (HTA
  // drops the last). Confidence is still scaled down for few steps.
  std::uint64_t min_steps_with_device_timeline = 1;
  // Below this many steps confidence is scaled down (see sample factor).
  std::uint64_t steady_step_count = 30;

  // ---- severity tiers: fraction of step time a category costs -----------
  // TensorFlow profiler input-pipeline analyzer: >= 5% of step time waiting on
  // input is "moderately", >= 20% "highly" input-bound. Used for io, compute,
  // memory and communication.
  double moderately_bound = 0.05;
  double highly_bound = 0.20;
  // TensorFlow profiler kernel-launch and "all other time" tiers: 3% / 15%.
  // Used for scheduling (launch overhead, time outside every phase).
  double scheduling_moderately_bound = 0.03;
  double scheduling_highly_bound = 0.15;

  // ---- unknown: when the facts do not support an answer ------------------
  // At least this share of the step in no phase (or in kind "other") with no
  // scheduling signal to explain it: the instrumentation does not cover the
  // step, so any verdict would be about the minority that it does cover.
  double mostly_unexplained = 0.50;
  // Runner-up cost at least this fraction of the leader's (a near tie) while
  // both are at least moderately bound: conflicting signals, "unknown".
  double conflict_ratio = 0.90;

  // ---- io sub-cases ------------------------------------------------------
  // input_on_cpu_fraction below this: the step thread mostly *waits* in input
  // (off CPU: loader starved, storage); at or above: it *works* there
  // (preprocessing on the step thread).
  double input_on_cpu_working = 0.50;
  // Major page faults per measured step at or above this: reads are served
  // from storage, not the page cache.
  double major_faults_per_step = 1.0;
  // Block-I/O delay (delayacct) as a fraction of wall time.
  double io_wait_fraction = 0.05;
  // Storage reads per step (MiB) at or above this count as storage evidence.
  double read_mib_per_step = 1.0;

  // A background loader whose own work (its input phases' self time per step,
  // over its threads) is below this fraction of the step's wait for input
  // does not explain that wait: it sat idle while the step waited. With the
  // step threads waiting for a CPU (runqueue_wait_fraction), the loader's
  // thread did too: the unexplained part of the wait is scheduling (the mlp
  // demo's loader: 0.01 ms of work per step, the step waiting 0.25 ms for it
  // at a 22% run queue).
  double idle_loader_work_ratio = 0.50;

  // ---- compute -------------------------------------------------------------
  // compute_on_cpu_fraction at or above this: compute phases run on the CPU
  // (CPU-only training) rather than waiting in them.
  double compute_on_cpu_working = 0.50;

  // ---- memory ------------------------------------------------------------
  // Minor page faults per step at or above this (~4 MiB of first-touch 4 KiB
  // pages every step): allocator returning memory to the OS and re-faulting
  // it, i.e. allocator churn. Also the "page_fault_storm" finding.
  double minor_faults_per_step = 1000.0;
  // The storm finding is a warning when the faults cost at least this share
  // of the step (their measured cost, else the kernel time), else info: 2,000
  // faults in a 1.9 s CPU step (PyTorch's word_language_model) cost 0.1%.
  double page_fault_warning_share = 0.02;
  // Device memory peak / capacity at or above this: near capacity (allocator
  // retries, fragmentation, forced small batches).
  double device_memory_near_capacity = 0.90;
  // pageable_memcpy_fraction / memcpy_fraction at or above this: most copies
  // are from pageable memory (staged, synchronous).
  double pageable_memcpy_share = 0.50;

  // ---- communication -----------------------------------------------------
  // A collective of at most this many bytes costs its latency, not its
  // volume, on any transport: time = alpha + bytes / beta, and alpha * beta
  // is of the order of ~0.5 MB for gloo over TCP (~100 us x 5 GB/s), ~1 MB
  // for NCCL over NVLink (~10 us x 100 GB/s), ~0.6 MB over InfiniBand (~25 us
  // x 25 GB/s) -- typical magnitudes, not measured here: 64 KiB then adds
  // ~13% or less to the latency. Fewer bytes buy nothing there.
  double latency_bound_collective_bytes = 64.0 * 1024;
  // At least this many bytes in a step's only collective: splitting it (DDP
  // buckets) lets its all-reduce overlap the rest of backward.
  double one_collective_split_bytes = 4.0 * 1024 * 1024;

  // ---- scheduling --------------------------------------------------------
  // Step threads runnable but not running (schedstat), fraction of wall time.
  double runqueue_wait_fraction = 0.05;
  // Involuntary context switches per second of wall time. An uncontended
  // thread is preempted a handful of times a second; one sharing its core
  // with another runnable thread once per CFS slice (3-24 ms): 40-300/s.
  double involuntary_switches_per_second = 50.0;
  // cpu_utilization (of available cores) at or above this: the process keeps
  // every core it may use busy — oversubscription is likely.
  double cpu_oversubscribed = 0.90;
  // Other processes kept at least this fraction of the machine's online CPUs
  // busy during the run (system.other_processes_cpu_s / (wall_s x
  // cores_online)) while this process alone fitted its cores: the CPU wait
  // is the neighbours', and the advice says so instead of "keep threads <=
  // cores" (PyTorch examples on a shared 2-core machine, docs/trials.md).
  double other_processes_busy = 0.50;
  // Or they took at least other_processes_filling of them and, with this
  // process, kept machine_full of them busy: the machine was full and this
  // process fitted what it used. PyTorch's regression example (a Python
  // loop using one core) beside two busy loops: the loops got 0.93 of the
  // other core, and the 1.4% CPU wait they caused tipped a near tie
  // (scheduling 40% against compute 37%: unknown) to "scheduling, 0.64".
  double other_processes_filling = 0.25;
  double machine_full = 0.90;
  // A phase instance (or a step) longer than max(preempted_over_p90 x p90,
  // p90 + preempted_min_ms) was interrupted, not slow: a preemption costs a
  // scheduler slice (milliseconds), which in a microsecond phase lands whole
  // in the instance it hit. The step's CPU wait is taken from those
  // instances first (settled_breakdown). On PyTorch's C++ regression
  // example beside two busy loops the steps beyond it summed to the measured
  // CPU wait within 5% in every run; quiet runs had none.
  double preempted_over_p90 = 4.0;
  double preempted_min_ms = 1.0;
  // PyTorch TensorBoard profiler plugin: more than half of the kernels are
  // shorter than their launch -> "kernels are short", fuse them.
  double short_kernel_fraction = 0.50;
  // Median launch delay (device start − end of the launching runtime call)
  // above which the host is running ahead of the device: work waits queued
  // for a millisecond or more, so GPU idle time is not the host failing to
  // launch but the device waiting on a dependency (another stream, a
  // collective). HTA flags single launch delays above 100 us as outliers
  // (launch_delay_cutoff); a median ten times that is a queue, not a hiccup.
  double host_ahead_launch_delay_us = 1000.0;
  // Kernels per step at or above this: per-launch overhead (5-20 us each, HTA)
  // alone adds 5-20 ms per step. Heuristic.
  double kernels_per_step = 1000.0;

  // ---- device (GPU) timeline facts ---------------------------------------
  // device_busy_fraction at or above this: the GPU is (almost) always busy.
  double device_busy = 0.90;
  // idle_fraction at or above this: the GPU is mostly idle — never "compute".
  // (PyTorch TensorBoard plugin flags GPU utilization below 50% as low.)
  double device_mostly_idle = 0.50;

  // Python step threads taking turns on the interpreter lock: together on at
  // most this many cores, while their compute phases held at least
  // interpreter_lock_excess times the CPU time they got (and the step waited
  // for a CPU under cpu_contention_finding: the cores were free).
  double interpreter_lock_cores = 1.15;
  double interpreter_lock_excess = 1.2;
  // One step thread: the process's other threads used at least this many
  // cores while its compute phases were mostly off-CPU.
  double interpreter_lock_other_threads = 0.5;
  // Compute phases mostly off-CPU with no GPU: the process's other threads
  // busy at least this fraction of the phases' time off the CPU did the work
  // for the step thread (a pool it waits for: compute); less, and the wait is
  // for something outside the process (unknown, not compute).
  double compute_pool_covers = 0.75;

  // ---- findings ----------------------------------------------------------
  // Memory growth: least-squares fit of RSS vs step over at least this many
  // points, with at least this R², and total growth over the run at least
  // max(growth_min_mib, growth_min_fraction * starting RSS).
  std::uint64_t growth_min_points = 5;
  double growth_min_r2 = 0.80;
  double growth_min_mib = 64.0;
  double growth_min_fraction = 0.10;
  // Step-time coefficient of variation (stddev / mean): warning, critical.
  double jitter_cv = 0.10;
  double jitter_cv_critical = 0.25;
  // The jitter finding names the step phase whose per-step spread is at
  // least this fraction of the step's.
  double jitter_phase_share = 0.5;
  // Step-time outliers: p99 / p50 and max / p50.
  double outlier_p99_over_p50 = 2.0;
  double outlier_max_over_p50 = 5.0;
  // Steps() loops of different work: at least this share of the steps'
  // variance lies between loops (or a loop's own CV is under jitter_cv).
  // jitter then judges each loop's own spread, and slow steps are read as
  // another loop's.
  double loops_apart_variance = 0.90;
  // jitter alone judges a loop's own spread from this share on (more of the
  // variance between loops than within them).
  double loops_differ_variance = 0.50;
  // Steps of different amounts of work: the number of phase occurrences a
  // step ran explains at least this share of the step time's variance
  // (steps.calls_per_step). jitter and slow steps are then info and read as
  // the work's.
  double work_explains_variance = 0.75;
  // The first steps of later steps() loops (epoch starts) averaging at least
  // this multiple of the median step: something restarts with each loop
  // (a DataLoader's workers). Their extra time at or above
  // loop_restart_warning_share of the measured steps' time: a warning.
  double loop_restart_over_rest = 2.0;
  double loop_restart_warning_share = 0.01;
  // The model run with gradients off (the Python instrument's
  // forward_no_grad) at least once per training step (as often as backward)
  // for at least this share of the step: an evaluation inside every step.
  double evaluation_in_step_share = 0.10;
  // Periodic slow steps: of the slowest steps kept (StepStats::slowest),
  // those at or above periodic_over_p50 x the median; at least
  // periodic_min_steps of them, periodic_fit of them on one period and
  // phase (step numbers a, a+P, a+2P, ...; P >= 2), and, when every such
  // step is in the list, periodic_fit of the period's slots in their range
  // slow too. A warning when their extra time is >= periodic_warning_share
  // of the measured steps' time, else info.
  double periodic_over_p50 = 2.0;
  double periodic_min_steps = 4;
  double periodic_fit = 0.75;
  double periodic_warning_share = 0.05;
  // Warm-up mean / steady-state mean at or above this: warm-up far slower.
  double warmup_over_steady = 3.0;
  // Device mean / host mean of a phase at or above this: the host clock saw
  // only the launch of asynchronous work.
  double device_over_host = 2.0;
  // ... and only where the difference matters: at least this many ms and
  // this fraction of the step (issue 27: "data: device 0.00 ms, host 0.00
  // ms (12.9x)" said nothing).
  double device_host_min_ms = 0.05;
  double device_host_min_share = 0.01;
  // Device-clocked runs (StepStats::clock "device"): the step is host-paced
  // while the host waits for the device less than this fraction of it; a
  // phase whose host time is mostly such a wait (host_waits_for_device) is
  // named when the wait is at least host_wait_phase_share of the step.
  double host_wait_paced = 0.10;
  double host_wait_phase_share = 0.10;
  // Device-clocked runs: a page-fault storm costs the step only where the
  // kernel time left after the host's waits for the device is this much of it.
  double device_run_fault_kernel_share = 0.05;
  // Dropped records as a fraction of produced: warning above 0, critical here.
  double dropped_critical_fraction = 0.01;
  // Unattributed share of the step: finding (TensorFlow "all other" highly).
  double unattributed_finding = 0.15;
  // The step thread waited for a CPU at least this share of the step while
  // the verdict is another category: the "cpu_contention" finding (its
  // numbers carry the machine's load). The moderately-bound tier.
  double cpu_contention_finding = 0.10;
  // Steps cover less than this fraction of the step thread's time from its
  // first step to its last: the "steps_coverage" finding, and the verdict's
  // confidence is capped at the coverage (it describes only that fraction).
  // 10% outside steps is more than the TensorFlow profiler's "all other
  // time" moderately tier (3%) and short of its highly tier (15%), so a loop
  // with per-step logging passes and a fetch in the loop header does not.
  double steps_coverage_min = 0.90;
  // Below this the finding is critical: most of the loop is outside steps.
  double steps_coverage_critical = 0.50;

  // ---- what-if -----------------------------------------------------------
  // Phases and kinds with at least this share of the step get projections.
  double what_if_min_share = 0.02;

  // ---- comparing two runs ------------------------------------------------
  // A delta is significant when |delta| > noise_sigmas * combined standard
  // error of the two means AND |delta| > min_relative_change of the base.
  // The standard error (even from batch means) only measures noise within a
  // run; two identical runs of one binary also differ by the machine's drift
  // between processes (heap layout, frequency, neighbours): 1.3% between two
  // back-to-back identical scenario runs with equal conditions (scenarios.diff
  // in a clean-clone CI run, 2026-12-01), ±6% between paired libtorch runs
  // (docs/benchmarks-libtorch.md). Between separate processes of one binary
  // the mean moves more than within any one of them (heap and stack layout
  // under ASLR, which core, clock frequency): 16 runs of `stepscope_scenarios
  // --scenario compute --steps 400` back to back on the 2-core CI machine,
  // each with a batch-means noise of ~0.4%, had means 0.712-0.760 ms (sd 1.7%,
  // so the difference of one pair has sd 2.4%; a clean-clone CI run saw a
  // pair 5.4% apart, 25 local repeats of scenarios.diff 2 pairs, one 6.7%
  // apart). 8% is ~3.3 sd of a pair's difference: one
  // run each cannot tell a smaller change from the next process. This is why
  // pyperf runs 20 processes; with repeats (compare_runs) the between-run sd
  // is measured and the floor drops to min_relative_change_repeated.
  double noise_sigmas = 3.0;
  double min_relative_change = 0.08;
  // With at least two runs on one side: the between-run standard error with
  // a Student t factor (two-sided 99%, Welch-Satterthwaite degrees of freedom),
  // and a floor of 1% (changes below it are not worth a verdict).
  double min_relative_change_repeated = 0.01;
  // A phase's change is called only when it also moves at least this share
  // of the base step (judge end to end): a 'data' phase of 0.0002 ms in a
  // 1.1 ms step was called "+25% slower" between two identical runs.
  double phase_change_min_step_share = 0.01;
  // A step phase whose calls per step differ by more than this between the
  // runs is compared by its time per step, not per call: gradient
  // accumulation's all-reduce every 8th step was "+64% slower" per call while
  // it cost the step 80% less.
  double phase_calls_change = 0.10;
  // Step noise from batch means over the step series (Law & Kelton): the
  // series is cut into about sqrt(points) batches, at least this many, so the
  // batch means are nearly independent even when neighbouring steps are not.
  // Fewer points than batch_means_min_batches * 2: sd / sqrt(n) instead.
  std::uint64_t batch_means_min_batches = 5;
  // Machine conditions differ between the two runs when any of these holds:
  //  - the step threads' runqueue wait (fraction of wall time) differs by at
  //    least this much (the scheduling rule's own tier, runqueue_wait_fraction);
  double conditions_runqueue_difference = 0.05;
  //  - other processes used at least this many more cores in one run (half a
  //    core: a neighbour that takes a core from a 2-core machine half the time);
  double conditions_other_cpu_cores = 0.5;
  // A run during which this process and the others together kept at least
  // this share of the machine's online CPUs busy, other processes at least
  // conditions_other_cpu_cores of them, shared its cores: a neighbour on the
  // same cores (hyperthread siblings, the memory bus) slows a step without
  // making it wait for a CPU (CI: identical runs 55% apart at 0% runqueue
  // while two compilers ran beside them).
  double conditions_busy_machine = 0.75;
  //  - involuntary switches per second: the busier run at or above the
  //    scheduling rule's rate and at least this many times the other's;
  double conditions_involuntary_ratio = 3.0;
  //  - the 1-minute load average per core differs by at least this much.
  double conditions_load_per_core = 0.5;
};

inline constexpr Thresholds kThresholds{};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
