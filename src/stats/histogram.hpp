// Bounded-memory log-linear histogram of durations in nanoseconds.
//
// Values below 2^kSubBits are counted exactly; above, each power of two is
// split into 2^kSubBits equal buckets, so a bucket is at most 1/128 of its
// values wide and its midpoint is within 0.4% of any value in it. Memory is
// bounded by the largest value seen (at most 58 * 128 counters), not by how
// many values were added. Insertion is a count-leading-zeros, a shift and an
// increment: cheap enough for the collector's >100 M records/s budget.
#pragma once

#include "stats/int128.hpp"

#include <stepscope/report.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

class Histogram {
 public:
  static constexpr int kSubBits = 7;
  static constexpr std::uint64_t kSubCount = 1ull << kSubBits;

  static std::uint32_t bucket_of(std::uint64_t value) noexcept {
    // Branch-free: `value | kSubCount` has the same top bit as value when
    // value >= kSubCount and bit kSubBits otherwise, so shift is 0 in the
    // exact range and the one formula covers both:
    //   index = shift * kSubCount + (value >> shift)
    // (above the exact range, value >> shift lies in [kSubCount, 2 * kSubCount)).
    const int exponent = 63 ^ __builtin_clzll(value | kSubCount);  // = 63 - clz, >= kSubBits: one BSR
    const int shift = exponent - kSubBits;
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(shift) << kSubBits) + (value >> shift));
  }
  // Lowest value in the bucket and its width.
  static std::uint64_t bucket_low(std::uint32_t index) noexcept {
    if (index < kSubCount) return index;
    const int shift = static_cast<int>(index >> kSubBits) - 1;
    const std::uint64_t sub = index & (kSubCount - 1);
    return (kSubCount + sub) << shift;
  }
  static std::uint64_t bucket_width(std::uint32_t index) noexcept {
    if (index < kSubCount) return 1;
    return 1ull << (static_cast<int>(index >> kSubBits) - 1);
  }
  // Representative value: the exact value for exact buckets, else the midpoint.
  static double bucket_value(std::uint32_t index) noexcept {
    if (index < kSubCount) return static_cast<double>(index);
    return static_cast<double>(bucket_low(index)) + static_cast<double>(bucket_width(index) - 1) / 2.0;
  }

  void add(std::uint64_t value) noexcept {
    const std::uint32_t index = bucket_of(value);
    if (__builtin_expect(index >= bucket_limit_, 0)) grow(index);
    ++counts_[index];
  }
  void add_count(std::uint32_t index, std::uint64_t n) {
    if (index >= bucket_limit_) grow(index);
    counts_[index] += n;
  }
  void merge(const Histogram& other) {
    for (std::uint32_t i = 0; i < other.counts_.size(); ++i)
      if (other.counts_[i] != 0) add_count(i, other.counts_[i]);
  }

  // Adds up the buckets: insertion does not keep a total (the moments next to
  // a histogram count the values anyway), reading it is rare.
  std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const std::uint64_t c : counts_) n += c;
    return n;
  }

  // Nearest-rank quantile (q in [0,1]): the value of the ceil(q*n)-th smallest.
  double quantile(double q) const noexcept { return quantiles<1>({q})[0]; }
  // Several at once, in one pass over the buckets (qs ascending): a report
  // asks p50, p90 and p99 of every distribution, and a histogram of
  // millisecond durations spans thousands of buckets.
  template <std::size_t N>
  std::array<double, N> quantiles(const std::array<double, N>& qs) const noexcept {
    std::array<double, N> out{};
    const std::uint64_t count = this->count();
    if (count == 0 || counts_.empty()) return out;
    std::size_t next = 0;
    std::uint64_t seen = 0;
    for (std::uint32_t i = 0; i < counts_.size() && next < N; ++i) {
      seen += counts_[i];
      while (next < N && seen >= rank_of(qs[next], count)) out[next++] = bucket_value(i);
    }
    for (; next < N; ++next) out[next] = bucket_value(static_cast<std::uint32_t>(counts_.size() - 1));
    return out;
  }

  HistogramData to_data() const {
    HistogramData data;
    data.sub_bucket_bits = kSubBits;
    for (std::uint32_t i = 0; i < counts_.size(); ++i)
      if (counts_[i] != 0) data.buckets.emplace_back(i, counts_[i]);
    return data;
  }
  // Rebuilds from a report; false when the layout differs or is out of range.
  bool from_data(const HistogramData& data) {
    if (data.sub_bucket_bits != kSubBits) return false;
    for (const auto& [index, n] : data.buckets) {
      if (index >= kMaxBuckets) return false;
      add_count(index, n);
    }
    return true;
  }

  std::size_t memory_bytes() const noexcept { return counts_.capacity() * sizeof(std::uint64_t); }

 private:
  static std::uint64_t rank_of(double q, std::uint64_t count) noexcept {
    const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count)));
    return std::clamp<std::uint64_t>(rank, 1, count);
  }

  // Values up to 2^64 ns: 57 doubling ranges above the exact range.
  static constexpr std::uint32_t kMaxBuckets = (64 - kSubBits + 1) << kSubBits;

  void grow(std::uint32_t index) {
    // Grow a whole power-of-two range at a time; never past kMaxBuckets.
    std::size_t wanted = std::min<std::size_t>(((index >> kSubBits) + 1) << kSubBits, kMaxBuckets);
    counts_.resize(std::max<std::size_t>(wanted, index + 1), 0);
    bucket_limit_ = static_cast<std::uint32_t>(counts_.size());
  }

  std::vector<std::uint64_t> counts_;
  std::uint32_t bucket_limit_ = 0;  // counts_.size(), kept apart: one compare on insertion
};

