// Set algebra on lists of time intervals (sorted, disjoint, non-empty), shared
// by the per-step attribution (attribution.cpp) and the PyTorch phases
// (framework_phases.cpp). Times are nanoseconds on the trace's clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "timeline/presorted_sort.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

using Intervals = std::vector<timeline::Interval>;

// Sorts and merges. Unlike the HTA merge (timeline::merge_intervals),
// degenerate (end <= start) inputs are dropped: here they are noise. The
// lists come from the timeline nearly in time order, hence the presorted
// sort; the merged list reuses the input's storage.
inline Intervals normalise(Intervals v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const timeline::Interval& iv) { return iv.end_ns <= iv.start_ns; }),
          v.end());
  stable_sort_presorted(v.begin(), v.end(), [](const timeline::Interval& a, const timeline::Interval& b) {
    return a.start_ns < b.start_ns;
  });
  std::size_t merged = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const timeline::Interval iv = v[i];
    if (merged > 0 && iv.start_ns <= v[merged - 1].end_ns)
      v[merged - 1].end_ns = std::max(v[merged - 1].end_ns, iv.end_ns);
    else
      v[merged++] = iv;
  }
  v.resize(merged);
  return v;
}

inline Intervals intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].start_ns, b[j].start_ns);
    const std::int64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (hi > lo) out.push_back({lo, hi});
    if (a[i].end_ns < b[j].end_ns)
      ++i;
    else
      ++j;
  }
  return out;
}

inline Intervals subtract(const Intervals& a, const Intervals& b) {
  Intervals out;
  std::size_t j = 0;
  for (timeline::Interval cur : a) {
    while (j < b.size() && b[j].end_ns <= cur.start_ns) ++j;
    std::size_t k = j;
    while (k < b.size() && b[k].start_ns < cur.end_ns) {
      if (b[k].start_ns > cur.start_ns) out.push_back({cur.start_ns, b[k].start_ns});
      cur.start_ns = std::max(cur.start_ns, b[k].end_ns);
      if (cur.start_ns >= cur.end_ns) break;
      ++k;
    }
    if (cur.start_ns < cur.end_ns) out.push_back(cur);
  }
  return out;
}

inline std::int64_t length(const Intervals& v) {
  std::int64_t total = 0;
  for (const timeline::Interval& iv : v) total += iv.end_ns - iv.start_ns;
  return total;
}

// The part of a normalised list inside [start, end); finds the first
// interval by binary search, so clipping many windows stays cheap.
inline Intervals clip(const Intervals& v, std::int64_t start, std::int64_t end) {
  Intervals out;
  auto it = std::lower_bound(v.begin(), v.end(), start,
                             [](const timeline::Interval& iv, std::int64_t t) { return iv.end_ns <= t; });
  for (; it != v.end() && it->start_ns < end; ++it) {
    const std::int64_t lo = std::max(it->start_ns, start), hi = std::min(it->end_ns, end);
    if (hi > lo) out.push_back({lo, hi});
  }
  return out;
}

// Items sorted by start (the caller sorts them) with the running maximum of
// their ends, so that a look-back from an instant stops where no earlier item
// ends after a bound: finding what encloses or overlaps an instant is not a
// scan of everything before it (three such scans made the import of a trace
// quadratic in its steps; docs/benchmarks-import.md).
template <typename T>
class ByStart {
 public:
  ByStart() = default;
  template <typename StartOf, typename EndOf>
  ByStart(std::vector<T> items, StartOf start_of, EndOf end_of) : items_(std::move(items)) {
    starts_.reserve(items_.size());
    max_end_.reserve(items_.size());
    for (const T& x : items_) {
      starts_.push_back(start_of(x));
      max_end_.push_back(max_end_.empty() ? end_of(x) : std::max(max_end_.back(), end_of(x)));
    }
  }
  // fn(item) for the items that start at or before `at`, latest first, while
  // an earlier one may still end after `after`; fn returns false to stop.
  template <typename Fn>
  void reach_back(std::int64_t at, std::int64_t after, Fn&& fn) const {
    auto i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), at) - starts_.begin());
    while (i > 0 && max_end_[i - 1] > after)
      if (!fn(items_[--i])) return;
  }

 private:
  std::vector<T> items_;
  std::vector<std::int64_t> starts_, max_end_;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
