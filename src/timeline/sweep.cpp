#include "timeline/sweep.hpp"

#include <algorithm>
#include <utility>

namespace stepscope {
inline namespace v1 {
namespace detail {

std::map<std::int64_t, std::int64_t> sweep_running_sums(const std::vector<SweepLayer>& layers) {
  std::vector<std::pair<std::int64_t, std::int64_t>> points;  // (time, delta)
  for (const SweepLayer& layer : layers) {
    for (const timeline::Interval& iv : layer.merged) {
      points.emplace_back(iv.start_ns, layer.value);
      points.emplace_back(iv.end_ns, -layer.value);
    }
  }
  // Ties do not matter: they are zero time apart.
  std::stable_sort(points.begin(), points.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
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
