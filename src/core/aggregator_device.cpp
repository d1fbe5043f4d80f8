// The device-true accounting (docs/gpu.md, "Device-true accounting"): the
// device times the CUDA backend resolves, and the report's step statistics,
// breakdown, shares, series and slowest steps on the device's clock.
#include "core/aggregator.hpp"

#include <algorithm>

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {
constexpr double kNsToMs = 1e-6;
// The device paces the step where the host waits for it at least this share
// of its step: the analysis' kThresholds.host_wait_paced (ClockFacts), which
// core cannot include; the two must agree.
constexpr double kHostWaitPaced = 0.10;

// Device time by kind (totals over n steps) in ms per step, scaled down
// together to fit `room` where they overrun it; `sum` gets their total.
PerKind<double> fit_parts(const std::array<std::uint64_t, kKindCount>& ns, double n, double room, double& sum) {
  double parts = 0;
  for (const std::uint64_t x : ns) parts += static_cast<double>(x) * kNsToMs / n;
  const double scale = parts > room && parts > 0 ? room / parts : 1.0;
  PerKind<double> out;
  for (PhaseKind k : kPhaseKinds) out[k] = static_cast<double>(ns[detail::kind_index(k)]) * kNsToMs / n * scale;
  sum = parts * scale;
  return out;
}
}  // namespace

void Aggregator::add_device_time(const PhaseSite* site, bool in_step, std::uint64_t step, std::uint64_t device_ns,
                                 std::uint8_t depth) {
  if (is_warmup(step)) return;
  if (site->is_step) {  // the device's step boundaries: outermost steps only
    if (depth < step_device_depth_) {
      step_device_ = DurationStats{};
      device_slow_steps_.clear();
      device_slow_floor_ns_ = 0;
      step_device_depth_ = depth;
    }
    if (depth == step_device_depth_) add_device_step(step, device_ns, depth);
    return;
  }
  const std::uint32_t id = phase_id(site);
  if (id >= device_.size()) device_.resize(phase_info_.size());
  device_[id][in_step ? 0 : 1].add(device_ns);
  if (!in_step || depth >= kDeviceDepths) return;
  const std::size_t kind = detail::kind_index(site->kind);
  device_kind_ns_[depth][kind] += device_ns;
  DeviceStepParts& parts = device_parts_[step % kDeviceStepsJoined];
  if (parts.step != step) parts = DeviceStepParts{step, {}};
  parts.kind_ns[depth][kind] += device_ns;
}

// One outermost step's device time, with its phases' (device_parts_): into
// the step statistics, its series point and the device's slowest steps.
void Aggregator::add_device_step(std::uint64_t step, std::uint64_t device_ns, std::uint8_t depth) {
  step_device_.add(device_ns);
  std::array<std::uint64_t, kKindCount> kinds{};
  const DeviceStepParts& parts = device_parts_[step % kDeviceStepsJoined];
  if (parts.step == step && depth + 1u < kDeviceDepths) kinds = parts.kind_ns[depth + 1u];
  StepPoint& point = series_point_of(step);
  ++point.device_n;
  point.device_ns += device_ns;
  std::uint64_t parts_ns = 0;
  for (int k = 0; k < kKindCount; ++k) {
    point.device_kind_ns[k] += kinds[k];
    parts_ns += kinds[k];
  }
  if (device_ns > device_slow_floor_ns_)
    keep_slowest(device_slow_steps_, device_slow_floor_ns_,
                 SlowStepEntry{step, device_ns, device_ns - std::min(device_ns, parts_ns), 0, kinds});
}

// The series point that holds (or will hold) a step: device times resolve
// after the host recorded the step, often after its point closed.
Aggregator::StepPoint& Aggregator::series_point_of(std::uint64_t step) {
  if (series_.empty() || step > series_.back().last_step) return open_point_;
  const auto after = std::upper_bound(series_.begin(), series_.end(), step,
                                      [](std::uint64_t s, const StepPoint& p) { return s < p.first_step; });
  return after == series_.begin() ? series_.front() : *(after - 1);
}

