// The run time end to end, each case in its own process (tests/core/probe.cpp):
// report fields for a known workload, STEPSCOPE=0, bad environment values,
// an unwritable output path, {rank}, thread exit, fork.
#include <stepscope/merge.hpp>
#include <stepscope/report.hpp>

#include "common/files.hpp"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>

using namespace stepscope;
using stepscope_test::slurp;
using stepscope_test::TempDir;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Runs the probe with extra environment in `dir`; returns the exit status.
int run_probe(const TempDir& dir, const std::string& env, const std::string& args) {
  const std::string cmd = "cd '" + dir.path + "' && env STEPSCOPE_QUIET=1 TMPDIR='" + dir.path + "' " + env + " '" +
                          STEPSCOPE_PROBE + "' " + args + " 2>'" + dir.path + "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Report load(const std::string& path) {
  Report r;
  std::string error;
  INFO(error);
  REQUIRE(load_report(path, r, error));
  return r;
}

const PhaseSummary* find(const Report& r, const std::string& name, ThreadRole role) {
  for (const auto& p : r.phases)
    if (p.name == name && p.thread_role == role) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("a known workload gives a complete, correct report", "[runtime]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "", "workload 120") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(r.schema_version == kReportSchemaVersion);
  CHECK(r.run.source == "live");
  CHECK(r.run.pid > 0);
  CHECK(!r.run.host.empty());
  CHECK(!r.run.library_version.empty());
  CHECK((r.run.clock_source == "tsc" || r.run.clock_source == "clock_monotonic"));
  CHECK(r.run.config.at("batch_size") == "32");
  CHECK(r.run.config_types.at("batch_size") == "number");
  CHECK(r.run.config.at("optimizer") == "sgd");
  CHECK(r.run.warmup_steps == 5);
  CHECK(r.run.warmup_source == "default");
  // Every step noted its collectives (warm-up too: the advice reads ratios).
  CHECK(r.communication.collectives == 2 * 120);
  CHECK(r.communication.bytes == 120 * 2 * 4096);
  CHECK(r.communication.steps == 120);
  CHECK(r.steps.warmup_excluded == 5);
  CHECK(r.dropped_records == 0);
  // Each step is at least the 1.1 ms of spinning in it.
  CHECK(r.steps.wall_ms.min >= 1.1);
  CHECK(r.steps.wall_ms.p50 <= r.steps.wall_ms.p90);
  CHECK(r.steps.wall_ms.p90 <= r.steps.wall_ms.p99);
  CHECK(r.steps.wall_ms.p99 <= r.steps.wall_ms.max);

  const auto* data = find(r, "data", ThreadRole::step);
  const auto* forward = find(r, "forward", ThreadRole::step);
  const auto* matmul = find(r, "matmul", ThreadRole::step);
  const auto* optimizer = find(r, "optimizer", ThreadRole::step);
  const auto* decode = find(r, "decode", ThreadRole::background);
  REQUIRE(data);
  REQUIRE(forward);
  REQUIRE(matmul);
  REQUIRE(optimizer);
  REQUIRE(decode);
  CHECK(data->kind == PhaseKind::input);
  CHECK(forward->kind == PhaseKind::compute);
  CHECK(optimizer->kind == PhaseKind::compute);
  CHECK(data->count == 115);
  CHECK(data->host_ms.min >= 0.3);
  CHECK(matmul->host_ms.min >= 0.4);
  // forward's inclusive time holds matmul; its self time does not.
  CHECK(forward->host_ms.mean >= forward->self_ms.mean + matmul->host_ms.mean * 0.99);
  CHECK(forward->self_ms.min >= 0.2);
  // Shares are self time over the measured steps' wall time in the breakdown
  // (each step with the gap before it: here the loop's own increment) (the
  // spun durations are lower bounds only: a loaded machine stretches them).
  const double breakdown_total_ms = r.steps.breakdown.wall_ms * static_cast<double>(r.steps.count);
  CHECK(data->share_of_step == Approx(data->self_ms.total / breakdown_total_ms).epsilon(1e-9));
  CHECK(matmul->share_of_step == Approx(matmul->self_ms.total / breakdown_total_ms).epsilon(1e-9));
  REQUIRE(r.steps.coverage.has_value());
  CHECK(*r.steps.coverage > 0.9);  // back-to-back STEPSCOPE_STEP scopes
  CHECK(data->share_of_step > 0.05);
  CHECK(matmul->share_of_step > 0.05);
  // The background loader is off the critical path.
  CHECK(decode->share_of_step == 0);
  CHECK(decode->overlap_with_steps.has_value());
  const auto& b = r.steps.breakdown;
  CHECK(std::accumulate(b.kind_ms.begin(), b.kind_ms.end(), 0.0) + b.unattributed_ms + b.between_steps_ms ==
        Approx(b.wall_ms).epsilon(1e-6));
  CHECK(b.unattributed_ms >= 0.1);
  CHECK(r.steps.series.wall_ms.size() >= 1);
  CHECK(r.system.available);
  CHECK(r.system.samples > 0);
  // No GPU here: the device section says why device timing is absent.
  CHECK(!r.device.status.empty());
  CHECK(!r.device.reason.empty());
  CHECK(!r.bottleneck.category.empty());
}

TEST_CASE("STEPSCOPE=0 records nothing and writes no report", "[runtime]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE=0", "workload 20") == 0);
  CHECK_FALSE(exists(dir.path + "/stepscope-report.json"));
}

