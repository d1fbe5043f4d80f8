// src/analysis/recommend.cpp — the verdict's recommendations: what to do
// about the leading category (Classifier::recommend), one helper per
// category, each advice line chosen by the evidence rows that fired.
// Not advice_wording.cpp, which rewords advice for an imported trace.
#include "analysis/classifier.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

void Classifier::recommend(Bottleneck category, Verdict& v) const {
  auto& out = v.recommendations;
  switch (category) {
    case Bottleneck::io:
      recommend_io(out);
      break;
    case Bottleneck::compute:
      recommend_compute(out);
      break;
    case Bottleneck::memory:
      recommend_memory(out);
      break;
    case Bottleneck::communication:
      recommend_communication(out);
      break;
    case Bottleneck::scheduling:
      recommend_scheduling(out);
      break;
  }
  // Allocator churn that costs the step at least the highly-bound tier under
  // another verdict is a lever of its own, and a cheap one: pytorch/examples'
  // cpp/custom-dataset read "compute-bound" with 43% of its step in page
  // faults, the remedy only in a finding; a caching allocator took the step
  // from 1730 to 741 ms.
  if (category != Bottleneck::memory && shares_.page_fault >= kThresholds.highly_bound)
    out.push_back(detail::page_fault_remedy(report_));
  // Under another verdict, a loader holding CPUs the step waits for is a
  // lever of its own, ranked by what input costs the step (its CPU wait
  // included) against the verdict's share (scheduling and io say it
  // themselves).
  if (category == Bottleneck::scheduling || category == Bottleneck::io) return;
  if (std::string loader = loader_cpu_advice(); !loader.empty()) {
    const bool first = cost_[Bottleneck::io] > cost_[category];
    out.insert(first || out.empty() ? out.begin() : out.begin() + 1, std::move(loader));
  }
}

void Classifier::recommend_io(std::vector<std::string>& out) const {
  const auto& t = kThresholds;
  const SystemSignals& s = report_.system;
  // Most of the input's cost is the wait for CPUs the loader holds: its CPU
  // work is the lever, not a background loader it already has.
  const bool loader_cpu_bound = loader_wait_ / (1.0 - machine_wait_) >= 0.5 * cost_[Bottleneck::io];
  if (std::string loader = loader_cpu_advice(); !loader.empty()) out.push_back(std::move(loader));
  if (loader_cpu_bound) {
    recommend_io_storage(out);
    return;
  }
  if (loader_idle())
    out.push_back(
        fmt::format("The background loader's phases ({}) work {:.1f}% of a step, yet the step waits {:.1f}% for its "
                    "batches: the loader is idle or waits outside its phases. Wrap its reads and waits in phases to "
                    "see which, and let it run further ahead (a deeper queue, prefetching).",
                    loader_phases_, pct(loader_work_share_), pct(shares_.kind[PhaseKind::input])));
  else if (input_over_compute_ && loader_work_share_ < 0)
    out.push_back(
        fmt::format("Input on the step's critical path is {:.0f}% of the step: run it on a background loader (worker "
                    "threads filling a bounded queue, DataLoader num_workers) so it overlaps compute; the step would "
                    "then take about the longer of compute and the loader's time per batch (see the what-if for "
                    "kind:input).",
                    pct(cost_[Bottleneck::io])));
  // Whether the step thread waits in its input phases or works there decides
  // the remedy; where the sampler could not tell (a run of under a few
  // seconds), one line says so and gives both, never two claims that
  // contradict each other.
  static constexpr const char* kWaitRemedy =
      "use more loader workers (e.g. DataLoader num_workers), prefetch the next batches ahead of the step "
      "(prefetch_factor, a bounded queue filled by a background thread), and pin host batch memory so the "
      "host-to-device copy can run asynchronously.";
  static constexpr const char* kWorkRemedy =
      "move decoding and augmentation off the step thread into loader workers, vectorise per-sample transforms "
      "(apply them per batch), and cache decoded or preprocessed samples instead of decoding them every epoch.";
  if (!s.available || s.input_on_cpu_fraction < 0)
    out.push_back(fmt::format(
        "Whether the step thread waits for its batches or does the input work itself, this run cannot tell ({}). "
        "If it waits: {} If it works: {}",
        s.available ? fmt::format("{} sample{} of its state in input phases, too few; a run of a few seconds has "
                                  "enough",
                                  s.input_samples, s.input_samples == 1 ? "" : "s")
                    : std::string("no samples of its state on this system"),
        kWaitRemedy, kWorkRemedy));
  else if (s.input_on_cpu_fraction < t.input_on_cpu_working)
    out.push_back(std::string("The step waits for batches that are not ready: ") + kWaitRemedy);
  else
    out.push_back(std::string("The step thread does the input work itself: ") + kWorkRemedy);
  recommend_io_storage(out);
}

