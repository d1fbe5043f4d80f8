// End-to-end verdicts: each scenario of examples/scenarios (and the MLP demo)
// runs as its own process with a known bottleneck; the test loads the report
// it wrote and checks the analyzer named that bottleneck, with evidence and
// advice, and that the what-if projection matches a measured change.
//
// The machine these run on is shared. A step thread that waits for a CPU
// (runqueue wait, measured by the kernel and stored in the report) is a real
// scheduling bottleneck, so a CPU-bound scenario run on a saturated machine
// is — correctly — not the scenario it was built to be. Such a run is
// repeated (up to 3 attempts); if every attempt was starved the case exits
// with code 77, which ctest reports as "skipped", never as passed.
#include <stepscope/analysis.hpp>
#include <stepscope/report.hpp>

#include "common/files.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

using namespace stepscope;
using stepscope_test::slurp;
using stepscope_test::TempDir;

namespace {

// Exit code ctest maps to "skipped" (SKIP_RETURN_CODE in CMakeLists.txt).
constexpr int kSkipExitCode = 77;
// A step thread runnable-but-waiting for a CPU at least this fraction of the
// run was starved by other load: the run is not the scenario it was built to be.
constexpr double kStarvedRunqueueFraction = 0.25;
constexpr int kAttempts = 3;
// The pipeline what-if's accuracy (10%) is judged only on runs whose step
// thread waited for a CPU less than this share of the run.
constexpr double kWhatIfQuietRunqueueFraction = 0.10;
// A run whose step thread waited for a CPU at least this fraction of the run
// shares its cores with other load: its step time carries that load's noise
// (a diff may rightly call a 27% change "within noise"), and a background
// loader that has little to do waits for a CPU too (scheduling, not compute).
constexpr double kContendedRunqueueFraction = 0.10;
// Other processes used at least this share of the machine's cores during a
// run: it shared the machine, even where its own threads never waited for a
// CPU (a hyperthread sibling or the memory bus: CI once measured the same
// compute 1.7x slower in B than in A with 0.03% runqueue wait).
constexpr double kSharedMachineFraction = 0.25;

// The shell command that runs `program args` with its report going to
// `dir/name.json` and its output to `dir/name.out` / `dir/name.err`.
std::string command_for(const std::string& dir, const std::string& name, const std::string& program,
                        const std::string& args) {
  return "env STEPSCOPE_QUIET=1 TMPDIR='" + dir + "' STEPSCOPE_OUT='" + dir + "/" + name + ".json' '" + program + "' " +
         args + " >'" + dir + "/" + name + ".out' 2>'" + dir + "/" + name + ".err'";
}

int run_shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Report load(const std::string& path) {
  Report r;
  std::string error;
  INFO("report " << path << ": " << error);
  REQUIRE(load_report(path, r, error));
  return r;
}

double runqueue_fraction(const Report& r) {
  return r.system.wall_s > 0 ? r.system.runqueue_wait_s / r.system.wall_s : 0.0;
}

bool starved(const Report& r) {
  return runqueue_fraction(r) >= kStarvedRunqueueFraction;
}
bool contended(const Report& r) {
  return runqueue_fraction(r) >= kContendedRunqueueFraction;
}
// The share of the machine's cores other processes kept busy during the run
// (-1 where the report could not tell).
double others_fraction(const Report& r) {
  const auto& s = r.system;
  if (s.other_processes_cpu_s < 0 || s.wall_s <= 0 || s.cores_online <= 0) return -1;
  return s.other_processes_cpu_s / (s.wall_s * s.cores_online);
}
// A run that had the machine to itself: fit for comparing with another run.
bool quiet(const Report& r) {
  return !contended(r) && others_fraction(r) < kSharedMachineFraction;
}

// The scenario's own setup (not the product) did not hold in any attempt.
[[noreturn]] void skip_setup(const TempDir& dir, const std::string& what, const std::string& why) {
  std::fprintf(stderr, "SKIPPED %s: in all %d attempts %s; the machine did not run this scenario as built.\n",
               what.c_str(), kAttempts, why.c_str());
  dir.remove();
  std::exit(kSkipExitCode);
}

[[noreturn]] void skip_starved(const TempDir& dir, const std::string& what, const Report& last) {
  std::fprintf(stderr,
               "SKIPPED %s: in all %d attempts the step thread waited for a CPU >= %.0f%% of the run "
               "(last: %.0f%%); the machine is too busy for this scenario to be what it was built to be.\n",
               what.c_str(), kAttempts, 100 * kStarvedRunqueueFraction, 100 * runqueue_fraction(last));
  dir.remove();
  std::exit(kSkipExitCode);
}

std::string describe(const Report& r) {
  std::ostringstream out;
  out << "verdict " << r.bottleneck.category << " (" << r.bottleneck.severity << ", confidence "
      << r.bottleneck.confidence << "): " << r.bottleneck.summary << "\n";
  out << "step " << r.steps.wall_ms.mean << " ms over " << r.steps.count << " steps; runqueue "
      << 100 * runqueue_fraction(r) << "%; other processes " << 100 * others_fraction(r) << "% of the cores\n";
  for (const auto& [category, cost] : r.bottleneck.ranking) out << "  cost " << category << " " << cost << "\n";
  for (const auto& e : r.bottleneck.evidence)
    out << "  " << (e.supports ? "+" : " ") << " " << e.signal << " = " << e.value << " (" << e.comparison << " "
        << e.threshold << ")\n";
  return out.str();
}

// Runs `program args` until `expected` holds or a run was not starved of CPU
// (then its report is returned as is, to be checked); skips when every
// attempt was starved.
Report run_expecting(const TempDir& dir, const std::string& name, const std::string& program, const std::string& args,
                     const std::function<bool(const Report&)>& expected) {
  Report r;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    const std::string tag = name + "-" + std::to_string(attempt);
    const int status = run_shell(command_for(dir.path, tag, program, args));
    INFO("stderr: " << slurp(dir.path + "/" + tag + ".err"));
    REQUIRE(status == 0);
    r = load(dir.path + "/" + tag + ".json");
    if (expected(r) || !starved(r)) return r;
    WARN(name << " attempt " << attempt << " starved of CPU: " << describe(r));
    ::sleep(2);
  }
  skip_starved(dir, name, r);
}

