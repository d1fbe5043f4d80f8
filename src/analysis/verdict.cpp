// src/analysis/verdict.cpp — the five-way bottleneck verdict (classify()).
//
// Categories are ranked by what they cost the *step*: the fraction of the
// mean step time the step thread (or, with a device timeline, the GPU) lost
// to each. Every signal looked at becomes an Evidence row; the leader's
// severity, confidence and recommendations follow from those rows. The rules
// and thresholds are described in docs/classification.md. The Classifier is
// declared in classifier.hpp; its recommendations are in recommend.cpp.
#include "analysis/classifier.hpp"

#include <stepscope/analysis.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

void Classifier::collect_step_shares() {
  const auto& t = kThresholds;
  const bool gpu = device_.present;
  // The shares are the breakdown's rows, net of the CPU wait and page faults
  // carved out of them: said where there are any, since the phase table shows
  // the phases whole (mnist on a busy machine read 46.6% in compute phases
  // beside a backward, forward and optimizer of 98%; docs/trials.md).
  std::string carved;
  if (shares_.cpu_wait > 0) carved = "waiting for a CPU";
  if (shares_.page_fault > 0) carved += (carved.empty() ? "" : " and ") + std::string("faulting pages");
  const std::string net =
      carved.empty() ? ""
                     : fmt::format(", besides the time it spent there {} (rows of their own in the breakdown)", carved);
  add(Bottleneck::io, Weight::primary, "input_share", shares_.kind[PhaseKind::input], t.moderately_bound, ">=",
      fmt::format("The step thread spent {:.1f}% of the step in input phases (getting the next batch){}.",
                  pct(shares_.kind[PhaseKind::input]), net));
  // With a device timeline the host clock around compute phases measures kernel
  // launches, not the math: informational only, the GPU facts decide compute.
  add(gpu ? kNoCategory : Bottleneck::compute, gpu ? Weight::info : Weight::primary, "compute_share",
      shares_.kind[PhaseKind::compute], t.moderately_bound, ">=",
      gpu ? fmt::format("Compute phases took {:.1f}% of the step on the host clock; on a GPU run that "
                        "is mostly launch time, so the device timeline decides compute.",
                        pct(shares_.kind[PhaseKind::compute]))
          : fmt::format("The step thread spent {:.1f}% of the step in compute phases{}.",
                        pct(shares_.kind[PhaseKind::compute]), net));
  add(Bottleneck::memory, Weight::primary, "memory_share", shares_.kind[PhaseKind::memory], t.moderately_bound, ">=",
      fmt::format("Memory phases (copies, allocation) took {:.1f}% of the step{}.",
                  pct(shares_.kind[PhaseKind::memory]), net));
  add(Bottleneck::communication, Weight::primary, "communication_share", shares_.kind[PhaseKind::communication],
      t.moderately_bound, ">=",
      fmt::format("Communication phases took {:.1f}% of the step{}.", pct(shares_.kind[PhaseKind::communication]),
                  net));
  add(gpu ? kNoCategory : Bottleneck::scheduling, gpu ? Weight::info : Weight::primary, "unattributed_share",
      shares_.unattributed, t.scheduling_moderately_bound, ">=",
      fmt::format("{:.1f}% of the step was inside the step but in no phase (framework overhead, "
                  "synchronisation, uninstrumented work).",
                  pct(shares_.unattributed)));
  add(Bottleneck::scheduling, Weight::secondary, "cpu_wait_share", shares_.cpu_wait, t.scheduling_moderately_bound,
      ">=",
      fmt::format("The step threads waited for a CPU (runnable, not running) {:.1f}% of the step; the breakdown "
                  "shows that time as 'cpu wait', taken out of the phases it inflated.",
                  pct(shares_.cpu_wait)));
  add(Bottleneck::memory, Weight::secondary, "page_fault_share", shares_.page_fault, t.moderately_bound, ">=",
      fmt::format("Kernel time faulting fresh pages cost {:.1f}% of the step beyond the memory phases (breakdown "
                  "row 'page faults': the process spent {:.1f}% of the run in the kernel with {:.0f} minor faults "
                  "per step).",
                  pct(shares_.page_fault), pct(faults_.kernel_share), faults_.minor_per_step));
  add(kNoCategory, Weight::info, "other_share", shares_.kind[PhaseKind::other], t.moderately_bound, ">=",
      fmt::format("{:.1f}% of the step was in phases of kind 'other', which map to no category.",
                  pct(shares_.kind[PhaseKind::other])));
}

void Classifier::collect_background_phases() {
  const double steps = static_cast<double>(report_.steps.count);
  for (const PhaseSummary& p : report_.phases) {
    if (p.thread_role != ThreadRole::background) continue;
    const double per_step_ms = safe_div(p.host_ms.total, steps);
    if (p.kind == PhaseKind::input) {
      const double busy_ms = safe_div(p.self_ms.total, steps) / std::max<std::uint32_t>(p.threads, 1);
      loader_work_share_ = std::max(0.0, loader_work_share_) + safe_div(busy_ms, step_ms_);
      loader_phases_ += (loader_phases_.empty() ? "'" : ", '") + p.name + "'";
    }
    const double overlap = p.overlap_with_steps.value_or(-1);
    add(kNoCategory, Weight::info, "background_phase:" + p.name, safe_div(per_step_ms, step_ms_), 0, "info",
        overlap >= 0 ? fmt::format("Background phase '{}' ({}) does {:.2f} ms of work per step on {} thread(s), "
                                   "{:.0f}% overlapped with steps; the step does not wait for it, so it is "
                                   "not counted as waiting.",
                                   p.name, phase_kind_name(p.kind), per_step_ms, p.threads, pct(overlap))
                     : fmt::format("Background phase '{}' ({}) does {:.2f} ms of work per step on {} thread(s); "
                                   "the step does not wait for it, so it is not counted as waiting.",
                                   p.name, phase_kind_name(p.kind), per_step_ms, p.threads));
  }
}

