// src/analysis/what_if.cpp — projections: "if X were k× faster (or free),
// the step would change by Y%". Makes the local-optimisation trap visible: a
// part at 5% of the step made 2× faster saves 2.5% of the step, not 50%.
//
// One model, the step as a pipeline, so that projections cannot contradict
// each other (a part never promises more than its whole: a phase's projection
// is never below its kind's; its share is its kind's settled share at most).
//
// Host-clocked runs (CPU loops): Amdahl on the settled accounting,
//
//   projected = step − part · (1 − 1/k)          (k = 0: the part is free)
//
// Device-clocked runs (StepStats::clock "device"): the host issues work and
// the device executes it side by side, so a step is bounded by the slower of
// the two, plus the waits neither accounts for:
//
//   step = max(host issue work, device time) + exposed
//   host issue work = host step − the host's waits for the device (ClockFacts)
//
// A change moves X's device time on the device side and X's host cost on the
// host side; the projection is the new maximum. Faster kernels (a compute,
// memory or communication part k× faster) leave the host's launch cost as it
// is: a launch-bound loop does not get faster; only removing the part ("free")
// takes its launches away too. A host part (input, other, time in no phase,
// CPU wait, page faults) k× faster saves its host time, and the device idle it
// caused shrinks by as much. A launch-bound loop's own lever is the host:
// "host:launch" removes the device's idle while the host launches (what CUDA
// graphs, fusion or torch.compile save), kernels per step × launch cost.
// A projection the data cannot support (a phase with device time on only some
// occurrences; "host:launch" without CUPTI's timeline) says so in its note and
// projects no change.
//
// A background loader (input phases on threads that run no steps) is a stage
// of the pipeline too: it produces one batch per step at its measured rate
// (per batch, each of its phases' self time, times occurrences per step, over
// the threads that ran it), so
//
//   step = max(own work, loader ms per batch) + slack,   own = step − input wait
//
// Making the loader (or the wait for it) faster moves the loader's side; any
// other change is bounded below by the loader, and the note says which bound
// applies.
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
#include <optional>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace {

using detail::kThresholds;

constexpr double kSpeedups[] = {2.0, 0.0};

// The step as a pipeline (see the top of the file).
struct Pipeline {
  double wall = 0;       // the step now: the settled breakdown's wall
  bool device = false;   // device-clocked: a host side and a device side
  double host = 0;       // device-clocked: the host's issue work per step
  double device_ms = 0;  // device-clocked: the device's step
  double exposed = 0;    // device-clocked: wall - max(host, device_ms)
  double loader = 0;     // background loader ms per batch; 0: none
  double own = 0;        // the step's own work: wall - its input wait
  StepBreakdown settled;
  // The loader and the step on the same full cores (see SharedCores): the
  // pace is set by their CPU work together, and the step's CPU wait is the
  // loader's doing.
  detail::SharedCores shared;
  double slack = 0;  // wall - the modelled pace: what neither side accounts for

  // The step's time per batch with the step's own work less `own_saved` ms
  // (measured, its CPU wait included) and the loader's work scaled by
  // `loader_left`: max(own work, loader ms per batch) + slack, or on shared
  // cores their CPU work together (SharedCores).
  double pace(double own_saved, double loader_left) const {
    if (!shared.active) return std::max(own - own_saved, loader * loader_left) + slack;
    const double work = std::max(0.0, shared.step_work_ms - own_saved * shared.step_work_ms / std::max(own, 1e-9));
    const double loader_cpu = shared.loader_cpu_ms * loader_left;
    return std::max({work, loader_cpu / shared.loader_threads, (work + loader_cpu) / shared.cores}) + slack;
  }
};

