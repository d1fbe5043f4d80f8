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
  // The thread with the most marked time (user, data, optimizer and other
  // work): the training loop's, where no ProfilerStep names one. -1: none.
  std::int64_t main_tid = -1;

  // The thread that ran step s: its ProfilerStep's, else the one the step
  // names (Step::tid), else main_tid (a window without ProfilerSteps).
  std::int64_t thread_of(const Step& s) const;
};

FrameworkMarks framework_marks(const Timeline& tl);

// The iterations of a trace without ProfilerStep#N (recorded without a
// profiler schedule, or never told prof.step()), from the training loop's own
// ranges on the thread that has most of them: from the start of one
// DataLoader fetch (enumerate(DataLoader)#...) to the start of the next
// that follows an Optimizer.step#... (every fetch where the thread makes no
// optimizer steps: inference); without fetches, from the end of one
// Optimizer.step to the end of the next (also when the fetches are on
// another thread than the updates: a background prefetcher's fetches are not
// the step's). The iteration after the last mark is left out (the trace does not
// show where it ends), as HTA leaves out the last ProfilerStep. Empty when
// fewer than two marks exist.
struct InferredIterations {
  std::vector<Step> steps;     // in order, numbered from 0
  const char* marked_by = "";  // "DataLoader fetches" or "Optimizer.step calls"; "" when empty
  std::int64_t tid = -1;
};
InferredIterations infer_iterations(const Timeline& tl);

// framework_phases() from marks already computed (report_from_timeline
// shares one framework_marks() between this and the top operators).
std::vector<StepFrameworkPhases> framework_phases(const Timeline& tl, const FrameworkMarks& marks);

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope
