// Tests of src/analysis/compare.cpp: deltas with noise and significance,
// verdict changes, config changes ("change one variable at a time").
#include "analysis/report_builder.hpp"
#include "analysis/thresholds.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

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

TEST_CASE("compare: significance needs > 3 noise and > the between-run drift floor", "[analysis][compare]") {
  // Base: mean 100, sd 20, n 100 -> se 2; candidate identical spread: noise 2 sqrt(2),
  // so 3 noise (8.5) lies above the relative floor (5% of 100).
  const double noise = 2 * std::sqrt(2.0);
  const double sigmas = stepscope::detail::kThresholds.noise_sigmas;
  const double floor = 100 * stepscope::detail::kThresholds.min_relative_change;
  REQUIRE(sigmas * noise > floor);
  struct Row {
    const char* name;
    double delta, sd;
    bool significant;
  };
  for (const Row& row : {Row{"just below 3 noise", sigmas * noise * 0.99, 20, false},
                         Row{"just above 3 noise", sigmas * noise * 1.01, 20, true},
                         Row{"above noise but under the floor", floor * 0.98, 0.1, false},
                         Row{"above noise and the floor", floor * 1.02, 0.1, true}}) {
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
  b.steps.breakdown.kind_ms[PhaseKind::input] = 1;
  b.steps.breakdown.kind_ms[PhaseKind::compute] = 57;
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

// ---- issue 12: a diff that does not cry wolf ----

namespace {

// A run whose step series drifts slowly (autocorrelated: a neighbour's load
// comes and goes over tens of steps) around `mean`: one point per step.
Report drifting_run(double mean, double drift, std::uint64_t n, double phase) {
  Report r = run(mean, 0.01 * mean, n);
  r.steps.series.stride = 1;
  double sum = 0, sq = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double v = mean + drift * std::sin(phase + static_cast<double>(i) / 40.0);
    r.steps.series.first_step.push_back(i);
    r.steps.series.wall_ms.push_back(v);
    sum += v;
    sq += v * v;
  }
  const double m = sum / static_cast<double>(n);
  r.steps.wall_ms = dist(m, std::sqrt(sq / static_cast<double>(n) - m * m), n);
  return r;
}

}  // namespace

TEST_CASE("compare: step noise from batch means holds up under autocorrelated steps", "[analysis][compare]") {
  // Two runs of the same code on a drifting machine: the drift puts their
  // means 2-3% apart. sd/sqrt(n) calls that significant; batch means do not.
  const Report a = drifting_run(10.0, 0.8, 400, 0.0);
  const Report b = drifting_run(10.0, 0.8, 400, 2.0);
  const Comparison c = compare_reports(a, b);
  INFO(format_comparison(c));
  const double plain = std::hypot(a.steps.wall_ms.stddev / 20, b.steps.wall_ms.stddev / 20);
  REQUIRE(std::fabs(c.step.delta_ms) > 3 * plain);  // would have been "slower"/"faster"
  CHECK(c.step.noise_method == "batch_means");
  CHECK(c.step.noise_ms > 2 * plain);
  CHECK_FALSE(c.step.significant);
  CHECK(std::string(delta_verdict(c.step)) == "within_noise");
  // A real 20% change still shows through the wider noise.
  const Report slow = drifting_run(12.0, 0.8, 400, 2.0);
  const Comparison d = compare_reports(a, slow);
  CHECK(d.step.significant);
  CHECK(std::string(delta_verdict(d.step)) == "slower");
  // Too short a series for batches: the plain standard error.
  const Comparison e = compare_reports(run(100, 10, 100), run(90, 20, 400));
  CHECK(e.step.noise_method == "standard_error");
}

TEST_CASE("compare: a run whose own halves differ by more than the delta calls it within noise",
          "[analysis][compare]") {
  // Base: steady at 10 ms. New: 10 ms for its first half, 12.4 ms for its
  // second (mean 11.2 ms, +12%): the candidate moved 21% within itself, so a
  // 12% difference from the base is not evidence of a change in the code.
  auto series_run = [](std::vector<double> v) {
    Report r = run(10, 0.1, v.size());
    r.steps.series.stride = 1;
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      r.steps.series.first_step.push_back(i);
      sum += v[i];
      sq += v[i] * v[i];
    }
    r.steps.series.wall_ms = v;
    const double m = sum / static_cast<double>(v.size());
    r.steps.wall_ms = dist(m, std::sqrt(std::max(0.0, sq / static_cast<double>(v.size()) - m * m)), v.size());
    return r;
  };
  std::vector<double> steady, shifted;
  for (int i = 0; i < 400; ++i) {
    steady.push_back(10.0 + 0.01 * (i % 7));
    shifted.push_back((i < 200 ? 10.0 : 12.4) + 0.01 * (i % 7));
  }
  const Comparison c = compare_reports(series_run(steady), series_run(shifted));
  INFO(format_comparison(c));
  CHECK(c.step.delta_pct > 11);
  CHECK(c.step.delta_pct > 100 * stepscope::detail::kThresholds.min_relative_change);  // above the floor alone
  CHECK(c.step.drift == Approx(2.4 / 11.23).epsilon(0.01));
  CHECK_FALSE(c.step.significant);
  CHECK(format_comparison(c).find("a run's own halves differ by 21.4%") != std::string::npos);
  CHECK(nlohmann::json::parse(comparison_to_json(c)).at("step").at("drift").get<double>() == Approx(c.step.drift));
  // The same +12% from a steady candidate is a change.
  std::vector<double> slower;
  for (int i = 0; i < 400; ++i) slower.push_back(11.2 + 0.01 * (i % 7));
  const Comparison d = compare_reports(series_run(steady), series_run(slower));
  CHECK(d.step.drift < 0.01);
  CHECK(d.step.significant);
}

