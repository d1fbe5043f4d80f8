// src/merge/job_merge.hpp — what the merge's steps share: src/merge/merge.cpp
// (the job's facts) and src/merge/across_ranks.cpp (the ranks against each
// other: stragglers, rank rows, the job verdict, the table). Not installed;
// semantics in docs/multi-rank.md.
#pragma once

#include "stats/histogram.hpp"

#include <stepscope/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace merging {

// Iglewicz & Hoaglin (1993): |modified z| > 3.5 marks an outlier.
constexpr double kStragglerZ = 3.5;
// Scale of a normal distribution from its median absolute deviation.
constexpr double kMadToSigma = 1.4826;
// An excess below 5% of the median step is not worth a user's attention
// (the analyzer's "moderately bound" tier, docs/classification.md).
constexpr double kMaterialShare = 0.05;
// Slow in at least half the aligned step points: chronic; fewer: one-off.
constexpr double kChronicFraction = 0.5;
// Relative floor of the spread, so identical synthetic ranks (MAD = 0, no
// recorded variance) do not turn a rounding difference into a huge z.
constexpr double kRelativeSpreadFloor = 0.005;
// Below this many ranks the spread is the other ranks' MAD (leave one out).
constexpr std::size_t kLeaveOneOutBelow = 8;
// One-off: outlier steps in fewer than this fraction of the step points (a
// rank slower in more of them is judged by its means).
constexpr double kOneOffMaxFraction = 0.25;
// Aligned step points kept per merge: bounds memory at ranks x this.
// A straggler whose step threads waited for a CPU beyond the median rank's
// wait by at least this share of its excess was slowed by its host's cores.
constexpr double kCpuWaitCauseShare = 0.5;
constexpr std::size_t kMaxStepPoints = 256;
constexpr std::size_t kMaxSlowSteps = 8;
constexpr std::size_t kMaxListedMissing = 64;
constexpr std::size_t kMaxListedRanksPerFinding = 8;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The name a straggler's time outside any phase goes by (Straggler::phase).
constexpr const char* kUnattributedPhase = "(unattributed)";

