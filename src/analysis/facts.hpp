// src/analysis/facts.hpp — derived quantities the analyzer rules share.
//
// Pure helpers over a Report: the step's shares by kind (from the breakdown,
// or from per-phase shares when a report carries no breakdown), GPU timeline
// facts with their documented meaning, and a least-squares line fit.
#pragma once

#include <stepscope/report.hpp>

#include <optional>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Fractions of the measured steps' mean wall time spent by the step thread.
struct StepShares {
  double wall_ms = 0;    // mean step time they are fractions of
  PerKind<double> kind;  // the phases of each kind
  double unattributed = 0;
  double cpu_wait = 0;          // carved out of the phases: waiting for a CPU (scheduling)
  double page_fault = 0;        // carved out of the other parts: kernel time faulting pages (memory)
  double between_steps = 0;     // on the step thread between steps, in no input phase
  bool from_breakdown = false;  // false: summed from phases' share_of_step
};

// Shares of the settled breakdown (below), so they match what the summary
// table, HTML and JSON show.
StepShares step_shares(const Report& report);

// The step's clock (StepStats::clock). On a device-clocked run the host runs
// ahead of the device and blocks wherever the launch queue fills or a value is
// read back: a phase's host self time beyond its device time (input phases
// aside: their host time is the host's own work) is time the host waited for
// the device, paying for the backlog of the phases before it.
struct ClockFacts {
  bool device = false;      // the figures come from the device timeline
  double host_wall_ms = 0;  // the host-clocked step (its breakdown's wall)
  double host_wait_ms = 0;  // per step, the host's time waiting for the device
  // The device waits for the host: the host waited for the device less than
  // kThresholds.host_wait_paced of the step (always, on host-clocked runs).
  // Host costs (CPU wait, page faults) cost a step only when it is host-paced.
  bool host_paced = true;
};
ClockFacts clock_facts(const Report& report);

// A phase's time on its report's clock: device_ms where the device clocks it
// (steps.clock "device" marks such phases with host_share_of_step), else
// host_ms. What `diff` compares.
const Distribution& clocked_ms(const PhaseSummary& p);

// A phase's host time per step and device time per step (0 without device time).
double phase_host_ms_per_step(const PhaseSummary& p, const Report& report);
double phase_device_ms_per_step(const PhaseSummary& p, const Report& report);

// Page-fault facts: minor faults per measured step, the fresh memory they
// touch (4 KiB pages assumed: the report does not record the page size), and
// the share of the run's wall time the process spent in the kernel.
struct FaultFacts {
  double minor_per_step = 0;
  double fresh_mib_per_step = 0;
  // cpu_system_s / wall_s, clamped to [0, 1]; on a device-clocked run less
  // the host's waits for the device (the CUDA driver's blocking waits are
  // kernel time, not fault cost).
  double kernel_share = 0;
  // minor_per_step >= kThresholds.minor_faults_per_step; on a device-clocked
  // run only where the step is host-paced and the kernel time left is material.
  bool storm = false;
  // What the faults cost per step at the fault cost measured on this machine
  // (system.page_fault_us), at most the step; <0 when not measured. On a VM
  // much of a fault is the hypervisor's and shows as user time, which the
  // kernel share misses (a 64 MiB allocation per step: 73% of the step).
  double cost_ms_per_step = -1;
  double step_ms = 0;  // the step it is part of
};
FaultFacts fault_facts(const Report& report);

// Whose threads held the CPUs during the run: this process's (cores used
// from its CPU time) or other processes' (a shared machine, where fewer
// threads here would not help). -1 where the report cannot tell.
struct CpuHolders {
  double own_cores = -1, other_cores = -1;
  double children_cores = 0;  // this process's descendants (DataLoader workers): the job's, not another's
  int cores = 0;              // available to this process (cgroup / affinity), else online
  // Others used >= other_processes_busy of the machine, or filled it beside this process
  // (other_processes_filling, machine_full), while this process fitted its cores.
  bool others_hold = false;
};
CpuHolders cpu_holders(const SystemSignals& s);
// A live run the Python package drove (run.build["frontend"], set through
// stepscope::set_frontend() when the package loads).
bool python_run(const Report& report);
// How much of its compute phases' time one step thread was on a CPU (or
// waiting for one): the sampler's share where it took enough samples; else,
// from the thread's exact run and run-queue times (schedstat), an upper bound
// -- it cannot have run in its compute phases longer than it ran at all --
// kept only below compute_on_cpu_working, where it says "mostly waited" (a
// run of a second or two has too few samples: pytorch/examples' ddp_rpc
// trainer, its forward, backward and optimizer RPCs to a parameter server,
// read "highly compute-bound (0.94)" with the thread on a CPU 13% of the
// time). fraction -1: unknown. `below`: the bound is kept under it (1: any
// bound the run times give).
struct ComputeOnCpu {
  double fraction = -1;
  bool bound = false;  // an upper bound from run times, not samples
  // "in 17% of its compute phases' samples", "at most 17% of its compute phases' time (...)"
  std::string phrase() const;
};
ComputeOnCpu compute_on_cpu(const Report& report, double below = -1);
// The process's threads that run no steps, in CPUs over the run (process CPU
// less the step threads' and stepscope's collector's). Needs the step
// threads' run time (system.step_threads_on_cpu_s >= 0) and a wall time.
double other_threads_cores(const SystemSignals& s);

