#include "report/self_cost.hpp"

#include <fmt/format.h>

namespace stepscope {
inline namespace v1 {

std::vector<std::string> self_cost_lines(const Report& r) {
  std::vector<std::string> lines;
  const Overhead& o = r.overhead;
  // The per-scope cost is named when the clock in use makes it dearer than
  // the TSC floor (a VM whose kernel distrusts the TSC): the user should know.
  if (o.scope_ns > 0 && o.tsc_scope_ns > 0 && o.scope_ns > 1.10 * o.tsc_scope_ns && r.run.clock_source != "tsc") {
    const std::string why = r.run.clock_reason.empty() ? "" : ": " + r.run.clock_reason;
    lines.push_back(fmt::format("one scope costs ~{:.0f} ns here, with {}{} (~{:.0f} ns with the TSC)", o.scope_ns,
                                r.run.clock_source, why, o.tsc_scope_ns));
  }
  if (o.measured) {
    lines.push_back(
        fmt::format("device activity (CUPTI) collected {}: {:+.1f}% per collected step, {:+.1f}% on the run (median "
                    "{:.3f} vs {:.3f} "
                    "ms/step over {} collected and {} other steps)",
                    o.device_mode == "windows" ? fmt::format("{} of every {} steps", o.window_steps, o.window_period)
                                               : std::string("on every step"),
                    o.window_cost_pct, o.run_cost_pct, o.instrumented_step_ms, o.uninstrumented_step_ms,
                    o.instrumented_steps, o.uninstrumented_steps));
  } else if (o.device_mode == "windows") {
    lines.push_back(
        fmt::format("device activity (CUPTI) collected {} of every {} steps; its cost is not measured "
                    "(needs 2 steps inside and 2 outside the windows: {} and {})",
                    o.window_steps, o.window_period, o.instrumented_steps, o.uninstrumented_steps));
  } else if (o.device_mode == "always") {
    lines.push_back(
        "device activity (CUPTI) collected on every step (STEPSCOPE_CUPTI_WINDOW=always): its cost is not "
        "measured, there are no uncollected steps to compare with");
  }
  return lines;
}

}  // namespace v1
}  // namespace stepscope
