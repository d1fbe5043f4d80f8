// src/import/phase_operators.hpp (internal) — the top operators of each phase
// from framework marks the caller already has: report_from_timeline computes
// timeline::framework_marks() once for the framework phases and for this.
// The public entry point is attach_top_operators(trace, phases, per_kind)
// in import/trace_import.hpp.
#pragma once

#include <cstddef>
#include <vector>

#include "import/trace_import.hpp"
#include "timeline/framework_phases.hpp"

namespace stepscope {
inline namespace v1 {

// attach_top_operators() with `marks` = timeline::framework_marks(trace).
void attach_top_operators(const timeline::Timeline& trace, const timeline::FrameworkMarks& marks,
                          std::vector<PhaseSummary>& phases, std::size_t per_kind = kTopOperatorsPerKind);

}  // namespace v1
}  // namespace stepscope