// Python threads that each run steps take turns on the interpreter lock (the
// GIL): together they ran on about one core while their compute phases held
// more time than that and no CPU was lacking, so each one's wait for the lock
// lands in whatever phase it waited in (two threads each training on its own
// loader: a 2-3 ms sleep read as 6.6 ms of 'data', the run "io-bound").
// Or one step thread and other threads of the process that run Python (a
// metrics or augmentation thread): the step thread's compute phases mostly
// off-CPU while those threads kept a CPU busy (a pure-Python thread beside
// a 4.8 ms torch step made it 480 ms, read "highly compute-bound (0.78)").
struct InterpreterLock {
  bool active = false;
  bool background = false;         // the lock's holder is a thread that runs no steps
  int threads = 0;                 // step threads (the most threads a step phase ran on)
  double on_cpu_cores = 0;         // the step threads together, time on a CPU over wall time
  double compute_cores = 0;        // the time their compute phases held, in cores (threads x share of the step)
  double other_threads_cores = 0;  // the process's threads that run no steps (stepscope's own left out)
  ComputeOnCpu compute_on_cpu;     // the step thread in its compute phases
};
InterpreterLock interpreter_lock(const Report& report);
// A background input phase's time per batch (one batch per step): its self
// time, times occurrences per step, over the threads that ran it. 0 for any
// other phase.
double loader_phase_ms(const PhaseSummary& p, const Report& report);
// A background loader on the cores of the step thread, which this process's
// threads and its worker processes fill (no other process holds them), its
// phases on background threads or its work in DataLoader worker processes
// (children_cpu_s, where the run's config has num_workers): the step's CPU wait is the
// loader's doing, and the step goes at the pace of their CPU work together,
//
//   step = max(step work, loader CPU / loader threads, (step work + loader CPU) / cores)
//
// (docs/classification.md). Seen with libtorch's DataLoader, workers(2)
// decoding 2 ms a sample, on 2 cores: the loader's wall time per batch (its
// own CPU wait in it) made it look like a stage that keeps up, and "decode
// free" promised -2% where it is ~-35%.
struct SharedCores {
  bool active = false;
  double step_work_ms = 0;   // per step: the step's wall less its input and CPU waits
  double loader_cpu_ms = 0;  // per batch: the loader's CPU time (its threads, its worker processes)
  double loader_threads = 1;
  int cores = 0;
  const char* loader = "background loader";  // what the loader is, for the text
};
SharedCores shared_cores(const Report& report, const StepBreakdown& settled);
// The loader's CPU per measured step (SharedCores::loader_cpu_ms, with its
// threads and what it is), wherever it ran: 0 without a loader.
struct LoaderCpu {
  double cpu_ms = 0;
  double threads = 0;
  const char* what = "background loader";
};
LoaderCpu loader_cpu(const Report& report);
// The size-aware allocator remedy for a page-fault storm (verdict and finding).
std::string page_fault_remedy(const Report& report);
// What the faults cost the step, as the breakdown's page-fault row holds it
// (the faults at the measured fault cost where the row is empty), and the
// step it is part of: the figures page_fault_remedy() quotes. cost_ms <= 0:
// not measured.
struct FaultCost {
  double cost_ms = -1;
  double step_ms = 0;
};
FaultCost page_fault_cost(const Report& report);

// The one accounting every output uses (verdict, summary table, HTML, JSON):
// the measured breakdown with two costs carved out so each part is what its
// category costs (see StepBreakdown::cpu_wait_ms / page_fault_ms):
//  - the step threads' runqueue wait (fraction of wall time), moved out of
//    the phases in proportion to their time;
//  - in a page-fault storm, the process' kernel time beyond the memory part, moved
//    out of the other parts in proportion to their time.
// A breakdown that already carries carved parts (set by analyze()) keeps
// their values, so a loaded report settles to the same numbers.
StepBreakdown settled_breakdown(const Report& report);

// Mean step time in ms (breakdown first, then the step distribution).
double mean_step_ms(const Report& report);

// GPU timeline facts as the rules use them, from report.device.facts
// (filled from the timeline analysis' DeviceFacts): clamped, busy and idle
// derived from each other when one is absent. Fractions are of total step
// time unless stated; facts the report does not hold stay empty.
struct DeviceFacts {
  bool present = false;  // at least one busy/idle fact
  double busy = 0;       // device_busy_fraction (or 1 - idle)
  double idle = 0;       // device_idle_fraction (or 1 - busy)
  bool has_idle_host_input = false;
  double idle_host_input = 0;             // idle while the host was in an input phase
  double idle_launch = 0;                 // idle while the host was launching / in framework ops
  double idle_sync = 0;                   // idle while the host blocked in a sync with nothing queued
  std::optional<double> compute;          // union of compute kernels
  std::optional<double> exposed_comm;     // comm kernels not overlapped by compute
  std::optional<double> memcpy;           // device time in copies
  std::optional<double> pageable_memcpy;  // device time in copies from pageable memory
  std::optional<double> short_kernels;    // of kernels, shorter than launch
  std::optional<double> kernels_per_step;
  std::optional<double> launch_delay_p50_us;  // median delay between a launch call and its kernel
  bool idle_causes_rescaled = false;          // causes were given as fractions of idle time
};

DeviceFacts device_facts(const Report& report);

// Ordinary least squares y = intercept + slope * x.
struct LineFit {
  double slope = 0, intercept = 0, r2 = 0;
  std::size_t points = 0;
};
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

double clamp01(double v);
double safe_div(double a, double b);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
