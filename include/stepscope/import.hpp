// stepscope/import.hpp — a stepscope report from a PyTorch profiler / Kineto
// Chrome trace (.json or .json.gz), as `stepscope analyze TRACE` builds it.
//
//   stepscope::Report report;
//   std::string error;
//   if (!stepscope::analyze_trace_file("rank0.json.gz", report, error)) {
//     std::fprintf(stderr, "%s\n", error.c_str());
//     return 1;
//   }
//   std::printf("%s\n", report.bottleneck.summary.c_str());
//
// The report is the one a live run writes (stepscope/report.hpp): steps from
// ProfilerStep#N, phases from user annotations, device facts from the GPU
// timeline, the analyzer's verdict. Nothing throws.
#pragma once

#include <string>

#include "stepscope/export.hpp"
#include "stepscope/report.hpp"

namespace stepscope {
inline namespace v1 {

// Reads the trace and builds its report. False with `error` set (one
// line) when the trace cannot be read, and when it holds nothing to time: no
// ProfilerStep#N and no GPU activity (the error then says how to record one,
// see nothing_to_time). `stepscope analyze` exits 3 on either.
STEPSCOPE_API bool analyze_trace_file(const std::string& path, Report& out, std::string& error) noexcept;

}  // namespace v1
}  // namespace stepscope
