// Every installed header, compiled and used as a user program would, against
// the installed tree alone (tests/package, docs/architecture.md "The
// installed API"): a header that needs one that is not installed, or an entry
// point a user calls that the library does not export, fails this build.
// Exit 0 when the report built in code goes through the analyzer, the JSON,
// the merge and the HTML page.
#include <stepscope/analysis.hpp>
#include <stepscope/clock.hpp>
#include <stepscope/export.hpp>
#include <stepscope/html.hpp>
#include <stepscope/import.hpp>
#include <stepscope/merge.hpp>
#include <stepscope/phase.hpp>
#include <stepscope/report.hpp>
#include <stepscope/ring.hpp>
#include <stepscope/site.hpp>
#include <stepscope/steps.hpp>
#include <stepscope/stepscope.hpp>
#include <stepscope/version.hpp>
#if STEPSCOPE_WITH_CUDA
#include <stepscope/cuda.hpp>  // needs a CUDA-enabled library (a link check)
#endif
// <stepscope/mpi.hpp> needs <mpi.h>: mpi_main.cpp includes it.

#include <cstdio>
#include <string>
#include <vector>

int main() {
  stepscope::Report report;
  report.steps.count = 40;
  report.steps.wall_ms.count = 40;
  report.steps.wall_ms.mean = 10;
  report.device.facts.device_busy_fraction = 0.95;
  report.device.facts.device_idle_fraction = 0.05;
  stepscope::analyze(report);

  stepscope::Report loaded;
  std::string error;
  if (!stepscope::report_from_json(stepscope::report_to_json(report), loaded, error)) {
    std::fprintf(stderr, "api: the report does not load back: %s\n", error.c_str());
    return 1;
  }
  if (loaded.device.facts.device_busy_fraction != 0.95 || loaded.device.facts.sync_calls) {
    std::fprintf(stderr, "api: device facts changed on the way through JSON\n");
    return 1;
  }
  loaded.run.rank = 0;
  error.clear();
  const stepscope::Report merged = stepscope::merge_reports(std::vector<stepscope::Report>{loaded}, error);
  if (!error.empty() || merged.run.source != "merge") {
    std::fprintf(stderr, "api: merge failed: %s\n", error.c_str());
    return 1;
  }
  if (stepscope::html_report(loaded).find("<html") == std::string::npos) {
    std::fprintf(stderr, "api: no HTML page\n");
    return 1;
  }
  stepscope::Report from_trace;
  if (stepscope::analyze_trace_file("no-such-trace.json", from_trace, error) || error.empty()) {
    std::fprintf(stderr, "api: a missing trace was not refused\n");
    return 1;
  }
  std::printf("api: verdict %s, stepscope %s\n", report.bottleneck.category.c_str(), STEPSCOPE_VERSION_STRING);
  return 0;
}