// Median of values (reorders them). Empty: 0.
inline double median_inplace(std::vector<double>& v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

// Values of one metric across ranks, sorted once, so leave-one-out medians
// and the MAD cost O(1) / O(n) per rank instead of O(n) / O(n log n).
class RankSample {
 public:
  RankSample() = default;
  // values[i] belongs to ranks[i]; NaN entries are left out.
  RankSample(const std::vector<double>& values, const std::vector<int>& ranks) {
    sorted_.reserve(values.size());
    position_.assign(values.size(), kAbsent);
    std::vector<std::pair<double, std::size_t>> order;
    order.reserve(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      if (std::isfinite(values[i])) order.emplace_back(values[i], i);
    std::sort(order.begin(), order.end());
    for (std::size_t k = 0; k < order.size(); ++k) {
      sorted_.push_back(order[k].first);
      position_[order[k].second] = k;
    }
    if (!order.empty()) {
      summary_.min = order.front().first;
      summary_.max = order.back().first;
      summary_.min_rank = ranks[order.front().second];
      summary_.max_rank = ranks[order.back().second];
      double sum = 0;
      for (double v : sorted_) sum += v;
      summary_.mean = sum / static_cast<double>(sorted_.size());
      summary_.median = median_of_sorted(0, kAbsent);
      summary_.imbalance = summary_.mean > 0 ? summary_.max / summary_.mean - 1.0 : 0.0;
      std::vector<double> deviations(sorted_.size());
      for (std::size_t k = 0; k < sorted_.size(); ++k) deviations[k] = std::fabs(sorted_[k] - summary_.median);
      mad_ = median_inplace(deviations);
    }
  }

  std::size_t size() const { return sorted_.size(); }
  const AcrossRanks& summary() const { return summary_; }
  double mad() const { return mad_; }
  bool has(std::size_t i) const { return position_[i] != kAbsent; }
  // Median of every value but entry i's.
  double median_without(std::size_t i) const { return median_of_sorted(0, position_[i]); }
  // The spread to measure entry i against: with many ranks the MAD of all
  // (one rank barely moves it); with few, the MAD of the *other* ranks, or
  // the candidate's own deviation would dominate it. O(n), n small.
  double mad_for(std::size_t i) const {
    if (sorted_.size() >= kLeaveOneOutBelow || !has(i)) return mad_;
    const double center = median_without(i);
    std::vector<double> deviations;
    deviations.reserve(sorted_.size());
    for (std::size_t k = 0; k < sorted_.size(); ++k)
      if (k != position_[i]) deviations.push_back(std::fabs(sorted_[k] - center));
    return median_inplace(deviations);
  }

 private:
  static constexpr std::size_t kAbsent = std::numeric_limits<std::size_t>::max();

  // Median of sorted_ with the element at `skip` removed (kAbsent: none).
  double median_of_sorted(std::size_t, std::size_t skip) const {
    const std::size_t n = sorted_.size() - (skip == kAbsent ? 0 : 1);
    if (n == 0) return 0;
    auto at = [&](std::size_t j) { return sorted_[skip != kAbsent && j >= skip ? j + 1 : j]; };
    return n % 2 == 1 ? at(n / 2) : 0.5 * (at(n / 2 - 1) + at(n / 2));
  }

  std::vector<double> sorted_;
  std::vector<std::size_t> position_;
  AcrossRanks summary_;
  double mad_ = 0;
};

// Per-rank facts the merge works on, means per measured step.
struct RankFacts {
  const Report* report = nullptr;
  int rank = -1;
  double steps = 0;
  double wall = 0;
  PerKind<double> kind_ms;  // the breakdown's parts, ms per step
  double unattributed = 0;
  double busy = 0;     // wall - comm
  double busy_se = 0;  // standard error of the busy mean (noise floor)
  // The step threads' time runnable but not running (schedstat), ms per
  // measured step; NaN when the report has no OS counters for its steps.
  double cpu_wait = kNaN;
  double comm() const { return kind_ms[PhaseKind::communication]; }
};

// Per-step self time of a step-thread phase, and the standard error of it.
struct PhaseValue {
  double per_step_ms = kNaN;
  double se = 0;
};

// Merges distributions by count: totals add, the mean is the pooled mean,
// the variance the pooled variance, extremes the extremes. Percentiles are
// count-weighted means of the ranks' percentiles (histograms replace them
// when available).
struct DistributionMerger {
  std::uint64_t count = 0;
  double total = 0, min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
  double sum_sq = 0;  // sum of n_i * (s_i^2 + m_i^2), for the pooled variance
  double p50 = 0, p90 = 0, p99 = 0;

  void add(const Distribution& d) {
    if (d.count == 0) return;
    const double n = static_cast<double>(d.count);
    count += d.count;
    total += d.total;
    min = std::min(min, d.min);
    max = std::max(max, d.max);
    sum_sq += n * (d.stddev * d.stddev + d.mean * d.mean);
    p50 += n * d.p50;
    p90 += n * d.p90;
    p99 += n * d.p99;
  }
  Distribution result() const {
    Distribution d;
    if (count == 0) return d;
    const double n = static_cast<double>(count);
    d.count = count;
    d.total = total;
    d.mean = total / n;
    d.stddev = std::sqrt(std::max(0.0, sum_sq / n - d.mean * d.mean));
    d.min = min;
    d.max = max;
    d.p50 = p50 / n;
    d.p90 = p90 / n;
    d.p99 = p99 / n;
    return d;
  }
};

// Sums histograms of the same layout; gives percentiles in ms.
struct HistogramMerger {
  detail::Histogram histogram;
  bool valid = true;
  bool any = false;
  // Largest bucket index of the layout (values up to 2^64 ns).
  static constexpr std::uint32_t kMaxBuckets = (64 - detail::Histogram::kSubBits + 1) << detail::Histogram::kSubBits;
  void add(const HistogramData& h) {
    if (h.buckets.empty()) return;
    any = true;
    if (!valid) return;
    // Validate first, then add the counts in place: no per-rank histogram
    // (a temporary one costs up to 58 KiB of zeroing per phase per rank).
    if (h.sub_bucket_bits != detail::Histogram::kSubBits) {
      valid = false;
      return;
    }
    for (const auto& bucket : h.buckets)
      if (bucket.first >= kMaxBuckets) {
        valid = false;
        return;
      }
    for (const auto& [index, count] : h.buckets) histogram.add_count(index, count);
  }
  bool usable() const { return any && valid && histogram.count() > 0; }
  void apply(Distribution& d) const {
    if (!usable()) return;
    const std::array<double, 3> q = histogram.quantiles<3>({0.50, 0.90, 0.99});
    d.p50 = q[0] / 1e6;  // ns -> ms
    d.p90 = q[1] / 1e6;
    d.p99 = q[2] / 1e6;
  }
};

struct PhaseKey {
  std::string name;
  PhaseKind kind;
  ThreadRole role;
  bool operator<(const PhaseKey& o) const { return std::tie(name, kind, role) < std::tie(o.name, o.kind, o.role); }
};

struct PhaseAccumulator {
  DistributionMerger host, self, device;
  HistogramMerger histogram;
  bool any_device = false;
  double share_sum = 0;
  double overlap_sum = 0;
  int overlap_n = 0;
  std::uint32_t threads = 0;
  std::vector<PhaseValue> per_rank;  // indexed like the usable ranks (step-thread phases)
};

// The per-step series of one rank resampled onto the job's step grid.
struct AlignedSeries {
  std::vector<std::uint64_t> grid;  // first step of each point
  std::uint32_t stride = 1;
};

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < kMaxListedRanksPerFinding; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kMaxListedRanksPerFinding)
    out += fmt::format(" and {} more", ranks.size() - kMaxListedRanksPerFinding);
  return out;
}

