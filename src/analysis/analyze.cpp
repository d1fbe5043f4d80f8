// src/analysis/analyze.cpp — runs the analyzer's three passes over a report.
//
// First the breakdown's carved parts are set (CPU wait and page-fault kernel
// time, detail::settled_breakdown); the measured parts stay as they are, and
// the settled view is stored (StepStats::settled_breakdown): the verdict, the
// summary table, HTML and JSON all read it, none recomputes it.
#include "analysis/facts.hpp"

#include <stepscope/analysis.hpp>

namespace stepscope {
inline namespace v1 {

void analyze(Report& report) {
  const StepBreakdown settled = detail::settled_breakdown(report);
  report.steps.breakdown.cpu_wait_ms = settled.cpu_wait_ms;
  report.steps.breakdown.page_fault_ms = settled.page_fault_ms;
  report.steps.settled_breakdown = settled;
  report.bottleneck = classify(report);
  report.findings = find_issues(report);
  report.what_if = project_what_if(report);
  // Imported traces and Python runs: advice in their language (advice_wording.cpp).
  reword_advice(report);
}

}  // namespace v1
}  // namespace stepscope
