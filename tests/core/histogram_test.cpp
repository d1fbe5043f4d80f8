// Histogram accuracy against exact order statistics, and bounded memory.
#include "stats/histogram.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

using stepscope::detail::DurationStats;
using stepscope::detail::Histogram;
using stepscope::detail::RunningStats;

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
  // All at once, in one pass: the same values as one at a time.
  const std::array<double, 6> all = stats.histogram.quantiles<6>({0.01, 0.1, 0.5, 0.9, 0.99, 0.999});
  const double qs[] = {0.01, 0.1, 0.5, 0.9, 0.99, 0.999};
  for (std::size_t i = 0; i < all.size(); ++i) REQUIRE(all[i] == stats.histogram.quantile(qs[i]));
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
  // Several ranks in one bucket, and the first and last value.
  const std::array<double, 5> q = h.quantiles<5>({0.0, 0.5, 0.5, 0.995, 1.0});
  CHECK(q == std::array<double, 5>{0.0, 49.0, 49.0, 99.0, 99.0});
  CHECK(Histogram{}.quantiles<2>({0.5, 0.9}) == std::array<double, 2>{0.0, 0.0});
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

namespace {
// The bucket index as first written (with a branch for the exact range): the
// layout reports and merges depend on, which the branch-free version must keep.
std::uint32_t reference_bucket(std::uint64_t value) {
  constexpr int kSubBits = Histogram::kSubBits;
  constexpr std::uint64_t kSubCount = Histogram::kSubCount;
  if (value < kSubCount) return static_cast<std::uint32_t>(value);
  const int exponent = 63 - __builtin_clzll(value);
  const int shift = exponent - kSubBits;
  const std::uint64_t sub = (value >> shift) - kSubCount;
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(shift + 1) << kSubBits) + sub);
}
}  // namespace

TEST_CASE("the branch-free bucket index keeps the layout", "[histogram]") {
  std::vector<std::uint64_t> values;
  for (std::uint64_t v = 0; v < (1u << 18); ++v) values.push_back(v);
  for (int k = 0; k < 64; ++k)
    for (std::int64_t d : {-2, -1, 0, 1, 2}) values.push_back((std::uint64_t{1} << k) + static_cast<std::uint64_t>(d));
  values.push_back(~std::uint64_t{0});
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) values.push_back(rng() >> (rng() % 64));
  // One assertion for all values (the first mismatch, if any), not one each.
  std::uint64_t mismatch = 0;
  std::size_t mismatches = 0;
  for (const std::uint64_t v : values)
    if (Histogram::bucket_of(v) != reference_bucket(v) && mismatches++ == 0) mismatch = v;
  INFO("first mismatch at " << mismatch);
  REQUIRE(mismatches == 0);
}

TEST_CASE("the count is the sum of the buckets, also after merges and imports", "[histogram]") {
  Histogram a, b;
  for (std::uint64_t v = 0; v < 5000; v += 3) a.add(v * v);
  for (std::uint64_t v = 0; v < 700; ++v) b.add(v);
  REQUIRE(a.count() == 1667);
  a.merge(b);
  REQUIRE(a.count() == 1667 + 700);
  Histogram c;
  REQUIRE(c.from_data(a.to_data()));
  REQUIRE(c.count() == a.count());
  REQUIRE(c.quantile(0.5) == a.quantile(0.5));
  REQUIRE(Histogram{}.count() == 0);
  REQUIRE(Histogram{}.quantile(0.5) == 0);
}

TEST_CASE("moments are exact: sums in integers, variance from exact sums", "[histogram]") {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    // Magnitudes from ns to ~18 minutes, spreads from 1 ns to the magnitude.
    const std::uint64_t base = std::uint64_t{1} << (rng() % 41);
    const std::uint64_t spread = 1 + (rng() % (base + 1));
    std::vector<std::uint64_t> values(1 + rng() % 5000);
    for (auto& v : values) v = base + rng() % spread;
    RunningStats m;
    for (auto v : values) m.add(v);
    std::uint64_t total = 0;
    for (auto v : values) total += v;
    // Two-pass variance in long double around the exact mean.
    const long double mean = static_cast<long double>(total) / values.size();
    long double scatter = 0;
    for (auto v : values) scatter += (v - mean) * (v - mean);
    INFO("base=" << base << " spread=" << spread << " n=" << values.size());
    REQUIRE(m.count() == values.size());
    REQUIRE(m.total_ns() == total);
    REQUIRE(m.min_ns() == *std::min_element(values.begin(), values.end()));
    REQUIRE(m.max_ns() == *std::max_element(values.begin(), values.end()));
    const double expected = values.size() < 2 ? 0.0 : static_cast<double>(std::sqrt(scatter / (values.size() - 1)));
    REQUIRE(m.stddev_ns() == Approx(expected).epsilon(1e-12).margin(1e-9));
  }
}

TEST_CASE("merged moments are bit-identical to moments of all values", "[histogram]") {
  std::mt19937_64 rng(9);
  RunningStats all, parts[4];
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t v = 1'000'000 + rng() % 50'000'000;
    all.add(v);
    parts[rng() % 4].add(v);
  }
  RunningStats merged;
  for (auto& p : parts) merged.merge(p);
  merged.merge(RunningStats{});  // merging an empty one changes nothing
  REQUIRE(merged.count() == all.count());
  REQUIRE(merged.total_ns() == all.total_ns());
  REQUIRE(merged.min_ns() == all.min_ns());
  REQUIRE(merged.max_ns() == all.max_ns());
  REQUIRE(merged.stddev_ns() == all.stddev_ns());
  REQUIRE(RunningStats{}.min_ns() == 0);
  REQUIRE(RunningStats{}.stddev_ns() == 0);
}
