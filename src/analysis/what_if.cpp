// src/analysis/what_if.cpp — Amdahl projections: "if X were k× faster, the
// step would change by Y%". Makes the local-optimisation trap visible: a phase
// at 5% of the step made 2× faster saves 2.5% of the step, not 50%.
//
//   projected = step − share · (1 − 1/k) · step      (k = 0: the part is free)
//
// The share is what the step thread spent in the part (self time), i.e. what
// the step actually waited for. Background phases run beside the step, so
// speeding them up gains nothing while they stay overlapped (share 0, with a
// note). Phases with device time are projected on the step thread's time and
// say so: GPU-side speedups pay off only where the step waits for the GPU.
//
// A projection is bounded by what feeds the step. A background loader
// (phases of kind input on threads that run no steps) produces one batch per
// step at its measured rate: per batch, each of its phases' self time (times
// occurrences per step) over the threads that ran it. The step cannot get
// shorter than that, whatever else is made faster, so
//
//   projected = max(Amdahl, loader ms per batch)     (not for input targets:
//                                                     they are the feed)
//
// and the note says which bound applies.
//
// In a merged multi-rank job the step is synchronous: no rank finishes a step
// before the slowest has reached the collective. For a change made on every
// rank, the step is bounded by the slowest rank's time outside communication
// after the change, plus the collective itself:
//
//   projected = max(Amdahl, max over ranks(busy_r − part_r · saved) + collective)
//
// where part_r is the rank's own time in the target kind (0 for
// communication: a faster network removes none of the waiting for the
// slowest rank, only the collective's own time shrinks). Phase targets have
// no per-rank split and keep the Amdahl projection.
#include "analysis/facts.hpp"
#include "analysis/thresholds.hpp"

#include <stepscope/analysis.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace {

using detail::kThresholds;

WhatIf project(std::string target, double share, double speedup, double step_ms, std::string note) {
  WhatIf w;
  w.target = std::move(target);
  w.share = share;
  w.speedup = speedup;
  w.step_ms_now = step_ms;
  const double saved_fraction = speedup == 0 ? 1.0 : 1.0 - 1.0 / speedup;
  w.step_ms_projected = step_ms - share * saved_fraction * step_ms;
  w.step_change_pct = step_ms > 0 ? 100.0 * (w.step_ms_projected - step_ms) / step_ms : 0.0;
  w.note = std::move(note);
  return w;
}

constexpr double kSpeedups[] = {2.0, 0.0};

// The background loader's time per batch; 0 when there is none.
double loader_ms_per_batch(const Report& facts) {
  const double steps = static_cast<double>(std::max<std::uint64_t>(facts.steps.count, 1));
  double per_batch = 0;
  for (const PhaseSummary& p : facts.phases) {
    if (p.thread_role != ThreadRole::background || p.kind != PhaseKind::input || p.count == 0) continue;
    // Occurrences per batch (one batch per step): a per-sample phase runs many times.
    const double per_step = std::max(1.0, std::round(static_cast<double>(p.count) / steps));
    per_batch += p.self_ms.mean * per_step / std::max<std::uint32_t>(p.threads, 1);
  }
  return per_batch;
}

bool is_input_target(const std::string& target, const Report& facts) {
  if (target == "kind:input") return true;
  for (const PhaseSummary& p : facts.phases)
    if (p.name == target && p.thread_role != ThreadRole::background && p.kind == PhaseKind::input) return true;
  return false;
}

// Applies the loader bound to a projection and says which bound holds.
void bound_by_loader(WhatIf& w, double loader_ms) {
  const std::string change =
      w.speedup == 0 ? w.target + " free" : fmt::format("{} {:g}x faster", w.target, w.speedup);
  std::string bound;
  if (w.step_ms_projected < loader_ms) {
    w.step_ms_projected = loader_ms;
    w.step_change_pct = w.step_ms_now > 0 ? 100.0 * (loader_ms - w.step_ms_now) / w.step_ms_now : 0.0;
    bound = fmt::format("{}: {:.2f} -> {:.2f} ms, then input-bound: the loader needs {:.2f} ms per batch", change,
                        w.step_ms_now, w.step_ms_projected, loader_ms);
  } else {
    bound = fmt::format("{}: {:.2f} -> {:.2f} ms; the loader ({:.2f} ms per batch) keeps up", change, w.step_ms_now,
                        w.step_ms_projected, loader_ms);
  }
  w.note = w.note.empty() ? bound : bound + "; " + w.note;
}

// A rank's time per step in a kind target; <0 when the target has no per-rank split.
double rank_part_ms(const RankSummary& r, const std::string& target) {
  if (target == "unattributed") return r.unattributed_ms;
  // busy_ms is outside communication: the collective's share is taken below.
  if (target == "kind:communication") return 0;
  for (PhaseKind k : kPhaseKinds)
    if (target == std::string("kind:") + phase_kind_name(k)) return r.kind_ms[k];
  return -1;
}