Report run_scenario(const TempDir& dir, const std::string& scenario, int steps,
                    const std::function<bool(const Report&)>& expected) {
  return run_expecting(dir, scenario, STEPSCOPE_SCENARIOS,
                       "--scenario " + scenario + " --steps " + std::to_string(steps), expected);
}

std::function<bool(const Report&)> category_is(const std::string& category) {
  return [category](const Report& r) { return r.bottleneck.category == category; };
}

const Evidence* evidence(const Report& r, const std::string& signal) {
  for (const auto& e : r.bottleneck.evidence)
    if (e.signal == signal) return &e;
  return nullptr;
}

// The verdict is backed: one of its own share signals crossed its threshold,
// and there is advice.
void check_backed(const Report& r, std::initializer_list<const char*> signals) {
  INFO(describe(r));
  CHECK(std::any_of(signals.begin(), signals.end(), [&](const char* signal) {
    const Evidence* e = evidence(r, signal);
    return e != nullptr && e->supports;
  }));
  CHECK(std::count_if(r.bottleneck.evidence.begin(), r.bottleneck.evidence.end(),
                      [](const Evidence& x) { return x.supports; }) >= 1);
  CHECK(!r.bottleneck.recommendations.empty());
  CHECK(r.bottleneck.confidence > 0);
  CHECK(!r.bottleneck.summary.empty());
  CHECK(r.dropped_records == 0);
}

const PhaseSummary* phase(const Report& r, const std::string& name, ThreadRole role) {
  for (const auto& p : r.phases)
    if (p.name == name && p.thread_role == role) return &p;
  return nullptr;
}

const WhatIf* what_if(const Report& r, const std::string& target, double speedup) {
  for (const auto& w : r.what_if)
    if (w.target == target && w.speedup == speedup) return &w;
  return nullptr;
}

}  // namespace

TEST_CASE("io: a loader reading cold files through a slow volume starves the step", "[scenarios][io]") {
  TempDir dir;
  const Report r = run_scenario(dir, "io", 150, category_is("io"));
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "io");
  check_backed(r, {"input_share"});
  // The loader's read and decode run on a background thread: shown, not counted as waiting.
  const PhaseSummary* read = phase(r, "read", ThreadRole::background);
  REQUIRE(read != nullptr);
  CHECK(read->share_of_step == 0);
  // The step waits (off CPU) rather than works in its input phase.
  if (r.system.input_on_cpu_fraction >= 0) CHECK(r.system.input_on_cpu_fraction < 0.5);
  CHECK(r.steps.breakdown.kind_ms[PhaseKind::input] > 2 * r.steps.breakdown.kind_ms[PhaseKind::compute]);
}

TEST_CASE("compute: matrix math dominates the step", "[scenarios][compute]") {
  TempDir dir;
  const Report r = run_scenario(dir, "compute", 150, category_is("compute"));
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "compute");
  check_backed(r, {"compute_share"});
  if (r.system.compute_on_cpu_fraction >= 0) CHECK(r.system.compute_on_cpu_fraction >= 0.5);
}

TEST_CASE("memory: fresh pages and large copies every step", "[scenarios][memory]") {
  TempDir dir;
  const Report r = run_scenario(dir, "memory", 150, category_is("memory"));
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "memory");
  check_backed(r, {"memory_share"});
  // 8 MiB of fresh 4 KiB pages per step: the page-fault storm is in the evidence.
  const Evidence* faults = evidence(r, "minor_faults_per_step");
  REQUIRE(faults != nullptr);
  CHECK(faults->supports);
  CHECK(faults->value >= 1500);
}

TEST_CASE("warm-up: 256 MiB touched once in the first step is start-up, not the measured steps' page faults",
          "[scenarios][warmup-init]") {
  // Issue 32: a 50-step run charged the process's faults and kernel time
  // (start-up, warm-up, lazy initialisation in the first step) to its steps:
  // "page faults 15% of the step" and a page_fault_storm finding.
  TempDir dir;
  const Report r = run_scenario(dir, "warmup-init", 50, category_is("compute"));
  INFO(describe(r));
  CHECK(r.bottleneck.category == "compute");
  CHECK(r.system.window_steps > 0);
  CHECK(static_cast<double>(r.system.before_steps_minor_faults) >= 0.9 * 65536);  // 256 MiB of 4 KiB pages
  CHECK(static_cast<double>(r.system.minor_faults) / static_cast<double>(r.steps.count) < 1000);
  CHECK(r.steps.breakdown.page_fault_ms == 0);
  for (const auto& f : r.findings) CHECK(f.kind != "page_fault_storm");
  // Reported as what it is: a one-time cost before the steps.
  CHECK(std::any_of(r.findings.begin(), r.findings.end(), [](const Finding& f) { return f.kind == "startup_cost"; }));
  CHECK(format_summary(r).find("page faults") == std::string::npos);
}