void Classifier::collect_system() {
  const auto& t = kThresholds;
  const SystemSignals& s = report_.system;
  if (!s.available) return;
  const double steps = static_cast<double>(std::max<std::uint64_t>(report_.steps.count, 1));
  if (s.input_on_cpu_fraction >= 0) {
    add(kNoCategory, Weight::info, "input_on_cpu_fraction", s.input_on_cpu_fraction, t.input_on_cpu_working, "<",
        s.input_on_cpu_fraction < t.input_on_cpu_working
            ? fmt::format("In input phases the step thread was running or runnable only {:.0f}% of the "
                          "samples: it mostly waited for data (off-CPU).",
                          pct(s.input_on_cpu_fraction))
            : fmt::format("In input phases the step thread was running or runnable {:.0f}% of the samples: "
                          "it did the input work itself (on-CPU).",
                          pct(s.input_on_cpu_fraction)));
  }
  if (const detail::ComputeOnCpu on_cpu = detail::compute_on_cpu(report_); on_cpu.fraction >= 0) {
    const bool gpu = device_.present;
    add(gpu ? kNoCategory : Bottleneck::compute, gpu ? Weight::info : Weight::primary, "compute_on_cpu_fraction",
        on_cpu.fraction, t.compute_on_cpu_working, ">=",
        fmt::format("The step thread was running or runnable (state R, which includes waiting for a CPU) {}{}.",
                    on_cpu.phrase(),
                    on_cpu.fraction >= t.compute_on_cpu_working
                        ? " (working, not blocked)"
                        : " (mostly blocked: synchronisation, locks, remote work or the device)"));
  }
  add(Bottleneck::io, Weight::secondary, "major_faults_per_step", static_cast<double>(s.major_faults) / steps,
      t.major_faults_per_step, ">=",
      fmt::format("{:.1f} major page faults per step (pages read from storage).",
                  static_cast<double>(s.major_faults) / steps));
  if (s.wall_s > 0) {
    add(Bottleneck::io, Weight::secondary, "io_wait_fraction", safe_div(s.io_wait_s, s.wall_s), t.io_wait_fraction,
        ">=", fmt::format("Block-I/O delay was {:.1f}% of wall time.", pct(safe_div(s.io_wait_s, s.wall_s))));
  }
  const double read_mib = static_cast<double>(s.read_bytes) / (1024.0 * 1024.0) / steps;
  add(Bottleneck::io, Weight::secondary, "read_mib_per_step", read_mib, t.read_mib_per_step,
      ">=", fmt::format("{:.2f} MiB read from storage per step.", read_mib));
  add(Bottleneck::memory, Weight::secondary, "minor_faults_per_step", static_cast<double>(s.minor_faults) / steps,
      t.minor_faults_per_step, ">=",
      fmt::format("{:.0f} minor page faults per step (first touches of fresh pages).",
                  static_cast<double>(s.minor_faults) / steps));
  if (s.wall_s > 0) {
    runqueue_fraction_ = clamp01(safe_div(s.runqueue_wait_s, s.wall_s));
    add(Bottleneck::scheduling, Weight::secondary, "runqueue_wait_fraction", runqueue_fraction_,
        t.runqueue_wait_fraction, ">=",
        fmt::format("Step threads were runnable but not running {:.1f}% of the time (waiting for a CPU).",
                    pct(runqueue_fraction_)));
    const double invol = static_cast<double>(s.involuntary_switches) / s.wall_s;
    add(Bottleneck::scheduling, Weight::secondary, "involuntary_switches_per_second", invol,
        t.involuntary_switches_per_second, ">=",
        fmt::format("{:.0f} involuntary context switches per second (preempted by other runnable "
                    "threads).",
                    invol));
  }
  if (s.cores_available > 0) {
    add(Bottleneck::scheduling, Weight::secondary, "cpu_utilization", s.cpu_utilization, t.cpu_oversubscribed, ">=",
        fmt::format("The process used {:.0f}% of its {} available core(s).", pct(s.cpu_utilization),
                    s.cores_available));
  }
}

