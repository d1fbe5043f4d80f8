#include "analysis/facts.hpp"

#include "analysis/thresholds.hpp"
#include "stats/histogram.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace stepscope {
inline namespace v1 {
namespace detail {

double clamp01(double v) {
  return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0;
}

double safe_div(double a, double b) {
  if (b == 0 || !std::isfinite(a) || !std::isfinite(b)) return 0;
  return a / b;
}

double mean_step_ms(const Report& report) {
  if (report.steps.breakdown.wall_ms > 0) return report.steps.breakdown.wall_ms;
  return report.steps.wall_ms.mean;
}

CpuHolders cpu_holders(const SystemSignals& s) {
  CpuHolders h;
  if (s.wall_s > 0) h.own_cores = (s.cpu_user_s + s.cpu_system_s) / s.wall_s;
  if (s.wall_s > 0 && s.other_processes_cpu_s >= 0) h.other_cores = s.other_processes_cpu_s / s.wall_s;
  if (s.wall_s > 0 && s.children_cpu_s > 0) h.children_cores = s.children_cpu_s / s.wall_s;
  h.cores = s.cores_available > 0 ? s.cores_available : s.cores_online;
  const auto& t = kThresholds;
  const double online = s.cores_online;
  h.others_hold = online > 0 && h.cores > 0 && h.own_cores + h.children_cores < h.cores &&
                  (h.other_cores >= t.other_processes_busy * online ||
                   (h.other_cores >= t.other_processes_filling * online &&
                    h.own_cores + h.children_cores + h.other_cores >= t.machine_full * online));
  return h;
}

bool python_run(const Report& report) {
  const auto frontend = report.run.build.find("frontend");
  return report.run.source == "live" && frontend != report.run.build.end() && frontend->second == "python";
}

namespace {

// The most threads a step phase ran on.
int step_threads(const Report& report) {
  int threads = 0;
  for (const PhaseSummary& p : report.phases)
    if (p.thread_role == ThreadRole::step) threads = std::max(threads, static_cast<int>(p.threads));
  return threads;
}

}  // namespace

std::string ComputeOnCpu::phrase() const {
  return bound ? fmt::format("at most {:.0f}% of its compute phases' time (its run time over theirs: too few samples)",
                             100 * fraction)
               : fmt::format("in {:.0f}% of its compute phases' samples", 100 * fraction);
}

ComputeOnCpu compute_on_cpu(const Report& report, double below) {
  const SystemSignals& s = report.system;
  if (!s.available) return {};
  if (s.compute_on_cpu_fraction >= 0) return {s.compute_on_cpu_fraction, false};
  if (s.step_threads_on_cpu_s < 0 || report.steps.clock != "host" || step_threads(report) != 1) return {};
  // The compute phases' time as measured (a wait for a CPU in them included).
  const double compute_s =
      report.steps.breakdown.kind_ms[PhaseKind::compute] * static_cast<double>(report.steps.count) * 1e-3;
  if (compute_s <= 0) return {};
  const double bound = (s.step_threads_on_cpu_s + s.runqueue_wait_s) / compute_s;
  if (bound >= (below < 0 ? kThresholds.compute_on_cpu_working : below)) return {};
  return {bound, true};
}

double other_threads_cores(const SystemSignals& s) {
  return std::max(0.0,
                  (s.cpu_user_s + s.cpu_system_s - s.step_threads_on_cpu_s - s.collector_cpu_ms * 1e-3) / s.wall_s);
}

InterpreterLock interpreter_lock(const Report& report) {
  InterpreterLock lock;
  const SystemSignals& s = report.system;
  if (!python_run(report) || !s.available || s.wall_s <= 0 || s.step_threads_on_cpu_s < 0 ||
      report.steps.clock != "host")
    return lock;
  lock.threads = step_threads(report);
  const int cores = s.cores_available > 0 ? s.cores_available : s.cores_online;
  if (lock.threads < 1 || cores < 2) return lock;
  const StepShares shares = step_shares(report);
  const auto& t = kThresholds;
  lock.on_cpu_cores = s.step_threads_on_cpu_s / s.wall_s;
  lock.compute_cores = lock.threads * shares.kind[PhaseKind::compute];
  lock.other_threads_cores = other_threads_cores(s);
  lock.compute_on_cpu = compute_on_cpu(report);
  const bool held = lock.compute_cores >= t.interpreter_lock_excess * lock.on_cpu_cores;
  if (lock.threads >= 2) {
    lock.active = held && shares.cpu_wait < t.cpu_contention_finding && lock.on_cpu_cores <= t.interpreter_lock_cores;
  } else if (!device_facts(report).present && !report.device.enabled && report.device.name.empty()) {
    // No GPU seen: compute phases off the CPU do not wait for a device.
    // Asleep in its compute phases (the samples count a thread waiting for
    // a CPU as on one, so a busy machine does not explain it: the same loop
    // beside two busy loops, 24% of its step waiting for a CPU, was on a CPU
    // in 44% of them, its other thread 0.56 CPUs).
    lock.background = true;
    lock.active = held && lock.compute_on_cpu.fraction >= 0 &&
                  lock.compute_on_cpu.fraction < t.compute_on_cpu_working &&
                  lock.other_threads_cores >= t.interpreter_lock_other_threads;
  }
  return lock;
}

double loader_phase_ms(const PhaseSummary& p, const Report& report) {
  if (p.thread_role != ThreadRole::background || p.kind != PhaseKind::input || p.count == 0) return 0;
  const double steps = static_cast<double>(std::max<std::uint64_t>(report.steps.count, 1));
  // Occurrences per batch: a per-sample phase runs many times.
  const double per_step = std::max(1.0, std::round(static_cast<double>(p.count) / steps));
  return p.self_ms.mean * per_step / std::max<std::uint32_t>(p.threads, 1);
}

LoaderCpu loader_cpu(const Report& report) {
  LoaderCpu out;
  const SystemSignals& s = report.system;
  if (!s.available || report.steps.count == 0 || s.step_threads_on_cpu_s < 0) return out;
  double loader_wall = 0;  // per batch, all its threads together
  for (const PhaseSummary& p : report.phases) {
    const double per_thread = loader_phase_ms(p, report);
    if (per_thread <= 0) continue;
    const double n = std::max<std::uint32_t>(p.threads, 1);
    loader_wall += per_thread * n;
    out.threads = std::max(out.threads, n);
  }
  // Per measured step (the counters are): the process's CPU beyond the step
  // threads', at most the loader's wall time (intra-op threads are in the
  // former, and a loader cannot use more CPU than it ran), and the worker
  // processes' CPU where the run has them (num_workers, when stepscope.torch
  // recorded it, says they are DataLoader workers).
  const double steps = static_cast<double>(report.steps.count);
  const double others_cpu = 1000.0 * (s.cpu_user_s + s.cpu_system_s - s.step_threads_on_cpu_s) / steps;
  out.cpu_ms = std::min(loader_wall, std::max(0.0, others_cpu));
  // Descendants are the loader only where the run says they are DataLoader
  // workers: a child of unknown purpose (a compressor, a logger) is the
  // job's own CPU (cpu_holders), not its input.
  const auto workers = report.run.config.find("num_workers");
  const double num_workers = workers != report.run.config.end() ? std::atof(workers->second.c_str()) : 0;
  const double children_cpu = s.children_cpu_s > 0 && num_workers > 0 ? 1000.0 * s.children_cpu_s / steps : 0;
  if (children_cpu >= kThresholds.what_if_min_share * mean_step_ms(report)) {
    out.what = loader_wall > 0 ? "background loader and DataLoader worker processes" : "DataLoader worker processes";
    out.cpu_ms += children_cpu;
    out.threads += num_workers;
  }
  return out;
}

SharedCores shared_cores(const Report& report, const StepBreakdown& settled) {
  SharedCores out;
  const SystemSignals& s = report.system;
  if (!s.available || report.steps.count == 0 || settled.wall_ms <= 0) return out;
  const CpuHolders h = cpu_holders(s);
  if (h.others_hold || h.cores <= 0 || h.own_cores + h.children_cores < kThresholds.machine_full * h.cores) return out;
  if (settled.cpu_wait_ms < kThresholds.what_if_min_share * settled.wall_ms) return out;
  const LoaderCpu loader = loader_cpu(report);
  if (loader.cpu_ms <= 0) return out;
  out.loader_cpu_ms = loader.cpu_ms;
  out.loader = loader.what;
  out.step_work_ms = std::max(0.0, settled.wall_ms - settled.kind_ms[PhaseKind::input] - settled.cpu_wait_ms);
  out.loader_threads = std::max(loader.threads, 1.0);
  out.cores = h.cores;
  out.active = true;
  return out;
}

const Distribution& clocked_ms(const PhaseSummary& p) {
  return p.host_share_of_step && p.device_ms && p.device_ms->count > 0 ? *p.device_ms : p.host_ms;
}

double phase_host_ms_per_step(const PhaseSummary& p, const Report& report) {
  const double steps = static_cast<double>(std::max<std::uint64_t>(report.steps.count, 1));
  return p.self_ms.mean * static_cast<double>(p.count) / steps;
}

double phase_device_ms_per_step(const PhaseSummary& p, const Report& report) {
  if (!p.device_ms || p.device_ms->count == 0) return 0;
  const double steps = static_cast<double>(std::max<std::uint64_t>(report.steps.count, 1));
  return p.device_ms->mean * static_cast<double>(p.count) / steps;
}

ClockFacts clock_facts(const Report& report) {
  ClockFacts c;
  const StepStats& s = report.steps;
  c.device = s.clock == "device" && s.host_breakdown.has_value();
  c.host_wall_ms = c.device ? s.host_breakdown->wall_ms : s.breakdown.wall_ms;
  if (!c.device) return c;
  for (const PhaseSummary& p : report.phases) {
    if (p.thread_role != ThreadRole::step || p.kind == PhaseKind::input || !p.device_ms) continue;
    c.host_wait_ms += std::max(0.0, phase_host_ms_per_step(p, report) - phase_device_ms_per_step(p, report));
  }
  // Of the host's step, as the aggregator decided the pacing (fill_device_clock).
  c.host_paced = c.host_wait_ms < kThresholds.host_wait_paced * std::max(c.host_wall_ms, 1e-9);
  return c;
}

FaultFacts fault_facts(const Report& report) {
  FaultFacts f;
  const SystemSignals& s = report.system;
  if (!s.available) return f;
  const double steps = static_cast<double>(std::max<std::uint64_t>(report.steps.count, 1));
  f.minor_per_step = static_cast<double>(s.minor_faults) / steps;
  f.fresh_mib_per_step = f.minor_per_step * 4096.0 / (1024.0 * 1024.0);
  f.kernel_share = clamp01(safe_div(s.cpu_system_s, s.wall_s));
  f.storm = f.minor_per_step >= kThresholds.minor_faults_per_step;
  f.step_ms = mean_step_ms(report);
  if (s.page_fault_us > 0 && f.step_ms > 0)
    f.cost_ms_per_step = std::min(f.minor_per_step * s.page_fault_us * 1e-3, f.step_ms);
  const ClockFacts clock = clock_facts(report);
  if (clock.device) {
    // The host's waits for the device are the CUDA driver's (kernel time when
    // it yields or spins in a syscall), not fault cost: left out; and a fault
    // costs a device-paced step nothing (the host was ahead anyway).
    // CUPTI's synchronisation records time the waits in sync calls (run
    // total, warm-up included): the larger of the two estimates is taken out.
    const double steps_run = static_cast<double>(report.steps.count + report.steps.warmup_excluded);
    const double sync_ms = safe_div(report.device.facts.cupti_sync_ms.value_or(0), std::max(steps_run, 1.0));
    const double driver_wait_ms = std::max(clock.host_wait_ms, std::isfinite(sync_ms) ? sync_ms : 0.0);
    f.kernel_share = clamp01(f.kernel_share - safe_div(driver_wait_ms, clock.host_wall_ms));
    f.storm = f.storm && clock.host_paced && f.kernel_share >= kThresholds.device_run_fault_kernel_share;
    if (!clock.host_paced && f.cost_ms_per_step > 0) f.cost_ms_per_step = 0;
  }
  return f;
}

// The remedy for a page-fault storm depends on the size of the blocks freed
// and re-faulted every step, which the report does not record: it holds the
// fresh pages per step, an upper bound on any one block. glibc serves blocks
// at or above its mmap threshold (128 KiB, adapting up to 32 MiB) with
// mmap and unmaps them on free; MALLOC_MMAP_THRESHOLD_ is capped at 32 MiB
// (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit), so larger blocks stay mmapped
// whatever it is set to. Smaller blocks come from the heap, whose top is
// returned to the OS past MALLOC_TRIM_THRESHOLD_ (padding MALLOC_TOP_PAD_).
FaultCost page_fault_cost(const Report& report) {
  // The cost as the breakdown's page-fault row holds it (what the what-if
  // takes away): never more than the step's other parts, so the advice and
  // the what-if project the same step.
  const FaultFacts faults = fault_facts(report);
  const StepBreakdown settled = settled_breakdown(report);
  return {settled.page_fault_ms > 0 ? settled.page_fault_ms : faults.cost_ms_per_step,
          settled.wall_ms > 0 ? settled.wall_ms : faults.step_ms};
}

std::string page_fault_remedy(const Report& report) {
  constexpr double kMmapThresholdMaxMib = 32.0;
  const FaultFacts faults_ = fault_facts(report);
  const double fresh = faults_.fresh_mib_per_step;
  std::string out = fmt::format(
      "Allocator churn: {:.0f} minor page faults per step, about {:.0f} MiB of fresh pages touched every step: "
      "memory is returned to the OS and faulted in again (the report cannot tell the size of each block, only "
      "that none exceeds {:.0f} MiB). ",
      faults_.minor_per_step, fresh, fresh);
  const auto [cost, step] = page_fault_cost(report);
  if (faults_.cost_ms_per_step > 0 && step > 0)
    out += fmt::format(
        "At the {:.1f} us a fault took on this machine they cost about {:.1f} ms of the {:.1f} ms step ({:.0f}%): "
        "without the churn the step would take about {:.1f} ms. ",
        faults_.cost_ms_per_step * 1e3 / std::max(faults_.minor_per_step, 1.0), cost, step, 100.0 * cost / step,
        step - cost);
  out += "Reuse buffers across steps (allocate them once): that ends the churn for any block size. ";
  // A caching allocator, as measured on pytorch/examples' cpp/custom-dataset
  // (an AlexNet whose 218 MB of fully connected gradients are freed and
  // allocated again every step, 226 MiB of fresh pages a step): 1730 ms a step
  // under glibc, 1506 with its three settings, 1423 under jemalloc's defaults
  // (it returns blocks of 8 MiB and more at once: 253 MiB a step), 741 under
  // tcmalloc, 717 under jemalloc with decay off (docs/trials.md).
  static constexpr const char* kCaching =
      "a caching allocator that keeps freed blocks: LD_PRELOAD=libtcmalloc_minimal.so.4 (gperftools' tcmalloc), "
      "or jemalloc with MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 (with its defaults jemalloc returns "
      "blocks of 8 MiB and more to the OS at once)";
  // What this run already tried (its environment, run.config): say what is left.
  const auto knob = [&report](const char* key) {
    const auto it = report.run.config.find(key);
    return it == report.run.config.end() ? std::string() : it->second;
  };
  const std::string preload = knob("env:LD_PRELOAD");
  if (preload.find("jemalloc") != std::string::npos) {
    const bool kept = knob("env:MALLOC_CONF").find("dirty_decay_ms:-1") != std::string::npos;
    out += kept ? "This run preloads jemalloc with its decay off and still churns: the fresh pages are not freed "
                  "heap blocks (memory-mapped files, shared memory, another allocator): reuse those buffers."
                : "This run preloads jemalloc and still churns: with its defaults it returns blocks of 8 MiB and "
                  "more to the OS at once; keep them with MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1, or "
                  "preload tcmalloc (LD_PRELOAD=libtcmalloc_minimal.so.4).";
    return out;
  }
  if (preload.find("tcmalloc") != std::string::npos) {
    out +=
        "This run preloads tcmalloc and still churns: the fresh pages are not freed heap blocks (memory-mapped "
        "files, shared memory, another allocator): reuse those buffers.";
    return out;
  }
  if (const std::string glibc = knob("env:glibc_malloc"); glibc.find("MALLOC_MMAP_THRESHOLD_") != std::string::npos) {
    out += fmt::format(
        "This run already sets glibc's malloc ({}) and still churns: its blocks are mapped whatever the threshold "
        "(32 MiB or larger, or above the threshold set), so use {}.",
        glibc, kCaching);
    return out;
  }
  // MALLOC_MMAP_THRESHOLD_ alone moves blocks below it onto the heap, whose
  // top glibc then trims back to the OS past MALLOC_TRIM_THRESHOLD_ and
  // faults in again: followed alone it doubled a step (32 -> 64 ms); with the
  // trim threshold and top pad set too, 8.75 ms (issue 29). So the settings
  // are given as one set. glibc caps the threshold at 32 MiB
  // (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit) and always maps larger blocks.
  long long block = (static_cast<long long>(std::ceil(fresh)) + 1) * 1024 * 1024;
  if (fresh >= kMmapThresholdMaxMib) {
    out += fmt::format(
        "If the blocks are {:.0f} MiB or larger, MALLOC_MMAP_THRESHOLD_ cannot help (glibc always maps them and "
        "unmaps them on free): reuse them across steps, or use {}. If they are smaller, ",
        kMmapThresholdMaxMib, kCaching);
    block = static_cast<long long>(kMmapThresholdMaxMib) * 1024 * 1024;
  } else {
    out += "Else ";
  }
  out += fmt::format(
      "keep freed memory in the process with the three glibc settings together: MALLOC_MMAP_THRESHOLD_={} "
      "MALLOC_TRIM_THRESHOLD_={} MALLOC_TOP_PAD_={} (one alone can make it worse: the threshold alone moves the "
      "blocks onto the heap, whose top is then returned to the OS every step); or {}.",
      block, 2 * block, block, kCaching);
  return out;
}

namespace {

// The share of each part's time (each kind's, the time in no phase) in which
// the step threads were running or runnable: only there could they wait for
// a CPU. Sampled where the sampler has enough samples (input, compute, the
// time in no phase); the rest is known in total from the threads' schedstat
// (time asleep = wall - on a CPU - waiting for one) and placed in the parts
// not sampled, first where a thread is likeliest to sleep: input (a loader's
// queue), communication (other ranks), the time in no phase (a time.sleep, a
// synchronisation), other, memory, compute. Without either, a part is
// runnable as far as anyone knows. A 10 ms time.sleep per step between the
// phases of a busy run lost 2 ms to "CPU wait" before (unattributed 7.9 ms).
void runnable_shares(const StepBreakdown& b, const SystemSignals& sys, PerKind<double>& kinds, double& outside) {
  kinds.values.fill(1.0);
  outside = 1.0;
  PerKind<bool> sampled{};
  auto take = [](double fraction, double& into, bool& was_sampled) {
    if (fraction >= 0) into = clamp01(fraction), was_sampled = true;
  };
  take(sys.input_on_cpu_fraction, kinds[PhaseKind::input], sampled[PhaseKind::input]);
  take(sys.compute_on_cpu_fraction, kinds[PhaseKind::compute], sampled[PhaseKind::compute]);
  bool outside_sampled = false;
  take(sys.unattributed_on_cpu_fraction, outside, outside_sampled);
  if (sys.step_threads_on_cpu_s < 0 || sys.wall_s <= 0) return;
  const double runnable_share = clamp01((sys.step_threads_on_cpu_s + sys.runqueue_wait_s) / sys.wall_s);
  double asleep = (1.0 - runnable_share) * b.wall_ms;  // left to place
  for (PhaseKind k : kPhaseKinds)
    if (sampled[k]) asleep -= std::max(0.0, b.kind_ms[k]) * (1.0 - kinds[k]);
  if (outside_sampled) asleep -= std::max(0.0, b.unattributed_ms) * (1.0 - outside);
  auto place = [&asleep](double ms, double& share) {
    if (asleep <= 0 || ms <= 0) return;
    const double slept = std::min(asleep, ms * share);
    share -= slept / ms;
    asleep -= slept;
  };
  for (PhaseKind k : {PhaseKind::input, PhaseKind::communication})
    if (!sampled[k]) place(b.kind_ms[k], kinds[k]);
  if (!outside_sampled) place(b.unattributed_ms, outside);
  for (PhaseKind k : {PhaseKind::other, PhaseKind::memory, PhaseKind::compute})
    if (!sampled[k]) place(b.kind_ms[k], kinds[k]);
}

// Where the step's CPU wait concentrated. A preemption costs a scheduler
// slice (milliseconds); in a step of microseconds it lands whole in the one
// phase instance it interrupted, so a few of them decide which phase looks
// large: PyTorch's C++ regression example (0.04 ms steps) beside two busy
// loops read compute 84% on one run (quiet: 73%) and input 42% on another
// (quiet: 26%). The instances beyond the preemption cutoff (thresholds.hpp)
// show where: per kind, their time over the median per step (at most the
// kind's time), and for the step outside its phases what the steps' own
// such excess leaves. On that example the steps' excess was the measured
// CPU wait within 5%; in long steps, where the wait spreads over every
// phase, there is none.
double preempted_excess_ms(const HistogramData& h, const Distribution& d) {
  if (h.sub_bucket_bits != Histogram::kSubBits || !(d.p90 > 0) || !(d.p50 >= 0)) return 0;
  const auto& t = kThresholds;
  const double cutoff_ms = std::max(t.preempted_over_p90 * d.p90, d.p90 + t.preempted_min_ms);
  double excess = 0;
  for (const auto& [index, n] : h.buckets) {
    const double ms = Histogram::bucket_value(index) * 1e-6;
    if (ms > cutoff_ms) excess += (ms - d.p50) * static_cast<double>(n);
  }
  return excess;
}

struct WaitExcess {
  PerKind<double> kind;
  double outside = 0;
};
WaitExcess wait_excess(const StepBreakdown& b, const Report& report) {
  WaitExcess e;
  const double steps = static_cast<double>(std::max<std::uint64_t>(report.steps.count, 1));
  for (const PhaseSummary& p : report.phases)
    if (p.thread_role == ThreadRole::step) e.kind[p.kind] += preempted_excess_ms(p.histogram, p.host_ms) / steps;
  double phases = 0;
  for (PhaseKind k : kPhaseKinds) {
    e.kind[k] = std::min(e.kind[k], std::max(0.0, b.kind_ms[k]));
    phases += e.kind[k];
  }
  const double step = preempted_excess_ms(report.steps.histogram, report.steps.wall_ms) / steps;
  e.outside = std::min(std::max(0.0, b.unattributed_ms), std::max(0.0, step - phases));
  return e;
}

StepBreakdown settle(StepBreakdown b, const Report& report) {
  if (b.wall_ms <= 0) return b;
  const SystemSignals& sys = report.system;
  // CPU wait: spread over the step time it inflated, the time outside every
  // phase included (the thread runs there too: a Python loop's own code
  // between its phases waits for a CPU like the phases do). Spread over the
  // phases alone, a step that is mostly outside phases had its phases emptied:
  // a 1.2 ms step with 0.08 ms of compute and 10% CPU wait read "compute
  // 0.000 ms" beside a phase table that showed the compute. A thread can only
  // wait for a CPU while runnable (see runnable_shares).
  const double stored_wait = b.cpu_wait_ms, stored_faults = b.page_fault_ms;
  b.cpu_wait_ms = b.page_fault_ms = 0;
  // On a device-paced step the host's costs are hidden behind the device's
  // work: the host's CPU wait and faults take nothing from its parts.
  const bool host_paced = clock_facts(report).host_paced;
  if (stored_wait > 0 || (host_paced && sys.available && sys.wall_s > 0 && sys.runqueue_wait_s > 0)) {
    PerKind<double>& phases = b.kind_ms;
    const double outside = std::max(0.0, b.unattributed_ms);
    PerKind<double> runnable;
    double outside_runnable = 1;
    runnable_shares(b, sys, runnable, outside_runnable);
    double exposed = outside * outside_runnable;  // step time in which waiting for a CPU was possible
    for (PhaseKind k : kPhaseKinds) exposed += std::max(0.0, phases[k]) * runnable[k];
    const double wait = std::min(
        stored_wait > 0 ? stored_wait : clamp01(safe_div(sys.runqueue_wait_s, sys.wall_s)) * b.wall_ms, exposed);
    if (wait > 0 && exposed > 0) {
      // First from where it concentrated (the instances beyond the
      // preemption cutoff, where the part could wait: wait_excess), the rest
      // in proportion to the time in which waiting was possible.
      const WaitExcess excess = wait_excess(b, report);
      double concentrated = excess.outside * outside_runnable;
      for (PhaseKind k : kPhaseKinds) concentrated += excess.kind[k] * runnable[k];
      const double first = std::min(wait, concentrated);
      const double rest = wait - first;
      const double rest_exposed = exposed - first;
      for (PhaseKind k : kPhaseKinds) {
        const double ms = std::max(0.0, phases[k]);
        const double taken = concentrated > 0 ? first * excess.kind[k] * runnable[k] / concentrated : 0.0;
        const double left_exposed = std::max(0.0, ms * runnable[k] - taken);
        phases[k] = ms - taken - (rest_exposed > 0 ? rest * left_exposed / rest_exposed : 0.0);
      }
      const double taken_outside = concentrated > 0 ? first * excess.outside * outside_runnable / concentrated : 0.0;
      const double outside_left_exposed = std::max(0.0, outside * outside_runnable - taken_outside);
      b.unattributed_ms =
          outside - taken_outside - (rest_exposed > 0 ? rest * outside_left_exposed / rest_exposed : 0.0);
      b.cpu_wait_ms = wait;
    }
  }
  // Page-fault storm: the kernel time is the faults' cost. What memory phases
  // already hold is not counted twice; the rest came out of the other parts.
  const FaultFacts faults = fault_facts(report);
  if (stored_faults > 0 || (faults.storm && (faults.kernel_share > 0 || faults.cost_ms_per_step > 0))) {
    // The parts the faults' time came out of: every kind but memory, and the time in no phase.
    std::vector<double*> others;
    for (PhaseKind k : kPhaseKinds)
      if (k != PhaseKind::memory) others.push_back(&b.kind_ms[k]);
    others.push_back(&b.unattributed_ms);
    double pool = 0;
    for (double* p : others) pool += std::max(0.0, *p);
    // The faults' cost: what they cost at the fault cost measured on this
    // machine (a VM's hypervisor time included, which the kernel share
    // misses); the kernel time only where that was not measured. The kernel
    // time also holds every system call: a Dataset spinning on
    // time.thread_time() (a syscall a read) read "memory" with its 58 ms of
    // kernel time all called faults, where its 3134 faults cost 28 ms.
    const double cost = faults.cost_ms_per_step > 0 ? faults.cost_ms_per_step : faults.kernel_share * b.wall_ms;
    const double moved =
        std::min(stored_faults > 0 ? stored_faults : std::max(0.0, cost - b.kind_ms[PhaseKind::memory]), pool);
    if (moved > 0 && pool > 0) {
      for (double* p : others) *p = std::max(0.0, *p) * (1.0 - moved / pool);
      b.page_fault_ms = moved;
    }
  }
  return b;
}

}  // namespace

StepBreakdown settled_breakdown(const Report& report) {
  return settle(report.steps.breakdown, report);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope

namespace stepscope {
inline namespace v1 {

StepBreakdown settled_breakdown(const Report& report) {
  try {
    return detail::settled_breakdown(report);
  } catch (...) {
    return report.steps.breakdown;
  }
}

}  // namespace v1
}  // namespace stepscope

namespace stepscope {
inline namespace v1 {
namespace detail {

StepShares step_shares(const Report& report) {
  StepShares s;
  StepBreakdown b = report.steps.breakdown;
  s.from_breakdown = b.wall_ms > 0;
  if (!s.from_breakdown) {
    // No breakdown (e.g. a hand-built or merged report): one from the phases'
    // own shares of the step, for phases the step waited on.
    b = StepBreakdown{};
    b.wall_ms = report.steps.wall_ms.mean;
    double attributed = 0;
    for (const PhaseSummary& p : report.phases) {
      if (p.thread_role != ThreadRole::step) continue;
      const double ms = clamp01(p.share_of_step) * b.wall_ms;
      attributed += clamp01(p.share_of_step);
      b.kind_ms[p.kind] += ms;
    }
    b.unattributed_ms = clamp01(1.0 - attributed) * b.wall_ms;
  }
  b = settle(b, report);
  s.wall_ms = b.wall_ms;
  if (b.wall_ms <= 0) return s;
  for (std::size_t k = 0; k < kPhaseKindCount; ++k) s.kind.values[k] = clamp01(b.kind_ms.values[k] / b.wall_ms);
  s.unattributed = clamp01(b.unattributed_ms / b.wall_ms);
  s.cpu_wait = clamp01(b.cpu_wait_ms / b.wall_ms);
  s.page_fault = clamp01(b.page_fault_ms / b.wall_ms);
  s.between_steps = clamp01(b.between_steps_ms / b.wall_ms);
  return s;
}

// A fact the report holds and that is a number (a live run may store NaN).
static std::optional<double> finite(const std::optional<double>& value) {
  return value && std::isfinite(*value) ? value : std::nullopt;
}

DeviceFacts device_facts(const Report& report) {
  DeviceFacts f;
  const DeviceFactsSection& t = report.device.facts;
  const auto busy = finite(t.device_busy_fraction);
  const auto idle = finite(t.device_idle_fraction);
  if (!busy && !idle) return f;
  f.present = true;
  f.busy = clamp01(busy ? *busy : 1.0 - *idle);
  f.idle = clamp01(idle ? *idle : 1.0 - *busy);
  const auto input = finite(t.idle_host_input_fraction);
  f.has_idle_host_input = input.has_value();
  f.idle_host_input = clamp01(input.value_or(0));
  f.idle_launch = clamp01(finite(t.idle_host_launch_bound_fraction).value_or(0));
  f.idle_sync = clamp01(finite(t.idle_sync_fraction).value_or(0));
  // The causes are documented as fractions of step time, so together they
  // cannot exceed the idle time. If they do, they were given as fractions of
  // the idle time (HTA's idle_time_ratio convention): rescale.
  const double causes = f.idle_host_input + f.idle_launch + f.idle_sync;
  if (causes > f.idle + 0.01 && f.idle > 0) {
    f.idle_host_input *= f.idle;
    f.idle_launch *= f.idle;
    f.idle_sync *= f.idle;
    f.idle_causes_rescaled = true;
  }
  if (auto v = finite(t.compute_fraction)) f.compute = clamp01(*v);
  if (auto v = finite(t.exposed_communication_fraction)) f.exposed_comm = clamp01(*v);
  if (auto v = finite(t.memcpy_fraction)) f.memcpy = clamp01(*v);
  if (auto v = finite(t.pageable_memcpy_fraction)) f.pageable_memcpy = clamp01(*v);
  if (auto v = finite(t.short_kernel_fraction)) f.short_kernels = clamp01(*v);
  if (auto v = finite(t.kernels_per_step)) f.kernels_per_step = std::max(0.0, *v);
  if (auto v = finite(t.launch_delay_p50_us)) f.launch_delay_p50_us = std::max(0.0, *v);
  return f;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  LineFit fit;
  const std::size_t n = std::min(x.size(), y.size());
  fit.points = n;
  if (n < 2) return fit;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0) return fit;
  fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  // A flat series is perfectly explained by a flat line.
  fit.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return fit;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