TEST_CASE("communication: the step waits for a straggling peer in all-reduce", "[scenarios][communication]") {
  TempDir dir;
  const Report r = run_scenario(dir, "communication", 150, category_is("communication"));
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "communication");
  check_backed(r, {"communication_share"});
  const PhaseSummary* allreduce = phase(r, "allreduce", ThreadRole::step);
  REQUIRE(allreduce != nullptr);
  CHECK(allreduce->kind == PhaseKind::communication);
  // The example notes its exchange (note_collectives): one collective of
  // ~400 KB a step, above the latency bound: the volume advice names it.
  CHECK(r.communication.collectives == r.communication.steps);
  CHECK(r.communication.steps >= 150);
  const auto names = [&r](const char* text) {
    for (const std::string& advice : r.bottleneck.recommendations)
      if (advice.find(text) != std::string::npos) return true;
    return false;
  };
  CHECK(names("Reduce the volume (1 collective of "));
  CHECK(names("stragglers"));
  CHECK_FALSE(names("no_sync()"));
}

TEST_CASE("scheduling: an oversubscribed spinning pool cannot keep the step fed", "[scenarios][scheduling]") {
  TempDir dir;
  const Report r = run_scenario(dir, "scheduling", 100, category_is("scheduling"));
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "scheduling");
  // Time outside phases, or (on a busy machine) the step thread's own wait
  // for a CPU, which the analyzer takes out of the unattributed time.
  check_backed(r, {"unattributed_share", "cpu_wait_share"});
  // The time outside phases is explained by a scheduling signal from the OS.
  const Evidence* invol = evidence(r, "involuntary_switches_per_second");
  const Evidence* runqueue = evidence(r, "runqueue_wait_fraction");
  REQUIRE(invol != nullptr);
  REQUIRE(runqueue != nullptr);
  CHECK((invol->supports || runqueue->supports));
}

// The pipeline scenarios' hidden size, calibrated once on CPU time (immune to
// other load) and pinned for every run, so all runs train the same model.
void pin_pipeline_hidden() {
  static std::string hidden;
  if (hidden.empty()) {
    const std::string cmd = std::string("'") + STEPSCOPE_SCENARIOS + "' --scenario pipeline-a --calibrate 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char line[256];
    while (std::fgets(line, sizeof line, p) != nullptr)
      if (std::strncmp(line, "chosen hidden ", 14) == 0) hidden = std::to_string(std::atoi(line + 14));
    pclose(p);
    REQUIRE(!hidden.empty());
  }
  setenv("SCENARIO_PIPELINE_HIDDEN", hidden.c_str(), 1);
}

// A part of the settled breakdown (what the verdict sees) as a share of the step.
double kind_share(const Report& r, PhaseKind kind) {
  const StepBreakdown b = settled_breakdown(r);
  return b.wall_ms > 0 ? b.kind_ms[kind] / b.wall_ms : 0.0;
}

// The loader's pace, pinned for every later run of a pipeline case
// (SCENARIO_PIPELINE_INPUT_MS): the scenario's ratio (2.5 ms of input to a
// 1.9 ms micro-batch) to a micro-batch as a probe run of B measured it in its
// steps, beside its loader and the collector. Left to itself each run sets
// its pace from a micro-batch timed before its steps: CI measured 1.9 ms
// there and 2.8 ms in B's steps, and two runs of one case chose loaders
// 2.5 and 4.0 ms a batch (diff then rightly saw three config changes).
void pin_pipeline_input(const TempDir& dir) {
  const Report probe = run_expecting(dir, "pipeline-b-probe", STEPSCOPE_SCENARIOS, "--scenario pipeline-b --steps 100",
                                     [](const Report&) { return true; });
  const double micro_batch_ms = 0.5 * kind_share(probe, PhaseKind::compute) * probe.steps.wall_ms.mean;
  REQUIRE(micro_batch_ms > 0);
  setenv("SCENARIO_PIPELINE_INPUT_MS", std::to_string(2.5 / 1.9 * micro_batch_ms).c_str(), 1);
}

TEST_CASE("pipeline: a slow read on the step thread is io (compute runner-up); on a background loader it is not",
          "[scenarios][pipeline]") {
  // 2.5 ms per batch from a slow dataset (sleep-paced: its wall time does not
  // depend on the machine's load) + 3.8 ms of CPU compute. Load only makes
  // the compute longer, so A stays >= 20% input up to a 2.5x slowdown and B
  // (loader faster than compute) never waits for it.
  TempDir dir;
  pin_pipeline_hidden();
  pin_pipeline_input(dir);  // one loader pace: where the input is read is what A and B change
  // A and B are compared, so they should see the same machine: run the pair
  // again (up to kAttempts times) while either shared it with other load, or
  // a run's own halves differed more than the change (the machine's speed
  // drifted within a run: diff rightly calls any smaller change noise).
  Report a, b;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    a = run_scenario(dir, "pipeline-a", 150, category_is("io"));
    b = run_scenario(dir, "pipeline-b", 150, category_is("compute"));
    const Comparison pair = compare_reports(a, b);
    const bool drifted = std::abs(pair.step.delta_pct) <= 100 * pair.step.drift;
    if (quiet(a) && quiet(b) && !drifted) break;
    if (attempt < kAttempts) {
      WARN("pipeline attempt " << attempt << ": quiet " << quiet(a) << "/" << quiet(b) << ", step change "
                               << pair.step.delta_pct << "% against a run's own drift " << 100 * pair.step.drift
                               << "%; again");
      ::sleep(2);
    }
  }
  INFO("A: " << describe(a) << "B: " << describe(b));
  REQUIRE(a.bottleneck.category == "io");
  check_backed(a, {"input_share"});
  CHECK(kind_share(a, PhaseKind::input) >= 0.20);
  // Where compute costs more than input (3.8 vs 2.5 ms on a quiet machine;
  // on a busy one the CPU wait is carved out of compute and may leave it
  // below input), io wins by the 20% rule and compute is named runner-up.
  if (a.bottleneck.ranking.front().first == "compute")
    CHECK(a.bottleneck.summary.find("compute (") != std::string::npos);
  if (a.bottleneck.ranking.front().first == "compute")
    CHECK(a.bottleneck.summary.find("runner-up") != std::string::npos);
  const Evidence* compute_a = evidence(a, "compute_share");
  REQUIRE(compute_a != nullptr);
  CHECK_FALSE(compute_a->supports);  // evidence for another category is not for io
  // A waits in its input phase: the advice is to fetch on a background thread.
  bool loader_advice = false;
  for (const auto& rec : a.bottleneck.recommendations) loader_advice |= rec.find("background") != std::string::npos;
  CHECK(loader_advice);
  // B: the loader (2.5 ms per batch) keeps ahead of the compute (3.8 ms).
  CHECK(b.bottleneck.category == "compute");
  const PhaseSummary* read = phase(b, "read", ThreadRole::background);
  REQUIRE(read != nullptr);
  // The loader's read takes the input time the scenario chose (the issue's
  // 2.5 : 1.9 ratio to a micro-batch on this machine), plus wake-up latency.
  const double input_ms = std::stod(b.run.config.at("input_ms_per_batch"));
  CHECK(read->self_ms.mean >= 0.95 * input_ms);
  CHECK(read->self_ms.mean <= 1.5 * input_ms);
  const PhaseSummary* a_data = phase(a, "data", ThreadRole::step);
  const PhaseSummary* b_data = phase(b, "data", ThreadRole::step);
  REQUIRE(a_data != nullptr);
  REQUIRE(b_data != nullptr);
  CHECK(b_data->share_of_step < a_data->share_of_step);
  // B is faster, by more than the noise of the two means.
  const Comparison c = compare_reports(a, b);
  INFO(format_comparison(c));
  // Faster and significant are judged on runs that had the machine: on a
  // shared one the noise between separate runs rises with the load (CI at a
  // 12% / 35% run queue: a -27% change against 28% between a run's own
  // halves; at 0.2% / 0.03% run queue but a neighbour on the other core, B's
  // compute 1.7x A's and the step -1.5%).
  const bool drifted = std::abs(c.step.delta_pct) <= 100 * c.step.drift;
  if (quiet(a) && quiet(b) && drifted)
    skip_setup(dir, "pipeline",
               "a run's own halves differed by " + std::to_string(100 * c.step.drift) + "%, more than the " +
                   std::to_string(c.step.delta_pct) + "% step change (the machine's speed drifted within a run)");
  if (quiet(a) && quiet(b)) {
    CHECK(b.steps.wall_ms.mean < a.steps.wall_ms.mean);
    CHECK(c.step.delta_ms < 0);
    CHECK(c.step.significant);
  } else if (!c.step.significant || c.step.delta_ms >= 0) {
    WARN("step change " << c.step.delta_pct << "% (significant: " << c.step.significant
                        << ") judged on a shared machine: runqueue " << 100 * runqueue_fraction(a) << "% / "
                        << 100 * runqueue_fraction(b) << "%, other processes " << 100 * others_fraction(a) << "% / "
                        << 100 * others_fraction(b) << "% of the cores: the noise is the machine's");
  }
}

