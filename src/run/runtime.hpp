// Internals of the run time (src/run/runtime.cpp, report_output.cpp): the
// layer on top that wires a live run's hand-offs, collector facts ->
// analyze() -> the writers (docs/architecture.md).
#pragma once

#include "core/env.hpp"

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>

#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

class Collector;

// Builds the report from the collector's facts plus run information and the
// analyzer's verdict. final_report stops the collector first.
Report build_report(bool final_report);
// The run's settings for code outside the library's own objects
// (stepscope_mpi): those the collector thread read, or, when recording never
// started, read from the environment now. Exported for that reason only.
STEPSCOPE_API Settings run_settings() noexcept;

// Writes the report to `path`; when that fails, says so on stderr, notes it
// in the report and writes to the fallback path; as a last resort prints the
// JSON on stderr. Returns the path written ("<stderr>" for the last resort).
std::string write_report_with_fallback(Report& report, const std::string& path, int rank);
// STEPSCOPE_TRACE: writes the captured window as a gzipped Chrome trace,
// beside the report (report_path's directory) unless STEPSCOPE_TRACE_OUT
// says where. A failure's reason goes to stderr and to report.warnings.
void write_trace_if_enabled(Collector& collector, Report& report, const Settings& settings,
                            const std::string& report_path, long child_pid);

// Ends the run: stops the collector and writes the final report (once; later
// calls return the same path). ended_by: "exit" (the exit handler) or
// "finish" (stepscope::finish()).
std::string finish_run(const char* ended_by) noexcept;

// Name of a termination signal the run time handles ("SIGTERM"), else "".
const char* termination_signal_name(int sig) noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
