// The summary's phase table (src/report/summary.cpp): rows per role, most
// expensive first, the rest counted in one line; the steps left out, said
// alike in the summary and the HTML page.
#include <stepscope/html.hpp>
#include <stepscope/report.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <string>

using namespace stepscope;

TEST_CASE("the phase table shows each role's most expensive phases and counts the rest", "[report]") {
  // A trace whose ranges carry the step number ("forward_step_17") made a
  // table of 2000 rows.
  Report r;
  const auto add = [&r](const std::string& name, ThreadRole role, double share, double total_ms) {
    PhaseSummary p;
    p.name = name;
    p.thread_role = role;
    p.share_of_step = share;
    p.self_ms.total = total_ms;
    p.count = 1;
    r.phases.push_back(p);
  };
  for (int i = 0; i < 25; ++i) add(fmt::format("step_phase_{:02}", i), ThreadRole::step, 0.04, 100.0 - i);
  for (int i = 0; i < 12; ++i) add(fmt::format("loader_{:02}", i), ThreadRole::background, 0, 50.0 - i);
  const std::string text = format_summary(r);
  INFO(text);
  CHECK(text.find("step_phase_19") != std::string::npos);
  CHECK(text.find("step_phase_20") == std::string::npos);
  CHECK(text.find("(5 more step phases, 20.0% of the step together; the report lists them all)") != std::string::npos);
  CHECK(text.find("loader_09") != std::string::npos);
  CHECK(text.find("loader_10") == std::string::npos);
  CHECK(text.find("(2 more background phases, 79.000 ms of self time together") != std::string::npos);
  // A table that fits is shown whole, with no such line.
  r.phases.resize(20);
  CHECK(format_summary(r).find("more step phases") == std::string::npos);
}

TEST_CASE("the steps left out of the statistics are named alike in the summary and the HTML page", "[report]") {
  Report r;
  r.steps.count = 55;
  r.steps.wall_ms.mean = r.steps.wall_ms.p50 = 10;
  r.steps.unended_excluded = 1;
  r.steps.unended_wall_ms = 12.5;
  r.steps.outer_excluded = 3;
  r.steps.next_step_ignored = 60;
  r.steps.evaluation_loops = 2;
  const std::string text = format_summary(r);
  const std::string page = html_report(r);
  INFO(text);
  for (const char* said : {"1 step left out of the statistics (12.5 ms)", "3 steps held steps of their own",
                           "60 next_step() calls inside a step", "2 steps() loops evaluated the model"}) {
    CHECK(text.find(said) != std::string::npos);
    CHECK(page.find(said) != std::string::npos);
  }
  // None left out: no such lines.
  const Report none;
  for (const char* said :
       {"left out of the statistics (", "held steps of", "next_step() call", "evaluated the model"}) {
    CHECK(format_summary(none).find(said) == std::string::npos);
    CHECK(html_report(none).find(said) == std::string::npos);
  }
}