TEST_CASE("pipeline what-if: compute 2x faster is bounded by the loader, as the halved run measures",
          "[scenarios][pipeline-whatif]") {
  // B (3.8 ms compute, 2.5 ms loader) projects "compute 2x faster" from its
  // own report; B-half really halves the compute (one micro-batch instead of
  // two). The two run alternately so both see the same machine; the
  // projection must be within 10% of the measured step.
  TempDir dir;
  pin_pipeline_hidden();
  // The what-if holds B's loader fixed: the halved run reads at B's pace.
  pin_pipeline_input(dir);
  for (int attempt = 1;; ++attempt) {
    std::vector<double> projected, measured;
    Report b, half;
    for (int round = 0; round < 2; ++round) {
      b = run_scenario(dir, "pipeline-b", 200, [](const Report&) { return true; });
      half = run_scenario(dir, "pipeline-b-half", 200, [](const Report&) { return true; });
      const WhatIf* w = what_if(b, "kind:compute", 2.0);
      REQUIRE(w != nullptr);
      projected.push_back(w->step_ms_projected);
      measured.push_back(half.steps.wall_ms.mean);
    }
    const double p = 0.5 * (projected[0] + projected[1]), m = 0.5 * (measured[0] + measured[1]);
    const WhatIf* w = what_if(b, "kind:compute", 2.0);
    INFO("B: " << describe(b) << "half: " << describe(half) << "projected " << p << " ms, measured " << m
               << " ms; note: " << w->note);
    // The setup itself: the halved run waits on its loader (about a quarter
    // of its step as built; 19.7% and 13.5% were seen in clean-clone CI runs
    // while another test shared the two cores and the loader thread ran
    // faster or slower than in B). When it does not, the scenario is not what
    // it was built to be: try again, and skip with the reason if it never is.
    // The loader sets the pace of the halved step only while it needs longer
    // per batch than B's halved compute (as B measured both): where B's
    // compute ran slower than the probe's, it does not.
    const PhaseSummary* loader_b = phase(b, "read", ThreadRole::background);
    REQUIRE(loader_b != nullptr);
    const double amdahl_b = b.steps.wall_ms.mean * (1 - 0.5 * kind_share(b, PhaseKind::compute));
    if (loader_b->self_ms.mean < 1.05 * amdahl_b) {
      if (attempt < kAttempts) {
        WARN("pipeline what-if attempt " << attempt << ": B's loader (" << loader_b->self_ms.mean
                                         << " ms a batch) is not above its halved step (" << amdahl_b << " ms); again");
        continue;
      }
      skip_setup(dir, "pipeline what-if",
                 "B's loader was not above its halved step (B's compute ran slower than the probe's)");
    }
    const double half_input = kind_share(half, PhaseKind::input);
    if (runqueue_fraction(half) < 0.05 && half_input < 0.15) {
      if (attempt < kAttempts) {
        WARN("pipeline what-if attempt " << attempt << ": the halved run waited on its loader only " << 100 * half_input
                                         << "% of its step; again");
        continue;
      }
      skip_setup(dir, "pipeline what-if",
                 "the halved run waited on its loader less than 15% of its step (built: about 25%)");
    }
    const bool within = std::abs(p - m) <= 0.10 * m;
    if (!within && attempt < kAttempts) {
      WARN("pipeline what-if attempt " << attempt << " off by " << 100 * (p - m) / m << "%; again");
      continue;
    }
    // A projection is checked to 10% only on runs that had their CPU: with the
    // step thread waiting for one (23% of the run was seen with two compilers
    // on the two cores) the waiting does not halve with the compute, and the
    // halved run measures the machine rather than the what-if.
    const auto busy = [](const Report& r) { return runqueue_fraction(r) >= kWhatIfQuietRunqueueFraction; };
    if (!within && (busy(b) || busy(half))) {
      std::fprintf(stderr,
                   "SKIPPED pipeline what-if: in all %d attempts off by more than 10%% while the step thread "
                   "waited for a CPU (last: %.0f%% and %.0f%% of the runs; checked below %.0f%%).\n",
                   kAttempts, 100 * runqueue_fraction(b), 100 * runqueue_fraction(half),
                   100 * kWhatIfQuietRunqueueFraction);
      dir.remove();
      std::exit(kSkipExitCode);
    }
    // The projection's input is B's loader time per batch. When the loader
    // itself ran at another speed in the halved run, the machine changed the
    // loader, not the what-if: skip with the figures. Both ways were seen in
    // clean-clone CI at no CPU wait: faster (B's compute 5.9 ms against 3.8 ms
    // built, its loader 3.8 ms a batch, the halved step 2.4 ms — the two
    // vCPUs behave like SMT siblings: two busy threads slow each other, a
    // waiting one does not) and slower (the halved step 4.0 ms, above B's
    // 3.6 ms, waiting 40% on a loader B measured at 2.5 ms). With the loader
    // within 15% in both runs, the projection must hold.
    const PhaseSummary* read_b = phase(b, "read", ThreadRole::background);
    const PhaseSummary* read_half = phase(half, "read", ThreadRole::background);
    if (!within && read_b != nullptr && read_half != nullptr &&
        std::abs(read_half->host_ms.mean - read_b->host_ms.mean) > 0.15 * read_b->host_ms.mean) {
      std::fprintf(
          stderr,
          "SKIPPED pipeline what-if: in all %d attempts off by more than 10%% while the loader's own read "
          "ran at another speed in the halved run (%.2f ms a batch against %.2f ms in B): the projection holds "
          "B's loader time fixed.\n",
          kAttempts, read_half->host_ms.mean, read_b->host_ms.mean);
      dir.remove();
      std::exit(kSkipExitCode);
    }
    CHECK(within);
    // On a quiet machine the loader sets the pace of the halved run, the
    // note says so, and the naive Amdahl projection (no loader bound) is
    // further from the measured step. (Under load the compute, not the
    // loader, may still set the pace: then the two projections agree.)
    // Or, where B's step and loader threads filled the two cores between
    // them, the loader's and the step's CPU work together set the pace
    // (docs/classification.md §5): the same bound, reached on shared cores.
    INFO("note: " << w->note);
    const bool loader_bound = w->note.find("then input-bound: the loader needs") != std::string::npos ||
                              w->note.find("the step and its loader share") != std::string::npos;
    CHECK(loader_bound);
    if (loader_bound) CHECK(std::abs(amdahl_b - m) > std::abs(p - m));
    // The halved run waits on the loader: with >= 20% of its step on input it
    // is io (compute runner-up), never plain compute.
    INFO("half input share " << half_input);
    if (half_input >= 0.20) {
      CHECK(half.bottleneck.category == "io");
      if (half.bottleneck.ranking.front().first == "compute")
        CHECK(half.bottleneck.summary.find("runner-up") != std::string::npos);
    }
    break;
  }
}