TEST_CASE("bad environment values: one clear warning each, safe defaults", "[runtime]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_WARMUP=lots STEPSCOPE_RING_RECORDS=3 STEPSCOPE_INTERVAL_MS=-1", "workload 30") ==
          0);
  const std::string err = slurp(dir.path + "/stderr.txt");
  CHECK(err.find("STEPSCOPE_WARMUP='lots' is invalid") != std::string::npos);
  CHECK(err.find("STEPSCOPE_RING_RECORDS='3' is invalid") != std::string::npos);
  CHECK(err.find("STEPSCOPE_INTERVAL_MS='-1' is invalid") != std::string::npos);
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(r.run.warmup_steps == 5);
  CHECK(r.steps.count == 25);
  CHECK(r.warnings.size() >= 3);
}

TEST_CASE("an unwritable output path falls back, with a clear message", "[runtime]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_OUT=/proc/no/such/dir/report.json", "workload 20") == 0);
  const std::string err = slurp(dir.path + "/stderr.txt");
  CHECK(err.find("cannot write the report to '/proc/no/such/dir/report.json'") != std::string::npos);
  // The fallback is $TMPDIR/stepscope-report.<pid>.json.
  std::string fallback;
  const auto at = err.find("writing it to '");
  REQUIRE(at != std::string::npos);
  fallback = err.substr(at + 15, err.find('\'', at + 15) - (at + 15));
  CHECK(fallback.rfind(dir.path, 0) == 0);
  const Report r = load(fallback);
  CHECK(r.steps.count == 15);
  CHECK(r.warnings.back().find("cannot write the report") != std::string::npos);
}

TEST_CASE("rank from the launcher names the report", "[runtime]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "RANK=2 WORLD_SIZE=4", "workload 10") == 0);
  const Report r = load(dir.path + "/stepscope-report.rank2.json");
  CHECK(r.run.rank == 2);
  CHECK(r.run.world_size == 4);
  REQUIRE(run_probe(dir, "RANK=1 WORLD_SIZE=4 STEPSCOPE_OUT=custom-{rank}.json", "workload 10") == 0);
  CHECK(load(dir.path + "/custom-1.json").run.rank == 1);
}

TEST_CASE("processes that no rank tells apart keep a report each; a rerun replaces the earlier run's", "[runtime]") {
  // torch.multiprocessing / mp.spawn workers without RANK, or two runs from
  // one directory: both want ./stepscope-report.json. Both run at once, each
  // rewriting its own file with snapshots every 0.1 s.
  TempDir dir;
  const std::string probe = std::string("'") + STEPSCOPE_PROBE + "'";
  const std::string both = "cd '" + dir.path + "' && export STEPSCOPE_QUIET=1 STEPSCOPE_SNAPSHOT_S=0.1 && (" + probe +
                           " workload 500 2>a.err & " + probe + " workload 500 2>b.err; wait)";
  REQUIRE(std::system(both.c_str()) == 0);
  std::vector<std::string> reports;
  if (DIR* d = ::opendir(dir.path.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, "stepscope-report", 16) == 0) reports.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(reports.begin(), reports.end());
  INFO("a.err: " << slurp(dir.path + "/a.err") << "\nb.err: " << slurp(dir.path + "/b.err"));
  REQUIRE(reports.size() == 2);
  CHECK(reports[0].rfind("stepscope-report.json", 0) == 0);
  REQUIRE(reports[1].rfind("stepscope-report.pid", 0) == 0);
  const Report first = load(dir.path + "/" + reports[0]);
  const Report moved = load(dir.path + "/" + reports[1]);
  CHECK(first.run.pid != moved.run.pid);
  CHECK(reports[1] == "stepscope-report.pid" + std::to_string(moved.run.pid) + ".json");
  CHECK(first.complete);
  CHECK(moved.complete);
  CHECK(first.steps.count == 495);
  CHECK(moved.steps.count == 495);
  const auto says_moved = [](const Report& r) {
    return std::any_of(r.warnings.begin(), r.warnings.end(), [](const std::string& w) {
      return w.find("holds the report of another process that ran at the same time") != std::string::npos;
    });
  };
  CHECK(says_moved(moved));
  CHECK_FALSE(says_moved(first));
  CHECK((slurp(dir.path + "/a.err") + slurp(dir.path + "/b.err")).find("instead of replacing it") != std::string::npos);
  // Run again alone: the earlier run's report is replaced, without a word.
  REQUIRE(run_probe(dir, "", "workload 20") == 0);
  const Report rerun = load(dir.path + "/stepscope-report.json");
  CHECK(rerun.steps.count == 15);
  CHECK(rerun.run.pid != first.run.pid);
  CHECK_FALSE(says_moved(rerun));
  CHECK(slurp(dir.path + "/stderr.txt").empty());
}

