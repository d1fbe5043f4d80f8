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

// The five-way classification with evidence, confidence and recommendations;
// "unknown" when the facts do not support a confident answer.
STEPSCOPE_API Verdict classify(const Report& facts);
// Secondary findings: memory growth, jitter, outliers, slow warm-up,
// host/device disagreement, dropped records, large unattributed time, ...
STEPSCOPE_API std::vector<Finding> find_issues(const Report& facts);
// Amdahl projections for each significant phase and kind.
STEPSCOPE_API std::vector<WhatIf> project_what_if(const Report& facts);
// Runs the three above and stores their results in `report`.
STEPSCOPE_API void analyze(Report& report);

// ---- comparing two runs ("change one variable at a time") ----

struct Delta {
  std::string name;        // phase name, or "step"
  double base_ms = 0, new_ms = 0;  // means
  double delta_ms = 0, delta_pct = 0;
  double noise_ms = 0;     // combined standard error of the two means (from stored distributions)
  bool significant = false; // |delta| well above noise
};

struct Comparison {
  Delta step;
  std::vector<Delta> phases;  // phases present in either run
  std::vector<std::string> only_in_base, only_in_new;
  std::string base_verdict, new_verdict;
  bool verdict_changed = false;
  std::vector<std::string> config_changes;  // "batch_size: 32 -> 64"
  std::vector<std::string> warnings;         // incl. "more than one config key changed"
};

STEPSCOPE_API Comparison compare_reports(const Report& base, const Report& candidate);
STEPSCOPE_API std::string format_comparison(const Comparison& comparison);

}  // namespace stepscope