TEST_CASE("page faults: a step that maps and touches 48 MiB every step is memory-bound", "[scenarios][page-faults]") {
  TempDir dir;
  // Built so that the faults' kernel time is most of the step. Where it is
  // not, the scenario is not what it was built to be: on this machine (a
  // Firecracker VM) touching a fresh page costs ~19 us, about half of it
  // counted as *user* time (the hypervisor's nested page fault), so kernel
  // time was 33-48% of the step and memory tied with compute (48% vs 47%
  // seen at load 9, 52% vs 48% at no load: unknown, a near tie). Tried
  // again; skipped with the figures if the kernel share never reaches 60% of
  // the step (the share at which memory leads compute beyond the tie margin,
  // runner-up ratio < 0.9). At 60% or more the verdict must be memory.
  Report r;
  for (int attempt = 1;; ++attempt) {
    r = run_scenario(dir, "page-faults", 40, category_is("memory"));
    if (r.bottleneck.category == "memory") break;
    const Evidence* share = evidence(r, "page_fault_share");
    const double kernel = share != nullptr ? share->value : 0;
    if (kernel >= 0.6) break;
    if (attempt == kAttempts)
      skip_setup(dir, "page faults",
                 "the faults' kernel time stayed below 60% of the step (last: " +
                     std::to_string(static_cast<int>(100 * kernel)) + "%, verdict " + r.bottleneck.category + ")");
    WARN("page faults attempt " << attempt << ": kernel time " << 100 * kernel << "% of the step: " << describe(r));
    ::sleep(2);
  }
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "memory");
  check_backed(r, {"page_fault_share"});
  const Evidence* faults = evidence(r, "minor_faults_per_step");
  REQUIRE(faults != nullptr);
  CHECK(faults->value >= 12000);  // 48 MiB of 4 KiB pages
  // The table and the sentence agree: the kernel time is its own row.
  CHECK(r.steps.breakdown.page_fault_ms > 0.3 * r.steps.breakdown.wall_ms);
  CHECK(format_summary(r).find("page faults") != std::string::npos);
  // Blocks of 48 MiB: the mmap threshold cannot help; reuse the buffer.
  bool remedy = false;
  for (const auto& rec : r.bottleneck.recommendations)
    remedy |= rec.find("MALLOC_MMAP_THRESHOLD_ cannot help") != std::string::npos &&
              rec.find("reuse them across steps") != std::string::npos;
  CHECK(remedy);
}

namespace {

// Spinning processes, one per `count`, killed when this goes out of scope.
struct CpuHogs {
  std::vector<pid_t> pids;
  explicit CpuHogs(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) pids.push_back(pid);
    }
  }
  ~CpuHogs() {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  }
};

}  // namespace

TEST_CASE("busy: beside two CPU hogs the scenarios keep their verdicts; only the confidence falls",
          "[scenarios][busy]") {
  // Issue 29: with other work on the two cores a verdict changed (an
  // overlapped pipeline read "unknown"). The CPU wait other processes cause
  // is the machine's: a verdict may lose confidence under contention, never
  // change category. The hogs are this test's own children (2 per core).
  TempDir dir;
  const int cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  for (const char* scenario : {"compute", "io", "memory"}) {
    const Report quiet_run = run_scenario(dir, scenario, 100, category_is(scenario));
    Report busy;
    {
      CpuHogs hogs(2 * cores);
      // Starved by design: never skipped for it. One repeat for chance.
      for (int attempt = 1; attempt <= 2 && busy.bottleneck.category != scenario; ++attempt)
        busy =
            run_expecting(dir, std::string(scenario) + "-busy-" + std::to_string(attempt), STEPSCOPE_SCENARIOS,
                          std::string("--scenario ") + scenario + " --steps 100", [](const Report&) { return true; });
    }
    INFO(scenario << "\nquiet: " << describe(quiet_run) << "busy: " << describe(busy));
    CHECK(quiet_run.bottleneck.category == scenario);
    CHECK(busy.bottleneck.category == scenario);
  }
}

TEST_CASE("diff: two identical runs on the same machine conditions are within noise", "[scenarios][diff]") {
  TempDir dir;
  const auto not_starved = [](const Report& r) { return !starved(r); };
  // Two identical runs back to back. The diff may only call them "within
  // noise" when their conditions match; a busy neighbour that came or went
  // between them is what conditions.differ reports instead (then the pair is
  // tried again, and the case is skipped if the machine never holds still).
  // A call of "slower"/"faster" with matching conditions is tried again too:
  // a one-run-each diff has a false-alarm rate above zero on a shared machine
  // (processes differ by 1.7% sd here, more under load), so one alarm is
  // chance and the check is that it does not repeat — a noise estimate that
  // is systematically too small fails every attempt.
  Comparison quiet;
  for (int attempt = 1;; ++attempt) {
    const Report base = run_scenario(dir, "compute", 400, not_starved);
    const Report same = run_scenario(dir, "compute", 400, not_starved);
    quiet = compare_reports(base, same);
    // A busy machine during either run (conditions.shared) is the machine's noise too.
    const bool differ = quiet.conditions.differ || quiet.conditions.shared;
    if (!differ && (!quiet.step.significant || attempt == kAttempts)) break;
    if (differ && attempt == kAttempts) skip_starved(dir, "diff (the machine's load kept changing)", same);
    WARN("diff attempt " << attempt << (differ ? ": conditions differ: " : ": an alarm on identical runs: ")
                         << format_comparison(quiet));
    ::sleep(2);
  }
  INFO(format_comparison(quiet));
  const nlohmann::json q = nlohmann::json::parse(comparison_to_json(quiet));
  CHECK(q.at("conditions").at("differ") == false);
  CHECK(q.at("step").at("verdict") == "within_noise");
  CHECK(q.at("step").at("noise_method") == "batch_means");
}

