// The stepscope command-line tool, verb by verb, on real inputs: reports of
// live runs of tests/core/probe and the PyTorch-profiler traces in
// tests/data/traces; and on bad inputs, which must give a clear message and
// the documented exit code (docs/cli.md: 0 ok, 1 failure, 2 usage, 3 input).
#include "tools/tool_runner.hpp"

#include <stepscope/html.hpp>
#include <stepscope/report.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#if __has_include(<stepscope/merge.hpp>)
#define STEPSCOPE_TEST_HAS_MERGE 1
#else
#define STEPSCOPE_TEST_HAS_MERGE 0
#endif

using namespace stepscope_test;

namespace {

constexpr int kOk = 0, kFailure = 1, kUsage = 2, kInputError = 3;

stepscope::Report load(const std::string& path) {
  stepscope::Report r;
  std::string error;
  INFO(error);
  REQUIRE(stepscope::load_report(path, r, error));
  return r;
}

// The bad inputs every verb that reads a report must refuse with exit code 3.
struct BadInput {
  const char* name;
  const char* expected_message;
};

void make_bad_inputs(const TempDir& dir, const std::string& good_report) {
  spit(dir / "not-json.json", "this is { not JSON\n");
  spit(dir / "empty.json", "");
  nlohmann::json j = nlohmann::json::parse(slurp(good_report));
  j["schema_version"] = 999;
  spit(dir / "future.json", j.dump());
  // A gzip stream cut in half.
  const std::string text = slurp(good_report);
  gzFile gz = gzopen((dir / "whole.json.gz").c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(gz) == Z_OK);
  const std::string whole = slurp(dir / "whole.json.gz");
  REQUIRE(whole.size() > 100);
  spit(dir / "truncated.json.gz", whole.substr(0, whole.size() / 2));
}

const BadInput kBadInputs[] = {
    {"missing.json", "cannot open"},
    {"not-json.json", "not valid JSON"},
    {"empty.json", "empty"},
    {"future.json", "unsupported schema_version 999"},
    {"truncated.json.gz", "truncated gzip"},
};

}  // namespace

TEST_CASE("help, version and usage errors", "[tools][cli]") {
  TempDir dir;
  auto r = run(dir, tool() + " --help");
  CHECK(r.status == kOk);
  for (const char* verb : {"show", "diff", "merge", "analyze", "html", "trace validate", "exit codes"})
    CHECK(contains(r.out, verb));
  for (const char* verb : {"show", "diff", "merge", "analyze", "html", "trace"}) {
    INFO(verb);
    r = run(dir, tool() + " " + verb + " --help");
    CHECK(r.status == kOk);
    CHECK(contains(r.out, std::string("usage: stepscope ") + verb));
    CHECK(run(dir, tool() + " help " + verb).out == r.out);
  }
  r = run(dir, tool() + " --version");
  CHECK(r.status == kOk);
  CHECK(contains(r.out, "report schema " + std::to_string(stepscope::kReportSchemaVersion)));

  r = run(dir, tool());
  CHECK(r.status == kUsage);
  CHECK(contains(r.err, "usage: stepscope"));
  r = run(dir, tool() + " frobnicate");
  CHECK(r.status == kUsage);
  CHECK(contains(r.err, "unknown verb 'frobnicate'"));
  r = run(dir, tool() + " show");
  CHECK(r.status == kUsage);
  CHECK(contains(r.err, "show takes exactly one REPORT"));
  r = run(dir, tool() + " show a.json --bogus");
  CHECK(r.status == kUsage);
  CHECK(contains(r.err, "unknown option '--bogus'"));
  CHECK(contains(r.err, "stepscope show --help"));
  r = run(dir, tool() + " diff only-one.json");
  CHECK(r.status == kUsage);
  r = run(dir, tool() + " html a.json -o");
  CHECK(r.status == kUsage);
  CHECK(contains(r.err, "needs a value"));
  r = run(dir, tool() + " analyze");
  CHECK(r.status == kUsage);
  r = run(dir, tool() + " analyze a.json b.json -o one.json");
  CHECK(r.status == kUsage);
  r = run(dir, tool() + " trace check x.json");
  CHECK(r.status == kUsage);
}

