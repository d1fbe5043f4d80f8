// The live progress line: a fact snapshot in, one short line out.
#include "run/live.hpp"
#include <stepscope/analysis.hpp>

#include "text/printable.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace stepscope {
inline namespace v1 {

namespace {

// User-chosen phase names go on a terminal line: a control character (\r,
// \n, ESC) would break the in-place update or inject terminal commands. The
// one escaping helper of the project (text/printable.hpp) makes them visible.
using detail::printable;

}  // namespace

LiveStatus LiveTracker::update(const Report& facts, double elapsed_s) noexcept {
  LiveStatus status;
  try {
    status.elapsed_s = elapsed_s;
    status.steps = facts.steps.count + facts.steps.warmup_excluded;
    status.warmup_steps = facts.steps.warmup_excluded;
    status.dropped_records = facts.dropped_records;
    const std::uint64_t measured = facts.steps.count;
    const double total_ms = facts.steps.wall_ms.total;
    if (measured > 0) status.overall_ms_per_step = total_ms / static_cast<double>(measured);
    status.window_s = std::max(0.0, elapsed_s - previous_elapsed_s_);
    if (measured > previous_measured_)
      status.recent_ms_per_step = (total_ms - previous_total_ms_) / static_cast<double>(measured - previous_measured_);
    previous_measured_ = measured;
    previous_total_ms_ = total_ms;
    previous_elapsed_s_ = elapsed_s;

    for (const auto& p : facts.phases) {
      if (p.thread_role != ThreadRole::step) continue;
      if (p.share_of_step > status.largest_phase_share) {
        status.largest_phase_share = p.share_of_step;
        status.largest_phase = p.name;
      }
    }
    if (measured > 0) {
      const Verdict v = classify(facts);
      status.verdict = v.bottleneck();
      status.severity = v.severity;
      status.confidence = v.confidence;
    }
  } catch (...) {
    status.verdict.reset();
  }
  return status;
}

std::string format_live_line(const LiveStatus& s, std::size_t max_width) {
  try {
    std::string line = fmt::format("stepscope {:.1f}s | step {}", s.elapsed_s, s.steps);
    if (s.overall_ms_per_step < 0) {
      line += s.steps > 0 ? " (warm-up)" : "";
      line += " | waiting for measured steps";
    } else if (s.recent_ms_per_step >= 0) {
      line += fmt::format(" | {:.2f} ms/step (last {:.1f}s)", s.recent_ms_per_step, s.window_s);
    } else {
      // No step finished in the window: say so, a stalled run must not look busy.
      line += fmt::format(" | no step in last {:.1f}s (mean {:.2f} ms/step)", s.window_s, s.overall_ms_per_step);
    }
    if (!s.largest_phase.empty())
      line += fmt::format(" | top: {} {:.0f}%", printable(s.largest_phase), s.largest_phase_share * 100);
    if (s.overall_ms_per_step >= 0) {
      if (!s.verdict)
        line += fmt::format(" | verdict: unknown");
      else
        line += fmt::format(" | verdict: {}{}-bound ({:.2f})", s.severity.empty() ? "" : s.severity + " ",
                            bottleneck_name(*s.verdict), s.confidence);
    }
    if (s.dropped_records > 0) line += fmt::format(" | DROPPED {}", s.dropped_records);
    if (max_width > 0) line = detail::shortened(line, max_width, "");
    return line;
  } catch (...) {
    return "stepscope";
  }
}

}  // namespace v1
}  // namespace stepscope