// The device-true accounting (docs/gpu.md): when the device timed (nearly)
// every measured step, the step is paced by the device's step boundaries and
// its parts are the device time of the step's outermost phases. A phase's
// device time runs from when the device reached its start to when its work
// ended, so it holds the GPU idle the phase caused (an input wait, launch
// gaps, a synchronous copy) and none of the time the host spent blocked there
// while the device worked off earlier phases' backlog. The period is the
// device's step where the host waits for it, else the larger of the device's
// step and the host's (a host-bound loop leaves the device idle between
// steps); the host-clocked figures stay beside them.
void Aggregator::fill_device_clock(Report& report) const {
  StepStats& s = report.steps;
  const std::uint64_t timed = step_device_.moments.count();
  if (s.count == 0 || timed == 0 || timed * 10 < s.count * 9) return;
  const Distribution device = step_device_.to_distribution_ms();
  const StepBreakdown host = s.breakdown;
  // The host's time waiting for the device per step: step phases' host self
  // time beyond their device time (input phases' is their own work; the
  // analysis' ClockFacts::host_wait_ms is the same sum). Where it is a tenth
  // of the host's step the device paces it, and the host's mean (its measured
  // steps start while the queue fills, a few device steps earlier) says
  // nothing of the period.
  const double measured = static_cast<double>(s.count);
  double host_wait = 0;
  for (const PhaseSummary& p : report.phases)
    if (p.thread_role == ThreadRole::step && p.kind != PhaseKind::input && p.device_ms)
      host_wait += std::max(0.0, (p.self_ms.mean - p.device_ms->mean) * static_cast<double>(p.count) / measured);
  const bool device_paced = host_wait >= kHostWaitPaced * host.wall_ms;
  StepBreakdown& b = s.breakdown;
  b = StepBreakdown{};
  b.wall_ms = device_paced ? device.mean : std::max(device.mean, host.wall_ms);
  // The host's time between steps shows only where the device did not hide it.
  const double gap = host.between_steps_ms + host.between_steps_input_ms;
  const double between = std::clamp(b.wall_ms - device.mean, 0.0, gap);
  b.between_steps_input_ms = gap > 0 ? between * host.between_steps_input_ms / gap : 0;
  b.between_steps_ms = between - b.between_steps_input_ms;
  // The parts: the device time of the phases one level inside the steps
  // (none where the steps sit at the deepest level kept).
  const std::size_t depth = step_device_depth_ + 1u;
  const std::array<std::uint64_t, kKindCount> none{};
  const double room = b.wall_ms - between;
  double parts = 0;
  b.kind_ms = fit_parts(depth < kDeviceDepths ? device_kind_ns_[depth] : none, static_cast<double>(timed), room, parts);
  b.kind_ms[PhaseKind::input] += b.between_steps_input_ms;
  b.unattributed_ms = std::max(0.0, room - parts);
  s.host_wall_ms = s.wall_ms;
  s.host_breakdown = host;
  s.wall_ms = device;
  s.histogram = step_device_.histogram.to_data();
  s.clock = "device";
  for (PhaseSummary& p : report.phases) {
    if (p.thread_role != ThreadRole::step || !p.device_ms || p.device_ms->count == 0) continue;
    p.host_share_of_step = p.share_of_step;
    p.share_of_step = p.device_ms->mean * static_cast<double>(p.count) / measured / b.wall_ms;
  }
  fill_device_series(report, device_paced);
}

// The per-step series on the device-true clock, each point paced as the
// breakdown is (fill_device_clock) from the device times of its steps; a
// point none of whose steps the device timed keeps the host's figures. On a
// device-paced loop the slowest steps are the device's too (the host's are
// where it blocked, smeared over the queue's depth); on a host-paced one the
// host's slow steps are the loop's.
void Aggregator::fill_device_series(Report& report, bool device_paced) const {
  StepSeries& series = report.steps.series;
  std::size_t at = 0;
  auto device_point = [&](const StepPoint& p) {
    if (p.n == 0) return;
    const std::size_t i = at++;
    if (p.device_n == 0 || i >= series.wall_ms.size()) return;
    const double n = static_cast<double>(p.device_n);
    const double device = static_cast<double>(p.device_ns) * kNsToMs / n;
    const double wall = device_paced ? device : std::max(device, series.wall_ms[i]);
    const double between = std::clamp(wall - device, 0.0, series.between_steps_ms[i]);
    double parts = 0;
    const PerKind<double> kinds = fit_parts(p.device_kind_ns, n, wall - between, parts);
    for (PhaseKind k : kPhaseKinds) series.kind_ms[k][i] = kinds[k];
    series.wall_ms[i] = wall;
    series.between_steps_ms[i] = between;
    series.unattributed_ms[i] = std::max(0.0, wall - between - parts);
  };
  for (const auto& p : series_) device_point(p);
  device_point(open_point_);
  if (device_paced && !device_slow_steps_.empty()) report.steps.slowest = slowest_of(device_slow_steps_);
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
