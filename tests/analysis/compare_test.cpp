// Tests of src/analysis/compare.cpp: deltas with noise and significance,
// verdict changes, config changes ("change one variable at a time").
#include "analysis/report_builder.hpp"
#include "analysis/thresholds.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace stepscope;
using namespace stepscope::test;

namespace {

Report run(double step_mean, double step_sd, std::uint64_t n) {
  Shares s;
  s.input = 0.6;
  s.compute = 0.35;
  s.unattributed = 0.05;
  Report r = host_report(s, n, step_mean);
  r.steps.wall_ms = dist(step_mean, step_sd, n);
  add_phase(r, "data", PhaseKind::input, ThreadRole::step, 0.6, 0.6 * step_mean);
  add_phase(r, "train", PhaseKind::compute, ThreadRole::step, 0.35, 0.35 * step_mean);
  r.run.config = {{"batch_size", "32"}, {"workers", "2"}, {"precision", "fp32"}};
  return r;
}

const Delta* phase(const Comparison& c, const std::string& name) {
  for (const Delta& d : c.phases)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace

TEST_CASE("compare: noise is the combined standard error of the means", "[analysis][compare]") {
  const Report a = run(100, 10, 100);  // se = 1
  const Report b = run(90, 20, 400);   // se = 1
  const Comparison c = compare_reports(a, b);
  CHECK(c.step.base_ms == Approx(100));
  CHECK(c.step.new_ms == Approx(90));
  CHECK(c.step.delta_ms == Approx(-10));
  CHECK(c.step.delta_pct == Approx(-10));
  CHECK(c.step.noise_ms == Approx(std::sqrt(2.0)));
  CHECK(c.step.significant);
}

TEST_CASE("compare: significance needs > 3 noise and > 1%", "[analysis][compare]") {
  // Base: mean 100, sd 10, n 100 -> se 1; candidate identical spread: noise sqrt(2).
  const double noise = std::sqrt(2.0);
  const double sigmas = stepscope::detail::kThresholds.noise_sigmas;
  struct Row {
    const char* name;
    double delta, sd;
    bool significant;
  };
  for (const Row& row : {Row{"just below 3 noise", sigmas * noise * 0.99, 10, false},
                         Row{"just above 3 noise", sigmas * noise * 1.01, 10, true},
                         Row{"above noise but under 1%", 0.9, 0.1, false},
                         Row{"above noise and 1%", 1.1, 0.1, true}}) {
    const Report a = run(100, row.sd, 100);
    const Report b = run(100 + row.delta, row.sd, 100);
    const Comparison c = compare_reports(a, b);
    INFO(row.name << ": delta " << row.delta << " noise " << c.step.noise_ms);
    CHECK(c.step.significant == row.significant);
  }
}

TEST_CASE("compare: per-phase deltas and phases in one run only", "[analysis][compare]") {
  Report a = run(100, 5, 100);
  Report b = run(100, 5, 100);
  b.phases[0].host_ms = dist(30, 3, 100);  // data: 60 -> 30 ms
  add_phase(a, "old_only", PhaseKind::other, ThreadRole::step, 0.01, 1);
  add_phase(b, "new_only", PhaseKind::other, ThreadRole::step, 0.01, 1);
  const Comparison c = compare_reports(a, b);
  const Delta* data = phase(c, "data");
  REQUIRE(data != nullptr);
  CHECK(data->delta_ms == Approx(-30));
  CHECK(data->delta_pct == Approx(-50));
  CHECK(data->significant);
  const Delta* train = phase(c, "train");
  REQUIRE(train != nullptr);
  CHECK_FALSE(train->significant);
  CHECK(c.only_in_base == std::vector<std::string>{"old_only"});
  CHECK(c.only_in_new == std::vector<std::string>{"new_only"});
}

TEST_CASE("compare: one config change is fine, two get a warning", "[analysis][compare]") {
  const Report a = run(100, 5, 100);
  SECTION("one change") {
    Report b = run(80, 5, 100);
    b.run.config["workers"] = "8";
    const Comparison c = compare_reports(a, b);
    CHECK(c.config_changes == std::vector<std::string>{"workers: 2 -> 8"});
    CHECK_FALSE(any_contains(c.warnings, "more than one config key changed"));
  }
  SECTION("two changes") {
    Report b = run(80, 5, 100);
    b.run.config["workers"] = "8";
    b.run.config["batch_size"] = "64";
    const Comparison c = compare_reports(a, b);
    CHECK(c.config_changes.size() == 2);
    CHECK(any_contains(c.config_changes, "batch_size: 32 -> 64"));
    CHECK(any_contains(c.warnings, "more than one config key changed"));
    CHECK(any_contains(c.warnings, "one variable at a time"));
    CHECK(format_comparison(c).find("one variable at a time") != std::string::npos);
  }
  SECTION("added and removed keys count as changes") {
    Report b = run(100, 5, 100);
    b.run.config.erase("precision");
    b.run.config["compile"] = "on";
    const Comparison c = compare_reports(a, b);
    CHECK(any_contains(c.config_changes, "precision: fp32 -> (unset)"));
    CHECK(any_contains(c.config_changes, "compile: (unset) -> on"));
    CHECK(any_contains(c.warnings, "more than one config key changed"));
  }
  SECTION("no change") {
    const Comparison c = compare_reports(a, run(100, 5, 100));
    CHECK(c.config_changes.empty());
    CHECK(c.warnings.empty());
  }
}

TEST_CASE("compare: the verdict before and after", "[analysis][compare]") {
  Report a = run(100, 5, 100);  // input 60%: io
  Report b = run(60, 5, 100);
  b.steps.breakdown.input_ms = 1;
  b.steps.breakdown.compute_ms = 57;
  b.steps.breakdown.unattributed_ms = 2;
  b.steps.breakdown.wall_ms = 60;
  SECTION("reports never analysed are classified on the fly") {
    const Comparison c = compare_reports(a, b);
    CHECK(c.base_verdict == "io");
    CHECK(c.new_verdict == "compute");
    CHECK(c.verdict_changed);
  }
  SECTION("stored verdicts are used") {
    analyze(a);
    analyze(b);
    const Comparison c = compare_reports(a, b);
    CHECK(c.base_verdict == a.bottleneck.category);
    CHECK(c.verdict_changed);
    const std::string text = format_comparison(c);
    CHECK(text.find("bottleneck: io -> compute") != std::string::npos);
    CHECK(text.find("step") != std::string::npos);
    CHECK(text.find("faster") != std::string::npos);
  }
}

TEST_CASE("compare: too few steps makes the noise unreliable", "[analysis][compare]") {
  const Comparison c = compare_reports(run(100, 5, 5), run(90, 5, 100));
  CHECK(any_contains(c.warnings, "noise estimate is unreliable"));
}