void Classifier::collect_device() {
  const auto& t = kThresholds;
  const DeviceInfo& d = report_.device;
  if (d.memory_capacity_mb > 0 && d.memory_peak_mb > 0) {
    const double used = safe_div(d.memory_peak_mb, d.memory_capacity_mb);
    add(Bottleneck::memory, Weight::secondary, "device_memory_peak_fraction", used, t.device_memory_near_capacity, ">=",
        fmt::format("Device memory peaked at {:.0f}% of capacity ({:.0f} of {:.0f} MB).", pct(used), d.memory_peak_mb,
                    d.memory_capacity_mb));
  }
  if (!device_.present) return;
  add(Bottleneck::compute, Weight::primary, "device_busy_fraction", device_.busy, t.device_busy,
      ">=", fmt::format("The GPU was busy {:.1f}% of the time.", pct(device_.busy)));
  add(kNoCategory, Weight::info, "idle_fraction", device_.idle, t.device_mostly_idle, ">=",
      fmt::format("The GPU was idle {:.1f}% of the time{}.", pct(device_.idle),
                  device_.idle >= t.device_mostly_idle ? "; a mostly idle GPU is never compute-bound" : ""));
  const std::string rescaled =
      device_.idle_causes_rescaled ? " (given as a fraction of idle time; rescaled to step time)" : "";
  if (device_.has_idle_host_input) {
    add(Bottleneck::io, Weight::primary, "idle_host_input_fraction", device_.idle_host_input, t.moderately_bound, ">=",
        fmt::format("The GPU was idle while the host was in an input phase {:.1f}% of the time{}.",
                    pct(device_.idle_host_input), rescaled));
  }
  // Host running ahead: kernels wait queued long after their launch, so the
  // idle time during launches is the device waiting on a dependency (another
  // stream, a collective), not the host failing to feed it.
  host_ahead_ = device_.launch_delay_p50_us && *device_.launch_delay_p50_us >= t.host_ahead_launch_delay_us;
  if (device_.launch_delay_p50_us) {
    add(kNoCategory, Weight::info, "launch_delay_p50_us", *device_.launch_delay_p50_us, t.host_ahead_launch_delay_us,
        ">=",
        host_ahead_ ? fmt::format("Kernels started a median {:.0f} us after their launch: the host runs ahead of the "
                                  "device, so GPU idle time is the device waiting on dependencies, not on the host.",
                                  *device_.launch_delay_p50_us)
                    : fmt::format("Kernels started a median {:.0f} us after their launch: the device drains the "
                                  "queue faster than the host fills it.",
                                  *device_.launch_delay_p50_us));
  }
  add(Bottleneck::scheduling, Weight::primary, "idle_launch_bound_fraction", host_ahead_ ? 0.0 : device_.idle_launch,
      t.scheduling_moderately_bound, ">=",
      host_ahead_ ? fmt::format("The GPU was idle while the host was in framework code {:.1f}% of the time{}, but the "
                                "host had already queued the work: not launch-bound.",
                                pct(device_.idle_launch), rescaled)
                  : fmt::format("The GPU was idle while the host was launching work or in framework code {:.1f}% "
                                "of the time{}.",
                                pct(device_.idle_launch), rescaled));
  add(Bottleneck::scheduling, Weight::secondary, "idle_sync_fraction", device_.idle_sync, t.scheduling_moderately_bound,
      ">=",
      fmt::format("The GPU was idle while the host blocked in a synchronisation with nothing queued "
                  "{:.1f}% of the time{}.",
                  pct(device_.idle_sync), rescaled));
  if (device_.exposed_comm) {
    add(Bottleneck::communication, Weight::primary, "exposed_comm_fraction", *device_.exposed_comm, t.moderately_bound,
        ">=",
        fmt::format("Communication kernels not overlapped by compute took {:.1f}% of the time.",
                    pct(*device_.exposed_comm)));
  }
  if (device_.memcpy) {
    add(Bottleneck::memory, Weight::primary, "memcpy_fraction", *device_.memcpy, t.moderately_bound,
        ">=", fmt::format("Memory copies took {:.1f}% of the GPU timeline.", pct(*device_.memcpy)));
  }
  if (device_.pageable_memcpy) {
    // The fact is a fraction of step time; the rule is about the share of
    // the copies that are pageable.
    const double copies = device_.memcpy.value_or(0);
    const double share = copies > 0 ? clamp01(*device_.pageable_memcpy / copies) : 0.0;
    add(Bottleneck::memory, Weight::secondary, "pageable_memcpy_share", share, t.pageable_memcpy_share, ">=",
        fmt::format("{:.0f}% of copy time ({:.1f}% of the step) was from pageable (not pinned) host "
                    "memory.",
                    pct(share), pct(*device_.pageable_memcpy)));
  }
  if (device_.short_kernels) {
    add(Bottleneck::scheduling, Weight::secondary, "short_kernel_fraction", *device_.short_kernels,
        t.short_kernel_fraction,
        ">=", fmt::format("{:.0f}% of kernels ran shorter than it took to launch them.", pct(*device_.short_kernels)));
  }
  if (device_.kernels_per_step) {
    add(Bottleneck::scheduling, Weight::secondary, "kernels_per_step", *device_.kernels_per_step, t.kernels_per_step,
        ">=", fmt::format("{:.0f} kernels per step.", *device_.kernels_per_step));
  }
}