TEST_CASE("diff: the same run beside a CPU hog is not blamed on the code", "[scenarios][diff-hog]") {
  // Holds on a busy machine too: the hogs (two per core) are this test's
  // own children, so they take the CPU from the scenario whatever else runs.
  TempDir dir;
  const Report base = run_scenario(dir, "compute", 200, [](const Report&) { return true; });
  const int cores = std::max(1, base.system.cores_online > 0 ? base.system.cores_online : 2);
  Report busy;
  {
    CpuHogs hogs(2 * cores);
    busy = run_scenario(dir, "compute", 200, [](const Report&) { return true; });
  }
  const Comparison loaded = compare_reports(base, busy);
  const std::string text = format_comparison(loaded);
  INFO(text);
  const nlohmann::json j = nlohmann::json::parse(comparison_to_json(loaded));
  INFO("conditions: " << j.at("conditions").dump() << "\nbase: " << describe(base) << "busy: " << describe(busy));
  CHECK(j.at("conditions").at("differ") == true);
  CHECK(j.at("conditions").at("reasons").size() >= 1);
  // Said before any verdict, and the code is not blamed.
  CHECK(text.find("machine conditions differ") < text.find("verdict"));
  if (loaded.step.significant)
    CHECK(std::find_if(loaded.warnings.begin(), loaded.warnings.end(), [](const std::string& w) {
            return w.find("likely the machine's") != std::string::npos;
          }) != loaded.warnings.end());
}

TEST_CASE("trap: a phase at ~5% of the step made 2x faster speeds the step up ~2.5%, as projected",
          "[scenarios][trap]") {
  TempDir dir;
  // The two variants run one after the other, interleaved base/fast four
  // times (running them at the same time made them compete unevenly for the
  // two cores); each variant's step time is the mean of its four runs, and
  // the noise is the spread between runs. A shared VM's speed drifts, so a
  // confirmation is required within three tries.
  const int steps = 300;
  const std::string args = " --steps " + std::to_string(steps);
  for (int attempt = 1;; ++attempt) {
    std::vector<Report> bases, fasts;
    for (int round = 0; round < 4; ++round) {
      // Alternate the order (base-fast, fast-base, ...) so a machine whose
      // speed drifts steadily does not favour one variant.
      const std::vector<const char*> order = round % 2 == 0 ? std::vector<const char*>{"trap-base", "trap-fast"}
                                                            : std::vector<const char*>{"trap-fast", "trap-base"};
      for (const char* variant : order) {
        const std::string tag = std::string(variant) + "-" + std::to_string(attempt) + "-" + std::to_string(round);
        REQUIRE(run_shell(
                    command_for(dir.path, tag, STEPSCOPE_SCENARIOS, std::string("--scenario ") + variant + args)) == 0);
        (std::string(variant) == "trap-base" ? bases : fasts).push_back(load(dir.path + "/" + tag + ".json"));
      }
    }
    const Report& base = bases[0];
    const Report& fast = fasts[0];
    auto mean_of = [](const std::vector<Report>& runs) {
      double sum = 0;
      for (const auto& r : runs) sum += r.steps.wall_ms.mean;
      return sum / static_cast<double>(runs.size());
    };

    const PhaseSummary* metrics = phase(base, "metrics", ThreadRole::step);
    const PhaseSummary* metrics_fast = phase(fast, "metrics", ThreadRole::step);
    REQUIRE(metrics != nullptr);
    REQUIRE(metrics_fast != nullptr);
    const WhatIf* projected = what_if(base, "metrics", 2.0);
    // Below the what-if minimum share (a starved run) there is no projection: not the setup.
    if (projected == nullptr && attempt < kAttempts) {
      WARN("trap attempt " << attempt << ": no projection for 'metrics' (share " << metrics->share_of_step << ")");
      continue;
    }
    if (projected == nullptr && (starved(base) || starved(fast)))
      skip_starved(dir, "trap", starved(base) ? base : fast);
    // Not starved, yet the ~5% phase measured under the what-if minimum share in
    // every attempt: the machine did not run the scenario as built (seen once in
    // a clean-clone CI run: 1.7%). Skipped with the reason, never passed.
    if (projected == nullptr)
      skip_setup(dir, "trap",
                 "the 'metrics' phase measured " + std::to_string(100 * metrics->share_of_step) +
                     "% of the step, under the what-if minimum share");

    const double base_ms = mean_of(bases), fast_ms = mean_of(fasts);
    // Paired by round: the two runs of a round ran back to back, on the same
    // machine conditions, so the change is measured within each pair and
    // the noise is the spread of the paired changes (a busy neighbour that
    // comes and goes between rounds cancels out).
    std::vector<double> paired;
    for (std::size_t i = 0; i < bases.size(); ++i)
      paired.push_back(100.0 * (fasts[i].steps.wall_ms.mean - bases[i].steps.wall_ms.mean) /
                       bases[i].steps.wall_ms.mean);
    double paired_mean = 0;
    for (double d : paired) paired_mean += d / static_cast<double>(paired.size());
    double paired_sq = 0;
    for (double d : paired) paired_sq += (d - paired_mean) * (d - paired_mean);
    const double paired_noise =
        std::sqrt(paired_sq / static_cast<double>(paired.size() - 1)) / std::sqrt(static_cast<double>(paired.size()));
    const double measured_pct = paired_mean;
    const double noise_pct = paired_noise;
    const double tolerance_pct = std::max(1.5, 3.0 * noise_pct);
    const double phase_speedup = metrics->host_ms.mean / metrics_fast->host_ms.mean;
    const bool confirmed = std::abs(measured_pct - projected->step_change_pct) <= tolerance_pct;
    // The setup is what it claims: a phase of about 5% of the step, really
    // made about twice as fast. Half the EMAs touch half the memory, so the
    // fast variant can gain a little from the cache as well: up to 2.7x was
    // seen on the 2-core CI VM (3.0 allowed).
    const bool setup_holds = metrics->share_of_step >= 0.025 && metrics->share_of_step <= 0.10 &&
                             phase_speedup >= 1.6 && phase_speedup <= 3.0;
    INFO("base: " << describe(base) << "fast: " << describe(fast));
    INFO("metrics share " << 100 * metrics->share_of_step << "%, phase " << metrics->host_ms.mean << " -> "
                          << metrics_fast->host_ms.mean << " ms (" << phase_speedup << "x); step " << base_ms << " -> "
                          << fast_ms << " ms: measured " << measured_pct << "%, projected "
                          << projected->step_change_pct << "%, tolerance " << tolerance_pct << " pp (noise "
                          << noise_pct << " pp)");
    if (!(confirmed && setup_holds) && attempt < kAttempts) {
      WARN("trap attempt " << attempt << " not confirmed (machine speed drifting?); again");
      ::sleep(1);
      continue;
    }
    if (!(confirmed && setup_holds) && (starved(base) || starved(fast)))
      skip_starved(dir, "trap", starved(base) ? base : fast);
    // A 2.5% change is confirmed only on runs that had the machine: with
    // other load on the cores (a CPU hog beside `ctest -j2` once left every
    // attempt unconfirmed, none starved) the pairs measure the neighbour.
    const auto shared = std::find_if(bases.begin(), bases.end(), [](const Report& r) { return !quiet(r); });
    const auto shared_fast = std::find_if(fasts.begin(), fasts.end(), [](const Report& r) { return !quiet(r); });
    if (!confirmed && (shared != bases.end() || shared_fast != fasts.end())) {
      const Report& r = shared != bases.end() ? *shared : *shared_fast;
      skip_setup(dir, "trap",
                 "the change was not confirmed while a run shared the machine (runqueue " +
                     std::to_string(100 * runqueue_fraction(r)) + "%, other processes " +
                     std::to_string(100 * others_fraction(r)) + "% of the cores)");
    }
    if (!setup_holds)
      skip_setup(dir, "trap",
                 "the 'metrics' phase was " + std::to_string(100 * metrics->share_of_step) + "% of the step, " +
                     std::to_string(phase_speedup) + "x faster in the fast variant (built: 2.5-10%, 1.6-3x)");
    CHECK(metrics->share_of_step >= 0.025);
    CHECK(metrics->share_of_step <= 0.10);
    CHECK(phase_speedup >= 1.6);
    CHECK(phase_speedup <= 3.0);
    // Amdahl's projection: 2x on ~5% is ~2.5%, not 50%.
    CHECK(projected->step_change_pct == Approx(-50.0 * metrics->share_of_step).margin(0.01));
    CHECK(projected->step_change_pct > -6.0);
    // ... and the measured run confirms it within the noise of the two means.
    CHECK(confirmed);
    break;
  }
}