Pipeline pipeline(const Report& facts) {
  Pipeline pl;
  pl.settled = settled_breakdown(facts);
  pl.wall = pl.settled.wall_ms > 0 ? pl.settled.wall_ms : facts.steps.wall_ms.mean;
  const detail::ClockFacts clock = detail::clock_facts(facts);
  if (clock.device && pl.wall > 0) {
    pl.device = true;
    pl.host = std::max(0.0, clock.host_wall_ms - clock.host_wait_ms);
    pl.device_ms = facts.steps.wall_ms.mean;
    pl.exposed = std::max(0.0, pl.wall - std::max(pl.host, pl.device_ms));
  }
  for (const PhaseSummary& p : facts.phases) pl.loader += detail::loader_phase_ms(p, facts);
  pl.own = std::max(0.0, pl.wall - pl.settled.kind_ms[PhaseKind::input]);
  if (!pl.device) pl.shared = detail::shared_cores(facts, pl.settled);
  // Worker processes with no phases here: their pace with cores of their own.
  if (pl.shared.active && pl.loader <= 0) pl.loader = pl.shared.loader_cpu_ms / pl.shared.loader_threads;
  pl.slack = std::max(0.0, pl.wall - pl.pace(0, 1));
  return pl;
}

// What a target costs per step on each side of the pipeline.
struct Part {
  std::string target;
  double share = 0;          // of the step: what the summary shows for it
  double host = 0;           // host cost, ms per step
  double device = 0;         // device time, ms per step (device-clocked runs)
  bool device_work = false;  // kernels / copies / collectives: k× faster leaves the launches
  bool feed = false;         // the step's wait for a background loader that sets the pace
  std::string note;
};

bool is_device_kind(PhaseKind k) {
  return k == PhaseKind::compute || k == PhaseKind::memory || k == PhaseKind::communication;
}

// A phase's host cost on a device-clocked run: its host time, less what it
// spent waiting for the device (input phases: the host's own work).
double host_cost(const PhaseSummary& p, const Report& facts) {
  const double host = detail::phase_host_ms_per_step(p, facts);
  if (!p.device_ms || p.kind == PhaseKind::input) return host;
  return std::min(host, detail::phase_device_ms_per_step(p, facts));
}

// What a host-clocked part measured per step, its CPU wait and faults
// included: a thread with less to do also waits less for a CPU (on a busy
// machine a phase made 2x faster took 6.5% off the step where its carved
// share promised 1.7%), so a phase's or kind's projection keeps them, and
// `cpu_wait` / `page_faults` are levers of their own beside them.
StepBreakdown measured_breakdown(const Report& facts, const Pipeline& pl) {
  if (facts.steps.breakdown.wall_ms > 0) return facts.steps.breakdown;
  const detail::StepShares sh = detail::step_shares(facts);  // a report without a breakdown: from its phases
  StepBreakdown b;
  b.wall_ms = pl.wall;
  for (std::size_t k = 0; k < kPhaseKindCount; ++k) b.kind_ms.values[k] = sh.kind.values[k] * pl.wall;
  b.unattributed_ms = sh.unattributed * pl.wall;
  return b;
}

Part phase_part(const Report& facts, const Pipeline& pl, const PhaseSummary& p) {
  Part part;
  part.target = p.name;
  part.share = detail::clamp01(p.share_of_step);
  part.feed = pl.loader > 0 && (pl.loader >= pl.own || pl.shared.active) && p.kind == PhaseKind::input;
  if (p.thread_role == ThreadRole::outside_step) part.note = "runs between steps on the step thread";
  if (!pl.device) {
    part.host = part.share * pl.wall;
    if (p.device_ms && p.device_ms->count > 0 && p.device_ms->mean > 0)
      part.note = fmt::format(
          "host time {:.2f} ms, device time {:.2f} ms: projected on the time the step thread spent "
          "in the phase; a faster kernel helps only where the step waits for the GPU",
          p.self_ms.mean, p.device_ms->mean);
    return part;
  }
  part.host = host_cost(p, facts);
  part.device = detail::phase_device_ms_per_step(p, facts);
  part.device_work = is_device_kind(p.kind);
  if (p.device_ms && p.device_ms->count * 10 < p.count * 9)
    part.note =
        fmt::format("not projected: only {} of its {} occurrences have device time", p.device_ms->count, p.count);
  else
    part.note = fmt::format(
        "device {:.2f} ms, host {:.2f} ms per step: the step is max(host issue {:.2f}, device "
        "{:.2f}) ms{}",
        part.device, detail::phase_host_ms_per_step(p, facts), pl.host, pl.device_ms,
        pl.exposed > 0 ? fmt::format(" + {:.2f} ms exposed", pl.exposed) : "");
  return part;
}

