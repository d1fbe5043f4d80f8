#include "timeline/sweep.hpp"

#include "timeline/presorted_sort.hpp"

#include <algorithm>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::map<std::int64_t, std::int64_t> sweep_running_sums(const std::vector<SweepLayer>& layers) {
  std::vector<std::pair<std::int64_t, std::int64_t>> points;  // (time, delta)
  std::size_t count = 0;
  for (const SweepLayer& layer : layers) count += 2 * layer.merged.size();
  points.reserve(count);
  for (const SweepLayer& layer : layers) {
    for (const timeline::Interval& iv : layer.merged) {
      points.emplace_back(iv.start_ns, layer.value);
      points.emplace_back(iv.end_ns, -layer.value);
    }
  }
  // Ties are zero time apart, but their order decides which running sums get
  // a (zero-length) entry, so the sort stays stable. Each layer's points are
  // one ascending run (its merged groups are disjoint): a merge of a few runs.
  stable_sort_presorted(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::int64_t, std::int64_t> time_at;
  std::int64_t running = 0;
  for (std::size_t i = 0; i + 1 < points.size(); ++i) {
    running += points[i].second;
    if (running > 0) time_at[running] += points[i + 1].first - points[i].first;
  }
  return time_at;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