// What one merge passes from step to step. The steps run in merge_impl's
// order; each reads what the steps before it filled.
struct JobMerge {
  // order_ranks: the usable ranks in rank order, their ids, the job's size.
  std::vector<std::string> warnings;
  std::vector<std::pair<int, const Report*>> ordered;  // every input, by rank (duplicates included)
  std::vector<RankFacts> ranks;
  std::vector<int> rank_ids;
  std::size_t n = 0;
  int world = 0;
  // compare_rank_means: each rank's mean per step, across ranks.
  RankSample step_sample, busy_sample, compute_sample, comm_sample;
  double median_step = 0;
  double material_ms = 0;  // kMaterialShare of the median step: what "matters" means here
  // merge_phases
  std::map<PhaseKey, PhaseAccumulator> phases;
  // align_series / summarise_step_points: per rank per aligned point (NaN: no value there).
  AlignedSeries grid;
  std::vector<std::vector<double>> busy_series, comm_series;
  std::vector<RankSample> point_busy;
  double collective_sum = 0, expected_wait_sum = 0;
  int collective_points = 0;
  // phases_across_ranks: time outside any phase, tested like a phase (a
  // straggler's extra work that no phase covers is its cause too).
  PhaseKey unattributed_key{kUnattributedPhase, PhaseKind::other, ThreadRole::step};
  std::vector<PhaseValue> unattributed_values;
  // find_stragglers
  std::vector<bool> is_straggler;
  // the result
  MultiRank m;
  Report job;
};

// The steps of merge_impl that compare the ranks (across_ranks.cpp).
void find_stragglers(JobMerge& jm);
void add_rank_rows(JobMerge& jm);
void judge_job(JobMerge& jm);
void explain_stragglers(JobMerge& jm);
// The job's step clock and host-clocked figures (step_clock.cpp).
void merge_step_clock(JobMerge& jm);

}  // namespace merging
}  // namespace v1
}  // namespace stepscope