std::vector<Part> kind_parts(const Report& facts, const Pipeline& pl) {
  std::vector<Part> parts;
  const StepBreakdown& b = pl.settled;
  const StepBreakdown host = facts.steps.host_breakdown.value_or(facts.steps.breakdown);
  const StepBreakdown measured = measured_breakdown(facts, pl);
  for (PhaseKind k : kPhaseKinds) {
    Part part;
    part.target = std::string("kind:") + phase_kind_name(k);
    part.share = detail::clamp01((pl.device ? b.kind_ms[k] : measured.kind_ms[k]) / pl.wall);
    part.feed = pl.loader > 0 && (pl.loader >= pl.own || pl.shared.active) && k == PhaseKind::input;
    part.note = "all step-thread phases of this kind together";
    if (pl.device) {
      part.device = b.kind_ms[k];
      part.device_work = is_device_kind(k);
      for (const PhaseSummary& p : facts.phases)
        if (p.thread_role == ThreadRole::step && p.kind == k) part.host += host_cost(p, facts);
      part.host = std::min(part.host, host.kind_ms[k]);
    } else {
      part.host = measured.kind_ms[k];
      if (b.cpu_wait_ms > 0) part.note += " (their CPU wait included: a thread with less to do waits less)";
    }
    parts.push_back(part);
  }
  // Host parts: their device side is the GPU idle they cause (device-clocked).
  auto host_part = [&](const char* target, double ms, double device_ms, const char* note) {
    Part part;
    part.target = target;
    part.share = detail::clamp01(ms / pl.wall);
    part.host = ms;
    part.device = pl.device ? device_ms : 0;
    part.note = note;
    parts.push_back(part);
  };
  host_part("unattributed", pl.device ? host.unattributed_ms : measured.unattributed_ms, b.unattributed_ms,
            "time in the step outside every phase (framework overhead, synchronisation)");
  if (pl.device) parts.back().share = detail::clamp01(b.unattributed_ms / pl.wall);
  host_part("cpu_wait", b.cpu_wait_ms, b.cpu_wait_ms,
            "the step threads runnable but not running: fewer threads or processes competing for the cores");
  host_part("page_faults", b.page_fault_ms, b.page_fault_ms,
            "kernel time faulting fresh pages: memory returned to the OS and touched again every step");
  return parts;
}

// A launch-bound loop's lever: the device's idle while the host launches,
// from CUPTI's timeline (with the default windows, the steps inside them).
// A device-clocked run without it (CUPTI off or held by another client, or
// no window held a whole step) says so rather than nothing.
std::optional<Part> launch_part(const Report& facts, const Pipeline& pl) {
  if (!pl.device) return std::nullopt;
  const detail::DeviceFacts d = detail::device_facts(facts);
  Part part;
  part.target = "host:launch";
  if (!d.present) {
    part.note =
        "not projected: the GPU's idle while the host launches comes from CUPTI's kernel records, and this run has "
        "none (STEPSCOPE_CUPTI=0, another CUPTI client, or no CUPTI window held a whole measured step)";
    return part;
  }
  if (d.idle_launch < kThresholds.what_if_min_share) return std::nullopt;
  part.share = d.idle_launch;
  part.host = part.device = d.idle_launch * pl.wall;
  const double kernels = d.kernels_per_step.value_or(0);
  part.note = fmt::format(
      "the GPU idles {:.2f} ms per step while the host launches{}: what CUDA graphs, fusing kernels or "
      "torch.compile can save (the host's launch rate bounds this loop, not the kernels)",
      part.host,
      kernels > 0
          ? fmt::format(" ({:.0f} kernels per step, {:.1f} us of idle each)", kernels, 1000.0 * part.host / kernels)
          : "");
  return part;
}

