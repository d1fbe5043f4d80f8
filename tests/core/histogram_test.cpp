// Histogram accuracy against exact order statistics, and bounded memory.
#include "core/histogram.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using stepscope::detail::DurationStats;
using stepscope::detail::Histogram;

namespace {
double exact_quantile(std::vector<std::uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  std::size_t rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return static_cast<double>(v[rank - 1]);
}
}  // namespace

TEST_CASE("bucket layout is contiguous and monotonic", "[histogram]") {
  std::uint32_t previous = 0;
  for (std::uint64_t v = 1; v < 1'000'000; v = v * 17 / 16 + 1) {
    const std::uint32_t b = Histogram::bucket_of(v);
    REQUIRE(b >= previous);
    REQUIRE(Histogram::bucket_low(b) <= v);
    REQUIRE(v < Histogram::bucket_low(b) + Histogram::bucket_width(b));
    previous = b;
  }
  REQUIRE(Histogram::bucket_of(127) == 127);
  REQUIRE(Histogram::bucket_of(128) == 128);
  REQUIRE(Histogram::bucket_low(Histogram::bucket_of(1ull << 40)) == (1ull << 40));
}

TEST_CASE("percentiles are within 1% of the exact values", "[histogram]") {
  std::mt19937_64 rng(42);
  // Log-normal durations around 2 ms with a heavy tail, plus a second mode.
  std::lognormal_distribution<double> main_mode(std::log(2e6), 0.4);
  std::lognormal_distribution<double> slow_mode(std::log(3e7), 0.2);
  std::vector<std::uint64_t> values;
  DurationStats stats;
  for (int i = 0; i < 200000; ++i) {
    const double x = (i % 50 == 0) ? slow_mode(rng) : main_mode(rng);
    const auto v = static_cast<std::uint64_t>(x);
    values.push_back(v);
    stats.add(v);
  }
  for (double q : {0.01, 0.1, 0.5, 0.9, 0.99, 0.999}) {
    const double exact = exact_quantile(values, q);
    const double approx = stats.histogram.quantile(q);
    INFO("q=" << q << " exact=" << exact << " approx=" << approx);
    REQUIRE(std::fabs(approx - exact) / exact <= 0.01);
  }
  const auto d = stats.to_distribution_ms();
  REQUIRE(d.count == values.size());
  REQUIRE(d.min == Approx(*std::min_element(values.begin(), values.end()) * 1e-6));
  REQUIRE(d.max == Approx(*std::max_element(values.begin(), values.end()) * 1e-6));
  double sum = 0;
  for (auto v : values) sum += static_cast<double>(v);
  const double mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (auto v : values) sq += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
  REQUIRE(d.mean == Approx(mean * 1e-6).epsilon(1e-9));
  REQUIRE(d.stddev == Approx(std::sqrt(sq / static_cast<double>(values.size() - 1)) * 1e-6).epsilon(1e-6));
}

TEST_CASE("small values are exact", "[histogram]") {
  Histogram h;
  for (std::uint64_t v = 0; v < 100; ++v) h.add(v);
  REQUIRE(h.quantile(0.5) == 49.0);
  REQUIRE(h.quantile(1.0) == 99.0);
}

TEST_CASE("memory does not grow with the number of values", "[histogram]") {
  Histogram h;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::uint64_t> dist(1'000'000, 50'000'000);
  for (int i = 0; i < 10000; ++i) h.add(dist(rng));
  const std::size_t after_10k = h.memory_bytes();
  for (int i = 0; i < 1'000'000; ++i) h.add(dist(rng));
  REQUIRE(h.memory_bytes() == after_10k);
  REQUIRE(h.memory_bytes() < 64 * 1024);
}

TEST_CASE("variance stays accurate when the spread is tiny next to the mean", "[histogram]") {
  DurationStats s;
  // 10 s +- 1 ns: the naive sum-of-squares formula loses this completely.
  for (int i = 0; i < 1000; ++i) s.add(10'000'000'000ull + static_cast<std::uint64_t>(i % 2));
  REQUIRE(s.moments.stddev_ns() == Approx(0.50025).epsilon(1e-3));
}

TEST_CASE("merged histograms equal one histogram of all values", "[histogram]") {
  DurationStats a, b, all;
  for (std::uint64_t v = 1000; v < 200000; v += 37) {
    (v % 3 == 0 ? a : b).add(v);
    all.add(v);
  }
  a.merge(b);
  const auto da = a.to_distribution_ms(), dall = all.to_distribution_ms();
  REQUIRE(da.count == dall.count);
  REQUIRE(da.p50 == dall.p50);
  REQUIRE(da.p99 == dall.p99);
  REQUIRE(da.stddev == Approx(dall.stddev).epsilon(1e-9));
}