TEST_CASE("show prints the summary and re-emits the JSON", "[tools][cli]") {
  TempDir dir;
  REQUIRE(make_probe_report(dir, "run.json"));
  auto r = run(dir, tool() + " show run.json");
  CHECK(r.status == kOk);
  CHECK(r.err.empty());
  CHECK(contains(r.out, "== stepscope (live) =="));
  CHECK(contains(r.out, "steps: 115 measured, 5 warm-up excluded"));
  CHECK(contains(r.out, "verdict: "));
  for (const char* phase : {"data", "forward", "matmul", "optimizer", "decode"}) CHECK(contains(r.out, phase));
  const stepscope::Report original = load(dir / "run.json");
  CHECK(r.out == stepscope::format_summary(original));

  r = run(dir, tool() + " show --json run.json");
  CHECK(r.status == kOk);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema_version"] == stepscope::kReportSchemaVersion);
  CHECK(j["steps"]["count"] == 115);
  // Re-emitted JSON is the same report.
  stepscope::Report again;
  std::string error;
  REQUIRE(stepscope::report_from_json(r.out, again, error));
  CHECK(stepscope::report_to_json(again) == stepscope::report_to_json(original));

  r = run(dir, tool() + " show --reanalyze run.json");
  CHECK(r.status == kOk);
  CHECK(contains(r.out, "verdict: "));
}

TEST_CASE("every report-reading verb refuses bad inputs with exit code 3", "[tools][cli]") {
  TempDir dir;
  REQUIRE(make_probe_report(dir, "good.json"));
  make_bad_inputs(dir, dir / "good.json");
  // The gzipped whole report is fine: gzip is transparent.
  CHECK(run(dir, tool() + " show whole.json.gz").status == kOk);
  for (const auto& bad : kBadInputs) {
    for (const std::string& command :
         {"show " + std::string(bad.name), "diff good.json " + std::string(bad.name),
          "diff " + std::string(bad.name) + " good.json", "html " + std::string(bad.name) + " -o x.html",
          "merge good.json " + std::string(bad.name)}) {
      INFO(command);
      const auto r = run(dir, tool() + " " + command);
      CHECK(r.status == kInputError);
      CHECK(contains(r.err, "stepscope: error: "));
      CHECK(contains(r.err, bad.expected_message));
      CHECK(contains(r.err, bad.name));  // the message names the file
      CHECK(r.out.empty());
    }
  }
  CHECK_FALSE(exists(dir / "x.html"));
}

TEST_CASE("diff compares two runs and warns when more than one variable changed", "[tools][cli]") {
  TempDir dir;
  REQUIRE(make_probe_report(dir, "base.json"));
  stepscope::Report changed = load(dir / "base.json");
  changed.run.config["batch_size"] = "64";
  changed.run.config["optimizer"] = "adam";
  std::string error;
  REQUIRE(stepscope::write_report_file(changed, dir / "new.json", error));

  auto r = run(dir, tool() + " diff base.json new.json");
  CHECK(r.status == kOk);
  CHECK(contains(r.out, "base: base.json"));
  CHECK(contains(r.out, "batch_size: 32 -> 64"));
  CHECK(contains(r.out, "optimizer: sgd -> adam"));
  CHECK(contains(r.out, "more than one config key changed"));
  CHECK(contains(r.out, "forward"));

  // One variable: no such warning.
  changed.run.config["optimizer"] = "sgd";
  REQUIRE(stepscope::write_report_file(changed, dir / "one.json", error));
  r = run(dir, tool() + " diff base.json one.json");
  CHECK(r.status == kOk);
  CHECK(contains(r.out, "batch_size: 32 -> 64"));
  CHECK_FALSE(contains(r.out, "more than one config key changed"));
}