TEST_CASE("two jobs in one directory: the second's ranks and job report are told apart", "[runtime]") {
  // Each job's rank 0 wants ./stepscope-report.rank0.json; the rank is set,
  // so the advice is a per-job name, not a rank.
  TempDir dir;
  const std::string probe = std::string("'") + STEPSCOPE_PROBE + "'";
  const std::string both = "cd '" + dir.path +
                           "' && export STEPSCOPE_QUIET=1 STEPSCOPE_SNAPSHOT_S=0.1 RANK=0 WORLD_SIZE=2 && (" + probe +
                           " workload 300 2>a.err & " + probe + " workload 300 2>b.err; wait)";
  REQUIRE(std::system(both.c_str()) == 0);
  const std::string err = slurp(dir.path + "/a.err") + slurp(dir.path + "/b.err");
  INFO(err);
  CHECK(err.find("holds the report of another process of the same rank (another job)") != std::string::npos);
  CHECK(err.find("put {pid} or the job's name in STEPSCOPE_OUT") != std::string::npos);
  CHECK(err.find("no rank tells") == std::string::npos);

  // The job report: one another job wrote while this process ran stays.
  const std::string merged = dir.path + "/stepscope-report.merged.json";
  stepscope_test::spit(merged, "{\"theirs\": true}\n");
  Report job;
  job.ranks.emplace();
  std::string error;
  const std::string written = write_job_report(job, merged, error);
  INFO(error);
  CHECK(written == dir.path + "/stepscope-report.merged.pid" + std::to_string(::getpid()) + ".json");
  CHECK(slurp(merged) == "{\"theirs\": true}\n");
  REQUIRE(stepscope_test::exists(written));
  REQUIRE_FALSE(job.warnings.empty());
  CHECK(job.warnings.back().find("holds the job report of another job that ran at the same time") != std::string::npos);
  CHECK(job.warnings.back().find("STEPSCOPE_MERGED_OUT") != std::string::npos);
  // One from before this process started (an earlier run's) is replaced.
  const timespec long_ago[2] = {{1'000'000'000, 0}, {1'000'000'000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, merged.c_str(), long_ago, 0) == 0);
  Report next;
  next.ranks.emplace();
  CHECK(write_job_report(next, merged, error) == merged);
  CHECK(next.warnings.empty());
  CHECK(slurp(merged).find("theirs") == std::string::npos);
  // {pid} in the path, as the advice says.
  Report named;
  named.ranks.emplace();
  CHECK(write_job_report(named, dir.path + "/job-{pid}.json", error) ==
        dir.path + "/job-" + std::to_string(::getpid()) + ".json");
}

TEST_CASE("threads that exit lose nothing they recorded", "[runtime][concurrency]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_WARMUP=0", "threads 8") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  const auto* work = find(r, "work", ThreadRole::background);
  REQUIRE(work);
  CHECK(work->count + r.dropped_records == 8000);
  CHECK(work->threads == 8);
  CHECK(r.total_records == 8000);
}

