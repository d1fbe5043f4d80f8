// The summary's "stepscope itself" lines about the run's own cost
// (src/report/self_cost.cpp): the per-scope cost when the clock makes it
// dearer than the TSC, and what collecting device activity cost.
#include <stepscope/report.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace stepscope;

namespace {
bool summary_has(const Report& r, const std::string& text) {
  return format_summary(r).find(text) != std::string::npos;
}
}  // namespace

TEST_CASE("the summary names the per-scope cost when the clock is dearer than the TSC", "[report]") {
  Report r;
  r.run.clock_source = "clock_monotonic";
  r.run.clock_reason = "the kernel marked the TSC unstable (boot parameter tsc=unstable)";
  r.overhead.scope_ns = 52;
  r.overhead.tsc_scope_ns = 22;
  CHECK(summary_has(r,
                    "stepscope itself: one scope costs ~52 ns here, with clock_monotonic: the kernel marked the TSC "
                    "unstable (boot parameter tsc=unstable) (~22 ns with the TSC)"));
  r.overhead.scope_ns = 23;  // within 10% of the TSC floor: nothing worth saying
  CHECK_FALSE(summary_has(r, "one scope costs"));
  r.overhead.scope_ns = 52;
  r.run.clock_source = "tsc";
  CHECK_FALSE(summary_has(r, "one scope costs"));
}

TEST_CASE("the summary says what collecting device activity cost the run", "[report]") {
  Report r;
  Overhead& o = r.overhead;
  o.device_mode = "windows";
  o.window_steps = 5;
  o.window_period = 200;
  o.instrumented_steps = 10;
  o.uninstrumented_steps = 235;
  o.instrumented_step_ms = 11.2;
  o.uninstrumented_step_ms = 7.5;
  o.measured = true;
  o.window_cost_pct = 49.3;
  o.run_cost_pct = 2.0;
  CHECK(summary_has(r,
                    "stepscope itself: device activity (CUPTI) collected 5 of every 200 steps: +49.3% per collected "
                    "step, +2.0% on the run (median 11.200 vs 7.500 ms/step over 10 collected and 235 other steps)"));
  o.measured = false;
  CHECK(summary_has(r, "its cost is not measured (needs 2 steps inside and 2 outside the windows: 10 and 235)"));
  o.device_mode = "always";
  CHECK(summary_has(r, "collected on every step (STEPSCOPE_CUPTI_WINDOW=always)"));
  o.device_mode = "off";
  CHECK_FALSE(summary_has(r, "device activity (CUPTI)"));
}

TEST_CASE("the summary names device timing only where a GPU's timing failed", "[report]") {
  Report r;
  r.device.reason = "why";
  // No GPU here, or device timing not wanted: the report says so, the summary does not.
  for (const char* quiet : {"no_driver", "no_device", "no_cuda_build", "disabled", "ok", "unknown"}) {
    r.device.status = quiet;
    INFO(quiet);
    CHECK_FALSE(summary_has(r, "device timing"));
  }
  for (const char* failed : {"driver_too_old", "cuda_error", "device_lost", "cupti_unavailable"}) {
    r.device.status = failed;
    INFO(failed);
    CHECK(summary_has(r, std::string("  device timing: ") + failed + " (why)"));
  }
}
