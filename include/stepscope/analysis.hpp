// stepscope/analysis.hpp — the analyzer: facts in, verdict out.
//
// Pure functions over a Report's measured facts (steps, phases, system
// signals, device facts). No I/O, no clocks, no globals: the same analyzer
// serves live runs, imported PyTorch-profiler traces and merged rank reports.
//
//   stepscope::Report report = ...;     // facts filled by the collector
//   stepscope::analyze(report);         // fills bottleneck, findings, what_if
//   std::cout << report.bottleneck.category;
//
// Thresholds and their rationale: docs/classification.md.
#pragma once

#include <stepscope/report.hpp>

#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {

// The five-way classification with evidence, confidence and recommendations;
// "unknown" when the facts do not support a confident answer.
STEPSCOPE_API Verdict classify(const Report& facts);
// Secondary findings: memory growth, jitter, outliers, slow warm-up,
// host/device disagreement, dropped records, large unattributed time, ...
STEPSCOPE_API std::vector<Finding> find_issues(const Report& facts);
// Amdahl projections for each significant phase and kind.
STEPSCOPE_API std::vector<WhatIf> project_what_if(const Report& facts);
// Runs the three above and stores their results in `report`, after setting
// the breakdown's carved parts (cpu_wait_ms, page_fault_ms).
STEPSCOPE_API void analyze(Report& report);

// The one accounting the verdict, the summary table, HTML and JSON share: the
// measured breakdown with CPU wait and page-fault kernel time carved out of
// the other parts as parts of their own (docs/classification.md §1). Every
// part is what its category costs; all parts add up to wall_ms. Uses the
// breakdown's carved values when set, else derives them from the system
// signals.
STEPSCOPE_API StepBreakdown settled_breakdown(const Report& report);

// ---- comparing two runs ("change one variable at a time") ----

struct Delta {
  std::string name;                // phase name, or "step"
  double base_ms = 0, new_ms = 0;  // means
  double delta_ms = 0, delta_pct = 0;
  // Combined standard error of the two means. For the step: from batch means
  // over each run's step series (noise_method "batch_means"), which holds up
  // when consecutive steps are correlated (drift, warm caches, a neighbour's
  // load); otherwise sd/sqrt(n) from the stored distributions ("standard_error").
  double noise_ms = 0;
  std::string noise_method = "standard_error";
  // Step only: the larger of the two runs' own drift, |mean of the first half
  // - mean of the second half| / mean. A delta below it (or below
  // min_relative_change) is within noise: one run already moved that much.
  double drift = 0;
  // Significant when |delta| > noise_factor * noise (and above the relative
  // floor): noise_sigmas (3) for one run each, a Student t value (99%) for
  // the between-run noise of repeats.
  double noise_factor = 3.0;
  bool significant = false;  // |delta| well above noise
  // Phases: the thread role in each run; they differ when a phase moved
  // between the step thread and a background thread (then the means measure
  // different things: waited-for time vs work beside the step).
  std::string base_role, new_role;
  // A step phase whose calls per step changed (by more than 10%): the means
  // are its time per step (mean per call x calls per step), these the calls
  // per step. 0: the means are per call.
  double base_calls = 0, new_calls = 0;
};

// "faster", "slower" or "within_noise" for a delta.
STEPSCOPE_API const char* delta_verdict(const Delta& delta) noexcept;

// The machine conditions of the two runs: load from other processes, time
// the step threads waited for a CPU, preemptions. When they differ, a step
// time difference may be the machine's, not the code's.
struct RunConditions {
  bool differ = false;
  std::vector<std::string> reasons;  // one sentence per condition that differs
  // Either run shared a busy machine (other processes and this one kept most
  // of its CPUs busy): a step change may be the neighbours', even where the
  // two runs' conditions match. The sentence says how busy.
  bool shared = false;
  std::string shared_reason;
  // Per run (base, new); <0 where the report does not hold the signal.
  double base_runqueue_fraction = -1, new_runqueue_fraction = -1;  // runnable, not running / wall
  double base_other_cpu_cores = -1, new_other_cpu_cores = -1;      // other processes' CPU / wall
  double base_involuntary_per_s = -1, new_involuntary_per_s = -1;  // involuntary switches / s
  double base_load_per_core = -1, new_load_per_core = -1;          // mean 1-min load average / cores
};

struct Comparison {
  // Runs on each side: 1 for compare_reports; compare_runs takes repeats, and
  // then the step's and phases' noise is the spread between runs
  // (noise_method "between_runs").
  std::size_t base_runs = 1, new_runs = 1;
  Delta step;
  std::vector<Delta> phases;  // phases present in either run
  std::vector<std::string> only_in_base, only_in_new;
  std::string base_verdict, new_verdict;
  bool verdict_changed = false;
  std::vector<std::string> config_changes;  // "batch_size: 32 -> 64"
  std::vector<std::string> warnings;        // incl. "more than one config key changed"
  RunConditions conditions;
  // What explains a significant step change, before the machine is blamed:
  // the config keys that changed, and the step's phases that moved by most of
  // the change ("'data': -12.30 ms per step (-99.8%)"). Empty: nothing does.
  std::vector<std::string> explained_by;
};

// One run each. A single pair cannot measure how much separate processes of
// the same binary differ, so a change is only significant above
// min_relative_change (8%, docs/classification.md); repeat the runs and use
// compare_runs to resolve smaller changes.
STEPSCOPE_API Comparison compare_reports(const Report& base, const Report& candidate);
// Repeated runs of each side (each vector non-empty; with one report each it
// is compare_reports). Means of the per-run means are compared; the noise is
// the between-run standard error (a Student t factor for few runs), so
// drift between processes is measured instead of assumed. Phases, verdicts,
// config and conditions come from every run: a config that differs within
// one side, or conditions that differ between any base and new run, warn.
STEPSCOPE_API Comparison compare_runs(const std::vector<Report>& base, const std::vector<Report>& candidate);
// Text form; a line about differing machine conditions comes before any verdict.
STEPSCOPE_API std::string format_comparison(const Comparison& comparison);
// JSON form (what `stepscope diff --json` prints): step and phases with
// "verdict" in faster|slower|within_noise, "conditions" {"differ", "reasons",
// per-run signals}, verdicts, config changes and warnings. Never throws.
STEPSCOPE_API std::string comparison_to_json(const Comparison& comparison);

// The analyzer's advice in the language of the report's source: an imported
// trace's (torch.profiler.record_function, not STEPSCOPE_PHASE), a run the
// Python package drove (stepscope.phase), a merged job's as its ranks'.
// analyze() and merge_reports() call it last. No-op for a C++ run.
STEPSCOPE_API void reword_advice(Report& report);

}  // namespace v1
}  // namespace stepscope