void Classifier::compute_costs() {
  if (!device_.present) {
    // Host timeline: each part of the settled breakdown (the same numbers the
    // summary table shows): CPU wait is scheduling, page-fault kernel time memory.
    cost_[Bottleneck::io] = shares_.kind[PhaseKind::input];
    cost_[Bottleneck::compute] = shares_.kind[PhaseKind::compute];
    cost_[Bottleneck::memory] = shares_.kind[PhaseKind::memory] + shares_.page_fault;
    cost_[Bottleneck::communication] = shares_.kind[PhaseKind::communication];
    cost_[Bottleneck::scheduling] = shares_.unattributed + shares_.cpu_wait;
    // The step waits for a background loader that had little to do: on a
    // machine where the step threads wait for a CPU, the loader's thread
    // does too (woken to refill the queue, it waits its turn). That part of
    // the wait is scheduling; what the loader's work could explain stays io.
    const auto& t = kThresholds;
    attribute_loader_wait();
    discount_machine_wait();
    bound_waiting_compute();
    if (loader_idle()) {
      const bool contended = runqueue_fraction_ >= t.runqueue_wait_fraction;
      if (contended) {
        idle_loader_wait_ = shares_.kind[PhaseKind::input] - loader_work_share_;
        cost_[Bottleneck::io] = loader_work_share_;
        cost_[Bottleneck::scheduling] += idle_loader_wait_;
      }
      add(contended ? Bottleneck::scheduling : kNoCategory, contended ? Weight::secondary : Weight::info,
          "idle_loader_wait", shares_.kind[PhaseKind::input] - loader_work_share_, t.moderately_bound, ">=",
          fmt::format("The step waited {:.1f}% of its time for input while the background loader's phases ({}) "
                      "worked {:.1f}% of a step{}.",
                      pct(shares_.kind[PhaseKind::input]), loader_phases_, pct(loader_work_share_),
                      contended ? fmt::format(": the loader sat idle; with the step threads waiting for a CPU "
                                              "{:.0f}% of the time, its thread waited too (counted as scheduling)",
                                              pct(runqueue_fraction_))
                                : ": the loader waits outside its phases (unwrapped reads, sleeps, a queue "
                                  "hand-off)"));
    }
    return;
  }
  // Device timeline: the GPU's wall time split into busy computing, copying,
  // exposed communication, and idle by cause. Idle time with no recorded cause
  // (the host was busy elsewhere) is split by what the host step thread was
  // doing; host compute/other/unattributed time while the GPU idles is the
  // host failing to feed the device: scheduling.
  const bool has_input_cause = device_.has_idle_host_input;
  const double memcpy = device_.memcpy.value_or(0);
  const double comm = device_.exposed_comm.value_or(0);
  const double idle_rest =
      std::max(0.0, device_.idle - device_.idle_host_input - device_.idle_launch - device_.idle_sync);
  const double w_input = has_input_cause ? 0.0 : shares_.kind[PhaseKind::input];
  const double w_memory = shares_.kind[PhaseKind::memory] + shares_.page_fault;
  const double w_comm = shares_.kind[PhaseKind::communication];
  const double w_sched =
      shares_.kind[PhaseKind::compute] + shares_.kind[PhaseKind::other] + shares_.unattributed + shares_.cpu_wait;
  const double w_sum = w_input + w_memory + w_comm + w_sched;
  auto part = [&](double w) { return w_sum > 0 ? idle_rest * w / w_sum : 0.0; };
  // Compute kernels' own time when the timeline gives it, else what is left
  // of the busy time after copies and exposed communication.
  cost_[Bottleneck::compute] =
      device_.compute ? std::min(*device_.compute, device_.busy) : std::max(0.0, device_.busy - memcpy - comm);
  cost_[Bottleneck::memory] = memcpy + part(w_memory);
  cost_[Bottleneck::communication] = comm + part(w_comm);
  cost_[Bottleneck::io] = device_.idle_host_input + part(w_input);
  cost_[Bottleneck::scheduling] = device_.idle_launch + device_.idle_sync + (w_sum > 0 ? part(w_sched) : idle_rest);
  if (host_ahead_) {
    // The "launch-bound" idle is the device waiting on a dependency. With
    // exposed communication it is the compute stream waiting for collectives:
    // communication. Otherwise nothing says what it waits on: it stays out of
    // every category (the verdict's confidence falls accordingly).
    cost_[Bottleneck::scheduling] -= device_.idle_launch;
    if (comm >= kThresholds.moderately_bound) {
      cost_[Bottleneck::communication] += device_.idle_launch;
      add(Bottleneck::communication, Weight::secondary, "idle_waiting_on_collectives", device_.idle_launch,
          kThresholds.moderately_bound, ">=",
          fmt::format("With the host ahead and {:.1f}% exposed communication, the GPU's {:.1f}% idle time "
                      "during launches is compute waiting for collectives.",
                      pct(comm), pct(device_.idle_launch)));
    }
  }
  if (idle_rest > 0) {
    add(Bottleneck::scheduling, Weight::secondary, "idle_host_busy_fraction", idle_rest,
        kThresholds.scheduling_moderately_bound, ">=",
        fmt::format("The GPU was idle {:.1f}% of the time with no input or launch cause recorded; that "
                    "time is split by what the host step thread was doing.",
                    pct(idle_rest)));
  }
}

// Host timeline: the part of the step threads' CPU wait the job's own
// loader caused (background input threads, DataLoader worker processes on
// the cores the step needs) is input's cost, in proportion to the loader's
// CPU among what the step threads did not use (the job's other threads and
// processes, other processes). A loop decoding 116 ms a batch on two worker
// processes beside a 56 ms step, on 2 cores, waited 25% of its step for a
// CPU: read as scheduling quiet it was "compute", and beside two busy loops,
// with the wait carved out as the machine's, "io".
void Classifier::attribute_loader_wait() {
  if (shares_.cpu_wait < kThresholds.what_if_min_share || shares_.wall_ms <= 0) return;
  const detail::LoaderCpu loader = detail::loader_cpu(report_);
  const SystemSignals& s = report_.system;
  if (loader.cpu_ms <= 0 || s.wall_s <= 0 || s.step_threads_on_cpu_s < 0) return;
  const detail::CpuHolders h = cpu_holders(s);
  const double loader_cores = loader.cpu_ms / shares_.wall_ms;
  const double holders =
      std::max(0.0, h.own_cores - s.step_threads_on_cpu_s / s.wall_s) + h.children_cores + std::max(0.0, h.other_cores);
  if (holders <= 0) return;
  loader_wait_ = shares_.cpu_wait * std::min(1.0, loader_cores / holders);
  cost_[Bottleneck::io] += loader_wait_;
  cost_[Bottleneck::scheduling] = std::max(0.0, cost_[Bottleneck::scheduling] - loader_wait_);
  add(kNoCategory, Weight::info, "loader_cpu_wait_share", loader_wait_, kThresholds.moderately_bound, ">=",
      fmt::format("The step threads waited for a CPU {:.1f}% of the step while the {} used {:.2f} ms of CPU per "
                  "batch ({:.1f} cores) of the {:.1f} the step threads left to others: {:.1f}% of the step is "
                  "that wait, the loader's cost, counted as input.",
                  pct(shares_.cpu_wait), loader.what, loader.cpu_ms, loader_cores, holders, pct(loader_wait_)));
}