WhatIf project(const Pipeline& pl, const Part& part, double speedup) {
  WhatIf w;
  w.target = part.target;
  w.share = part.share;
  w.speedup = speedup;
  w.step_ms_now = pl.wall;
  w.note = part.note;
  const double saved = speedup == 0 ? 1.0 : 1.0 - 1.0 / speedup;
  double step = pl.wall - saved * part.host;
  if (w.note.rfind("not projected", 0) == 0) {
    step = pl.wall;
  } else if (pl.device) {
    double host = pl.host, device = pl.device_ms;
    if (part.device_work) {
      device -= saved * part.device;
      if (speedup == 0) host -= part.host;
    } else {
      host -= saved * part.host;
      device -= std::min(part.device, saved * std::max(part.host, part.device));
    }
    step = std::max({host, device, 0.0}) + pl.exposed;
  }
  if (part.feed) step = pl.pace(0, 1.0 - saved);  // the wait for a loader: a faster loader shortens it
  w.step_ms_projected = std::min(step, pl.wall);
  w.step_change_pct = pl.wall > 0 ? 100.0 * (w.step_ms_projected - pl.wall) / pl.wall : 0.0;
  return w;
}

// A background phase: beside the step, it shortens the step only where the
// step waits for the loader it is part of (29 item 3: a loader at 40 ms per
// batch made 2x faster gave 20 ms steps).
void background_what_if(const Report& facts, const Pipeline& pl, const PhaseSummary& p, std::vector<WhatIf>& out) {
  const double steps = static_cast<double>(std::max<std::uint64_t>(facts.steps.count, 1));
  const double work_share = p.host_ms.total / steps / pl.wall;
  if (work_share < kThresholds.what_if_min_share) return;
  const double mine = detail::loader_phase_ms(p, facts);
  for (double k : kSpeedups) {
    const double saved = k == 0 ? 1.0 : 1.0 - 1.0 / k;
    Part part;
    part.target = p.name;
    WhatIf w = project(pl, part, k);
    const double step = mine > 0 ? pl.pace(0, 1.0 - saved * mine / pl.loader) : pl.wall;
    w.step_ms_projected = std::min(step, pl.wall);
    w.step_change_pct = 100.0 * (w.step_ms_projected - pl.wall) / pl.wall;
    if (w.step_ms_projected < pl.wall)
      w.share = detail::clamp01((pl.wall - pl.pace(0, 1.0 - mine / pl.loader)) / pl.wall);
    if (pl.shared.active && w.step_ms_projected < pl.wall) {
      w.note = fmt::format(
          "background loader on the step's cores: the {} use {:.2f} ms of CPU per batch beside the step's "
          "{:.2f} ms, on {} cores they fill, so their work together sets the pace (the step's CPU wait is the "
          "loader's doing); {} {:.2f} ms of loader CPU per batch",
          pl.shared.loader, pl.shared.loader_cpu_ms, pl.shared.step_work_ms, pl.shared.cores,
          k == 0 ? "without this phase" : "with this phase 2x faster",
          pl.shared.loader_cpu_ms * (1.0 - saved * mine / pl.loader));
    } else if (w.step_ms_projected < pl.wall) {
      w.note = fmt::format(
          "background loader: it needs {:.2f} ms per batch and the step's own work {:.2f} ms, so the loader sets "
          "the pace; {} {:.2f} ms per batch",
          pl.loader, pl.own, k == 0 ? "without this phase" : "with this phase 2x faster", pl.loader - saved * mine);
    } else {
      w.note = fmt::format(
          "background phase: its {:.1f}% of step-equivalent work is overlapped with the step{}; "
          "making it faster does not shorten the step unless the step starts waiting for it",
          100 * work_share, p.overlap_with_steps ? fmt::format(" ({:.0f}% overlap)", 100 * *p.overlap_with_steps) : "");
    }
    out.push_back(w);
  }
}

// A part never promises more than its whole: a phase's projection is never
// below its kind's for the same change (issue 32: "backward free -90%" beside
// "kind:compute free -39%").
void no_part_beyond_its_whole(const Report& facts, std::vector<WhatIf>& out) {
  for (WhatIf& w : out) {
    const PhaseSummary* phase = nullptr;
    for (const PhaseSummary& p : facts.phases)
      if (p.name == w.target && p.thread_role != ThreadRole::background) phase = &p;
    if (phase == nullptr) continue;
    const std::string kind = std::string("kind:") + phase_kind_name(phase->kind);
    for (const WhatIf& whole : out) {
      if (whole.target != kind || whole.speedup != w.speedup || whole.step_ms_projected <= w.step_ms_projected)
        continue;
      w.step_ms_projected = whole.step_ms_projected;
      w.step_change_pct = whole.step_change_pct;
      w.share = std::min(w.share, whole.share);
    }
  }
}

