// detail::stable_sort_presorted (src/timeline/presorted_sort.hpp) must give
// exactly std::stable_sort's order, equal keys included, whatever the input:
// sorted, a few runs, many runs (the fallback), reversed, all equal. And the
// launch percentiles, found by selection instead of a full sort, must be
// numpy's linear-interpolation percentiles of the sorted values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "timeline/presorted_sort.hpp"
#include "timeline/timeline.hpp"
#include "timeline/timeline_builder.hpp"

using namespace stepscope::timeline;

namespace {

using Item = std::pair<int, int>;  // (key, position in the input): equal keys must keep their order
bool by_key(const Item& a, const Item& b) {
  return a.first < b.first;
}

std::vector<Item> with_positions(const std::vector<int>& keys) {
  std::vector<Item> out;
  for (std::size_t i = 0; i < keys.size(); ++i) out.push_back({keys[i], static_cast<int>(i)});
  return out;
}

void check_same_as_stable_sort(const std::vector<int>& keys) {
  std::vector<Item> expected = with_positions(keys), ours = expected;
  std::stable_sort(expected.begin(), expected.end(), by_key);
  stepscope::detail::stable_sort_presorted(ours.begin(), ours.end(), by_key);
  CHECK(ours == expected);
}

}  // namespace

TEST_CASE("stable_sort_presorted orders as std::stable_sort does", "[timeline][sort]") {
  std::mt19937 rng(7);
  check_same_as_stable_sort({});
  check_same_as_stable_sort({3});
  check_same_as_stable_sort({2, 1});
  check_same_as_stable_sort(std::vector<int>(100, 5));  // all equal: one run, nothing moves
  for (int n : {10, 100, 1000, 5000}) {
    INFO("n = " << n);
    std::vector<int> sorted(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) sorted[static_cast<std::size_t>(i)] = i / 3;  // ties in every run
    check_same_as_stable_sort(sorted);
    std::vector<int> reversed(sorted.rbegin(), sorted.rend());
    check_same_as_stable_sort(reversed);  // n runs: the fallback
    for (int displaced : {1, 2, 5, 11, 40}) {
      INFO("displaced = " << displaced);
      // A nearly sorted list, as a trace's events are: a few elements out of place.
      std::vector<int> nearly = sorted;
      std::uniform_int_distribution<std::size_t> at(0, nearly.size() - 1);
      for (int k = 0; k < displaced; ++k) std::swap(nearly[at(rng)], nearly[at(rng)]);
      check_same_as_stable_sort(nearly);
      // Runs concatenated (each layer of a sweep, each thread of a trace).
      std::vector<int> runs;
      for (int r = 0; r < displaced; ++r)
        for (int i = 0; i < n / displaced; ++i) runs.push_back((i * 7 + r) / 4);
      check_same_as_stable_sort(runs);
    }
    std::vector<int> random(static_cast<std::size_t>(n));
    std::uniform_int_distribution<int> key(0, n / 4);
    for (int& v : random) v = key(rng);
    check_same_as_stable_sort(random);
  }
}

TEST_CASE("launch percentiles are numpy's over the sorted values", "[timeline][launch]") {
  using stepscope::test::Builder;
  std::vector<int> sizes;
  for (int n = 1; n <= 150; ++n) sizes.push_back(n);  // selection leaves the ranks near lo sorted only sometimes
  sizes.push_back(1000);
  for (int n : sizes) {
    INFO("pairs = " << n);
    Builder b;
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_int_distribution<int> delay(0, 300), runtime(1, 80);
    std::vector<double> delays, runtimes;
    for (int i = 0; i < n; ++i) {
      const int launch = 1000 * i, cpu = runtime(rng), wait = delay(rng) % 7 == 0 ? 17 : delay(rng);  // some ties
      b.device("gemm", launch + cpu + wait, launch + cpu + wait + 3, 7, DeviceOpKind::kernel, launch, launch + cpu);
      delays.push_back(static_cast<double>(wait) * 1000.0);
      runtimes.push_back(static_cast<double>(cpu) * 1000.0);
    }
    std::sort(delays.begin(), delays.end());
    std::sort(runtimes.begin(), runtimes.end());
    const auto numpy = [](const std::vector<double>& sorted, double p) {
      const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
      const auto lo = static_cast<std::size_t>(std::floor(rank)), hi = static_cast<std::size_t>(std::ceil(rank));
      return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
    };
    const LaunchStats s = launch_statistics(b.tl);
    REQUIRE(s.pairs == n);
    CHECK(s.launch_delay_p50_ns == numpy(delays, 50));  // exact: the same values, the same arithmetic
    CHECK(s.launch_delay_p90_ns == numpy(delays, 90));
    CHECK(s.launch_delay_p99_ns == numpy(delays, 99));
    CHECK(s.runtime_p50_ns == numpy(runtimes, 50));
    CHECK(s.runtime_p90_ns == numpy(runtimes, 90));
  }
}