// Host timeline: where other processes held the CPUs (this process fitted
// its cores), the step threads' CPU wait is the machine's. Each category's
// cost becomes its share of the step without that wait (the step a quiet
// machine would run), so the same code reads the same at load 0.6 and at
// load 4; the confidence then falls with the wait (run()).
void Classifier::discount_machine_wait() {
  const detail::CpuHolders holders = cpu_holders(report_.system);
  if (!holders.others_hold || shares_.cpu_wait - loader_wait_ <= 0 || shares_.cpu_wait >= 1) return;
  machine_wait_ = shares_.cpu_wait - loader_wait_;
  cost_[Bottleneck::scheduling] = std::max(0.0, cost_[Bottleneck::scheduling] - machine_wait_);
  for (double& c : cost_.values) c /= 1.0 - machine_wait_;
  add(kNoCategory, Weight::info, "machine_cpu_wait_share", machine_wait_, kThresholds.scheduling_moderately_bound, ">=",
      fmt::format("The step threads waited for a CPU {:.1f}% of the step while other processes kept {:.1f} of the "
                  "machine's {} CPUs busy: that wait is the machine's, not the step's. The verdict is the step's "
                  "without it (its shares are of the rest of the step), with its confidence lowered accordingly.",
                  pct(machine_wait_), std::max(0.0, holders.other_cores), report_.system.cores_online));
}

// A step that waits for communication of its own (an RPC trainer's round
// trips, timed as rpc.wait) and whose compute phases the step thread was on
// a CPU for only part of the time: those phases computed at most that part.
// Where even that upper bound is below the communication measured, compute
// cannot lead; the rest of their time waited (for the same remote work inside
// a distributed backward, the interpreter lock, a pool) and is counted in no
// category. pytorch/examples' rpc/rnn trainer: rpc.wait 42%, compute phases
// 51% (dist_autograd.backward 36% of it), the thread on a CPU at most 52% of
// their time: "highly compute-bound (0.62)" before.
void Classifier::bound_waiting_compute() {
  const double compute = cost_[Bottleneck::compute], communication = cost_[Bottleneck::communication];
  if (communication <= 0 || compute <= 0) return;
  const detail::ComputeOnCpu on_cpu = detail::compute_on_cpu(report_, 1.0);
  if (on_cpu.fraction < 0 || compute * on_cpu.fraction >= communication) return;
  compute_waited_ = compute * (1.0 - on_cpu.fraction);
  cost_[Bottleneck::compute] = compute * on_cpu.fraction;
  add(Bottleneck::communication, Weight::secondary, "compute_on_cpu_bound", on_cpu.fraction,
      safe_div(communication, compute), "<",
      fmt::format("Compute phases hold {:.0f}% of the step, but the step thread was on a CPU {}: they computed at "
                  "most {:.0f}% of the step, less than the {:.0f}% it waited for communication. The other {:.0f}% "
                  "waited (for remote work inside a distributed backward or optimizer step, the interpreter lock, "
                  "another thread) and is counted in no category.",
                  pct(compute), on_cpu.phrase(), pct(cost_[Bottleneck::compute]), pct(communication),
                  pct(compute_waited_)));
}

bool Classifier::scheduling_signal() const {
  for (const Signal& s : signals_)
    if (s.category == Bottleneck::scheduling && s.evidence.crossed && s.evidence.signal != "unattributed_share")
      return true;
  return false;
}

double Classifier::agreement(Bottleneck category) const {
  int considered = 0, agreeing = 0;
  for (const Signal& s : signals_) {
    if (s.category != category) continue;
    if (s.weight == Weight::primary) {
      ++considered;
      if (s.evidence.crossed) ++agreeing;
    } else if (s.weight == Weight::secondary && s.evidence.crossed) {
      ++considered;
      ++agreeing;
    }
  }
  return considered > 0 ? static_cast<double>(agreeing) / considered : 0.5;
}

std::string Classifier::top_phase(PhaseKind kind) const {
  const PhaseSummary* best = nullptr;
  for (const PhaseSummary& p : report_.phases) {
    if (p.thread_role != ThreadRole::step || p.kind != kind) continue;
    if (best == nullptr || p.share_of_step > best->share_of_step) best = &p;
  }
  return best != nullptr && best->share_of_step > 0 ? best->name : std::string();
}

