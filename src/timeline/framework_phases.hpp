// Where PyTorch's own phases lie in an imported trace, as interval sets:
// what framework_phases() claims step by step, and what the operator
// attribution (src/import/phase_operators.cpp) looks an instant up in, so the
// two agree on which phase a moment belongs to. Internal.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "timeline/interval_set.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace timeline {

// Normalised intervals (detail::normalise), per thread except backward: the
// autograd engine may run it on a thread of its own.
struct FrameworkMarks {
  std::map<std::int64_t, detail::Intervals> user;       // the user's record_function ranges
  std::map<std::int64_t, detail::Intervals> data;       // enumerate(DataLoader)#...
  std::map<std::int64_t, detail::Intervals> optimizer;  // Optimizer.step#..., Optimizer.zero_grad#...
  std::map<std::int64_t, detail::Intervals> work;       // any other operator, runtime call, nn.Module frame
  detail::Intervals backward;                           // autograd::engine::evaluate_function:..., "...: backward"
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> step_tid;  // (start, end) of a ProfilerStep -> thread

  // The thread that ran step s (-1: unknown).
  std::int64_t thread_of(const Step& s) const;
};

FrameworkMarks framework_marks(const Timeline& tl);

// framework_phases() from marks already computed (report_from_timeline
// shares one framework_marks() between this and the top operators).
std::vector<StepFrameworkPhases> framework_phases(const Timeline& tl, const FrameworkMarks& marks);

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope
