// Internals shared by the run time (src/core/runtime.cpp) and its tests.
#pragma once

#include "core/env.hpp"

#include <stepscope/report.hpp>

#include <string>

namespace stepscope::detail {

class Collector;

// Builds the report from the collector's facts plus run information and the
// analyzer's verdict. final_report stops the collector first.
Report build_report(bool final_report);
const Settings& settings();

// Writes the report to its path; when that fails, says so on stderr, notes it
// in the report and writes to the fallback path; as a last resort prints the
// JSON on stderr. Returns the path written ("<stderr>" for the last resort).
std::string write_report_with_fallback(Report& report, const Settings& settings, int rank);
// STEPSCOPE_TRACE: writes the captured window as a gzipped Chrome trace.
void write_trace_if_enabled(Collector& collector, const RunInfo& run, const Settings& settings, int rank);

}  // namespace stepscope::detail
