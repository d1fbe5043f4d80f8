// Bounded-memory log-linear histogram of durations in nanoseconds.
//
// Values below 2^kSubBits are counted exactly; above, each power of two is
// split into 2^kSubBits equal buckets, so a bucket is at most 1/128 of its
// values wide and its midpoint is within 0.4% of any value in it. Memory is
// bounded by the largest value seen (at most 58 * 128 counters), not by how
// many values were added. Insertion is a count-leading-zeros, a shift and an
// increment: cheap enough for the collector's >100 M records/s budget.
#pragma once

#include <stepscope/report.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace stepscope::detail {

class Histogram {
 public:
  static constexpr int kSubBits = 7;
  static constexpr std::uint64_t kSubCount = 1ull << kSubBits;

  static std::uint32_t bucket_of(std::uint64_t value) noexcept {
    if (value < kSubCount) return static_cast<std::uint32_t>(value);
    const int exponent = 63 - __builtin_clzll(value);  // >= kSubBits
    const int shift = exponent - kSubBits;
    const std::uint64_t sub = (value >> shift) - kSubCount;  // [0, kSubCount)
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(shift + 1) << kSubBits) + sub);
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
    if (index >= counts_.size()) grow(index);
    ++counts_[index];
    ++count_;
  }
  void add_count(std::uint32_t index, std::uint64_t n) {
    if (index >= counts_.size()) grow(index);
    counts_[index] += n;
    count_ += n;
  }
  void merge(const Histogram& other) {
    for (std::uint32_t i = 0; i < other.counts_.size(); ++i)
      if (other.counts_[i] != 0) add_count(i, other.counts_[i]);
  }

  std::uint64_t count() const noexcept { return count_; }

  // Nearest-rank quantile (q in [0,1]): the value of the ceil(q*n)-th smallest.
  double quantile(double q) const noexcept {
    if (count_ == 0) return 0;
    std::uint64_t rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::clamp<std::uint64_t>(rank, 1, count_);
    std::uint64_t seen = 0;
    for (std::uint32_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return bucket_value(i);
    }
    return bucket_value(static_cast<std::uint32_t>(counts_.size() - 1));
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
  // Values up to 2^64 ns: 57 doubling ranges above the exact range.
  static constexpr std::uint32_t kMaxBuckets = (64 - kSubBits + 1) << kSubBits;

  void grow(std::uint32_t index) {
    // Grow a whole power-of-two range at a time; never past kMaxBuckets.
    std::size_t wanted = std::min<std::size_t>(((index >> kSubBits) + 1) << kSubBits, kMaxBuckets);
    counts_.resize(std::max<std::size_t>(wanted, index + 1), 0);
  }

  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
};

// Streaming count / sum / min / max / variance next to a Histogram. Variance
// uses sums shifted by the first value, which avoids the cancellation of the
// naive sum-of-squares formula when the spread is tiny next to the mean.
class RunningStats {
 public:
  void add(std::uint64_t value_ns) noexcept {
    if (count_ == 0) shift_ = static_cast<double>(value_ns);
    const double d = static_cast<double>(value_ns) - shift_;
    sum_d_ += d;
    sum_d2_ += d * d;
    total_ += value_ns;
    min_ = std::min(min_, value_ns);
    max_ = std::max(max_, value_ns);
    ++count_;
  }
  void merge(const RunningStats& other) noexcept {
    if (other.count_ == 0) return;
    if (count_ == 0) {
      *this = other;
      return;
    }
    // Re-express the other's shifted sums around our shift.
    const double delta = other.shift_ - shift_;
    const double n = static_cast<double>(other.count_);
    sum_d2_ += other.sum_d2_ + 2 * delta * other.sum_d_ + n * delta * delta;
    sum_d_ += other.sum_d_ + n * delta;
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
    const double n = static_cast<double>(count_);
    const double var = (sum_d2_ - sum_d_ * sum_d_ / n) / (n - 1);
    return var > 0 ? std::sqrt(var) : 0;
  }
  std::uint64_t min_ns() const noexcept { return count_ ? min_ : 0; }
  std::uint64_t max_ns() const noexcept { return max_; }

 private:
  std::uint64_t count_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t min_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t max_ = 0;
  double shift_ = 0, sum_d_ = 0, sum_d2_ = 0;
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
  Distribution to_distribution_ms() const {
    constexpr double kMs = 1e-6;
    Distribution d;
    d.count = moments.count();
    d.total = static_cast<double>(moments.total_ns()) * kMs;
    d.mean = moments.mean_ns() * kMs;
    d.stddev = moments.stddev_ns() * kMs;
    d.min = static_cast<double>(moments.min_ns()) * kMs;
    d.max = static_cast<double>(moments.max_ns()) * kMs;
    // Percentiles from the histogram, clamped into the exact [min, max].
    auto q = [&](double p) { return std::clamp(histogram.quantile(p) * kMs, d.min, d.max); };
    d.p50 = q(0.50);
    d.p90 = q(0.90);
    d.p99 = q(0.99);
    return d;
  }
};

}  // namespace stepscope::detail