bool is_input_target(const std::string& target, const Report& facts) {
  if (target == "kind:input") return true;
  for (const PhaseSummary& p : facts.phases)
    if (p.name == target && p.kind == PhaseKind::input) return true;  // the step's wait, or the loader itself
  return false;
}

// Applies the loader bound to a projection and says which bound holds.
void bound_by_loader(WhatIf& w, const Pipeline& pl) {
  const std::string change = w.speedup == 0 ? w.target + " free" : fmt::format("{} {:g}x faster", w.target, w.speedup);
  std::string bound;
  if (pl.shared.active) {
    // On cores the loader shares, the step's work made smaller also leaves
    // the loader more CPU; its CPU wait is no work of its own.
    const double saved = w.speedup == 0 ? 1.0 : 1.0 - 1.0 / w.speedup;
    const double pace = pl.pace(w.target == "cpu_wait" ? 0.0 : saved * w.share * pl.wall, 1.0);
    if (w.step_ms_projected < pace) {
      w.step_ms_projected = std::min(pace, w.step_ms_now);
      w.step_change_pct = w.step_ms_now > 0 ? 100.0 * (w.step_ms_projected - w.step_ms_now) / w.step_ms_now : 0.0;
    }
    bound = fmt::format(
        "{}: {:.2f} -> {:.2f} ms: the step and its loader share {} full cores, so their CPU work together sets the "
        "pace ({} {:.2f} ms of CPU per batch, the step {:.2f} ms){}",
        change, w.step_ms_now, w.step_ms_projected, pl.shared.cores, pl.shared.loader, pl.shared.loader_cpu_ms,
        pl.shared.step_work_ms, w.target == "cpu_wait" ? ": the wait goes only with less work or more cores" : "");
    w.note = w.note.empty() ? bound : bound + "; " + w.note;
    return;
  }
  const double loader_ms = pl.loader;
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
  const std::string change = w.speedup == 0 ? w.target + " free" : fmt::format("{} {:g}x faster", w.target, w.speedup);
  std::string note;
  if (w.step_ms_projected < bound) {
    w.step_ms_projected = bound;
    w.step_change_pct = w.step_ms_now > 0 ? 100.0 * (bound - w.step_ms_now) / w.step_ms_now : 0.0;
    note = fmt::format(
        "{} on every rank: {:.2f} -> {:.2f} ms, then bound by the slowest rank: rank {} needs "
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
  const Pipeline pl = pipeline(facts);
  if (pl.wall <= 0) return out;
  const double min_share = kThresholds.what_if_min_share;

  for (const PhaseSummary& p : facts.phases) {
    if (p.thread_role == ThreadRole::background) {
      background_what_if(facts, pl, p, out);
      continue;
    }
    const Part part = phase_part(facts, pl, p);
    if (part.share < min_share) continue;
    for (double k : kSpeedups) out.push_back(project(pl, part, k));
  }
  for (const Part& part : kind_parts(facts, pl))
    if (part.share >= min_share)
      for (double k : kSpeedups) out.push_back(project(pl, part, k));
  if (const std::optional<Part> launch = launch_part(facts, pl)) out.push_back(project(pl, *launch, 0.0));

  // What feeds the step bounds every projection but those of the feed itself.
  if (pl.loader > 0)
    for (WhatIf& w : out)
      if (w.share > 0 && !is_input_target(w.target, facts) && w.note.rfind("not projected", 0) != 0)
        bound_by_loader(w, pl);
  // A synchronous job goes at its slowest rank's pace.
  if (facts.ranks)
    for (WhatIf& w : out) bound_by_ranks(w, *facts.ranks);
  no_part_beyond_its_whole(facts, out);

  // Largest possible gain first; stable so phases precede kinds on ties.
  std::stable_sort(out.begin(), out.end(),
                   [](const WhatIf& a, const WhatIf& b) { return a.step_change_pct < b.step_change_pct; });
  return out;
}

}  // namespace v1
}  // namespace stepscope