std::string Classifier::summary(Bottleneck category, const std::string& severity) const {
  const double c = cost_[category];
  std::string where;
  switch (category) {
    case Bottleneck::io: {
      const std::string phase = top_phase(PhaseKind::input);
      where =
          device_.present && device_.idle_host_input > 0
              ? fmt::format("the GPU idles {:.0f}% of the time while the host gets input", pct(device_.idle_host_input))
              : fmt::format("the step waits {:.0f}% of its time on input{}", pct(c),
                            loader_wait_ > 0 ? fmt::format(" ({:.0f}% of the step waiting for CPUs its loader held{})",
                                                           pct(loader_wait_ / (1.0 - machine_wait_)),
                                                           phase.empty() ? "" : ", the rest mostly in '" + phase + "'")
                            : phase.empty()  ? ""
                                             : " (mostly in '" + phase + "')");
      if (input_over_compute_)
        where += fmt::format(
            "; compute ({:.0f}%) is the runner-up, but input at or above {:.0f}% of the step "
            "on its critical path is input-bound: {}",
            pct(cost_[Bottleneck::compute]), pct(kThresholds.highly_bound),
            loader_wait_ / (1.0 - machine_wait_) >= 0.5 * c ? "most of it is the wait for CPUs the loader's work holds"
            : loader_work_share_ >= 0                       ? "the background loader does not keep it off that path"
                                                            : "a background loader would hide it");
      break;
    }
    case Bottleneck::compute: {
      const std::string phase = top_phase(PhaseKind::compute);
      where = device_.present ? fmt::format("the GPU computes {:.0f}% of the time", pct(c))
                              : fmt::format("compute takes {:.0f}% of the step{}", pct(c),
                                            phase.empty() ? "" : " (mostly in '" + phase + "')");
      break;
    }
    case Bottleneck::memory:
      where =
          shares_.page_fault > 0
              ? fmt::format(
                    "moving or managing memory costs {:.0f}% of the step ({:.0f}% kernel time faulting "
                    "about {:.0f} MiB of fresh pages per step, {:.0f}% in memory phases)",
                    pct(c), pct(shares_.page_fault), faults_.fresh_mib_per_step, pct(shares_.kind[PhaseKind::memory]))
              : fmt::format("moving or managing memory costs {:.0f}% of the step", pct(c));
      break;
    case Bottleneck::communication:
      where = fmt::format("communication the step waits for costs {:.0f}% of the step", pct(c));
      break;
    case Bottleneck::scheduling:
      if (device_.present) {
        where = fmt::format("the host fails to keep the GPU fed for {:.0f}% of the time", pct(c));
      } else {
        // Name only the parts that are there, with the breakdown's numbers.
        std::string parts;
        if (shares_.cpu_wait - loader_wait_ > 0 && machine_wait_ == 0)
          parts += fmt::format("{:.0f}% waiting for a CPU", pct(shares_.cpu_wait - loader_wait_));
        if (shares_.unattributed > 0)
          parts += fmt::format("{}{:.0f}% outside every phase", parts.empty() ? "" : ", ", pct(shares_.unattributed));
        where =
            fmt::format("{:.0f}% of the step goes to scheduling{}", pct(c), parts.empty() ? "" : " (" + parts + ")");
      }
      break;
  }
  if (pct(machine_wait_) >= 0.5)  // said where it shows in a whole percent ("without the 0%" read as noise)
    where += fmt::format(" (shares of the step without the {:.0f}% it waited for CPUs other processes held)",
                         pct(machine_wait_));
  return fmt::format("The step is {} {}-bound: {}.", severity, bottleneck_name(category), where);
}

Verdict Classifier::run() {
  Verdict v;
  collect_step_shares();
  collect_background_phases();
  collect_system();
  collect_device();
  compute_costs();
  const std::array<Bottleneck, kBottleneckCount> order = rank(v);
  // Each check adds its evidence row; the first that fails says why there is no verdict.
  if (std::optional<Unknown> unknown = too_few_steps()) return finish_unknown(std::move(*unknown), v);
  if (std::optional<Unknown> unknown = unexplained_step()) return finish_unknown(std::move(*unknown), v);
  if (std::optional<Unknown> unknown = waiting_in_compute()) return finish_unknown(std::move(*unknown), v);
  const Leader lead = choose_leader(order);
  if (std::optional<Unknown> unknown = conflicting(lead)) return finish_unknown(std::move(*unknown), v);
  decide(lead, v);
  settle_evidence(lead.category, v);
  return v;
}

// Ranking: what each category costs the step, largest first.
std::array<Bottleneck, kBottleneckCount> Classifier::rank(Verdict& v) const {
  std::array<Bottleneck, kBottleneckCount> order = kBottlenecks;
  std::stable_sort(order.begin(), order.end(), [&](Bottleneck a, Bottleneck b) { return cost_[a] > cost_[b]; });
  for (Bottleneck c : order) v.ranking.emplace_back(bottleneck_name(c), cost_[c]);
  return order;
}

Verdict Classifier::finish_unknown(Unknown unknown, Verdict& v) {
  v.category = "unknown";
  v.severity.clear();
  v.confidence = 0;
  v.summary = std::move(unknown.why);
  v.recommendations.push_back(std::move(unknown.advice));
  settle_evidence(kNoCategory, v);
  return v;
}

// 1. Enough steps?
std::optional<Classifier::Unknown> Classifier::too_few_steps() {
  const auto& t = kThresholds;
  const std::uint64_t needed = device_.present ? t.min_steps_with_device_timeline : t.min_measured_steps;
  add(kNoCategory, Weight::info, "measured_steps", static_cast<double>(report_.steps.count),
      static_cast<double>(needed), ">=",
      fmt::format("{} measured step(s); at least {} are needed for a verdict{}.", report_.steps.count, needed,
                  device_.present ? " with a device timeline" : ""));
  if (report_.steps.count == 0 && report_.steps.warmup_excluded == 0 && !report_.phases.empty())
    return Unknown{
        "Unknown: this process ran no steps; its phases are timed above, but a verdict is about a step.",
        "Mark each iteration of the training loop (stepscope::steps(loader), STEPSCOPE_STEP(), next_step(); "
        "stepscope.steps() in Python). A worker process (a DataLoader worker with STEPSCOPE_CHILDREN=1) runs no "
        "steps: the verdict is in the report of the process that runs them."};
  if (report_.steps.count < needed || step_ms_ <= 0)
    return Unknown{fmt::format("Unknown: only {} measured step(s) (at least {} needed).", report_.steps.count, needed),
                   "Run more steps (past the warm-up) before drawing conclusions."};
  return std::nullopt;
}

