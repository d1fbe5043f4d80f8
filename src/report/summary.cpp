// The human summary printed at exit: breakdown, phases, verdict, what-if.
#include <stepscope/report.hpp>

#include "report/ending.hpp"
#include "report/self_cost.hpp"
#include "report/site_label.hpp"
#include "text/printable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

namespace stepscope {
inline namespace v1 {

namespace {

std::string bar(double fraction, int width) {
  const int n = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width + 0.5);
  std::string s;
  for (int i = 0; i < n; ++i) s += "#";
  return s;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A host-clocked what-if projects a part with the CPU wait and page faults
// measured in it (a thread with less to do waits less), while its breakdown
// row is net of them: say so where the two differ, else "unattributed free:
// -89%" stands beside an unattributed row of 33%.
std::string carved_included(const WhatIf& x, const StepBreakdown& b) {
  if (b.wall_ms <= 0 || (b.cpu_wait_ms <= 0 && b.page_fault_ms <= 0)) return "";
  double row = -1;
  if (x.target == "unattributed") row = b.unattributed_ms;
  for (PhaseKind k : kPhaseKinds)
    if (x.target == std::string("kind:") + phase_kind_name(k)) row = b.kind_ms[k];
  if (row < 0 || x.share - row / b.wall_ms < 0.01) return "";
  const char* carved = b.cpu_wait_ms > 0 && b.page_fault_ms > 0 ? "the CPU wait and page faults"
                       : b.cpu_wait_ms > 0                      ? "the CPU wait"
                                                                : "the page faults";
  return fmt::format("; {:.0f}% of the step measured there, {} in it included, which the breakdown shows apart",
                     100 * x.share, carved);
}

// One line of the summary, appended to `out`.
struct LineWriter {
  std::string& out;
  void operator()(const std::string& s) const {
    out += detail::printable(s);  // names and messages come from users: no raw control characters
    out += '\n';
  }
};

// The step header: how many steps, their time, the host clock, the steps left out.
void step_lines(const LineWriter& line, const Report& r) {
  const auto& w = r.steps.wall_ms;
  // One step time for the header, the breakdown, the what-ifs and diff: the
  // loop's, the time between steps included (a naive range-for read 7.97
  // ms/step here beside a 41.3 ms breakdown).
  const bool device = r.steps.clock == "device";
  const char* paced = device ? ", paced by the device" : "";
  const double loop_ms = r.steps.breakdown.wall_ms;
  if (loop_ms > 1.005 * w.mean)
    line(
        fmt::format("steps: {} measured, {} warm-up excluded | {:.3f} ms/step with the time between steps (the "
                    "step scopes alone: {:.3f} ms, p50 {:.3f}, p90 {:.3f}, p99 {:.3f}, max {:.3f}){}",
                    r.steps.count, r.steps.warmup_excluded, loop_ms, w.mean, w.p50, w.p90, w.p99, w.max, paced));
  else
    line(fmt::format(
        "steps: {} measured, {} warm-up excluded | {:.3f} ms/step (p50 {:.3f}, p90 {:.3f}, p99 {:.3f}, max {:.3f}){}",
        r.steps.count, r.steps.warmup_excluded, w.mean, w.p50, w.p90, w.p99, w.max, paced));
  if (const auto& h = r.steps.host_wall_ms)
    line(
        fmt::format("  host clock: {:.3f} ms/step (p50 {:.3f}, p90 {:.3f}, p99 {:.3f}): where the host ran ahead "
                    "of the GPU and waited",
                    h->mean, h->p50, h->p90, h->p99));
  for (const std::string& note : detail::steps_left_out_notes(r.steps)) line("  " + note);
}

// The step breakdown (settled accounting `b`), then the steps' coverage of
// the step thread and the gaps between steps() loops.
void breakdown_lines(const LineWriter& line, const Report& r, const StepBreakdown& b) {
  line(r.steps.clock == "device" ? "step breakdown (critical path on the device timeline, mean per step):"
                                 : "step breakdown (critical path, mean per step):");
  auto part_line = [&](const char* name, double ms) {
    const double f = b.wall_ms > 0 ? ms / b.wall_ms : 0;
    line(fmt::format("  {:<14} {:>10.3f} ms {:>6.1f}%  {}", name, ms, f * 100, bar(f, 30)));
  };
  for (PhaseKind k : kPhaseKinds) part_line(phase_kind_name(k), b.kind_ms[k]);
  part_line("unattributed", b.unattributed_ms);
  // Parts carved out of the rows above (which are shown net of them).
  const std::pair<const char*, double> carved[] = {{"cpu wait", b.cpu_wait_ms}, {"page faults", b.page_fault_ms}};
  for (const auto& [name, ms] : carved)
    if (ms > 0) part_line(name, ms);
  // Only when the loop has time outside its steps (see StepBreakdown).
  if (b.between_steps_ms > 0) part_line("between steps", b.between_steps_ms);
  if (r.steps.coverage)
    line(
        fmt::format("steps cover {:.1f}% of the step thread's time from the first step to the last ({:.1f} ms "
                    "between steps, {:.1f} ms of it in input phases, counted as the next step's input)",
                    *r.steps.coverage * 100, r.steps.between_steps_ms, r.steps.between_steps_input_ms));
  if (r.steps.loop_boundaries > 0)
    line(
        fmt::format("  {} gap{} between steps() loops (epoch boundaries: evaluation, checkpointing, logging) "
                    "took {:.1f} ms in all, outside every step: in neither the per-step numbers nor the coverage",
                    r.steps.loop_boundaries, r.steps.loop_boundaries == 1 ? "" : "s", r.steps.between_loops_ms));
}

// One row per phase, with its device time and call sites under it.
void phase_table(const LineWriter& line, const Report& r) {
  if (r.phases.empty()) return;
  line(fmt::format("  {:<20} {:<13} {:<12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>7}", "phase", "kind", "role", "count",
                   "mean ms", "p50", "p99", "self ms", "share"));
  // Rows per role, most expensive first (the report's order): a trace whose
  // ranges carry a step number in their name ("forward_step_17") has
  // thousands of phases, and a table of them all hides the ones that matter.
  constexpr std::size_t kStepRows = 20, kOtherRows = 10;
  std::size_t shown_in_role = 0, hidden = 0;
  double hidden_share = 0, hidden_ms = 0;
  const auto hidden_line = [&](ThreadRole role) {
    if (hidden == 0) return;
    line(role == ThreadRole::step
             ? fmt::format("  ({} more {} phases, {:.1f}% of the step together; the report lists them all)", hidden,
                           to_string(role), hidden_share * 100)
             : fmt::format("  ({} more {} phases, {:.3f} ms of self time together; the report lists them all)", hidden,
                           to_string(role), hidden_ms));
    hidden = 0;
    hidden_share = hidden_ms = 0;
  };
  for (std::size_t i = 0; i < r.phases.size(); ++i) {
    const PhaseSummary& p = r.phases[i];
    if (i > 0 && r.phases[i - 1].thread_role != p.thread_role) {
      hidden_line(r.phases[i - 1].thread_role);
      shown_in_role = 0;
    }
    if (++shown_in_role > (p.thread_role == ThreadRole::step ? kStepRows : kOtherRows)) {
      ++hidden;
      hidden_share += p.share_of_step;
      hidden_ms += p.self_ms.total;
      continue;
    }
    std::string share = p.thread_role == ThreadRole::step ? fmt::format("{:.1f}%", p.share_of_step * 100) : "-";
    if (p.overlap_with_steps) share = fmt::format("ovl {:.0f}%", *p.overlap_with_steps * 100);
    line(fmt::format("  {:<20} {:<13} {:<12} {:>7} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>7}",
                     detail::printable(p.name, 20), to_string(p.kind), to_string(p.thread_role), p.count,
                     p.host_ms.mean, p.host_ms.p50, p.host_ms.p99, p.self_ms.mean, share));
    if (p.device_ms)
      line(fmt::format("  {:<20} device: mean {:.3f} ms, p99 {:.3f} ms{}", "", p.device_ms->mean, p.device_ms->p99,
                       p.host_share_of_step
                           ? fmt::format(" (share on the device; host clock {:.1f}%)", *p.host_share_of_step * 100)
                           : ""));
    for (const auto& site : p.sites)
      line(fmt::format("    at {} — {} × mean {:.3f} ms, p50 {:.3f}, p99 {:.3f}", detail::call_site_label(site),
                       site.host_ms.count, site.host_ms.mean, site.host_ms.p50, site.host_ms.p99));
    if (p.sites_merged > 0)
      line(fmt::format("    ({} more call sites merged into \"(other call sites)\")", p.sites_merged));
  }
  hidden_line(r.phases.back().thread_role);
}

// The verdict, its first supporting evidence and recommendations.
void verdict_lines(const LineWriter& line, const Verdict& v) {
  if (!v.bottleneck()) {
    line(fmt::format("verdict: UNKNOWN (confidence {:.2f}) — {}", v.confidence, v.summary));
  } else {
    line(fmt::format("verdict: {} {}-bound (confidence {:.2f}) — {}", v.severity, upper(v.category), v.confidence,
                     v.summary));
  }
  int shown = 0;
  for (const auto& e : v.evidence) {
    if (!e.supports || shown++ >= 5) continue;
    line(fmt::format("  evidence: {}", e.sentence));
  }
  for (std::size_t i = 0; i < v.recommendations.size() && i < 3; ++i)
    line(fmt::format("  try: {}", v.recommendations[i]));
}

// The first what-if projections (settled accounting `breakdown`).
void what_if_lines(const LineWriter& line, const Report& r, const StepBreakdown& breakdown) {
  int shown = 0;
  for (const auto& x : r.what_if) {
    if (shown++ >= 4) break;
    if (x.note.rfind("not projected", 0) == 0) {
      line(fmt::format("  what if {} were {}: {}", x.target,
                       x.speedup == 0 ? std::string("free") : fmt::format("{:g}x faster", x.speedup), x.note));
      continue;
    }
    line(fmt::format("  what if {} were {}: step {:.3f} -> {:.3f} ms ({:+.1f}%{})", x.target,
                     x.speedup == 0 ? std::string("free") : fmt::format("{:g}x faster", x.speedup), x.step_ms_now,
                     x.step_ms_projected, x.step_change_pct, carved_included(x, breakdown)));
  }
}

// What stepscope itself cost: its collector thread's CPU, then the rest.
void own_cost_lines(const LineWriter& line, const Report& r) {
  if (r.system.collector_cpu_ms > 0 && r.system.wall_s > 0) {
    // A run shorter than a second in ms: a 24 ms run read "over 0.0 s".
    const double wall_s = r.system.run_wall_s > 0 ? r.system.run_wall_s : r.system.wall_s;  // the whole run
    const std::string over = wall_s < 1.0 ? fmt::format("{:.3g} ms", wall_s * 1e3) : fmt::format("{:.1f} s", wall_s);
    const double share_pct = r.system.collector_cpu_ms / (wall_s * 10.0);
    // One thread cannot use more than one core: above 100% the CPU time
    // includes start-up (the device probe) that the wall time does not.
    line(share_pct <= 100
             ? fmt::format("  stepscope itself: {:.1f} ms of CPU on its collector thread ({:.2f}% of one core over {})",
                           r.system.collector_cpu_ms, share_pct, over)
             : fmt::format("  stepscope itself: {:.1f} ms of CPU on its collector thread, start-up included (the run "
                           "lasted {}: too short for a share of a core)",
                           r.system.collector_cpu_ms, over));
  }
  for (const std::string& cost : self_cost_lines(r)) line("  stepscope itself: " + cost);
}

}  // namespace

std::string format_summary(const Report& r) {
  std::string out;
  const LineWriter line{out};
  std::string who = r.run.rank >= 0 ? fmt::format(" rank {}/{}", r.run.rank, r.run.world_size) : "";
  line(fmt::format("== stepscope{} ({}) ==", who, r.run.source));
  // The settled accounting: the same numbers as the verdict sentence and ranking.
  const StepBreakdown& breakdown = r.steps.shown_breakdown();
  for (const std::string& note : detail::run_ending_notes(r)) line(note);
  if (r.steps.count > 0) {
    step_lines(line, r);
    breakdown_lines(line, r, breakdown);
  } else {
    line(fmt::format("steps: none measured ({} warm-up excluded)", r.steps.warmup_excluded));
  }
  phase_table(line, r);
  verdict_lines(line, r.bottleneck);
  what_if_lines(line, r, breakdown);
  for (const auto& f : r.findings) line(fmt::format("  finding [{}] {}", f.severity, f.message));
  if (r.dropped_records > 0)
    line(fmt::format("  DROPPED {} of {} records (ring full): statistics undercount", r.dropped_records,
                     r.total_records));
  own_cost_lines(line, r);
  // A machine without a GPU (or a build or run without device timing) is said
  // in the report only; a GPU whose timing failed is said here too.
  static constexpr std::array<std::string_view, 7> kQuiet = {"",          "ok",        "unknown",      "disabled",
                                                             "no_driver", "no_device", "no_cuda_build"};
  if (std::find(kQuiet.begin(), kQuiet.end(), r.device.status) == kQuiet.end())
    line(fmt::format("  device timing: {} ({})", r.device.status, r.device.reason));
  return out;
}

}  // namespace v1
}  // namespace stepscope
