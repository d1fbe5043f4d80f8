// What stepscope cost the run, in words (the summary's "stepscope itself"
// lines beyond the collector's CPU): the per-scope cost when the clock makes
// it dearer than the TSC would, and what collecting device activity cost.
#pragma once

#include <stepscope/report.hpp>

#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {

// One entry per line; empty when there is nothing worth saying.
std::vector<std::string> self_cost_lines(const Report& r);

}  // namespace v1
}  // namespace stepscope