TEST_CASE("compare: machine conditions that differ are said before any verdict", "[analysis][compare]") {
  const auto& t = stepscope::detail::kThresholds;
  struct Row {
    const char* what;
    std::function<void(SystemSignals&)> busy;  // applied to the new run
    bool differ;
    const char* reason;
  };
  const std::vector<Row> rows = {
      {"same machine", [](SystemSignals&) {}, false, nullptr},
      {"runqueue just under",
       [&](SystemSignals& s) { s.runqueue_wait_s = (0.01 + t.conditions_runqueue_difference - 0.002) * s.wall_s; },
       false, nullptr},
      {"runqueue over", [&](SystemSignals& s) { s.runqueue_wait_s = 0.40 * s.wall_s; }, true, "waited for a CPU"},
      {"other processes", [](SystemSignals& s) { s.other_processes_cpu_s = 1.8 * s.wall_s; }, true,
       "other processes used"},
      {"preempted", [](SystemSignals& s) { s.involuntary_switches = static_cast<std::uint64_t>(400 * s.wall_s); }, true,
       "involuntary"},
      {"load average", [](SystemSignals& s) { s.load_average_start = s.load_average_end = 4.0; }, true, "load average"},
  };
  for (const Row& row : rows) {
    Report a = run(100, 10, 100), b = run(100, 10, 100);
    for (Report* r : {&a, &b}) {
      r->system.runqueue_wait_s = 0.01 * r->system.wall_s;
      r->system.other_processes_cpu_s = 0.1 * r->system.wall_s;
      r->system.involuntary_switches = static_cast<std::uint64_t>(5 * r->system.wall_s);
      r->system.load_average_start = r->system.load_average_end = 0.5;
      r->system.cores_online = 2;
    }
    row.busy(b.system);
    b.steps.wall_ms = dist(130, 10, 100);  // and the step is slower: +30%
    const Comparison c = compare_reports(a, b);
    const std::string text = format_comparison(c);
    INFO(row.what << "\n" << text);
    CHECK(c.conditions.differ == row.differ);
    if (row.differ) {
      REQUIRE(!c.conditions.reasons.empty());
      CHECK(c.conditions.reasons.front().find(row.reason) != std::string::npos);
      // The line comes before the table and its verdicts, and the code is not
      // blamed: one config, no phase that moved on its own, so the +30% is
      // the machine's noise, not a change (issue 29: a busy machine changes
      // the confidence, not the answer).
      CHECK(text.find("machine conditions differ") < text.find("verdict"));
      CHECK_FALSE(c.step.significant);
      CHECK(any_contains(c.warnings, "counted as the machine's noise"));
    } else {
      CHECK(text.find("machine conditions differ") == std::string::npos);
    }
  }
}

