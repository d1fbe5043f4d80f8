// src/merge/step_clock.cpp — the job's step clock: a job is device-clocked
// (docs/gpu.md, "Device-true accounting") when every rank is, and then its
// host-clocked figures ride beside the device's as a rank's do: the ranks'
// host step times merged, their host breakdowns and phases' host shares
// averaged (as the breakdown and shares are). A job some of whose ranks had
// no device clock stays "host", with a warning: its figures mix the clocks.
#include "merge/job_merge.hpp"

#include <fmt/format.h>

namespace stepscope {
inline namespace v1 {
namespace merging {

void merge_step_clock(JobMerge& jm) {
  StepStats& job = jm.job.steps;
  job.clock = "host";
  job.host_wall_ms.reset();
  job.host_breakdown.reset();
  std::size_t device = 0;
  for (const RankFacts& f : jm.ranks) {
    const StepStats& s = f.report->steps;
    if (s.clock == "device" && s.host_wall_ms && s.host_breakdown) ++device;
  }
  if (device == 0 || jm.ranks.empty()) return;
  if (device < jm.ranks.size()) {
    jm.warnings.push_back(
        fmt::format("{} of {} ranks paced their steps by the device, the others by the host: the job's step figures "
                    "mix the two clocks (steps.clock \"host\")",
                    device, jm.ranks.size()));
    return;
  }
  const double n = static_cast<double>(jm.ranks.size());
  DistributionMerger host_wall;
  StepBreakdown host;
  for (const RankFacts& f : jm.ranks) {
    const StepStats& s = f.report->steps;
    host_wall.add(*s.host_wall_ms);
    const StepBreakdown& h = *s.host_breakdown;
    host.wall_ms += h.wall_ms / n;
    for (PhaseKind k : kPhaseKinds) host.kind_ms[k] += h.kind_ms[k] / n;
    host.unattributed_ms += h.unattributed_ms / n;
    host.cpu_wait_ms += h.cpu_wait_ms / n;
    host.page_fault_ms += h.page_fault_ms / n;
    host.between_steps_input_ms += h.between_steps_input_ms / n;
    host.between_steps_ms += h.between_steps_ms / n;
  }
  job.clock = "device";
  job.host_wall_ms = host_wall.result();
  job.host_breakdown = host;
  // A phase's host share: the mean over the ranks, as its share (a rank that
  // did not run it adds 0; one whose share has no host figure, its share).
  for (PhaseSummary& p : jm.job.phases) {
    double sum = 0;
    bool any = false;
    for (const RankFacts& f : jm.ranks)
      for (const PhaseSummary& q : f.report->phases) {
        if (q.name != p.name || q.kind != p.kind || q.thread_role != p.thread_role) continue;
        sum += q.host_share_of_step.value_or(q.share_of_step);
        any = any || q.host_share_of_step.has_value();
      }
    if (any) p.host_share_of_step = sum / n;
  }
}

}  // namespace merging
}  // namespace v1
}  // namespace stepscope
