// A stable sort for sequences that are already nearly sorted: what the
// timeline's event lists are. A Kineto trace lists each thread's host events
// and each stream's device ops almost in time order (on the V100 trace 11 of
// 31 323 host ops start before their predecessor, no device op does), so the
// analyses' sorts by start time were spending most of their time confirming
// an order that was already there. Internal to the library.
//
//   detail::stable_sort_presorted(v.begin(), v.end(), [](const Interval& a, const Interval& b) {
//     return a.start_ns < b.start_ns;
//   });
//
// The result is exactly std::stable_sort's (equal elements keep their order),
// in O(n) for a sorted range and O(n log r) for one made of r ascending runs;
// a range of many short runs is handed to std::stable_sort itself.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

template <typename RandomIt, typename Less>
void stable_sort_presorted(RandomIt first, RandomIt last, Less less) {
  const std::ptrdiff_t n = last - first;
  if (n < 2) return;
  // Past this many runs a merge sort of its own does no worse: give up the
  // run list early rather than grow it for an unsorted range.
  const std::size_t max_runs = 2 + static_cast<std::size_t>(n) / 32;
  std::vector<std::ptrdiff_t> run_starts;  // allocated only once a run ends
  for (std::ptrdiff_t i = 1; i < n; ++i) {
    if (!less(first[i], first[i - 1])) continue;
    if (run_starts.empty()) run_starts.push_back(0);
    run_starts.push_back(i);
    if (run_starts.size() > max_runs) {
      std::stable_sort(first, last, less);
      return;
    }
  }
  if (run_starts.empty()) return;  // already sorted
  run_starts.push_back(n);
  // Merge neighbouring runs pairwise until one is left; inplace_merge is
  // stable (on ties the left run's element comes first), so every level keeps
  // the order of equal elements, as std::stable_sort does.
  std::vector<std::ptrdiff_t> merged;
  while (run_starts.size() > 2) {
    const std::size_t runs = run_starts.size() - 1;
    merged.clear();
    std::size_t k = 0;
    for (; k + 1 < runs; k += 2) {
      std::inplace_merge(first + run_starts[k], first + run_starts[k + 1], first + run_starts[k + 2], less);
      merged.push_back(run_starts[k]);
    }
    if (k < runs) merged.push_back(run_starts[k]);  // an odd run waits for the next level
    merged.push_back(n);
    run_starts.swap(merged);
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