TEST_CASE("compare: both runs on a busy machine match, and the diff still says the machine was shared",
          "[analysis][compare]") {
  const auto& t = stepscope::detail::kThresholds;
  // 2 cores; this process keeps one busy; other processes `others` cores.
  for (const double others : {0.2, t.conditions_other_cpu_cores, 0.9}) {
    Report a = run(100, 10, 100), b = run(100, 10, 100);
    for (Report* r : {&a, &b}) {
      r->system.cores_online = 2;
      r->system.cpu_user_s = r->system.wall_s;
      r->system.other_processes_cpu_s = others * r->system.wall_s;
    }
    b.steps.wall_ms = dist(130, 10, 100);  // +30%
    const Comparison c = compare_reports(a, b);
    INFO("other processes " << others << " cores\n" << format_comparison(c));
    CHECK_FALSE(c.conditions.differ);  // the same in both runs
    const bool busy = others >= t.conditions_other_cpu_cores && (1 + others) / 2 >= t.conditions_busy_machine;
    CHECK(c.conditions.shared == busy);
    // Two runs of one config on a busy machine: the +30% is not called a change.
    CHECK(c.step.significant == !busy);
    CHECK(any_contains(c.warnings, "counted as the machine's noise") == busy);
    if (busy) CHECK(c.conditions.shared_reason.find("the machine was busy") != std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(comparison_to_json(c));
    CHECK(j.at("conditions").at("shared") == busy);
  }
  // The same report against itself on a busy machine: shared, but nothing differs.
  Report busy = run(100, 10, 100);
  busy.system.cores_online = 2;
  busy.system.cpu_user_s = busy.system.wall_s;
  busy.system.other_processes_cpu_s = busy.system.wall_s;
  const Comparison self = compare_reports(busy, busy);
  CHECK_FALSE(self.conditions.differ);
  CHECK(self.conditions.shared);
  CHECK_FALSE(self.step.significant);
  CHECK_FALSE(any_contains(self.warnings, "may be theirs"));  // no change to explain
}

TEST_CASE("compare: comparison_to_json carries the verdicts and the conditions", "[analysis][compare]") {
  Report a = run(100, 10, 100), b = run(100, 10, 100);
  b.system.runqueue_wait_s = 0.5 * b.system.wall_s;
  b.steps.wall_ms = dist(140, 10, 100);
  b.run.config["batch_size"] = "64";  // a change to explain the step
  const nlohmann::json j = nlohmann::json::parse(comparison_to_json(compare_reports(a, b)));
  CHECK(j.at("step").at("verdict") == "slower");
  CHECK(j.at("explained_by").size() == 1);
  CHECK(j.at("conditions").at("differ") == true);
  CHECK(j.at("conditions").at("reasons").size() >= 1);
  CHECK(j.at("conditions").at("new").at("runqueue_fraction").get<double>() == Approx(0.5));
  CHECK(j.at("phases").size() == 2);
  for (const auto& p : j.at("phases")) {
    const std::string v = p.at("verdict");
    CHECK((v == "faster" || v == "slower" || v == "within_noise"));
  }
  const nlohmann::json same = nlohmann::json::parse(comparison_to_json(compare_reports(a, a)));
  CHECK(same.at("step").at("verdict") == "within_noise");
  CHECK(same.at("conditions").at("differ") == false);
  CHECK(same.at("conditions").at("base").at("load_per_core").is_null());  // not measured: null, not 0
}

TEST_CASE("compare: a phase compared across thread roles says so", "[analysis][compare]") {
  Report a = run(100, 10, 100), b = run(100, 10, 100);
  add_phase(a, "decode", PhaseKind::input, ThreadRole::step, 0.2, 20);
  add_phase(b, "decode", PhaseKind::input, ThreadRole::background, 0, 20);
  const Comparison c = compare_reports(a, b);
  const Delta* d = phase(c, "decode");
  REQUIRE(d != nullptr);
  CHECK(d->base_role == "step");
  CHECK(d->new_role == "background");
  CHECK(any_contains(c.warnings, "compared across thread roles"));
  CHECK(format_comparison(c).find("(step vs background thread)") != std::string::npos);
  // Same role: no such warning.
  CHECK_FALSE(any_contains(compare_reports(a, a).warnings, "thread roles"));
}

namespace {

// A run of `mean` ms per step whose series is steady (spread 0.5%).
Report steady_run(double mean) {
  Report r = run(mean, 0.005 * mean, 300);
  r.steps.series.stride = 1;
  for (std::uint64_t i = 0; i < 300; ++i) {
    r.steps.series.first_step.push_back(i);
    r.steps.series.wall_ms.push_back(mean * (1 + 0.005 * std::sin(static_cast<double>(i))));
  }
  return r;
}

}  // namespace

TEST_CASE("compare: repeats on a busy machine say so once, without asking for repeats", "[analysis][compare]") {
  const auto busy = [](double ms) {
    Report r = steady_run(ms);
    r.system.cores_online = 2;
    r.system.cpu_user_s = r.system.wall_s;
    r.system.other_processes_cpu_s = 0.9 * r.system.wall_s;
    return r;
  };
  const std::vector<Report> base{busy(9.9), busy(10.0), busy(10.1)};
  const std::vector<Report> faster{busy(4.9), busy(5.0), busy(5.1)};
  const Comparison c = compare_runs(base, faster);
  INFO(format_comparison(c));
  REQUIRE(c.step.significant);
  const auto said = std::count_if(c.warnings.begin(), c.warnings.end(),
                                  [](const std::string& w) { return w.rfind("the machine was busy", 0) == 0; });
  CHECK(said == 1);
  CHECK_FALSE(any_contains(c.warnings, "--vs"));
}

TEST_CASE("compare: one run each cannot tell 3%; three repeats each can", "[analysis][compare]") {
  // Separate processes of one binary differ by ~1.7% here; each run is
  // quiet. One pair 3% apart: within noise (with the advice to repeat).
  const Comparison pair = compare_reports(steady_run(10.0), steady_run(10.3));
  INFO(format_comparison(pair));
  CHECK_FALSE(pair.step.significant);
  CHECK(std::any_of(pair.warnings.begin(), pair.warnings.end(),
                    [](const std::string& w) { return w.rfind("one run each", 0) == 0; }));
  // Three runs each, 0.5% apart between runs (sd): +3% is beyond the
  // between-run noise (t = 4.6 for 4 degrees of freedom).
  const std::vector<Report> base{steady_run(9.95), steady_run(10.0), steady_run(10.05)};
  const std::vector<Report> slower{steady_run(10.25), steady_run(10.3), steady_run(10.35)};
  const Comparison reps = compare_runs(base, slower);
  INFO(format_comparison(reps));
  CHECK(reps.base_runs == 3);
  CHECK(reps.new_runs == 3);
  CHECK(reps.step.noise_method == "between_runs");
  CHECK(reps.step.base_ms == Approx(10.0));
  CHECK(reps.step.new_ms == Approx(10.3));
  CHECK(reps.step.noise_ms == Approx(std::sqrt(2 * 0.0025 / 3)).epsilon(0.01));
  CHECK(reps.step.noise_factor == Approx(4.604).epsilon(0.01));
  CHECK(reps.step.significant);
  CHECK(std::string(delta_verdict(reps.step)) == "slower");
  // Phases get the same treatment (run() gives every run the same phases).
  REQUIRE_FALSE(reps.phases.empty());
  CHECK(reps.phases.front().noise_method == "between_runs");
  // The same means with the 1.7% spread measured between processes here
  // (docs/classification.md): three runs each cannot tell 3% at 99%.
  const std::vector<Report> spread_base{steady_run(9.83), steady_run(10.0), steady_run(10.17)};
  const std::vector<Report> spread_new{steady_run(10.13), steady_run(10.3), steady_run(10.47)};
  CHECK_FALSE(compare_runs(spread_base, spread_new).step.significant);
  // A wide spread: within noise.
  const std::vector<Report> wide_base{steady_run(9.0), steady_run(10.0), steady_run(11.0)};
  const std::vector<Report> wide_new{steady_run(9.3), steady_run(10.3), steady_run(11.3)};
  CHECK_FALSE(compare_runs(wide_base, wide_new).step.significant);
  // Repeats of one side that are not the same experiment are called out.
  std::vector<Report> mixed = base;
  mixed[1].run.config["batch_size"] = "64";
  const Comparison m = compare_runs(mixed, slower);
  CHECK(std::any_of(m.warnings.begin(), m.warnings.end(),
                    [](const std::string& w) { return w.find("base run 2 has another config") != std::string::npos; }));
  // JSON carries the run counts.
  const nlohmann::json j = nlohmann::json::parse(comparison_to_json(reps));
  CHECK(j.at("runs").at("base") == 3);
  CHECK(j.at("step").at("noise_method") == "between_runs");
  // One report each is compare_reports.
  CHECK(compare_runs({steady_run(10.0)}, {steady_run(10.3)}).step.noise_method == "batch_means");
}

TEST_CASE("compare: a phase change too small to move the step is within noise (end to end)", "[analysis][compare]") {
  // Identical runs of a 100 ms step with a 0.02 ms phase that moved 25%
  // (seen: a 'data' phase of 0.0002 ms in a 1.1 ms step called "+25% slower"),
  // beside a phase that moved 2% of the step: only the second is called
  // (both are far above their own noise and the 8% relative floor).
  Report a = run(100, 1, 400), b = run(100, 1, 400);
  add_phase(a, "tiny", PhaseKind::other, ThreadRole::step, 0.0002, 0.02);
  add_phase(b, "tiny", PhaseKind::other, ThreadRole::step, 0.00025, 0.025);
  add_phase(a, "moved", PhaseKind::other, ThreadRole::step, 0.10, 10.0);
  add_phase(b, "moved", PhaseKind::other, ThreadRole::step, 0.12, 12.0);
  const Comparison c = compare_reports(a, b);
  const Delta* tiny = phase(c, "tiny");
  const Delta* moved = phase(c, "moved");
  REQUIRE(tiny != nullptr);
  REQUIRE(moved != nullptr);
  CHECK(tiny->delta_pct == Approx(25));
  CHECK_FALSE(tiny->significant);
  CHECK(std::string(delta_verdict(*tiny)) == "within_noise");
  CHECK(moved->significant);
  // The same 0.005 ms a call, called 500 times a step (a policy once per
  // action of an episode, pytorch/examples' reinforce): 2.5 ms a step.
  for (Report* r : {&a, &b}) {
    PhaseSummary& many = add_phase(*r, "many", PhaseKind::compute, ThreadRole::step, 0.1, r == &a ? 0.02 : 0.025);
    many.count = 500 * r->steps.count;
    many.host_ms = many.self_ms = dist(many.host_ms.mean, 0.05 * many.host_ms.mean, many.count);
  }
  const Comparison calls = compare_reports(a, b);
  const Delta* many = phase(calls, "many");
  REQUIRE(many != nullptr);
  CHECK(many->significant);
  CHECK(std::string(delta_verdict(*many)) == "slower");
}

TEST_CASE("compare: a run that did not end by itself is named, on either side", "[analysis][compare]") {
  auto cut_short = [](const Comparison& c) {
    std::vector<std::string> out;
    for (const auto& w : c.warnings)
      if (w.find("its numbers cover the run only up to then") != std::string::npos) out.push_back(w);
    return out;
  };
  const Report whole = run(10, 0.5, 200);
  CHECK(cut_short(compare_reports(whole, whole)).empty());

  Report crashed = whole;
  crashed.exception = Report::UncaughtException{"torch.cuda.OutOfMemoryError", "CUDA out of memory.", 61};
  auto w = cut_short(compare_reports(whole, crashed));
  REQUIRE(w.size() == 1);
  CHECK(w[0] ==
        "the new run ended by an uncaught exception (torch.cuda.OutOfMemoryError): its numbers cover the "
        "run only up to then");

  Report snapshot = whole;
  snapshot.complete = false;
  Report signalled = whole;
  signalled.ended_by = "SIGTERM";
  w = cut_short(compare_reports(snapshot, signalled));
  REQUIRE(w.size() == 2);
  CHECK(w[0].rfind("the base run is a snapshot of a run still going", 0) == 0);
  CHECK(w[1].rfind("the new run ended by SIGTERM", 0) == 0);

  // Repeats: the second base run is the one that was cut short.
  Report terminated = whole;
  terminated.ended_by = "terminate";
  w = cut_short(compare_runs({whole, terminated, whole}, {whole, whole}));
  REQUIRE(w.size() == 1);
  CHECK(w[0].rfind("the base run 2 ended by std::terminate", 0) == 0);
}

namespace {
// Both runs on a 2-core machine with the same neighbours (0.1 cores); the
// new run's own threads preempt each other (400 involuntary switches/s, 20%
// run queue) when `own_churn`.
void same_neighbours(Report& a, Report& b, bool own_churn) {
  for (Report* r : {&a, &b}) {
    r->system.cores_online = 2;
    r->system.cpu_user_s = 0.5 * r->system.wall_s;
    r->system.other_processes_cpu_s = 0.1 * r->system.wall_s;
    r->system.involuntary_switches = static_cast<std::uint64_t>(5 * r->system.wall_s);
    r->system.runqueue_wait_s = 0.01 * r->system.wall_s;
  }
  if (own_churn) {
    b.system.involuntary_switches = static_cast<std::uint64_t>(400 * b.system.wall_s);
    b.system.runqueue_wait_s = 0.20 * b.system.wall_s;
  }
}
}  // namespace

TEST_CASE("compare: a setting that changed explains the step, not the machine (0 -> 4 loader workers)",
          "[analysis][compare]") {
  // Issue 32: the 4 workers add context switches of their own; the diff
  // marked the faster step "(machine conditions differ)".
  Report a = run(100, 5, 100), b = run(60, 5, 100);
  b.phases[0].host_ms = b.phases[0].self_ms = dist(20, 1, 100);  // data: 60 -> 20 ms
  b.run.config["workers"] = "4";
  same_neighbours(a, b, true);
  const Comparison c = compare_reports(a, b);
  const std::string text = format_comparison(c);
  INFO(text);
  CHECK(c.step.significant);
  CHECK(c.step.delta_ms < 0);
  CHECK_FALSE(c.conditions.differ);  // other processes' load is the same: the switches are the run's own
  CHECK(text.find("machine conditions differ") == std::string::npos);
  CHECK(text.find("explained below") != std::string::npos);
  REQUIRE_FALSE(c.explained_by.empty());
  CHECK(c.explained_by.front() == "config workers: 2 -> 4");
  CHECK(any_contains(c.explained_by, "involuntary context switches"));
  CHECK_FALSE(any_contains(c.warnings, "likely the machine's"));
  // Neighbours that did change stay the machine's, whatever the config.
  b.system.other_processes_cpu_s = 1.5 * b.system.wall_s;
  const Comparison busy = compare_reports(a, b);
  CHECK(busy.conditions.differ);
  CHECK_FALSE(any_contains(busy.conditions.reasons, "DataLoader workers"));  // no num_workers in either run
  // PyTorch's mnist with a slow Dataset, num_workers 0 -> 2 (trials
  // 2026-12-04): the workers are "other processes", so the change itself
  // moved that figure; the reasons say so.
  a.run.config["num_workers"] = "0";
  b.run.config["num_workers"] = "2";
  const Comparison workers = compare_reports(a, b);
  CHECK(any_contains(workers.conditions.reasons,
                     "other processes used 0.1 cores during base vs 1.5 during new (this "
                     "run's DataLoader workers among them: num_workers 0 -> 2 moved part"));
  CHECK(workers.conditions.shared_reason.find("DataLoader workers among them: num_workers 0 -> 2") !=
        std::string::npos);
}

TEST_CASE("compare: a phase that moved by most of the step change explains it, config key or not",
          "[analysis][compare]") {
  // Issue 29: slow input moved to a prefetch thread, step -48%, data -99.8%,
  // no config key: the diff said "likely the machine's, not the code's".
  Report a = run(100, 5, 100), b = run(52, 3, 100);
  b.phases[0].host_ms = b.phases[0].self_ms = dist(0.12, 0.01, 100);  // data: 60 -> 0.12 ms
  same_neighbours(a, b, true);  // the prefetch thread's switches and wait are the run's own
  const Comparison c = compare_reports(a, b);
  const std::string text = format_comparison(c);
  INFO(text);
  CHECK(c.step.significant);
  REQUIRE(c.explained_by.size() >= 1);
  CHECK(c.explained_by.front().rfind("phase 'data': -59.88 ms per step (-99.8%)", 0) == 0);
  CHECK_FALSE(c.conditions.differ);
  CHECK_FALSE(any_contains(c.warnings, "likely the machine's"));
  CHECK_FALSE(any_contains(c.warnings, "no config key changed"));
  // Other processes' load changed too, yet the change is the phase's own: it
  // moved far more than the rest of the step did.
  b.system.other_processes_cpu_s = 1.5 * b.system.wall_s;
  const Comparison loaded = compare_reports(a, b);
  CHECK(loaded.conditions.differ);
  CHECK(loaded.step.significant);
  CHECK(any_contains(loaded.explained_by, "phase 'data'"));
  // Every part slower alike on a busier machine: no phase explains it.
  Report slow = run(130, 5, 100);
  slow.phases[0].host_ms = slow.phases[0].self_ms = dist(78, 4, 100);
  slow.phases[1].host_ms = slow.phases[1].self_ms = dist(45.5, 2, 100);
  same_neighbours(a, slow, false);
  slow.system.other_processes_cpu_s = 1.5 * slow.system.wall_s;
  const Comparison machine = compare_reports(a, slow);
  INFO(format_comparison(machine));
  CHECK(machine.explained_by.empty());
  CHECK_FALSE(machine.step.significant);
  CHECK(any_contains(machine.warnings, "counted as the machine's noise"));
  for (const Delta& d : machine.phases) CHECK_FALSE(d.significant);  // they moved with the machine too
  CHECK_FALSE(any_contains(machine.warnings, "one run each"));
  CHECK(format_comparison(machine).find("slower") == std::string::npos);
}

TEST_CASE("compare: phases outside the steps are apart, never '+23683% slower'", "[analysis][compare]") {
  // Issue 29: a test loop's phase and the fetch that found the loop's end
  // (one sample each, outside every step) listed beside the step's phases.
  Report a = run(100, 5, 100), b = run(100, 5, 100);
  for (Report* r : {&a, &b}) {
    PhaseSummary& end_fetch = add_phase(*r, "data", PhaseKind::input, ThreadRole::outside_step, 0, 0.01);
    end_fetch.count = 1;
    end_fetch.host_ms = dist(r == &a ? 0.01 : 2.38, 0, 1);
    PhaseSummary& test = add_phase(*r, "test", PhaseKind::compute, ThreadRole::outside_step, 0, 500);
    test.count = 1;
    test.host_ms = dist(r == &a ? 500 : 900, 0, 1);
  }
  const Comparison c = compare_reports(a, b);
  const std::string text = format_comparison(c);
  INFO(text);
  for (const Delta& d : c.phases)
    if (d.base_role == "outside_step") CHECK_FALSE(d.significant);
  const auto heading = text.find("outside the steps (no step waited");
  REQUIRE(heading != std::string::npos);
  CHECK(text.find("test ") > heading);  // listed under it, after the step's phases
  CHECK(text.find("train ") < heading);
  CHECK(text.find("slower") == std::string::npos);
}

TEST_CASE("compare: the loop's step time, and the coverage difference said", "[analysis][compare]") {
  // Issue 32: a naive range-for (steps cover 20% of the loop: 7.97 ms in the
  // step scopes, 41.3 ms per iteration) against a covered run of the same
  // loop read "within noise" on the scopes and never named the coverage.
  Report naive = run(41.3, 2, 100), covered = run(41.0, 2, 100);
  naive.steps.wall_ms = dist(7.97, 0.5, 100);
  naive.steps.breakdown.between_steps_ms = 41.3 - 7.97;
  naive.steps.coverage = 0.20;
  covered.steps.coverage = 1.0;
  const Comparison c = compare_reports(naive, covered);
  INFO(format_comparison(c));
  CHECK(c.step.base_ms == Approx(41.3));  // the summary's, breakdown's and what-ifs' step time
  CHECK(c.step.new_ms == Approx(41.0));
  CHECK_FALSE(c.step.significant);
  CHECK(any_contains(c.warnings, "steps cover 20% of the loop in base vs 100% in new"));
  // Equal coverage: nothing to say.
  CHECK_FALSE(any_contains(compare_reports(covered, covered).warnings, "steps cover"));
}

TEST_CASE("compare: a phase slower only by the CPU wait the machine added does not explain the step",
          "[analysis][compare]") {
  // The libtorch MNIST loop on a busy machine: backward +6.7 ms and forward
  // +2.9 ms were the step thread waiting for a CPU 30% -> 38% of the run,
  // not the phases' own change.
  Report a = run(100, 5, 100), b = run(130, 5, 100);
  b.phases[1].host_ms = b.phases[1].self_ms = dist(60, 3, 100);  // train: 35 -> 60 ms
  same_neighbours(a, b, false);
  b.system.runqueue_wait_s = 0.25 * b.system.wall_s;  // 0.25 x 130 = 32.5 ms of CPU wait, 1 ms before
  const Comparison c = compare_reports(a, b);
  INFO(format_comparison(c));
  CHECK_FALSE(any_contains(c.explained_by, "phase 'train'"));
  // The same phase change with no added wait is the phase's own.
  b.system.runqueue_wait_s = 0.01 * b.system.wall_s;
  CHECK(any_contains(compare_reports(a, b).explained_by, "phase 'train'"));
}

TEST_CASE("compare: the wait for CPUs the job's own loader held explains the step, not the machine",
          "[analysis][compare]") {
  // A PyTorch loop whose 2 workers decoded 2 ms a sample, then none
  // (docs/trials.md): 96.7 -> 62.0 ms, every phase 26-84% faster (the wait
  // for CPUs was in all of them), the run queue 24% -> 0% with other
  // processes' load the same. It read "the machine's noise".
  Report a = run(96, 3, 100), b = run(62, 3, 100);
  same_neighbours(a, b, false);
  a.system.runqueue_wait_s = 0.24 * a.system.wall_s;
  a.system.involuntary_switches = static_cast<std::uint64_t>(154 * a.system.wall_s);
  for (Report* r : {&a, &b}) r->system.children_cpu_s = 1.2 * r->system.wall_s;
  a.bottleneck.evidence.push_back(Evidence{"loader_cpu_wait_share", 0.24, 0.10, ">=", true, true, ""});
  const Comparison c = compare_reports(a, b);
  const std::string text = format_comparison(c);
  INFO(text);
  CHECK(c.step.significant);
  REQUIRE_FALSE(c.explained_by.empty());
  CHECK(c.explained_by.front().find("the wait for CPUs the job's own loader held: 23.04 -> 0.00 ms per step") == 0);
  CHECK(
      any_contains(c.explained_by, "(its consequence, with other processes' load unchanged) the step threads waited"));
  CHECK_FALSE(c.conditions.differ);
  CHECK(text.find("the machine's noise") == std::string::npos);
  // Without that evidence (the same runs), the machine is blamed as before.
  a.bottleneck.evidence.clear();
  const Comparison blind = compare_reports(a, b);
  CHECK(blind.conditions.differ);
}

TEST_CASE("compare: the text shows every change, and counts the rows within noise past twenty", "[analysis][compare]") {
  // Two reports whose ranges carry the step number ("forward_step_17")
  // printed a row for each of 2000 phases.
  Report a = run(100, 10, 100);
  Report b = run(100, 10, 100);
  for (int i = 0; i < 30; ++i) {
    const std::string name = "layer_" + std::to_string(i);
    add_phase(a, name, PhaseKind::compute, ThreadRole::step, 0.001, 0.1);
    add_phase(b, name, PhaseKind::compute, ThreadRole::step, 0.001, 0.1);
  }
  for (int i = 0; i < 25; ++i)
    add_phase(a, "old_" + std::to_string(i), PhaseKind::compute, ThreadRole::step, 0.001, 0.1);
  const std::string text = format_comparison(compare_reports(a, b));
  INFO(text);
  CHECK(text.find("(12 more rows within noise)") != std::string::npos);  // data, train and 30 layers: 20 shown
  CHECK(text.find("(5 more only in base)") != std::string::npos);
  CHECK(text.find("old_19 ") != std::string::npos);
  CHECK(text.find("old_20 ") == std::string::npos);
}

TEST_CASE("compare: a phase whose calls per step changed is compared per step, and explains the step",
          "[analysis][compare]") {
  // pytorch/examples' DDP tutorial, then with gradient accumulation over 8
  // micro-batches: the all-reduce runs every 8th step and takes 2.0 ms instead
  // of 1.2 (the ranks drift apart in between). Per call it read "+64%, within
  // noise" while it cost the step 80% less.
  Report a = run(1.74, 1.4, 500), b = run(0.50, 1.0, 500);
  PhaseSummary& every = add_phase(a, "ddp.allreduce", PhaseKind::communication, ThreadRole::step, 0.70, 1.215);
  every.host_ms = every.self_ms = dist(1.215, 1.0, 500);
  PhaseSummary& eighth = add_phase(b, "ddp.allreduce", PhaseKind::communication, ThreadRole::step, 0.50, 1.988);
  eighth.count = 63;
  eighth.host_ms = eighth.self_ms = dist(1.988, 1.2, 63);
  const Comparison c = compare_reports(a, b);
  const Delta* d = phase(c, "ddp.allreduce");
  REQUIRE(d != nullptr);
  CHECK(d->base_calls == Approx(1));
  CHECK(d->new_calls == Approx(0.126));
  CHECK(d->base_ms == Approx(1.215));
  CHECK(d->new_ms == Approx(1.988 * 0.126));
  CHECK(std::string(delta_verdict(*d)) == "faster");
  const std::string text = format_comparison(c);
  INFO(text);
  CHECK(text.find("(ms per step: 1 -> 0.126 calls a step)") != std::string::npos);
  const std::string json = comparison_to_json(c);
  CHECK(json.find("\"new_calls_per_step\"") != std::string::npos);
  CHECK(json.find("0.126") != std::string::npos);
  // The same calls per step on both sides: compared per call, as before.
  eighth.count = 500;
  eighth.host_ms = eighth.self_ms = dist(1.988, 1.2, 500);
  const Delta* per_call = phase(compare_reports(a, b), "ddp.allreduce");
  REQUIRE(per_call != nullptr);
  CHECK(per_call->base_calls == 0);
  CHECK(per_call->new_ms == Approx(1.988));
}