// Applies the slowest rank's pace to a projection of a merged job.
void bound_by_ranks(WhatIf& w, const MultiRank& m) {
  if (m.ranks.size() < 2 || w.share <= 0) return;
  const double saved = w.speedup == 0 ? 1.0 : 1.0 - 1.0 / w.speedup;
  const bool communication = w.target == "kind:communication";
  double pace = -1;
  int slowest = -1;
  for (const RankSummary& r : m.ranks) {
    const double part = rank_part_ms(r, w.target);
    if (part < 0) return;
    const double busy = std::max(0.0, r.busy_ms - part * saved);
    if (busy > pace) {
      pace = busy;
      slowest = r.rank;
    }
  }
  const double collective = m.comm_collective_ms * (communication ? 1.0 - saved : 1.0);
  const double bound = pace + collective;
  const std::string change =
      w.speedup == 0 ? w.target + " free" : fmt::format("{} {:g}x faster", w.target, w.speedup);
  std::string note;
  if (w.step_ms_projected < bound) {
    w.step_ms_projected = bound;
    w.step_change_pct = w.step_ms_now > 0 ? 100.0 * (bound - w.step_ms_now) / w.step_ms_now : 0.0;
    note = fmt::format("{} on every rank: {:.2f} -> {:.2f} ms, then bound by the slowest rank: rank {} needs "
                       "{:.2f} ms per step outside communication, the collective {:.2f} ms",
                       change, w.step_ms_now, bound, slowest, pace, collective);
  } else {
    note = fmt::format("{} on every rank: the slowest rank (rank {}, {:.2f} ms outside communication) keeps pace",
                       change, slowest, pace);
  }
  w.note = w.note.empty() ? note : note + "; " + w.note;
}

}  // namespace

std::vector<WhatIf> project_what_if(const Report& facts) {
  std::vector<WhatIf> out;
  const double step_ms = detail::mean_step_ms(facts);
  if (step_ms <= 0) return out;
  const double min_share = kThresholds.what_if_min_share;
  const double steps = static_cast<double>(std::max<std::uint64_t>(facts.steps.count, 1));

  for (const PhaseSummary& p : facts.phases) {
    if (p.thread_role == ThreadRole::background) {
      const double work_share = p.host_ms.total / steps / step_ms;
      if (work_share < min_share) continue;
      const std::string note = fmt::format(
          "background phase: its {:.1f}% of step-equivalent work is overlapped with the step{}; "
          "making it faster does not shorten the step unless the step starts waiting for it",
          100 * work_share,
          p.overlap_with_steps ? fmt::format(" ({:.0f}% overlap)", 100 * *p.overlap_with_steps) : "");
      for (double k : kSpeedups) out.push_back(project(p.name, 0.0, k, step_ms, note));
      continue;
    }
    if (p.share_of_step < min_share) continue;
    std::string note;
    if (p.thread_role == ThreadRole::outside_step)
      note = "runs between steps on the step thread";
    if (p.device_ms && p.device_ms->count > 0 && p.device_ms->mean > 0)
      note = fmt::format(
          "host time {:.2f} ms, device time {:.2f} ms: projected on the time the step thread spent "
          "in the phase; a faster kernel helps only where the step waits for the GPU",
          p.self_ms.mean, p.device_ms->mean);
    for (double k : kSpeedups) out.push_back(project(p.name, p.share_of_step, k, step_ms, note));
  }

  const detail::StepShares s = detail::step_shares(facts);
  const std::pair<const char*, double> kinds[] = {
      {"kind:input", s.input},       {"kind:compute", s.compute},
      {"kind:memory", s.memory},     {"kind:communication", s.communication},
      {"kind:other", s.other},       {"unattributed", s.unattributed}};
  for (const auto& [name, share] : kinds) {
    if (share < min_share) continue;
    const std::string note =
        std::string(name) == "unattributed"
            ? "time in the step outside every phase (framework overhead, synchronisation)"
            : "all step-thread phases of this kind together";
    for (double k : kSpeedups) out.push_back(project(name, share, k, step_ms, note));
  }

  // What feeds the step bounds every projection but those of the feed itself.
  const double loader_ms = loader_ms_per_batch(facts);
  if (loader_ms > 0)
    for (WhatIf& w : out)
      if (w.share > 0 && !is_input_target(w.target, facts)) bound_by_loader(w, loader_ms);
  // A synchronous job goes at its slowest rank's pace.
  if (facts.ranks)
    for (WhatIf& w : out) bound_by_ranks(w, *facts.ranks);

  // Largest possible gain first; stable so phases precede kinds on ties.
  std::stable_sort(out.begin(), out.end(), [](const WhatIf& a, const WhatIf& b) {
    return a.step_change_pct < b.step_change_pct;
  });
  return out;
}

}  // namespace v1
}  // namespace stepscope