void Classifier::recommend_io_storage(std::vector<std::string>& out) const {
  if (fires("major_faults_per_step") || fires("io_wait_fraction") || fires("read_mib_per_step"))
    out.push_back(
        "Reads are served from storage, not memory (major faults / block-I/O wait / bytes read): "
        "use faster local storage (local NVMe rather than a network file system), keep the "
        "dataset in the page cache or RAM, or pack it into large sequential shards with "
        "read-ahead.");
  if (device_.present && device_.idle_host_input > 0)
    out.push_back(
        "The GPU idles while the host fetches input: overlap loading of batch N+1 with the GPU "
        "work of batch N (prefetch to the device, non_blocking copies from pinned memory).");
}

namespace {

// "1.2 KiB", "25.0 MiB": a collective's size as the advice names it.
std::string byte_size(double bytes) {
  if (bytes < 1024) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024.0 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024);
  return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
}

}  // namespace

// Which lever moves a communication-bound step depends on what each
// collective moves: below the latency bound fewer bytes buy nothing; one
// large collective per step cannot overlap backward. Without notes
// (note_collectives) the advice says both and how to tell.
void Classifier::recommend_communication(std::vector<std::string>& out) const {
  const auto& t = kThresholds;
  const CommunicationVolume& c = report_.communication;
  static constexpr const char* kOverlap =
      "Overlap communication with compute: bucket gradients so all-reduce runs during backward (DDP bucket_cap_mb), "
      "and start collectives as early as their inputs are ready.";
  static constexpr const char* kStragglers =
      "Check for stragglers: a rank waiting in a collective waits for the slowest rank; merge the ranks' reports and "
      "compare their step times.";
  // An RPC job's trainer (stepscope.torch times its waits as rpc.wait):
  // round trips to other processes, not collectives.
  if (top_phase(PhaseKind::communication) == "rpc.wait") {
    for (const PhaseSummary& p : report_.phases)
      if (p.thread_role == ThreadRole::step && p.name == "rpc.wait" && p.count > 0 && report_.steps.count > 0) {
        const double per_step = static_cast<double>(p.count) / static_cast<double>(report_.steps.count);
        out.push_back(fmt::format(
            "The step waits {:.3f} ms for {:.3g} remote call{} (torch.distributed.rpc: rpc_sync, an rpc_async "
            "future's wait, RRef.to_here; {:.3f} ms each): each is a round trip to another process and the work done "
            "there. Issue independent calls with rpc_async and wait for them together (torch.futures.wait_all) "
            "after the local work that does not need them, send fewer and larger calls, and keep what every step "
            "reads on this process; the other process's own report says whether its work or the wire is the cost.",
            p.share_of_step * step_ms_, per_step, per_step == 1 ? " a step" : "s a step", p.self_ms.mean));
        break;
      }
    return;
  }
  if (c.collectives == 0 || c.steps == 0) {
    out.push_back(kOverlap);
    out.push_back(fmt::format(
        "Reduce the volume (bf16/fp16 gradients, gradient compression) where each collective moves megabytes; "
        "where it moves kilobytes (a small model) its latency is the cost: all-reduce less often (gradient "
        "accumulation under DDP's no_sync(), a larger batch per step).{}",
        report_.run.clock_source == "trace"  // an imported trace, or a job merged from them
            ? ""
            : " This run noted no collective sizes (stepscope::note_collectives) to tell which."));
    out.push_back(kStragglers);
    return;
  }
  const double per_step = static_cast<double>(c.collectives) / static_cast<double>(c.steps);
  const double each = static_cast<double>(c.bytes) / static_cast<double>(c.collectives);
  const double comm_ms = shares_.kind[PhaseKind::communication] * step_ms_;
  // Gradient accumulation all-reduces every k-th step: "1 collective ... every 8 steps".
  const bool accumulates = per_step < 0.95;
  const std::string moved =
      accumulates
          ? fmt::format("1 collective of {} every {:.3g} steps", byte_size(each), 1.0 / per_step)
          : fmt::format("{:.3g} collective{} of {} per step", per_step, per_step == 1 ? "" : "s", byte_size(each));
  const std::string rate = comm_ms > 0 ? fmt::format(" ({:.3g} MB/s over the {:.3f} ms the step waits for them)",
                                                     each * per_step / (comm_ms * 1e3), comm_ms)
                                       : std::string();
  if (each <= t.latency_bound_collective_bytes) {
    out.push_back(fmt::format(
        "The step runs {}{}: too little data for bandwidth to matter, so each collective costs its latency "
        "and the rendezvous with the other ranks, and fewer bytes (fp16 gradients, compression) would buy "
        "nothing. {}{}.",
        moved, rate,
        accumulates ? "All-reduce less often still: accumulate over more micro-batches per all-reduce (under DDP's "
                      "no_sync()), or take a larger batch per micro-batch"
                    : "All-reduce less often: accumulate gradients over several micro-batches under DDP's no_sync() "
                      "and all-reduce once, or take a larger batch per step",
        per_step >= 2 ? "; and fewer, larger buckets (a larger bucket_cap_mb)" : ""));
    out.push_back(kStragglers);
    return;
  }
  if (per_step < 1.5 && each >= t.one_collective_split_bytes)
    out.push_back(fmt::format(
        "All of a step's gradients go in one collective ({}), which can start only when backward ends: split them "
        "(a smaller DDP bucket_cap_mb) so all-reduce overlaps the rest of backward.",
        byte_size(each)));
  else
    out.push_back(kOverlap);
  // The run's DDP hook already sends 16-bit gradients (stepscope.torch records it).
  const auto hook = report_.run.config.find("ddp_comm_hook");
  const bool compressed = hook != report_.run.config.end() &&
                          (hook->second == "fp16_compress_hook" || hook->second == "bf16_compress_hook");
  out.push_back(fmt::format(
      "Reduce the volume ({}{}): {}, fewer synchronisation points per step.", moved, rate,
      compressed
          ? fmt::format("the gradients already travel in 16 bits ({}); compress them further (PowerSGD)", hook->second)
          : std::string("bf16/fp16 gradients (DDP's fp16_compress_hook), gradient compression")));
  out.push_back(kStragglers);
}

