// src/analysis/analyze.cpp — runs the analyzer's three passes over a report.
//
// First the breakdown is settled (CPU wait and page-fault kernel time carved
// out as their own parts, detail::settled_breakdown), so the verdict, the
// summary table, HTML and JSON all read one accounting.
#include "analysis/facts.hpp"

#include <stepscope/analysis.hpp>

namespace stepscope {

void analyze(Report& report) {
  report.steps.breakdown = detail::settled_breakdown(report);
  report.bottleneck = classify(report);
  report.findings = find_issues(report);
  report.what_if = project_what_if(report);
}

}  // namespace stepscope
