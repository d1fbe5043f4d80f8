#include "analysis/facts.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

namespace stepscope::detail {

double clamp01(double v) { return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0; }

double safe_div(double a, double b) {
  if (b == 0 || !std::isfinite(a) || !std::isfinite(b)) return 0;
  return a / b;
}

const char* kind_name(PhaseKind kind) {
  // Local copy of the names so the analyzer does not depend on the report
  // serialisation code being linked.
  switch (kind) {
    case PhaseKind::input: return "input";
    case PhaseKind::compute: return "compute";
    case PhaseKind::memory: return "memory";
    case PhaseKind::communication: return "communication";
    case PhaseKind::other: return "other";
  }
  return "other";
}

double mean_step_ms(const Report& report) {
  if (report.steps.breakdown.wall_ms > 0) return report.steps.breakdown.wall_ms;
  return report.steps.wall_ms.mean;
}

StepShares step_shares(const Report& report) {
  StepShares s;
  const StepBreakdown& b = report.steps.breakdown;
  if (b.wall_ms > 0) {
    s.wall_ms = b.wall_ms;
    s.from_breakdown = true;
    s.input = clamp01(b.input_ms / b.wall_ms);
    s.compute = clamp01(b.compute_ms / b.wall_ms);
    s.memory = clamp01(b.memory_ms / b.wall_ms);
    s.communication = clamp01(b.communication_ms / b.wall_ms);
    s.other = clamp01(b.other_ms / b.wall_ms);
    s.unattributed = clamp01(b.unattributed_ms / b.wall_ms);
    s.between_steps = clamp01(b.between_steps_ms / b.wall_ms);
    return s;
  }
  // No breakdown (e.g. a hand-built or merged report): the phases' own shares
  // of the step, for phases the step waited on.
  s.wall_ms = report.steps.wall_ms.mean;
  double attributed = 0;
  for (const PhaseSummary& p : report.phases) {
    if (p.thread_role != ThreadRole::step) continue;
    const double share = clamp01(p.share_of_step);
    attributed += share;
    switch (p.kind) {
      case PhaseKind::input: s.input += share; break;
      case PhaseKind::compute: s.compute += share; break;
      case PhaseKind::memory: s.memory += share; break;
      case PhaseKind::communication: s.communication += share; break;
      case PhaseKind::other: s.other += share; break;
    }
  }
  s.unattributed = clamp01(1.0 - attributed);
  return s;
}

// The first of `keys` present in the report's device facts.
static std::optional<double> fact(const Report& report, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = report.device.facts.find(key);
    if (it != report.device.facts.end() && std::isfinite(it->second)) return it->second;
  }
  return std::nullopt;
}

DeviceFacts device_facts(const Report& report) {
  DeviceFacts f;
  const auto busy = fact(report, {"device_busy_fraction"});
  const auto idle = fact(report, {"idle_fraction", "device_idle_fraction"});
  if (!busy && !idle) return f;
  f.present = true;
  f.busy = clamp01(busy ? *busy : 1.0 - *idle);
  f.idle = clamp01(idle ? *idle : 1.0 - *busy);
  const auto input = fact(report, {"idle_host_input_fraction"});
  f.has_idle_host_input = input.has_value();
  f.idle_host_input = clamp01(input.value_or(0));
  f.idle_launch = clamp01(
      fact(report, {"idle_launch_bound_fraction", "idle_host_launch_bound_fraction"}).value_or(0));
  f.idle_sync = clamp01(fact(report, {"idle_sync_fraction"}).value_or(0));
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
  if (auto v = fact(report, {"compute_fraction"})) f.compute = clamp01(*v);
  if (auto v = fact(report, {"exposed_comm_fraction", "exposed_communication_fraction"}))
    f.exposed_comm = clamp01(*v);
  if (auto v = fact(report, {"memcpy_fraction"})) f.memcpy = clamp01(*v);
  if (auto v = fact(report, {"pageable_memcpy_fraction"})) f.pageable_memcpy = clamp01(*v);
  if (auto v = fact(report, {"short_kernel_fraction"})) f.short_kernels = clamp01(*v);
  if (auto v = fact(report, {"kernels_per_step"})) f.kernels_per_step = std::max(0.0, *v);
  if (auto v = fact(report, {"launch_delay_p50_us"})) f.launch_delay_p50_us = std::max(0.0, *v);
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

}  // namespace stepscope::detail
