// src/analysis/analyze.cpp — runs the analyzer's three passes over a report.
#include <stepscope/analysis.hpp>
#include <stepscope/import.hpp>  // reword_advice_for_trace

namespace stepscope {

void analyze(Report& report) {
  report.bottleneck = classify(report);
  report.findings = find_issues(report);
  report.what_if = project_what_if(report);
  // Imported traces: advice in the trace's language (src/import/trace_report.cpp).
  reword_advice_for_trace(report);
}

}  // namespace stepscope