// 2. Does the instrumentation cover the step? (host timeline only: with a
//    device timeline the GPU facts cover the whole step.)
std::optional<Classifier::Unknown> Classifier::unexplained_step() {
  const auto& t = kThresholds;
  if (device_.present) return std::nullopt;
  // An OS contention signal (preemptions, a full run queue) stands in for
  // the time the thread lost to other threads only where that time was not
  // measured. Where it was (the breakdown's 'cpu wait', from schedstat), it
  // is already out of the time outside phases, and what is left there is
  // the thread running or sleeping in code nobody wrapped: a Python loop 69%
  // outside its phases on a busy machine read "scheduling, 0.88" with its 9%
  // CPU wait the only scheduling it measured; on a quiet machine, unknown.
  const bool wait_measured = shares_.cpu_wait > 0;
  const bool explained = scheduling_signal() && !wait_measured;
  // Time between steps is unexplained whatever the scheduling signals say:
  // nothing was recorded there (steps_coverage finding).
  const double unexplained =
      (shares_.kind[PhaseKind::other] + shares_.between_steps + (explained ? 0.0 : shares_.unattributed)) /
      (1.0 - machine_wait_);
  add(kNoCategory, Weight::info, "unexplained_share", unexplained, t.mostly_unexplained, "<",
      fmt::format("{:.1f}% of the step is in no phase or in kind 'other'{}.", pct(unexplained),
                  explained       ? " (time outside phases is explained by scheduling signals)"
                  : wait_measured ? fmt::format(" (the step thread's {:.1f}% CPU wait is counted apart; nothing "
                                                "says what the rest was)",
                                                pct(shares_.cpu_wait))
                                  : std::string(" with no scheduling signal to explain it")));
  // Mostly between steps: the loop's own structure, not missing phases
  // (the fetch in a range-for's header runs outside the step it feeds).
  if (unexplained >= t.mostly_unexplained && shares_.between_steps >= 0.5 * unexplained)
    return Unknown{fmt::format("Unknown: {:.0f}% of the loop's time falls between steps, where nothing was measured "
                               "(the fetch in the loop header, most likely); the per-step numbers cover only the "
                               "rest.",
                               pct(shares_.between_steps)),
                   "Iterate stepscope::steps(loader) so each fetch is its step's data phase, or call "
                   "stepscope::next_step() at the top of the loop body instead of STEPSCOPE_STEP()."};
  if (unexplained >= t.mostly_unexplained)
    return Unknown{
        wait_measured
            ? fmt::format("Unknown: {:.0f}% of the step is outside any classified phase; the {:.0f}% the step "
                          "thread waited for a CPU is counted apart, and nothing says what the rest was.",
                          pct(unexplained), pct(shares_.cpu_wait))
            : fmt::format("Unknown: {:.0f}% of the step is outside any classified phase and no scheduling "
                          "signal explains it.",
                          pct(unexplained)),
        "Wrap more of the step in STEPSCOPE_PHASE scopes with a kind (input, compute, memory, "
        "communication) so the time can be attributed."};
  return std::nullopt;
}

// A step whose compute phases mostly waited rather than computed, in a run
// with no GPU to wait for: the phase times say how long it waited, not what
// it computed, and no category fits them. Python threads holding the
// interpreter lock (facts.hpp, InterpreterLock) are one cause; work outside
// the process (an RPC to a parameter server, another process, a lock, a
// sleep) the other, where this process's other threads were too idle to have
// done the compute for it (a pool that did is compute: the step thread waits
// for its own workers).
std::optional<Classifier::Unknown> Classifier::waiting_in_compute() const {
  const auto& t = kThresholds;
  if (compute_waited_ > 0) return std::nullopt;  // communication outweighs what compute can have done
  const detail::InterpreterLock lock = detail::interpreter_lock(report_);
  if (lock.active && lock.background)
    return Unknown{
        fmt::format("Unknown: the step thread was on a CPU {}: they mostly waited rather than computed, while this "
                    "process's other threads kept {:.1f} CPUs busy. In Python that is most often the interpreter lock "
                    "(the GIL) those threads hold; a wait for work done elsewhere (an RPC to a parameter server, a "
                    "queue) looks the same from here.",
                    lock.compute_on_cpu.phrase(), lock.other_threads_cores),
        "If those threads run Python, move their work out of this process (multiprocessing, DataLoader workers) or "
        "into code that releases the lock (torch and numpy operators); if the phase waits for remote work, time that "
        "wait as its own phase of kind communication; then measure again."};
  if (device_.present || report_.device.enabled || !report_.device.name.empty()) return std::nullopt;
  const detail::ComputeOnCpu on_cpu = detail::compute_on_cpu(report_);
  const SystemSignals& s = report_.system;
  if (on_cpu.fraction < 0 || on_cpu.fraction >= t.compute_on_cpu_working || s.step_threads_on_cpu_s < 0 ||
      s.wall_s <= 0)
    return std::nullopt;
  for (Bottleneck c : kBottlenecks)
    if (cost_[c] > cost_[Bottleneck::compute]) return std::nullopt;
  const double compute = shares_.kind[PhaseKind::compute];
  const double others = detail::other_threads_cores(s);
  if (others >= t.compute_pool_covers * compute * (1.0 - on_cpu.fraction)) return std::nullopt;
  return Unknown{
      fmt::format("Unknown: compute phases hold {:.0f}% of the step, but the step thread was on a CPU {} and no GPU "
                  "was seen: they mostly waited rather than computed, and this process's other threads ({:.2f} CPUs) "
                  "were too idle to have done that work for it. The wait is for something outside the process: a "
                  "remote call (an RPC to a parameter server, a distributed backward or optimizer step), another "
                  "process, a lock or a sleep.",
                  pct(compute), on_cpu.phrase(), others),
      "Time that wait as a phase of its own (kind communication for a remote call) so that it is counted as what it "
      "is, then measure again: a faster CPU or BLAS would not shorten it."};
}