TEST_CASE("mlp demo: the loss falls and a fast loader is not the bottleneck", "[scenarios][demo]") {
  TempDir dir;
  const std::string out = dir.path + "/run";
  const Report r = run_expecting(dir, "demo", STEPSCOPE_MLP_DEMO, "--steps 200 --out '" + out + "'",
                                 [](const Report& x) { return x.bottleneck.category == "compute"; });
  INFO(describe(r));
  // The loader does ~1% of a step of work: it is never what the step waits
  // on. On a quiet machine the step is compute; on a contended one the
  // loader's thread waits for a CPU like the step's, and that wait is
  // scheduling (idle_loader_wait), so compute or scheduling.
  CHECK(r.bottleneck.category != "io");
  if (!contended(r))
    CHECK(r.bottleneck.category == "compute");
  else
    CHECK((r.bottleneck.category == "compute" || r.bottleneck.category == "scheduling"));
  CHECK(r.run.config.at("batch_size") == "64");
  CHECK(r.run.config.at("slow_loader") == "false");
  const PhaseSummary* decode = phase(r, "decode", ThreadRole::background);
  REQUIRE(decode != nullptr);

  // loss.csv: step,loss,accuracy — the mean loss of the last 20 steps is well
  // below that of the first 20.
  std::ifstream csv(out + "/loss.csv");
  REQUIRE(csv.good());
  std::string line;
  std::getline(csv, line);
  CHECK(line == "step,loss,accuracy");
  std::vector<double> losses;
  while (std::getline(csv, line)) {
    const auto first = line.find(','), second = line.find(',', first + 1);
    REQUIRE(first != std::string::npos);
    losses.push_back(std::stod(line.substr(first + 1, second - first - 1)));
  }
  REQUIRE(losses.size() == 200);
  double head = 0, tail = 0;
  for (int i = 0; i < 20; ++i) {
    head += losses[static_cast<std::size_t>(i)] / 20;
    tail += losses[losses.size() - 1 - static_cast<std::size_t>(i)] / 20;
  }
  INFO("loss " << head << " -> " << tail);
  CHECK(std::isfinite(tail));
  CHECK(tail < 0.6 * head);
}

TEST_CASE("mlp demo: --slow-loader makes the step wait on input", "[scenarios][demo-slow]") {
  TempDir dir;
  const Report r = run_expecting(dir, "demo-slow", STEPSCOPE_MLP_DEMO, "--steps 100 --slow-loader", category_is("io"));
  INFO(describe(r));
  REQUIRE(r.bottleneck.category == "io");
  check_backed(r, {"input_share"});
  CHECK(r.run.config.at("slow_loader") == "true");
  // The recommendation is about a starved loader (the step waits, off CPU).
  if (r.system.input_on_cpu_fraction >= 0) CHECK(r.system.input_on_cpu_fraction < 0.5);
}
