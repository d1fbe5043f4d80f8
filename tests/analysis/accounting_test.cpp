// The device-true accounting as the analyzer's readers see it (issue 27
// item 1): on a device-clocked report `diff` compares the device's times.
#include "analysis/report_builder.hpp"

#include <stepscope/analysis.hpp>

#include <catch2/catch.hpp>

using namespace stepscope;
using namespace stepscope::test;

namespace {

// A device-clocked run (steps.clock "device"): the optimizer's host time is
// the host's wait for the device, `optimizer_host_ms`; its device time 0.07 ms.
Report device_run(double optimizer_host_ms, double backward_device_ms) {
  Shares s;
  s.compute = 1.0;
  const double step_ms = backward_device_ms + 3.0;
  Report r = host_report(s, 200, step_ms);
  r.steps.clock = "device";
  r.steps.host_breakdown = r.steps.breakdown;
  PhaseSummary& optimizer =
      add_phase(r, "optimizer", PhaseKind::compute, ThreadRole::step, 0.07 / step_ms, optimizer_host_ms);
  optimizer.device_ms = dist(0.07, 0.001, optimizer.count);
  optimizer.host_share_of_step = optimizer_host_ms / step_ms;
  PhaseSummary& backward =
      add_phase(r, "backward", PhaseKind::compute, ThreadRole::step, backward_device_ms / step_ms, 0.05);
  backward.device_ms = dist(backward_device_ms, 0.01, backward.count);
  backward.host_share_of_step = 0.05 / step_ms;
  return r;
}

const Delta* phase_delta(const Comparison& c, const std::string& name) {
  for (const Delta& d : c.phases)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace

TEST_CASE("accounting: diff compares a device-clocked phase's device time", "[analysis][accounting]") {
  // Where the host waits moved (2.6 -> 0.3 ms in the optimizer), the device's
  // work did not; the backward's kernels got 20% faster.
  const Comparison c = compare_reports(device_run(2.6, 5.4), device_run(0.3, 4.3));
  const Delta* optimizer = phase_delta(c, "optimizer");
  const Delta* backward = phase_delta(c, "backward");
  REQUIRE(optimizer != nullptr);
  REQUIRE(backward != nullptr);
  CHECK(optimizer->base_ms == Approx(0.07));
  CHECK(optimizer->new_ms == Approx(0.07));
  CHECK_FALSE(optimizer->significant);
  CHECK(backward->base_ms == Approx(5.4));
  CHECK(backward->new_ms == Approx(4.3));
  CHECK(backward->significant);
  CHECK(std::string(delta_verdict(*backward)) == "faster");
}
