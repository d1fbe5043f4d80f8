// The "running sum" sweep HTA uses for kernel-type slices and overlap.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

struct SweepLayer {
  std::vector<timeline::Interval> merged;  // one class, already merged
  std::int64_t value;                      // added at each start, removed at each end
};

// Sorts every start (+value) and end (-value) by time and returns, for each
// running sum, the time spent at it. With distinct power-of-two values the
// running sum is the set of layers active at once. Merged lists of degenerate
// (end < start) groups make the sum dip as in HTA, which this keeps.
std::map<std::int64_t, std::int64_t> sweep_running_sums(const std::vector<SweepLayer>& layers);

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