void Classifier::recommend_compute(std::vector<std::string>& out) const {
  const auto& t = kThresholds;
  if (device_.present) {
    out.push_back(
        "The GPU is the bottleneck, as it should be in a well-fed loop: use mixed precision "
        "(bf16/fp16 autocast, tensor cores), fused kernels (torch.compile, fused optimizers, "
        "flash attention), and a larger batch if memory allows.");
    out.push_back(
        "Profile the top kernels (Nsight Compute) for low occupancy or memory-bound kernels "
        "before hand-optimising; make sure the largest ones actually dominate the step.");
  } else {
    // torch ran fewer intra-op threads than the cores this process has to
    // itself (stepscope.torch records torch.get_num_threads()) and used no
    // more: each operator could use the rest. pytorch/examples' dcgan under
    // Debian's torch 1.13, which starts with 1 thread on this 2-core VM:
    // 9.4 s steps, 97% compute, the advice only "set intra-op threads to the
    // physical cores".
    const SystemSignals& s = report_.system;
    if (const auto intra = report_.run.config.find("intra_op_threads");
        intra != report_.run.config.end() && s.available && shares_.cpu_wait < t.cpu_contention_finding) {
      const double threads = std::atof(intra->second.c_str());
      const int cores = s.cores_available > 0 ? s.cores_available : s.cores_online;
      const int processes = report_.run.local_ranks > 1 ? report_.run.local_ranks : s.sibling_processes + 1;
      const int share = cores / std::max(1, processes);
      const double used = s.cpu_utilization * cores;
      if (threads >= 1 && share > threads && used < threads + 0.5)
        out.push_back(fmt::format(
            "torch ran {:.0f} intra-op thread{} while this process has {} core{}{} and used {:.1f} CPUs: "
            "torch.set_num_threads({}) (or OMP_NUM_THREADS={}) lets each operator use them, then measure again.",
            threads, threads == 1 ? "" : "s", share, share == 1 ? "" : "s",
            processes > 1 ? fmt::format(" of the {} its job's {} processes share", cores, processes) : std::string(),
            used, share, share));
    }
    out.push_back(
        "Compute on the CPU dominates: use an optimised BLAS/oneDNN build, set intra-op threads "
        "to the physical cores, vectorise hot loops, and use reduced precision (bf16) where the "
        "CPU supports it.");
    // Not for a full-batch optimizer (LBFGS's closure already takes all of
    // it), nor where the step has no fixed part to amortise: a 1.1 s dcgan
    // step 98% in its phases, 0.1% outside them, was told to use one.
    // Time in no phase is not known to be fixed: pytorch/examples'
    // fast_neural_style runs its VGG loss network there (43% of the step,
    // work that grows with the batch) and read "amortises the fixed
    // per-step overhead (43% ...)". Where it is most of the outside time and
    // the unattributed finding fires, the advice says what it assumes.
    const auto optimizer = report_.run.config.find("optimizer");
    const double fixed = shares_.unattributed + shares_.kind[PhaseKind::other] + shares_.between_steps;
    const bool unknown = shares_.unattributed >= t.unattributed_finding && 2 * shares_.unattributed > fixed;
    if ((optimizer == report_.run.config.end() || optimizer->second != "LBFGS") && fixed >= t.moderately_bound)
      out.push_back(
          unknown
              ? fmt::format("A larger batch per step amortises per-step overhead, if that is what the {:.0f}% of the "
                            "step in no phase is: wrap it in phases first (work that grows with the batch, such as a "
                            "second model's forward, does not amortise).",
                            pct(shares_.unattributed))
              : fmt::format(
                    "A larger batch per step amortises the fixed per-step overhead ({:.0f}% of the step outside "
                    "the phases that grow with the batch).",
                    pct(fixed)));
    if (const double on_cpu = detail::compute_on_cpu(report_).fraction;
        on_cpu >= 0 && on_cpu < t.compute_on_cpu_working)
      out.push_back(
          "Compute phases are mostly off-CPU: they wait (device synchronisation, locks) rather "
          "than compute; look for hidden synchronisation (.item(), .cpu(), blocking copies).");
  }
}

void Classifier::recommend_memory(std::vector<std::string>& out) const {
  const auto& t = kThresholds;
  if ((device_.memcpy && *device_.memcpy >= t.moderately_bound) || fires("pageable_memcpy_share"))
    out.push_back(
        "Copies cost step time: allocate host batches in pinned (page-locked) memory and copy with "
        "non_blocking=true, keep tensors on the device across steps, and avoid .cpu()/.item() "
        "round trips.");
  if (fires("minor_faults_per_step")) out.push_back(detail::page_fault_remedy(report_));
  if (fires("device_memory_peak_fraction"))
    out.push_back(
        "Device memory is near capacity: use activation checkpointing, smaller micro-batches with "
        "gradient accumulation, or release cached blocks that are no longer needed.");
  if (shares_.kind[PhaseKind::memory] > 0)
    out.push_back(
        "Reduce per-step allocations and copies in memory phases: reuse buffers, fuse copies, and "
        "keep data in the layout the next stage consumes.");
}

void Classifier::recommend_scheduling(std::vector<std::string>& out) const {
  const auto& t = kThresholds;
  if (fires("idle_sync_fraction"))
    out.push_back(
        "The GPU drains while the host synchronises: remove per-step synchronisation "
        "(.item(), .cpu(), printing losses, blocking copies) or move it off the critical path.");
  if (fires("idle_launch_bound_fraction") || fires("short_kernel_fraction") || fires("kernels_per_step") ||
      device_.present)
    out.push_back(
        "The host cannot issue work fast enough: use fewer, bigger ops (fuse tiny ops), capture "
        "the step in a CUDA graph (torch.compile mode='reduce-overhead'), and cut per-call "
        "framework/Python overhead.");
  if (idle_loader_wait_ > 0)
    out.push_back(
        fmt::format("The step waits {:.0f}% of its time for a background loader that has little to do ({:.1f}% of a "
                    "step of work): its thread waits for a CPU like the step's. Give the loader a core (fewer "
                    "intra-op threads, no other jobs on the machine) or fetch further ahead.",
                    pct(shares_.kind[PhaseKind::input]), pct(loader_work_share_)));
  // The CPU-wait advice and the wrap-the-rest advice, in the order of
  // what each part costs the step (end to end: 4% waiting for a CPU does
  // not come before 41% in no phase).
  std::string cpu_advice = cpu_contention_advice();
  std::string wrap_advice;
  if (shares_.unattributed >= t.scheduling_moderately_bound)
    wrap_advice = fmt::format(
        "{:.0f}% of the step is outside every phase: wrap the remaining work (framework overhead, "
        "logging, synchronisation, checkpointing) in STEPSCOPE_PHASE scopes to see where it goes.",
        pct(shares_.unattributed));
  const bool wrap_first = shares_.unattributed > shares_.cpu_wait;
  for (std::string* advice : {wrap_first ? &wrap_advice : &cpu_advice, wrap_first ? &cpu_advice : &wrap_advice})
    if (!advice->empty()) out.push_back(std::move(*advice));
  out.push_back(
      "If several threads or ranks take part in a step, check load imbalance: the step waits for "
      "the slowest one.");
}

