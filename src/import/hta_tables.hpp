// src/import/hta_tables.hpp (internal) — HTA's tables from device analyses
// the caller already ran: report_from_timeline computes the analyses that the
// tables and the verdict's device facts share once (timeline/device_analyses.hpp).
// The public entry point is hta_tables(trace) in import/trace_import.hpp.
#pragma once

#include "import/trace_import.hpp"
#include "timeline/device_analyses.hpp"

namespace stepscope {
inline namespace v1 {

// hta_tables(trace) with `shared` = timeline::shared_device_analyses(trace).
HtaTables hta_tables(const timeline::Timeline& trace, const timeline::SharedDeviceAnalyses& shared);

}  // namespace v1
}  // namespace stepscope
