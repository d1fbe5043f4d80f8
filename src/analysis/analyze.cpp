// src/analysis/analyze.cpp — runs the analyzer's three passes over a report.
#include <stepscope/analysis.hpp>

namespace stepscope {

void analyze(Report& report) {
  report.bottleneck = classify(report);
  report.findings = find_issues(report);
  report.what_if = project_what_if(report);
}

}  // namespace stepscope