// The job's own loader holds CPUs the step waits for (loader_wait_): its
// CPU work is the input's cost, and more workers would only take more of the
// same cores. Empty where it caused no wait worth a line.
std::string Classifier::loader_cpu_advice() const {
  if (loader_wait_ < kThresholds.what_if_min_share) return std::string();
  const detail::LoaderCpu loader = detail::loader_cpu(report_);
  return fmt::format(
      "The loading ({}) takes {:.2f} ms of CPU per batch, and the step waits {:.0f}% of its time for CPUs it holds: "
      "make the loading cheaper (decode once and cache, lighter augmentation, smaller inputs, per-batch rather "
      "than per-sample transforms) or give the job more cores; more loader workers would take more of the same "
      "cores, fewer would slow the loader.",
      loader.what, loader.cpu_ms, pct(loader_wait_ / (1.0 - machine_wait_)));
}

// Whose threads hold the CPUs: this process' own (too many threads)
// or other processes' (a shared machine: fewer threads here would not help).
// Empty where no CPU contention signal fired.
std::string Classifier::cpu_contention_advice() const {
  if (!(fires("runqueue_wait_fraction") || fires("involuntary_switches_per_second") || fires("cpu_utilization")))
    return std::string();
  const SystemSignals& s = report_.system;
  const CpuHolders holders = cpu_holders(s);
  const double own_cores = std::max(0.0, holders.own_cores), other_cores = holders.other_cores;
  const int cores = holders.cores;
  if (holders.others_hold)
    return fmt::format(
        "Other processes kept {:.1f} of this machine's {} CPUs busy during the run{}, while this process used "
        "{:.1f} of its {}: the step waits for CPUs they "
        "hold, not for its own threads. Run where the job has its cores to itself (a quieter machine, "
        "taskset or a cgroup CPU set, the batch system's exclusive allocation) and measure again; until "
        "then these numbers say as much about the machine's load as about the step.",
        other_cores, s.cores_online,
        s.load_average_start >= 0 && s.load_average_end >= 0
            ? fmt::format(" (load average {:.1f} at the start, {:.1f} at the end)", s.load_average_start,
                          s.load_average_end)
            : std::string(),
        own_cores, cores);
  if (std::string loader = loader_cpu_advice(); !loader.empty()) return loader;
  return "The CPU is oversubscribed: keep threads <= cores (intra-op threads x loader workers), pin "
         "the step thread to its own core, and stop other jobs sharing the machine.";
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
