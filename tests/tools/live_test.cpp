// The live progress line: formatting (pure), the recent-window arithmetic,
// and the real thing on stderr of tests/core/probe (STEPSCOPE_LIVE).
#include "tools/tool_runner.hpp"

#include "run/live.hpp"

#include <stepscope/analysis.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace stepscope;
using stepscope_test::contains;

namespace {

Report facts_with(std::uint64_t measured, std::uint64_t warmup, double total_ms) {
  Report r;
  r.steps.count = measured;
  r.steps.warmup_excluded = warmup;
  r.steps.wall_ms.count = measured;
  r.steps.wall_ms.total = total_ms;
  r.steps.wall_ms.mean = measured > 0 ? total_ms / static_cast<double>(measured) : 0;
  PhaseSummary data;
  data.name = "data";
  data.kind = PhaseKind::input;
  data.share_of_step = 0.38;
  PhaseSummary forward;
  forward.name = "forward";
  forward.kind = PhaseKind::compute;
  forward.share_of_step = 0.21;
  PhaseSummary loader;  // background: never "the largest phase" of the step
  loader.name = "decode";
  loader.thread_role = ThreadRole::background;
  loader.share_of_step = 0.9;
  r.phases = {forward, data, loader};
  return r;
}

}  // namespace

TEST_CASE("format_live_line shows steps, ms/step, the top phase and the verdict", "[live]") {
  LiveStatus s;
  s.elapsed_s = 12.04;
  s.steps = 1234;
  s.recent_ms_per_step = 41.234;
  s.window_s = 2;
  s.overall_ms_per_step = 40;
  s.largest_phase = "data";
  s.largest_phase_share = 0.381;
  s.verdict = Bottleneck::io;
  s.severity = "moderately";
  s.confidence = 0.78;
  CHECK(
      format_live_line(s) ==
      "stepscope 12.0s | step 1234 | 41.23 ms/step (last 2.0s) | top: data 38% | verdict: moderately io-bound (0.78)");

  s.dropped_records = 17;
  CHECK(contains(format_live_line(s), " | DROPPED 17"));

  s.verdict.reset();
  s.severity = "";
  CHECK(contains(format_live_line(s), " | verdict: unknown"));
}

TEST_CASE("format_live_line: warm-up, stalls, hostile names, width", "[live]") {
  LiveStatus warm;
  warm.elapsed_s = 0.5;
  warm.steps = 3;
  CHECK(format_live_line(warm) == "stepscope 0.5s | step 3 (warm-up) | waiting for measured steps");
  LiveStatus none;
  CHECK(format_live_line(none) == "stepscope 0.0s | step 0 | waiting for measured steps");

  // No step finished in the window: a stalled run must not look busy.
  LiveStatus stalled;
  stalled.elapsed_s = 30;
  stalled.steps = 100;
  stalled.overall_ms_per_step = 12.5;
  stalled.recent_ms_per_step = -1;
  stalled.window_s = 5;
  CHECK(contains(format_live_line(stalled), "no step in last 5.0s (mean 12.50 ms/step)"));

  // Control characters in a user's phase name cannot break the line.
  LiveStatus hostile = stalled;
  hostile.largest_phase = "evil\r\x1b[2Jname\n";
  hostile.largest_phase_share = 0.5;
  const std::string line = format_live_line(hostile);
  CHECK(line.find_first_of("\r\n\x1b") == std::string::npos);
  CHECK(contains(line, "top: evil\\r\\x1b[2Jname\\n 50%"));  // escaped visibly (text/printable.hpp)

  // Truncation never splits a UTF-8 sequence.
  LiveStatus wide = stalled;
  wide.largest_phase = "données";  // é is two bytes
  const std::string full = format_live_line(wide);
  const auto e_at = full.find("\xc3\xa9");
  REQUIRE(e_at != std::string::npos);
  const std::string cut = format_live_line(wide, e_at + 1);
  CHECK(cut.size() == e_at);
  CHECK(format_live_line(wide, 20).size() == 20);
  CHECK(format_live_line(wide, 0) == full);
}

TEST_CASE("LiveTracker: ms/step over the recent window, largest step phase, verdict", "[live]") {
  LiveTracker tracker;
  LiveStatus s = tracker.update(facts_with(0, 3, 0), 1.0);
  CHECK(s.steps == 3);
  CHECK(s.warmup_steps == 3);
  CHECK(s.recent_ms_per_step < 0);
  CHECK(s.overall_ms_per_step < 0);
  CHECK_FALSE(s.verdict);

  const Report facts = facts_with(100, 5, 1000);
  s = tracker.update(facts, 3.0);  // 100 steps of 10 ms
  CHECK(s.steps == 105);
  CHECK(s.recent_ms_per_step == Approx(10));
  CHECK(s.window_s == Approx(2));
  CHECK(s.largest_phase == "data");  // not the background "decode"
  CHECK(s.largest_phase_share == Approx(0.38));
  CHECK(s.verdict == classify(facts).bottleneck());

  s = tracker.update(facts_with(150, 5, 1000 + 50 * 30.0), 5.0);  // the next 50 took 30 ms each
  CHECK(s.recent_ms_per_step == Approx(30));
  CHECK(s.overall_ms_per_step == Approx(2500.0 / 150));

  s = tracker.update(facts_with(150, 5, 2500), 7.0);  // stalled
  CHECK(s.recent_ms_per_step < 0);
  CHECK(s.overall_ms_per_step == Approx(2500.0 / 150));
}

namespace {

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("STEPSCOPE_LIVE prints progress lines on stderr", "[live][runtime]") {
  using namespace stepscope_test;
  TempDir dir;
  // stderr is a file here: quiet unless forced.
  auto r = run(dir, "env STEPSCOPE_QUIET=1 STEPSCOPE_LIVE=0.02 " + probe() + " workload 300");
  REQUIRE(r.status == 0);
  CHECK_FALSE(contains(r.err, "stepscope 0."));
  CHECK(count_of(r.err, "ms/step") == 0);

  r = run(dir, "env STEPSCOPE_QUIET=1 STEPSCOPE_LIVE=0.02 STEPSCOPE_LIVE_FORCE=1 " + probe() + " workload 300");
  REQUIRE(r.status == 0);
  INFO(r.err);
  // Plain lines (no carriage return, no escape codes) when forced onto a file.
  CHECK(r.err.find('\r') == std::string::npos);
  CHECK(r.err.find('\x1b') == std::string::npos);
  CHECK(count_of(r.err, "stepscope ") >= 2);
  CHECK(contains(r.err, "ms/step"));
  CHECK(contains(r.err, "| top: "));
  CHECK(contains(r.err, "| verdict: "));

  // On a terminal: one line rewritten in place (\r + clear to end of line).
  if (std::system("command -v script >/dev/null 2>&1") == 0) {
    r = run(dir, "env STEPSCOPE_QUIET=1 STEPSCOPE_LIVE=0.02 script -qec \"" + probe() + " workload 300\" /dev/null");
    REQUIRE(r.status == 0);
    CHECK(contains(r.out, "\rstepscope "));
    CHECK(contains(r.out, "\x1b[K"));
  } else {
    WARN("skipped the terminal case: util-linux 'script' not found");
  }
}