TEST_CASE("diff --json: the comparison as JSON, same run twice is within noise", "[tools][cli]") {
  TempDir dir;
  REQUIRE(make_probe_report(dir, "base.json"));
  // The same report against itself: no delta, no condition differs.
  auto r = run(dir, tool() + " diff --json base.json base.json");
  INFO(r.err);
  REQUIRE(r.status == kOk);
  const auto same = nlohmann::json::parse(r.out);
  CHECK(same["step"]["verdict"] == "within_noise");
  CHECK(same["conditions"]["differ"] == false);
  CHECK(same["conditions"]["reasons"].empty());
  // A run whose step thread waited for a CPU far more: conditions differ, named.
  // (The probe's own wait is set to 0 first: on a busy machine it may already
  // have waited for half of its run.)
  stepscope::Report quiet = load(dir / "base.json");
  quiet.system.runqueue_wait_s = 0;
  stepscope::Report busy = quiet;
  busy.system.runqueue_wait_s = busy.system.wall_s * 0.6;
  std::string error;
  REQUIRE(stepscope::write_report_file(quiet, dir / "base.json", error));
  REQUIRE(stepscope::write_report_file(busy, dir / "busy.json", error));
  r = run(dir, tool() + " diff --json base.json busy.json");
  REQUIRE(r.status == kOk);
  const auto differ = nlohmann::json::parse(r.out);
  CHECK(differ["conditions"]["differ"] == true);
  REQUIRE_FALSE(differ["conditions"]["reasons"].empty());
  // The text form says so before any verdict.
  r = run(dir, tool() + " diff base.json busy.json");
  CHECK(contains(r.out, "machine conditions differ"));
  CHECK(r.out.find("machine conditions differ") < r.out.find("bottleneck"));
  // Repeats: BASE... --vs NEW...; the noise is the spread between runs (here
  // none) and never below the runs' own, which is made small: on a busy
  // machine the probe's own steps may scatter by more than its mean.
  stepscope::Report steady = quiet;
  steady.steps.wall_ms.stddev = 0.01 * steady.steps.wall_ms.mean;
  for (double& v : steady.steps.series.wall_ms) v = steady.steps.wall_ms.mean;
  REQUIRE(stepscope::write_report_file(steady, dir / "base.json", error));
  stepscope::Report slower = steady;
  slower.steps.wall_ms.mean *= 1.5;
  for (double& v : slower.steps.series.wall_ms) v = slower.steps.wall_ms.mean;
  REQUIRE(stepscope::write_report_file(slower, dir / "slower.json", error));
  r = run(dir, tool() + " diff --json base.json base.json --vs slower.json slower.json slower.json");
  INFO(r.err);
  REQUIRE(r.status == kOk);
  const auto reps = nlohmann::json::parse(r.out);
  CHECK(reps["runs"]["base"] == 2);
  CHECK(reps["runs"]["new"] == 3);
  CHECK(reps["step"]["noise_method"] == "between_runs");
  CHECK(reps["step"]["verdict"] == "slower");
  r = run(dir, tool() + " diff base.json base.json --vs slower.json");
  CHECK(contains(r.out, "base: base.json base.json"));
  CHECK(contains(r.out, "spread between 2 base and 1 new runs"));
  // --vs without a base, or a lone report: usage errors.
  CHECK(run(dir, tool() + " diff --vs slower.json").status == kUsage);
  CHECK(run(dir, tool() + " diff base.json").status == kUsage);
}

TEST_CASE("analyze --hta prints HTA's tables with HTA's numbers", "[tools][cli][import]") {
  TempDir dir;
  const auto r = run(dir, tool() + " analyze -q --hta '" + shared_trace("a100_2rank_nccl.json.gz") + "' -o a.json");
  INFO(r.err);
  REQUIRE(r.status == kOk);
  // HTA 0.6.1's temporal breakdown of this trace (tests/data/traces/REFERENCE.json).
  CHECK(contains(r.out, "temporal breakdown"));
  CHECK(contains(r.out, "77.78"));
  CHECK(contains(r.out, "17.26"));
  CHECK(contains(r.out, "2516 launch/op pairs"));
  const auto shown = run(dir, tool() + " show --hta a.json");
  CHECK(shown.status == kOk);
  CHECK(contains(shown.out, "77.78"));
}