// Streaming count / sum / min / max / variance next to a Histogram, in exact
// integer arithmetic: adding a value is a multiply and a few integer adds (the
// collector does this for every record), and the variance is computed once,
// at report time, from exact sums: no cancellation when the spread is tiny
// next to the mean, and merging is exact. Exact while the total stays below
// 2^64 ns (584 years of summed time), which also keeps the sum of squares
// below 2^128: sum(v^2) <= (sum v)^2 for v >= 0.
class RunningStats {
 public:
  void add(std::uint64_t value_ns) noexcept {
    const Uint128 square = static_cast<Uint128>(value_ns) * value_ns;
    sum_sq_ += square;
    total_ += value_ns;
    // Branches, not conditional moves: a new extreme is rare after the first
    // few values, and a compare with memory and a predicted branch is two
    // instructions where load, compare, move and store are four.
    if (__builtin_expect(value_ns < min_, 0)) min_ = value_ns;
    if (__builtin_expect(value_ns > max_, 0)) max_ = value_ns;
    ++count_;
  }
  void merge(const RunningStats& other) noexcept {
    sum_sq_ += other.sum_sq_;
    total_ += other.total_;
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
    count_ += other.count_;
  }
  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t total_ns() const noexcept { return total_; }
  double mean_ns() const noexcept { return count_ ? static_cast<double>(total_) / static_cast<double>(count_) : 0; }
  double stddev_ns() const noexcept {
    if (count_ < 2) return 0;
    // (n-1) var = sum_sq - total^2 / n. total^2 fits 128 bits (total < 2^64);
    // split total^2 / n into quotient and remainder so the difference of the
    // two large terms is taken exactly, in integers.
    const double n = static_cast<double>(count_);
    const Uint128 total_sq = static_cast<Uint128>(total_) * total_;
    const Uint128 quotient = total_sq / count_;
    const double remainder = static_cast<double>(static_cast<std::uint64_t>(total_sq % count_));
    // Sum of squared deviations from the mean; sum_sq >= total^2 / n (Cauchy-Schwarz).
    const double scatter = static_cast<double>(sum_sq_ - quotient) - remainder / n;
    const double var = scatter / (n - 1);
    return var > 0 ? std::sqrt(var) : 0;
  }
  std::uint64_t min_ns() const noexcept { return count_ ? min_ : 0; }
  std::uint64_t max_ns() const noexcept { return max_; }

 private:
  // count_ and total_ are not neighbours on purpose: GCC would pair their
  // two scalar adds into one SSE add that costs five instructions, not two.
  std::uint64_t count_ = 0;
  std::uint64_t min_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t total_ = 0;
  std::uint64_t max_ = 0;
  Uint128 sum_sq_ = 0;  // sum of squared values
};

// Moments only (no percentiles: those fields are NaN, "null" in JSON).
inline Distribution moments_to_distribution_ms(const RunningStats& m) {
  constexpr double kMs = 1e-6;
  Distribution d;
  d.count = m.count();
  d.total = static_cast<double>(m.total_ns()) * kMs;
  d.mean = m.mean_ns() * kMs;
  d.stddev = m.stddev_ns() * kMs;
  d.min = static_cast<double>(m.min_ns()) * kMs;
  d.max = static_cast<double>(m.max_ns()) * kMs;
  d.p50 = d.p90 = d.p99 = std::numeric_limits<double>::quiet_NaN();
  return d;
}

// Moments plus percentiles from a histogram of the same values.
inline Distribution to_distribution_ms(const RunningStats& moments, const Histogram& histogram) {
  constexpr double kMs = 1e-6;
  Distribution d = moments_to_distribution_ms(moments);
  // Percentiles from the histogram, clamped into the exact [min, max].
  const std::array<double, 3> q = histogram.quantiles<3>({0.50, 0.90, 0.99});
  d.p50 = std::clamp(q[0] * kMs, d.min, d.max);
  d.p90 = std::clamp(q[1] * kMs, d.min, d.max);
  d.p99 = std::clamp(q[2] * kMs, d.min, d.max);
  return d;
}

// A duration distribution: exact moments plus a histogram for percentiles.
struct DurationStats {
  RunningStats moments;
  Histogram histogram;
  void add(std::uint64_t ns) noexcept {
    moments.add(ns);
    histogram.add(ns);
  }
  void merge(const DurationStats& other) {
    moments.merge(other.moments);
    histogram.merge(other.histogram);
  }
  Distribution to_distribution_ms() const { return stepscope::detail::to_distribution_ms(moments, histogram); }
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