// 3. The leader; a mostly idle GPU is never compute-bound.
Classifier::Leader Classifier::choose_leader(const std::array<Bottleneck, kBottleneckCount>& order) {
  const auto& t = kThresholds;
  std::vector<Bottleneck> candidates(order.begin(), order.end());
  if (device_.present && device_.idle >= t.device_mostly_idle) {
    candidates.erase(std::remove(candidates.begin(), candidates.end(), Bottleneck::compute), candidates.end());
  }
  Bottleneck leader = candidates[0];
  Category runner = candidates.size() > 1 ? Category(candidates[1]) : kNoCategory;
  // Rule (b): input on the step's critical path at or above the highly-bound
  // tier is io even when compute costs more. Compute is the work the step
  // exists to do; input at that share is time a background loader would
  // hide (XProf: "highly input-bound" at >= 20%).
  add(Bottleneck::io, Weight::secondary, "input_on_critical_path", cost_[Bottleneck::io], t.highly_bound, ">=",
      fmt::format("Input on the step's critical path is {:.1f}% of the step; from {:.0f}% on the step is "
                  "input-bound even when compute costs more, since overlapping input with compute would hide it.",
                  pct(cost_[Bottleneck::io]), pct(t.highly_bound)));
  // The same when input leads compute by a little: then it is no conflict
  // either (io 51% against compute 48% read "unknown" while io 35% against
  // compute 64% read io).
  const bool compute_close_behind = leader == Bottleneck::io && runner == Bottleneck::compute;
  // Compute must lead the rest clearly: where another category costs about
  // as much (scheduling 38.1% against compute 38.4%), which of the two came
  // first is noise, and with scheduling first it was a conflict, unknown
  // (PyTorch's regression example read io on a busy run for that alone).
  bool compute_contested = false;
  for (Bottleneck other : candidates)
    if (other != Bottleneck::compute && other != Bottleneck::io &&
        cost_[other] >= t.conflict_ratio * cost_[Bottleneck::compute] && cost_[other] >= t.moderately_bound)
      compute_contested = true;
  if ((leader == Bottleneck::compute || compute_close_behind) && !compute_contested &&
      cost_[Bottleneck::io] >= t.highly_bound &&
      std::find(candidates.begin(), candidates.end(), Bottleneck::io) != candidates.end()) {
    input_over_compute_ = true;
    leader = Bottleneck::io;
    runner = Bottleneck::compute;
  }
  const double lead_cost = cost_[leader];
  const double runner_cost = runner ? cost_[*runner] : 0.0;
  return Leader{leader, runner, lead_cost, runner_cost};
}

// 4. Conflicting signals: two categories cost nearly the same.
std::optional<Classifier::Unknown> Classifier::conflicting(const Leader& lead) {
  const auto& t = kThresholds;
  const Bottleneck leader = lead.category;
  const Category runner = lead.runner;
  const double lead_cost = lead.cost, runner_cost = lead.runner_cost;
  add(kNoCategory, Weight::info, "runner_up_ratio", safe_div(runner_cost, lead_cost), t.conflict_ratio, "<",
      runner == kNoCategory
          ? std::string("No runner-up category.")
          : fmt::format("Runner-up {} costs {:.1f}% against {:.1f}% for {}.", bottleneck_name(*runner),
                        pct(runner_cost), pct(lead_cost), bottleneck_name(leader)));
  if (!input_over_compute_ && runner != kNoCategory && runner_cost >= t.moderately_bound &&
      runner_cost >= t.conflict_ratio * lead_cost)
    return Unknown{fmt::format("Unknown: conflicting signals — {} ({:.0f}% of the step) and {} ({:.0f}%) cost "
                               "about the same.",
                               bottleneck_name(leader), pct(lead_cost), bottleneck_name(*runner), pct(runner_cost)),
                   fmt::format("Both {} and {} hold the step back about equally: address one, measure again, "
                               "and compare the two reports.",
                               bottleneck_name(leader), bottleneck_name(*runner))};
  return std::nullopt;
}

// 5. Severity, confidence, words.
void Classifier::decide(const Leader& lead, Verdict& v) const {
  const auto& t = kThresholds;
  const Bottleneck leader = lead.category;
  const double lead_cost = lead.cost, runner_cost = lead.runner_cost;
  const double moderate = leader == Bottleneck::scheduling ? t.scheduling_moderately_bound : t.moderately_bound;
  const double highly = leader == Bottleneck::scheduling ? t.scheduling_highly_bound : t.highly_bound;
  v.category = bottleneck_name(leader);
  v.severity = lead_cost >= highly ? "highly" : lead_cost >= moderate ? "moderately" : "mildly";
  const double dominance = clamp01(safe_div(lead_cost - runner_cost, lead_cost));
  const double agree = agreement(leader);
  const double sample =
      std::min(1.0, 0.7 + 0.3 * static_cast<double>(report_.steps.count) / static_cast<double>(t.steady_step_count));
  v.confidence = clamp01((0.3 + 0.4 * dominance + 0.3 * agree) * sample * (1.0 - machine_wait_));
  // Python step threads taking turns on the interpreter lock: of the time
  // their compute phases held, only the CPU time they got was their work.
  if (const detail::InterpreterLock lock = detail::interpreter_lock(report_); lock.active && !lock.background)
    v.confidence *= clamp01(safe_div(lock.on_cpu_cores, lock.compute_cores));
  // Steps that cover only part of the loop describe only that part, and the
  // input phases between them (the breakdown's, as the next step's input).
  if (const auto& coverage = report_.steps.coverage; coverage && *coverage < t.steps_coverage_min) {
    const double measured_between =
        clamp01(safe_div(report_.steps.between_steps_input_ms, report_.steps.between_steps_ms));
    v.confidence = std::min(v.confidence, clamp01(*coverage + (1.0 - *coverage) * measured_between));
  }
  v.summary = summary(leader, v.severity);
  recommend(leader, v);
}

}  // namespace detail

Verdict classify(const Report& facts) {
  return detail::Classifier(facts).run();
}

}  // namespace v1
}  // namespace stepscope