TEST_CASE("a process that marks no steps has its phases counted, not taken for warm-up", "[runtime]") {
  // With the default warm-up (5 steps), every record of a process that never
  // started a step counted as warm-up: a user who wrapped forward, backward
  // and optimizer but marked no steps read "count 0, mean 0.000" for each.
  TempDir dir;
  REQUIRE(run_probe(dir, "", "threads 8") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  REQUIRE(r.steps.count + r.steps.warmup_excluded == 0);
  const auto* work = find(r, "work", ThreadRole::background);
  REQUIRE(work);
  CHECK(work->count + r.dropped_records == 8000);
  CHECK_FALSE(work->overlap_with_steps);  // no steps: nothing to overlap
}

TEST_CASE("a forked child records nothing and writes no report", "[runtime]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "", "fork") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(r.run.pid > 0);
  CHECK(r.steps.count + r.steps.warmup_excluded == 40);  // the parent's steps only
  // Only the parent's report exists.
  const int files = std::system(("test $(ls '" + dir.path + "' | grep -c '^stepscope-report') -eq 1").c_str());
  CHECK(files == 0);
}

TEST_CASE("an output path that is a FIFO or device is written in place, never replaced", "[runtime]") {
  TempDir dir;
  const std::string fifo = dir.path + "/report.fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // A reader drains the FIFO into a file while the probe writes the report.
  const std::string reader = "cat '" + fifo + "' > '" + dir.path + "/from_fifo.json' &";
  REQUIRE(std::system(reader.c_str()) == 0);
  REQUIRE(run_probe(dir, "STEPSCOPE_OUT='" + fifo + "'", "workload 10") == 0);
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));  // still a FIFO: not renamed over
  // The probe has exited; the reader may still be copying (the report
  // crosses the pipe in several writes): wait until what it copied parses.
  Report r;
  std::string error;
  bool parsed = false;
  for (int i = 0; i < 250 && !parsed; ++i) {
    parsed = report_from_json(slurp(dir.path + "/from_fifo.json"), r, error);
    if (!parsed) usleep(20000);
  }
  INFO(error);
  CHECK(parsed);
  CHECK(r.steps.count == 5);
}

TEST_CASE("at exit the report is written before exit handlers registered before stepscope started", "[runtime]") {
  // The CUDA runtime registers its own exit handler when a program first
  // uses CUDA; finish() must run before it (exit handlers run in reverse
  // order), so its registration comes after the collector started.
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_CUDA=0", "exit-order 20") == 0);
  REQUIRE(exists(dir.path + "/stepscope-report.json"));
  CHECK(slurp(dir.path + "/early-handler.txt") == "report-present=1\n");
}

TEST_CASE("a process that exits right after its first step still writes its report", "[runtime]") {
  TempDir dir;
  for (int i = 0; i < 5; ++i) {
    REQUIRE(run_probe(dir, "STEPSCOPE_CUDA=0 STEPSCOPE_WARMUP=0", "exit-quick") == 0);
    const std::string path = dir.path + "/stepscope-report.json";
    REQUIRE(exists(path));
    const Report r = load(path);
    CHECK(r.steps.count == 1);
    ::unlink(path.c_str());
  }
}

TEST_CASE("STEPSCOPE_QUIET=1 keeps stderr silent, the device notice included", "[runtime]") {
  // No GPU here: the device notice (why device timing is absent) goes to the
  // report's device section, not to stderr.
  TempDir dir;
  REQUIRE(run_probe(dir, "", "workload 10") == 0);
  CHECK(slurp(dir.path + "/stderr.txt").empty());
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(!r.device.reason.empty());
}

TEST_CASE("the STEPSCOPE_TRACE file lands beside the report, not in the working directory", "[runtime]") {
  TempDir dir;
  REQUIRE(::mkdir((dir.path + "/out").c_str(), 0755) == 0);
  REQUIRE(run_probe(dir, "STEPSCOPE_OUT=out/report.json STEPSCOPE_TRACE=2-4", "workload 10") == 0);
  CHECK(exists(dir.path + "/out/report.json"));
  CHECK(exists(dir.path + "/out/stepscope-trace.json.gz"));
  CHECK_FALSE(exists(dir.path + "/stepscope-trace.json.gz"));
}

TEST_CASE("the collector's CPU line never claims more than one core for a run shorter than its start-up",
          "[runtime][summary]") {
  // Issue 29: a process that recorded almost nothing printed "281.69% of one
  // core": the collector's CPU time includes its start-up (the device probe),
  // the run's wall time does not.
  stepscope::Report r;
  r.system.wall_s = 0.004;
  r.system.collector_cpu_ms = 11.3;
  const std::string text = stepscope::format_summary(r);
  INFO(text);
  CHECK(text.find("of one core") == std::string::npos);
  CHECK(text.find("11.3 ms of CPU on its collector thread, start-up included") != std::string::npos);
  r.system.wall_s = 10;
  CHECK(stepscope::format_summary(r).find("(0.11% of one core over 10.0 s)") != std::string::npos);
}