TEST_CASE("html writes a self-contained, escaped page", "[tools][cli][html]") {
  TempDir dir;
  REQUIRE(make_probe_report(dir, "run.json"));
  stepscope::Report report = load(dir / "run.json");
  // Names come from users: they must not become markup.
  report.phases.front().name = "<script>alert('x')</script>&\"";
  report.run.config["note"] = "<img src=x onerror=alert(1)>";
  report.warnings.push_back("a <b>bold</b> warning");
  std::string error;
  REQUIRE(stepscope::write_report_file(report, dir / "hostile.json", error));

  auto r = run(dir, tool() + " html run.json -o page.html");
  CHECK(r.status == kOk);
  CHECK(contains(r.err, "page.html"));
  const std::string page = slurp(dir / "page.html");
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  for (const char* id :
       {"id=\"verdict\"", "id=\"steps\"", "id=\"series-chart\"", "id=\"phase-table\"", "id=\"what-if\"",
        "id=\"findings\"", "id=\"warnings\"", "id=\"config\"", "data-rendered=\"pending\""})
    CHECK(contains(page, id));
  // Self-contained: nothing fetched from anywhere.
  for (const char* external : {"http://", "https://", "src=\"", "href=\"", "@import", "url("}) {
    INFO(external);
    CHECK_FALSE(contains(page, external));
  }

  // Default output name: the report's name with .html.
  r = run(dir, tool() + " html hostile.json");
  CHECK(r.status == kOk);
  const std::string hostile = slurp(dir / "hostile.html");
  CHECK_FALSE(contains(hostile, "<script>alert"));
  CHECK(contains(hostile, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
  CHECK_FALSE(contains(hostile, "<img src=x"));
  CHECK(contains(hostile, "&lt;img src=x onerror=alert(1)&gt;"));
  CHECK(contains(hostile, "a &lt;b&gt;bold&lt;/b&gt; warning"));

  // An output that cannot be written is a failure (1), not an input error.
  r = run(dir, tool() + " html run.json -o /nonexistent-dir/page.html");
  CHECK(r.status == kFailure);
  CHECK(contains(r.err, "cannot write the page to '/nonexistent-dir/page.html'"));
}

TEST_CASE("analyze builds a report from a real PyTorch-profiler trace", "[tools][cli][import]") {
  const std::string trace = shared_trace("v100_single_rank_compute.json.gz");
  REQUIRE(exists(trace));  // tests/data is part of the repository
  TempDir dir;
  auto r = run(dir, tool() + " analyze '" + trace + "' -o v100.json --html v100.html");
  INFO(r.err);
  REQUIRE(r.status == kOk);
  CHECK(contains(r.out, "== stepscope rank 0/1 (kineto-import) =="));
  CHECK(contains(r.out, "verdict: highly COMPUTE-bound"));
  CHECK(contains(r.err, "report written to v100.json"));
  const stepscope::Report report = load(dir / "v100.json");
  CHECK(report.run.source == "kineto-import");
  CHECK(report.bottleneck.category == "compute");
  CHECK(report.steps.count == 4);
  CHECK(exists(dir / "v100.html"));
  // The written report shows the same as the analysis printed.
  r = run(dir, tool() + " show v100.json");
  CHECK(r.status == kOk);
  CHECK(contains(r.out, "verdict: highly COMPUTE-bound"));

  // Default output name: beside the trace, or in --out-dir.
  r = run(dir, tool() + " analyze -q '" + trace + "' --out-dir .");
  CHECK(r.status == kOk);
  CHECK(r.out.empty());
  CHECK(exists(dir / "v100_single_rank_compute.stepscope.json"));
  // Read-only traces: writing beside them fails with 1.
  if (::access(shared_trace("").c_str(), W_OK) != 0) {
    r = run(dir, tool() + " analyze -q '" + trace + "'");
    CHECK(r.status == kFailure);
    CHECK(contains(r.err, "cannot write the report"));
  }
}

TEST_CASE("analyze refuses bad traces with exit code 3", "[tools][cli][import]") {
  TempDir dir;
  spit(dir / "not-json.json", "<html>not a trace</html>");
  spit(dir / "no-events.json", "{\"schemaVersion\": 1}");
  const std::string trace = shared_trace("mi250_minitoy.json.gz");
  std::vector<std::string> bad = {"missing.json.gz", "not-json.json", "no-events.json"};
  if (exists(trace)) {
    const std::string whole = slurp(trace);
    spit(dir / "truncated.json.gz", whole.substr(0, whole.size() / 2));
    bad.push_back("truncated.json.gz");
  }
  for (const auto& name : bad) {
    INFO(name);
    const auto r = run(dir, tool() + " analyze " + name + " -o out.json");
    INFO(r.err);
    CHECK(r.status == kInputError);
    CHECK(contains(r.err, "stepscope: error: "));
    CHECK(contains(r.err, name));
    CHECK_FALSE(exists(dir / "out.json"));
  }
}

#if STEPSCOPE_TEST_HAS_MERGE
TEST_CASE("merge joins the reports of a job's ranks", "[tools][cli][merge]") {
  TempDir dir;
  // {rank} in the path: a multi-rank run's STEPSCOPE_OUT without it gets
  // ".rank<N>" inserted (ranks must not share a file).
  REQUIRE(
      make_probe_report(dir, "rank0.json", "RANK=0 WORLD_SIZE=2 STEPSCOPE_OUT='" + (dir / "rank{rank}.json") + "'"));
  REQUIRE(
      make_probe_report(dir, "rank1.json", "RANK=1 WORLD_SIZE=2 STEPSCOPE_OUT='" + (dir / "rank{rank}.json") + "'"));
  auto r = run(dir, tool() + " merge rank0.json rank1.json -o job.json --html job.html");
  INFO(r.err);
  REQUIRE(r.status == kOk);
  CHECK(contains(r.err, "merged report of 2 ranks written to job.json"));
  CHECK(contains(r.out, "verdict: "));
  const stepscope::Report job = load(dir / "job.json");
  CHECK(job.run.source == "merge");
  REQUIRE(job.ranks.has_value());
  CHECK(job.ranks->ranks_merged == 2);
  CHECK(job.ranks->ranks.size() == 2);
  const std::string page = slurp(dir / "job.html");
  CHECK(contains(page, "id=\"ranks\""));
  CHECK(contains(page, "id=\"rank-table\""));

  // A merged report cannot be merged again: the merge fails (1).
  r = run(dir, tool() + " merge job.json rank0.json -o again.json");
  CHECK(r.status == kFailure);
  CHECK(contains(r.err, "cannot merge"));
  CHECK_FALSE(exists(dir / "again.json"));
  r = run(dir, tool() + " merge");
  CHECK(r.status == kUsage);
}

TEST_CASE("analyze --merge joins the traces of two ranks", "[tools][cli][merge][import]") {
  const std::string rank0 = shared_trace("sampled_128rank_rank0.json.gz"),
                    rank1 = shared_trace("sampled_128rank_rank1.json.gz");
  REQUIRE(exists(rank0));  // tests/data is part of the repository
  REQUIRE(exists(rank1));
  TempDir dir;
  const auto r =
      run(dir, tool() + " analyze --merge '" + rank0 + "' '" + rank1 + "' --out-dir . -o job.json --html job.html");
  INFO(r.err);
  REQUIRE(r.status == kOk);
  CHECK(exists(dir / "sampled_128rank_rank0.stepscope.json"));
  CHECK(exists(dir / "sampled_128rank_rank1.stepscope.json"));
  const stepscope::Report job = load(dir / "job.json");
  CHECK(job.run.source == "merge");
  REQUIRE(job.ranks.has_value());
  CHECK(job.ranks->ranks_merged == 2);
  CHECK(contains(slurp(dir / "job.html"), "id=\"rank-chart\""));
}
#endif

TEST_CASE("the exported Chrome trace is structurally sound", "[tools][cli][trace]") {
  TempDir dir;
  const auto probe_run = run(dir, "env STEPSCOPE_QUIET=1 STEPSCOPE_TRACE=10-12 STEPSCOPE_TRACE_OUT='" +
                                      (dir / "trace.json.gz") + "' " + probe() + " workload 40");
  REQUIRE(probe_run.status == 0);
  REQUIRE(exists(dir / "trace.json.gz"));

  // Independently of the tool: parse it and check what viewers rely on.
  const auto doc = nlohmann::json::parse(slurp_maybe_gzip(dir / "trace.json.gz"));
  REQUIRE(doc.contains("traceEvents"));
  const auto& events = doc["traceEvents"];
  double last_ts = -1;
  std::set<std::int64_t> named_threads, used_threads;
  bool process_named = false;
  std::set<std::string> steps;
  std::set<std::string> phases;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    if (ph == "M") {
      if (e.at("name") == "process_name") process_named = !e.at("args").at("name").get<std::string>().empty();
      if (e.at("name") == "thread_name") named_threads.insert(e.at("tid").get<std::int64_t>());
      continue;
    }
    if (ph != "X") continue;
    REQUIRE(e.at("ts").is_number());
    REQUIRE(e.at("dur").is_number());
    CHECK(e.at("dur").get<double>() >= 0);
    CHECK(e.at("ts").get<double>() >= last_ts);  // sorted
    last_ts = e.at("ts").get<double>();
    used_threads.insert(e.at("tid").get<std::int64_t>());
    if (e.at("cat") == "step")
      steps.insert(e.at("name").get<std::string>());
    else
      phases.insert(e.at("name").get<std::string>());
  }
  CHECK(process_named);
  for (auto tid : used_threads) CHECK(named_threads.count(tid) == 1);
  CHECK(steps == std::set<std::string>{"step 10", "step 11", "step 12"});
  for (const char* phase : {"data", "forward", "matmul", "optimizer"}) CHECK(phases.count(phase) == 1);

  // The tool's validator agrees.
  auto r = run(dir, tool() + " trace validate trace.json.gz");
  INFO(r.out << r.err);
  CHECK(r.status == kOk);
  CHECK(contains(r.out, "3 steps marked"));
  CHECK(contains(r.out, "valid\n"));

  // And it catches what is wrong: unsorted, partial overlap, no metadata, no steps.
  spit(
      dir / "bad.json",
      R"({"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":10,"dur":5},)"
      R"({"ph":"X","name":"b","pid":1,"tid":1,"ts":8,"dur":5},{"ph":"X","name":"c","pid":1,"tid":2,"ts":20,"dur":-1}]})");
  r = run(dir, tool() + " trace validate bad.json");
  CHECK(r.status == kFailure);
  CHECK(contains(r.out, "not sorted"));
  CHECK(contains(r.out, "overlaps its parent"));
  CHECK(contains(r.out, "negative dur"));
  CHECK(contains(r.out, "no process_name"));
  CHECK(contains(r.out, "no thread_name"));
  CHECK(contains(r.out, "no step marked"));
  CHECK(contains(r.out, "INVALID"));
  // Another producer's trace: steps are not required with --any-producer.
  const std::string kineto = shared_trace("mi250_minitoy.json.gz");
  if (exists(kineto)) {
    r = run(dir, tool() + " trace validate --any-producer '" + kineto + "'");
    INFO(r.out);
    CHECK(r.status != kInputError);
  }
  // Unreadable: 3.
  spit(dir / "junk.json", "not json");
  CHECK(run(dir, tool() + " trace validate junk.json").status == kInputError);
  CHECK(run(dir, tool() + " trace validate missing.json").status == kInputError);
}

TEST_CASE("the HTML page survives empty and hostile reports", "[tools][html]") {
  // Nothing measured: every section still renders and says so.
  const std::string empty = stepscope::html_report(stepscope::Report{});
  CHECK(contains(empty, "No measured steps"));
  CHECK(contains(empty, "No per-step series"));
  CHECK(contains(empty, "No phases were recorded"));
  CHECK(contains(empty, "data-rendered=\"pending\""));
  CHECK(contains(empty, "</html>"));

  // Non-finite and negative numbers never reach SVG coordinates as nan/inf.
  stepscope::Report r;
  r.steps.count = 3;
  r.steps.wall_ms.mean = std::nan("");
  r.steps.breakdown.wall_ms = 10;
  r.steps.breakdown.kind_ms[stepscope::PhaseKind::compute] = std::numeric_limits<double>::infinity();
  r.steps.breakdown.kind_ms[stepscope::PhaseKind::input] = -5;
  r.steps.series.stride = 1;
  r.steps.series.first_step = {5, 6, 7};
  r.steps.series.wall_ms = {10, std::nan(""), 1e308};
  r.steps.series.kind_ms[stepscope::PhaseKind::compute] = {std::numeric_limits<double>::infinity(), 2, 3};
  r.steps.series.kind_ms[stepscope::PhaseKind::input] = {-1, 1};  // shorter than the others
  stepscope::PhaseSummary p;
  p.name = "x";
  p.count = 2;
  p.host_ms.min = 0;
  p.host_ms.max = std::nan("");
  p.histogram.sub_bucket_bits = 7;
  p.histogram.buckets = {{4000000000u, 1}, {5, 2}};
  r.phases.push_back(p);
  r.bottleneck.ranking = {{"compute", std::nan("")}, {"io", 2.0}};
  const std::string page = stepscope::html_report(r);
  for (const char* bad : {"=\"nan", "=\"inf", "=\"-nan", ",nan", ",inf", "nan ", "inf "}) {
    INFO(bad);
    CHECK_FALSE(contains(page, bad));
  }
  CHECK(contains(page, "</html>"));
}

TEST_CASE("the HTML page names the gaps between steps() loops (epoch boundaries)", "[tools][html]") {
  stepscope::Report r;
  r.steps.count = 20;
  r.steps.coverage = 1.0;
  CHECK_FALSE(contains(stepscope::html_report(r), "id=\"loop-boundaries\""));
  r.steps.loop_boundaries = 2;
  r.steps.between_loops_ms = 20.8;
  const std::string page = stepscope::html_report(r);
  CHECK(contains(page, "id=\"loop-boundaries\""));
  CHECK(contains(page, "2 gaps between <code>steps()</code> loops"));
}
