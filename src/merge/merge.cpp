// src/merge/merge.cpp — one job report from the reports of its ranks.
//
// Semantics and the statistics behind them: docs/multi-rank.md. In short:
//  - job facts: per-kind means over ranks (the analyzer classifies these);
//    phases merged (counts and totals summed, percentiles from the summed
//    histograms); the step series aligned on step numbers and averaged.
//  - across ranks: per rank, per phase and per aligned step point the
//    min / median / max / mean and who holds the extremes; imbalance max/mean-1.
//  - stragglers: a rank's per-step time outside communication against the
//    median of the *other* ranks, in units of the ranks' spread (1.4826 x
//    MAD, floored by the measurement noise of the means); flagged when
//    z >= 3.5 (Iglewicz-Hoaglin modified z-score cut-off) AND the excess is
//    >= 5% of the median step. The same test on each non-communication phase
//    says where. A stall inflates the rank's own noise, so a second pass over
//    the aligned per-step series flags ranks slow in a few (< 25%) steps
//    whose outlier steps alone cost >= 5% of the step on average; the series
//    also tells chronic (slow in most points) from one-off. Below 8 ranks
//    the spread is the MAD of the other ranks (leave one out).
//  - communication: the last rank to reach a collective waits for nobody, so
//    the smallest communication time at each step point is the collective
//    itself; each rank's excess over it is waiting for slower ranks.
// Cost: O(ranks x (phases + points)) time, O(ranks x points) memory with
// points capped at kMaxStepPoints.
#include "stats/histogram.hpp"
#include "stats/utc_time.hpp"
#include "text/printable.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/merge.hpp>
#include <stepscope/version.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace {

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
constexpr std::size_t kMaxStepPoints = 256;
constexpr std::size_t kMaxSlowSteps = 8;
constexpr std::size_t kMaxListedMissing = 64;
constexpr std::size_t kMaxListedRanksPerFinding = 8;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The name a straggler's time outside any phase goes by (Straggler::phase).
constexpr const char* kUnattributedPhase = "(unattributed)";

// Median of values (reorders them). Empty: 0.
double median_inplace(std::vector<double>& v) {
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
  double comm() const { return kind_ms[PhaseKind::communication]; }
};

RankFacts rank_facts(const Report& r, int rank) {
  RankFacts f;
  f.report = &r;
  f.rank = rank;
  f.steps = static_cast<double>(r.steps.count);
  const StepBreakdown& b = r.steps.breakdown;
  if (b.wall_ms > 0) {
    f.wall = b.wall_ms;
    f.kind_ms = b.kind_ms;
    f.unattributed = b.unattributed_ms;
  } else {
    // No breakdown (hand-built report): from the phases' shares.
    f.wall = r.steps.wall_ms.mean;
    double attributed = 0;
    for (const PhaseSummary& p : r.phases) {
      if (p.thread_role != ThreadRole::step) continue;
      const double ms = p.share_of_step * f.wall;
      attributed += ms;
      f.kind_ms[p.kind] += ms;
    }
    f.unattributed = std::max(0.0, f.wall - attributed);
  }
  f.busy = std::max(0.0, f.wall - f.comm());
  const double n = std::max(1.0, static_cast<double>(r.steps.wall_ms.count));
  f.busy_se = r.steps.wall_ms.stddev / std::sqrt(n);
  return f;
}

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
    d.p50 = histogram.quantile(0.50) / 1e6;  // ns -> ms
    d.p90 = histogram.quantile(0.90) / 1e6;
    d.p99 = histogram.quantile(0.99) / 1e6;
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

AlignedSeries choose_grid(const std::vector<RankFacts>& ranks) {
  // The coarsest series is the common grid: finer series average onto it.
  const Report* coarsest = nullptr;
  for (const RankFacts& f : ranks) {
    const StepSeries& s = f.report->steps.series;
    if (s.first_step.empty() || s.wall_ms.size() != s.first_step.size()) continue;
    if (coarsest == nullptr || s.stride > coarsest->steps.series.stride ||
        (s.stride == coarsest->steps.series.stride && s.first_step.size() < coarsest->steps.series.first_step.size()))
      coarsest = f.report;
  }
  AlignedSeries a;
  if (coarsest == nullptr) return a;
  a.grid = coarsest->steps.series.first_step;
  a.stride = coarsest->steps.series.stride;
  if (!std::is_sorted(a.grid.begin(), a.grid.end())) {
    a.grid.clear();
    return a;
  }
  // Bound the work and memory: merge neighbouring points.
  while (a.grid.size() > kMaxStepPoints) {
    std::vector<std::uint64_t> coarser;
    coarser.reserve(a.grid.size() / 2 + 1);
    for (std::size_t i = 0; i < a.grid.size(); i += 2) coarser.push_back(a.grid[i]);
    a.grid = std::move(coarser);
    a.stride *= 2;
  }
  return a;
}

// Resamples `values` (at `first_step`) onto the grid: mean of the points
// whose first step falls in [grid[k], grid[k+1]). NaN where none does.
void resample(const std::vector<std::uint64_t>& grid, const std::vector<std::uint64_t>& first_step,
              const std::vector<double>& values, std::vector<double>& out, std::vector<int>& counts) {
  out.assign(grid.size(), 0.0);
  counts.assign(grid.size(), 0);
  const std::size_t n = std::min(first_step.size(), values.size());
  for (std::size_t i = 0; i < n; ++i) {
    auto it = std::upper_bound(grid.begin(), grid.end(), first_step[i]);
    if (it == grid.begin()) continue;  // before the grid starts
    const std::size_t k = static_cast<std::size_t>(it - grid.begin()) - 1;
    if (!std::isfinite(values[i])) continue;
    out[k] += values[i];
    ++counts[k];
  }
  for (std::size_t k = 0; k < grid.size(); ++k) out[k] = counts[k] > 0 ? out[k] / counts[k] : kNaN;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < kMaxListedRanksPerFinding; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kMaxListedRanksPerFinding)
    out += fmt::format(" and {} more", ranks.size() - kMaxListedRanksPerFinding);
  return out;
}

// A straggler candidate from one metric.
struct Candidate {
  std::string phase;
  double rank_ms = 0, median_ms = 0, excess = 0, z = 0;
  PhaseKind kind = PhaseKind::other;
  bool whole_step = false;
};

// The ranks of one job agree on its size, and each rank is inside it. When
// they do not, reports of different jobs (or of a relaunch at another size)
// were mixed: the merge goes on (world = the largest), but says so.
void warn_on_world_size(const std::vector<Report>& inputs, std::vector<std::string>& warnings) {
  std::map<int, std::vector<int>> ranks_by_world;  // declared world_size -> ranks declaring it
  std::vector<int> outside;                        // ranks >= their own world_size
  for (const Report& r : inputs) {
    if (r.run.rank < 0) continue;  // no rank: a single process, world_size 1 says nothing
    ranks_by_world[r.run.world_size].push_back(r.run.rank);
    if (r.run.rank >= r.run.world_size) outside.push_back(r.run.rank);
  }
  if (ranks_by_world.size() > 1) {
    std::string sizes;
    for (const auto& [world, ranks] : ranks_by_world)
      sizes += fmt::format("{}world_size {} from rank(s) {}", sizes.empty() ? "" : "; ", world, rank_list(ranks));
    warnings.push_back(fmt::format(
        "the reports disagree on the world size ({}): reports of different jobs or launches mixed? merged as one "
        "job of the largest size",
        sizes));
  }
  if (!outside.empty())
    warnings.push_back(fmt::format("rank(s) {} are not below their own report's world_size", rank_list(outside)));
}

// The job's time outside steps (issue 12's steps.coverage and between_steps_*):
// the breakdown's between-steps parts are means per step over the ranks,
// like its other parts, so they still add up to the job's breakdown wall
// time; the run totals add up over the ranks' step threads; the coverage is
// the worst rank's, so the steps_coverage finding fires when any rank's loop
// runs outside its steps (a mean would hide one rank's uninstrumented fetch).
void merge_between_steps(const std::vector<RankFacts>& ranks, StepStats& job) {
  const double n = static_cast<double>(ranks.size());
  for (const RankFacts& f : ranks) {
    const StepStats& s = f.report->steps;
    // A rank without a breakdown (hand-built report) adds nothing to its parts.
    if (s.breakdown.wall_ms > 0) {
      job.breakdown.between_steps_input_ms += s.breakdown.between_steps_input_ms / n;
      job.breakdown.between_steps_ms += s.breakdown.between_steps_ms / n;
    }
    job.between_steps_ms += s.between_steps_ms;
    job.between_steps_input_ms += s.between_steps_input_ms;
    job.loop_boundaries += s.loop_boundaries;
    job.between_loops_ms += s.between_loops_ms;
    job.loop_first_steps += s.loop_first_steps;
    job.loop_first_ms += s.loop_first_ms;
    job.loop_first_max_ms = std::max(job.loop_first_max_ms, s.loop_first_max_ms);
    if (s.coverage) job.coverage = job.coverage ? std::min(*job.coverage, *s.coverage) : *s.coverage;
  }
}

// Each rank's HTA tables (device.hta of an imported trace), in rank order:
// HTA's numbers are per rank and do not average (device.hta_ranks).
std::vector<HtaTables> hta_by_rank(const std::vector<RankFacts>& ranks) {
  std::vector<HtaTables> tables;
  for (const RankFacts& f : ranks) {
    if (!f.report->device.hta.present) continue;
    tables.push_back(f.report->device.hta);
  }
  return tables;
}

// ---- the merge, step by step (merge_impl lists the steps) ----------------

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

// Validates the inputs and orders them by rank; duplicates and ranks without
// steps are left out with a warning. False (and `error`) when nothing is left.
bool order_ranks(const std::vector<Report>& inputs, JobMerge& jm, std::string& error) {
  std::vector<std::string>& warnings = jm.warnings;
  std::vector<std::pair<int, const Report*>>& ordered = jm.ordered;
  ordered.reserve(inputs.size());
  int declared_world = 0;
  bool any_unranked = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Report& r = inputs[i];
    if (r.schema_version != kReportSchemaVersion) {
      error = fmt::format("report {} has schema_version {} (this stepscope merges {})", i, r.schema_version,
                          kReportSchemaVersion);
      return false;
    }
    if (r.run.source == "merge" || r.ranks) {
      error = fmt::format("report {} is already a merged job report; merge the per-rank reports instead", i);
      return false;
    }
    declared_world = std::max(declared_world, r.run.world_size);
    int rank = r.run.rank;
    if (rank < 0) {
      any_unranked = true;
      rank = static_cast<int>(i);
    }
    ordered.emplace_back(rank, &r);
  }
  if (any_unranked)
    warnings.push_back("some reports carry no rank (run.rank); their position in the input was used as the rank");
  warn_on_world_size(inputs, warnings);
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RankFacts>& ranks = jm.ranks;
  std::vector<int>& rank_ids = jm.rank_ids;
  std::vector<int> duplicates, empty_ranks;
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    if (i > 0 && ordered[i].first == ordered[i - 1].first) {
      duplicates.push_back(ordered[i].first);
      continue;
    }
    if (ordered[i].second->steps.count == 0) {
      empty_ranks.push_back(ordered[i].first);
      continue;
    }
    ranks.push_back(rank_facts(*ordered[i].second, ordered[i].first));
    rank_ids.push_back(ordered[i].first);
  }
  if (!duplicates.empty())
    warnings.push_back(
        fmt::format("duplicate reports for rank(s) {}: only the first of each was merged", rank_list(duplicates)));
  if (!empty_ranks.empty())
    warnings.push_back(
        fmt::format("rank(s) {} measured no steps and were left out of the statistics", rank_list(empty_ranks)));
  if (ranks.empty()) {
    error = "none of the reports has measured steps";
    return false;
  }
  jm.n = ranks.size();
  jm.world = std::max({declared_world, rank_ids.back() + 1, static_cast<int>(jm.n)});
  return true;
}

// Ranks in [0, world) without a report.
void note_missing_ranks(JobMerge& jm) {
  const int world = jm.world;
  const std::vector<std::pair<int, const Report*>>& ordered = jm.ordered;
  std::vector<std::string>& warnings = jm.warnings;
  MultiRank& m = jm.m;

  m.world_size = world;
  m.ranks_merged = static_cast<int>(jm.n);
  {
    std::set<int> present;
    for (const auto& [rank, report] : ordered) present.insert(rank);
    int missing = 0;
    for (int r = 0; r < world; ++r)
      if (present.count(r) == 0) {
        ++missing;
        if (m.missing_ranks.size() < kMaxListedMissing) m.missing_ranks.push_back(r);
      }
    if (missing > 0)
      warnings.push_back(fmt::format("{} of {} ranks have no report (e.g. rank {}): the job facts cover the others",
                                     missing, world, m.missing_ranks.front()));
  }
}

// Each rank's means per step (wall, busy, compute, communication) across ranks.
void compare_rank_means(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::vector<int>& rank_ids = jm.rank_ids;
  const std::size_t n = jm.n;
  MultiRank& m = jm.m;

  auto across = [&](auto getter) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = getter(ranks[i]);
    return RankSample(v, rank_ids);
  };
  jm.step_sample = across([](const RankFacts& f) { return f.wall; });
  jm.busy_sample = across([](const RankFacts& f) { return f.busy; });
  jm.compute_sample = across([](const RankFacts& f) { return f.kind_ms[PhaseKind::compute]; });
  jm.comm_sample = across([](const RankFacts& f) { return f.comm(); });
  m.step_ms = jm.step_sample.summary();
  m.busy_ms = jm.busy_sample.summary();
  m.compute_ms = jm.compute_sample.summary();
  m.communication_ms = jm.comm_sample.summary();
  jm.median_step = jm.step_sample.summary().median;
  jm.material_ms = kMaterialShare * jm.median_step;
}

// The job's phases: merged distributions, and each rank's per-step value of
// its step-thread phases (for the straggler tests).
void merge_phases(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  std::map<PhaseKey, PhaseAccumulator>& phases = jm.phases;
  Report& job = jm.job;

  for (std::size_t i = 0; i < n; ++i) {
    const Report& r = *ranks[i].report;
    for (const PhaseSummary& p : r.phases) {
      PhaseAccumulator& acc = phases[PhaseKey{p.name, p.kind, p.thread_role}];
      acc.host.add(p.host_ms);
      acc.self.add(p.self_ms);
      if (p.device_ms) {
        acc.any_device = true;
        acc.device.add(*p.device_ms);
      }
      acc.histogram.add(p.histogram);
      acc.share_sum += p.share_of_step;
      if (p.overlap_with_steps) {
        acc.overlap_sum += *p.overlap_with_steps;
        ++acc.overlap_n;
      }
      acc.threads += p.threads;
      if (p.thread_role == ThreadRole::step && ranks[i].steps > 0) {
        if (acc.per_rank.empty()) acc.per_rank.resize(n);
        PhaseValue& v = acc.per_rank[i];
        const double per_step = p.self_ms.total / ranks[i].steps;
        v.per_step_ms = std::isfinite(v.per_step_ms) ? v.per_step_ms + per_step : per_step;
        const double occurrences_per_step = static_cast<double>(p.self_ms.count) / ranks[i].steps;
        v.se = p.self_ms.count > 0
                   ? p.self_ms.stddev * occurrences_per_step / std::sqrt(static_cast<double>(p.self_ms.count))
                   : 0;
      }
    }
  }
  for (auto& [key, acc] : phases) {
    PhaseSummary p;
    p.name = key.name;
    p.kind = key.kind;
    p.thread_role = key.role;
    p.host_ms = acc.host.result();
    p.self_ms = acc.self.result();
    acc.histogram.apply(p.host_ms);
    if (acc.histogram.usable()) p.histogram = acc.histogram.histogram.to_data();
    p.count = p.host_ms.count;
    p.share_of_step = acc.share_sum / static_cast<double>(n);
    if (acc.overlap_n > 0) p.overlap_with_steps = acc.overlap_sum / acc.overlap_n;
    if (acc.any_device) p.device_ms = acc.device.result();
    p.threads = acc.threads;
    job.phases.push_back(std::move(p));
  }
  std::stable_sort(job.phases.begin(), job.phases.end(),
                   [](const PhaseSummary& a, const PhaseSummary& b) { return a.self_ms.total > b.self_ms.total; });
}

// Imported ranks' top operators per phase, summed over the ranks (count and
// self_ms are totals, as the merged phase's self_ms.total is): the job's
// hottest operators inside each phase. Each kind ("cpu_op", "kernel") keeps
// as many rows as the longest list a rank carried, most self_ms first.
void merge_top_operators(JobMerge& jm) {
  struct Sum {
    std::map<std::pair<std::string, std::string>, OperatorTime> by_kind_and_name;
    std::map<std::string, std::size_t> rows_per_kind;
  };
  std::map<PhaseKey, Sum> sums;
  for (const RankFacts& rank : jm.ranks)
    for (const PhaseSummary& p : rank.report->phases) {
      if (p.top_operators.empty()) continue;
      Sum& sum = sums[PhaseKey{p.name, p.kind, p.thread_role}];
      std::map<std::string, std::size_t> rows;
      for (const OperatorTime& op : p.top_operators) {
        OperatorTime& total = sum.by_kind_and_name[{op.kind, op.name}];
        total.name = op.name;
        total.kind = op.kind;
        total.count += op.count;
        total.self_ms += op.self_ms;
        ++rows[op.kind];
      }
      for (const auto& [kind, n] : rows) sum.rows_per_kind[kind] = std::max(sum.rows_per_kind[kind], n);
    }
  for (PhaseSummary& p : jm.job.phases) {
    const auto it = sums.find(PhaseKey{p.name, p.kind, p.thread_role});
    if (it == sums.end()) continue;
    for (const auto& [kind, rows] : it->second.rows_per_kind) {
      std::vector<OperatorTime> list;
      for (const auto& [key, op] : it->second.by_kind_and_name)
        if (key.first == kind) list.push_back(op);
      std::stable_sort(list.begin(), list.end(),
                       [](const OperatorTime& a, const OperatorTime& b) { return a.self_ms > b.self_ms; });
      if (list.size() > rows) list.resize(rows);
      // cpu_ops first, then kernels: the order a rank's list has.
      const auto at = kind == "cpu_op" ? p.top_operators.begin() : p.top_operators.end();
      p.top_operators.insert(at, list.begin(), list.end());
    }
  }
}

// The series' columns the merge averages over ranks, in this order: wall,
// each kind's part (kPhaseKinds' order), unattributed, RSS.
template <class Series>  // StepSeries or const StepSeries
auto series_columns(Series& s) {
  std::vector<decltype(&s.wall_ms)> columns = {&s.wall_ms};
  for (auto& kind : s.kind_ms) columns.push_back(&kind);
  columns.push_back(&s.unattributed_ms);
  columns.push_back(&s.rss_mb);
  return columns;
}
constexpr std::size_t kWallColumn = 0;
constexpr std::size_t kCommColumn = 1 + detail::kind_index(PhaseKind::communication);
constexpr std::size_t kRssColumn = kPhaseKindCount + 2;

// The ranks' per-step series on one grid: the job's series (means over the
// ranks) and each rank's busy / communication time per point.
void align_series(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;

  jm.grid = choose_grid(ranks);
  const AlignedSeries& grid = jm.grid;
  const std::size_t points = grid.grid.size();
  // busy / comm / wall per rank per point (NaN: the rank has no value there).
  std::vector<std::vector<double>>& busy_series = jm.busy_series;
  std::vector<std::vector<double>>& comm_series = jm.comm_series;
  busy_series.assign(n, {});
  comm_series.assign(n, {});
  StepSeries& job_series = jm.job.steps.series;
  if (points > 0) {
    job_series.stride = grid.stride;
    job_series.first_step = grid.grid;
    const std::vector<std::vector<double>*> job_columns = series_columns(job_series);
    std::vector<std::vector<double>> sums(job_columns.size(), std::vector<double>(points, 0.0));
    std::vector<std::vector<int>> sum_n(job_columns.size(), std::vector<int>(points, 0));
    std::vector<double> resampled;
    std::vector<int> counts;
    for (std::size_t i = 0; i < n; ++i) {
      const StepSeries& s = ranks[i].report->steps.series;
      const std::vector<const std::vector<double>*> columns = series_columns(s);
      std::vector<double> wall, comm;
      for (std::size_t c = 0; c < job_columns.size(); ++c) {
        if (columns[c]->empty()) continue;
        resample(grid.grid, s.first_step, *columns[c], resampled, counts);
        for (std::size_t k = 0; k < points; ++k)
          if (std::isfinite(resampled[k])) {
            sums[c][k] += resampled[k];
            ++sum_n[c][k];
          }
        if (c == kWallColumn) wall = resampled;
        if (c == kCommColumn) comm = resampled;
      }
      busy_series[i].assign(points, kNaN);
      comm_series[i].assign(points, kNaN);
      for (std::size_t k = 0; k < points && !wall.empty(); ++k) {
        const double c = comm.empty() || !std::isfinite(comm[k]) ? 0.0 : comm[k];
        if (std::isfinite(wall[k])) {
          busy_series[i][k] = std::max(0.0, wall[k] - c);
          comm_series[i][k] = c;
        }
      }
    }
    for (std::size_t c = 0; c < job_columns.size(); ++c) {
      job_columns[c]->resize(points);
      for (std::size_t k = 0; k < points; ++k) (*job_columns[c])[k] = sum_n[c][k] > 0 ? sums[c][k] / sum_n[c][k] : 0.0;
    }
    const std::vector<int>& rss_n = sum_n[kRssColumn];
    if (rss_n.empty() || std::all_of(rss_n.begin(), rss_n.end(), [](int x) { return x == 0; }))
      job_series.rss_mb.clear();
  }
}

// Per aligned point: across-ranks summaries, the collective estimate, waiting.
void summarise_step_points(JobMerge& jm) {
  const std::vector<int>& rank_ids = jm.rank_ids;
  const std::size_t n = jm.n;
  const AlignedSeries& grid = jm.grid;
  const std::size_t points = grid.grid.size();
  const std::vector<std::vector<double>>& busy_series = jm.busy_series;
  const std::vector<std::vector<double>>& comm_series = jm.comm_series;
  MultiRank& m = jm.m;

  std::vector<RankSample>& point_busy = jm.point_busy;  // kept for the per-step straggler pass
  point_busy.assign(points, RankSample{});
  m.step_stride = grid.stride;
  {
    std::vector<double> column(n);
    for (std::size_t k = 0; k < points; ++k) {
      StepAcrossRanks point;
      point.first_step = grid.grid[k];
      for (std::size_t i = 0; i < n; ++i) column[i] = busy_series[i][k];
      point_busy[k] = RankSample(column, rank_ids);
      const RankSample& busy = point_busy[k];
      if (busy.size() == 0) continue;
      point.busy_ms = busy.summary();
      for (std::size_t i = 0; i < n; ++i) column[i] = comm_series[i][k];
      const RankSample comm(column, rank_ids);
      point.communication_ms = comm.summary();
      for (std::size_t i = 0; i < n; ++i)
        column[i] = std::isfinite(busy_series[i][k]) ? busy_series[i][k] + comm_series[i][k] : kNaN;
      point.wall_ms = RankSample(column, rank_ids).summary();
      if (comm.size() > 0) {
        jm.collective_sum += comm.summary().min;
        jm.expected_wait_sum += busy.summary().max - busy.summary().mean;
        ++jm.collective_points;
      }
      m.steps.push_back(std::move(point));
    }
  }
}

// Communication: the collective itself vs waiting for slower ranks.
void split_communication(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  MultiRank& m = jm.m;

  m.comm_ms = jm.comm_sample.summary().mean;
  m.comm_collective_ms =
      jm.collective_points > 0 ? jm.collective_sum / jm.collective_points : jm.comm_sample.summary().min;
  m.comm_collective_ms = std::min(m.comm_collective_ms, jm.comm_sample.summary().min);
  m.expected_wait_from_imbalance_ms = jm.collective_points > 0
                                          ? jm.expected_wait_sum / jm.collective_points
                                          : jm.busy_sample.summary().max - jm.busy_sample.summary().mean;
  double wait_sum = 0;
  for (std::size_t i = 0; i < n; ++i) wait_sum += std::max(0.0, ranks[i].comm() - m.comm_collective_ms);
  m.comm_wait_ms = wait_sum / static_cast<double>(n);
  m.comm_wait_fraction = m.comm_ms > 0 ? std::min(1.0, m.comm_wait_ms / m.comm_ms) : 0.0;
}

// A step-thread phase (not communication) to test each rank in.
struct PhaseTest {
  const PhaseKey* key;
  RankSample sample;
  double median_se;
  const std::vector<PhaseValue>* values;
};

// The step-thread phases across ranks (m.phases), and the ones a straggler
// may be found in.
std::vector<PhaseTest> phases_across_ranks(JobMerge& jm) {
  const std::vector<int>& rank_ids = jm.rank_ids;
  const std::size_t n = jm.n;
  const std::map<PhaseKey, PhaseAccumulator>& phases = jm.phases;
  MultiRank& m = jm.m;
  std::vector<PhaseTest> phase_tests;

  for (const auto& [key, acc] : phases) {
    if (key.role != ThreadRole::step || acc.per_rank.empty()) continue;
    std::vector<double> values(n), ses;
    for (std::size_t i = 0; i < n; ++i) {
      values[i] = acc.per_rank[i].per_step_ms;
      if (std::isfinite(values[i])) ses.push_back(acc.per_rank[i].se);
    }
    PhaseAcrossRanks across_phase;
    across_phase.name = key.name;
    across_phase.kind = key.kind;
    RankSample sample(values, rank_ids);
    across_phase.ranks = static_cast<std::uint32_t>(sample.size());
    across_phase.per_step_ms = sample.summary();
    m.phases.push_back(across_phase);
    // Communication phases are where the victims wait, not where a straggler is.
    if (key.kind == PhaseKind::communication) continue;
    const double median_se = median_inplace(ses);
    phase_tests.push_back(PhaseTest{&key, std::move(sample), median_se, &acc.per_rank});
  }
  std::stable_sort(m.phases.begin(), m.phases.end(), [](const PhaseAcrossRanks& a, const PhaseAcrossRanks& b) {
    return a.per_step_ms.mean > b.per_step_ms.mean;
  });
  // Time outside any phase, with the noise of the rank's step time.
  std::vector<double> values(n), ses(n);
  jm.unattributed_values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = jm.ranks[i].unattributed;
    ses[i] = jm.ranks[i].busy_se;
    jm.unattributed_values[i] = PhaseValue{values[i], ses[i]};
  }
  const double median_se = median_inplace(ses);
  phase_tests.push_back(
      PhaseTest{&jm.unattributed_key, RankSample(values, rank_ids), median_se, &jm.unattributed_values});
  return phase_tests;
}

// The per-step pass for rank i: at each aligned point, its time outside
// communication against the other ranks' median there. `slow` collects the
// materially slower points; `outlier_excess_per_step` sums the excess of
// points that are also outliers (z >= 3.5), per step of the run.
struct PointPass {
  int valid_points = 0;
  std::vector<std::pair<double, std::uint64_t>> slow;  // (excess ms, first step)
  double outlier_excess_per_step = 0;
  double max_z = 0;
};

// The per-step pass for every rank.
std::vector<PointPass> step_point_passes(const JobMerge& jm) {
  const std::size_t n = jm.n;
  const AlignedSeries& grid = jm.grid;
  const std::size_t points = grid.grid.size();
  const std::vector<std::vector<double>>& busy_series = jm.busy_series;
  const std::vector<RankSample>& point_busy = jm.point_busy;
  const double material_ms = jm.material_ms;

  // Per-rank noise of one step point: 1.4826 x MAD of its own busy series
  // over the points (robust to the stall we are looking for).
  std::vector<double> point_noise(n, 0.0);
  {
    std::vector<double> values;
    for (std::size_t i = 0; i < n; ++i) {
      values.clear();
      for (double v : busy_series[i])
        if (std::isfinite(v)) values.push_back(v);
      const double center = median_inplace(values);
      for (double& v : values) v = std::fabs(v - center);
      point_noise[i] = kMadToSigma * median_inplace(values);
    }
  }
  std::vector<double> noise_scratch = point_noise;
  const double median_point_noise = median_inplace(noise_scratch);
  auto point_pass = [&](std::size_t i) {
    PointPass pass;
    double outlier_sum = 0;
    for (std::size_t k = 0; k < points; ++k) {
      const RankSample& point = point_busy[k];
      if (!std::isfinite(busy_series[i][k]) || point.size() < 2 || !point.has(i)) continue;
      ++pass.valid_points;
      const double reference = point.median_without(i);
      const double excess = busy_series[i][k] - reference;
      if (excess < material_ms) continue;
      pass.slow.emplace_back(excess, grid.grid[k]);
      const double spread = point.size() >= 3 ? kMadToSigma * point.mad_for(i) : 0.0;
      const double noise = std::sqrt(point_noise[i] * point_noise[i] + median_point_noise * median_point_noise);
      const double z = excess / std::max({spread, noise, kRelativeSpreadFloor * std::fabs(reference), 1e-9});
      if (z >= kStragglerZ) {
        outlier_sum += excess;
        pass.max_z = std::max(pass.max_z, z);
      }
    }
    if (pass.valid_points > 0) pass.outlier_excess_per_step = outlier_sum / pass.valid_points;
    return pass;
  };
  std::vector<PointPass> passes(n);
  for (std::size_t i = 0; i < n; ++i) passes[i] = point_pass(i);
  return passes;
}

// Stragglers: chronic (a rank's means against the other ranks' medians) or
// one-off (a few outlier step points that cost the run a material share).
void find_stragglers(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::vector<int>& rank_ids = jm.rank_ids;
  const std::size_t n = jm.n;
  const double material_ms = jm.material_ms;
  const RankSample& busy_sample = jm.busy_sample;
  MultiRank& m = jm.m;

  // Robust z of rank i's value against the median of the other ranks.
  auto test = [&](const RankSample& sample, std::size_t i, double value, double se, double median_se, Candidate& out) {
    if (!sample.has(i) || sample.size() < 2) return false;
    const double reference = sample.median_without(i);
    // With two ranks the MAD is half their difference by construction and
    // says nothing: only the measurement noise of the means counts.
    const double spread = sample.size() >= 3 ? kMadToSigma * sample.mad_for(i) : 0.0;
    const double noise = std::sqrt(se * se + median_se * median_se);
    const double scale = std::max({spread, noise, kRelativeSpreadFloor * std::fabs(reference), 1e-9});
    out.rank_ms = value;
    out.median_ms = reference;
    out.excess = value - reference;
    out.z = out.excess / scale;
    return out.z >= kStragglerZ && out.excess >= material_ms;
  };
  std::vector<double> se_scratch(n);
  for (std::size_t i = 0; i < n; ++i) se_scratch[i] = ranks[i].busy_se;
  const double busy_median_se = median_inplace(se_scratch);
  const std::vector<PhaseTest> phase_tests = phases_across_ranks(jm);
  std::vector<PointPass> passes = step_point_passes(jm);

  // The per-step pass for every rank, and how much outlier time the other
  // ranks have too: on a busy host every rank is preempted now and then, and
  // that shared heavy tail is not one rank holding the others back.
  std::vector<double> outlier_per_step(n);
  for (std::size_t i = 0; i < n; ++i) outlier_per_step[i] = passes[i].outlier_excess_per_step;
  const RankSample outlier_sample(outlier_per_step, rank_ids);

  std::vector<bool>& is_straggler = jm.is_straggler;
  is_straggler.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    // (a) chronic: the rank's means against the other ranks' medians.
    Candidate best;
    bool found = false;
    Candidate largest;  // the phase with the largest excess, flagged or not
    bool any_phase = false;
    for (const PhaseTest& t : phase_tests) {
      Candidate c;
      const PhaseValue& v = (*t.values)[i];
      if (!std::isfinite(v.per_step_ms)) continue;
      const bool flagged = test(t.sample, i, v.per_step_ms, v.se, t.median_se, c);
      c.phase = t.key->name;
      c.kind = t.key->kind;
      if (t.sample.has(i) && (!any_phase || c.excess > largest.excess)) {
        largest = c;
        any_phase = true;
      }
      if (flagged && (!found || c.excess > best.excess)) {
        best = c;
        found = true;
      }
    }
    // A straggler holds the others back: its whole time outside
    // communication must stand out, not just one phase (a rank slow in one
    // phase and fast in another does not make anyone wait). The phase then
    // says where: the flagged phase with the largest excess, else the phase
    // with the largest excess.
    Candidate whole;
    const bool whole_flagged = test(busy_sample, i, ranks[i].busy, ranks[i].busy_se, busy_median_se, whole);
    if (whole_flagged && !found) {
      if (any_phase && largest.excess > 0) {
        best = largest;
      } else {
        best = whole;
        best.phase = "step";
        best.whole_step = true;
      }
    }
    found = whole_flagged;
    // (b) one-off: a few outlier steps whose excess alone costs the run a
    // material share (a stall inflates the rank's own variance, so the test
    // on means cannot see it), beyond the outlier time the other ranks have,
    // and the rank is materially slower on average (not just noisier).
    PointPass& pass = passes[i];
    const double outlier_beyond_others =
        pass.outlier_excess_per_step - (outlier_sample.size() >= 2 ? outlier_sample.median_without(i) : 0.0);
    const bool few_points =
        pass.valid_points > 0 && static_cast<double>(pass.slow.size()) / pass.valid_points < kOneOffMaxFraction;
    if (!found && few_points && outlier_beyond_others >= material_ms && whole.excess >= material_ms) {
      best = any_phase && largest.excess > 0 ? largest : whole;
      if (!(any_phase && largest.excess > 0)) best.phase = "step";
      best.z = pass.max_z;  // of its worst step point
      found = true;
    }
    if (!found) continue;
    is_straggler[i] = true;
    Straggler s;
    s.rank = ranks[i].rank;
    s.phase = best.phase;
    s.rank_ms = best.rank_ms;
    s.median_ms = best.median_ms;
    s.excess_ms = best.excess;
    s.robust_z = best.z;
    s.cause = best.whole_step || best.phase == "step" ? "step"
              : best.phase == kUnattributedPhase      ? "unattributed"
              : best.kind == PhaseKind::input         ? "input"
                                                      : "phase";
    // Chronic or one-off: in how many aligned points it was materially slower.
    if (pass.valid_points > 0) {
      s.slow_step_fraction = static_cast<double>(pass.slow.size()) / pass.valid_points;
      s.pattern = s.slow_step_fraction >= kChronicFraction ? "chronic" : "one-off";
      std::sort(pass.slow.begin(), pass.slow.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (std::size_t j = 0; j < pass.slow.size() && j < kMaxSlowSteps; ++j)
        s.slow_steps.push_back(pass.slow[j].second);
      std::sort(s.slow_steps.begin(), s.slow_steps.end());
    } else {
      s.pattern = "chronic";  // no series: only the means, which say "on average"
      s.slow_step_fraction = 1.0;
    }
    m.stragglers.push_back(std::move(s));
  }
  std::stable_sort(m.stragglers.begin(), m.stragglers.end(),
                   [](const Straggler& a, const Straggler& b) { return a.excess_ms > b.excess_ms; });
}

// One row per rank, and how stragglers and waiting were estimated.
void add_rank_rows(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  MultiRank& m = jm.m;

  m.ranks.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const RankFacts& f = ranks[i];
    RankSummary r;
    r.rank = f.rank;
    r.host = f.report->run.host;
    r.steps = f.report->steps.count;
    r.step_ms = f.wall;
    r.busy_ms = f.busy;
    r.kind_ms = f.kind_ms;
    r.unattributed_ms = f.unattributed;
    r.comm_wait_ms = std::max(0.0, f.comm() - m.comm_collective_ms);
    r.verdict = f.report->bottleneck.category;
    r.straggler = jm.is_straggler[i];
    // A rank that is not a straggler and waits materially in communication
    // waits for the stragglers (in a synchronous job, for all of them).
    if (!r.straggler && r.comm_wait_ms >= jm.material_ms)
      for (const Straggler& s : m.stragglers) r.waits_for.push_back(s.rank);
    r.complete = f.report->complete;
    r.ended_by = f.report->ended_by;
    if (f.report->interrupted) r.interrupted = f.report->interrupted->signal;
    if (f.report->exception)
      r.exception = detail::printable_exception(f.report->exception->type, f.report->exception->message);
    m.ranks.push_back(std::move(r));
  }
  m.method =
      "Stragglers: per rank, the per-step time outside communication against the median of the other ranks in "
      "units of 1.4826 x MAD across ranks (floored by the standard error of the means and 0.5% of the median); "
      "flagged when z >= 3.5 and the excess is >= 5% of the median step; the same test per non-communication "
      "phase names the phase. Or: outlier step points (same test per point) in < 25% of the points whose "
      "excess alone is >= 5% of the median step on average. Below 8 ranks the MAD is the other ranks'. Chronic: "
      "materially slower in >= 50% of the aligned step points, else one-off. "
      "Collective: the smallest communication time across ranks at each step point (the last rank to arrive "
      "does not wait); waiting: each rank's communication time above it.";
}

// The job's run information: what the ranks agree on.
void fill_job_run(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const int world = jm.world;
  std::vector<std::string>& warnings = jm.warnings;
  Report& job = jm.job;

  job.run.library_version = ranks.front().report->run.library_version;
  job.run.time_utc = detail::utc_now_iso();
  {
    std::set<std::string> hosts;
    for (const RankFacts& f : ranks) hosts.insert(f.report->run.host);
    job.run.host = hosts.size() == 1 ? *hosts.begin() : fmt::format("{} hosts", hosts.size());
  }
  job.run.pid = 0;
  job.run.rank = -1;
  job.run.world_size = world;
  job.run.source = "merge";
  job.run.build = ranks.front().report->run.build;
  job.run.clock_source = ranks.front().report->run.clock_source;
  job.run.clock_tsc_ghz = ranks.front().report->run.clock_tsc_ghz;
  job.run.clock_error_ppm = ranks.front().report->run.clock_error_ppm;
  job.run.warmup_steps = ranks.front().report->run.warmup_steps;
  job.run.warmup_source = ranks.front().report->run.warmup_source;
  {
    // Settings every rank agrees on; the others are named in a warning.
    const RunInfo& first = ranks.front().report->run;
    std::vector<std::string> differing;
    for (const auto& [key, value] : first.config) {
      bool same = true;
      for (const RankFacts& f : ranks) {
        auto it = f.report->run.config.find(key);
        if (it == f.report->run.config.end() || it->second != value) {
          same = false;
          break;
        }
      }
      if (same) {
        job.run.config[key] = value;
        auto type = first.config_types.find(key);
        if (type != first.config_types.end()) job.run.config_types[key] = type->second;
      } else {
        differing.push_back(key);
      }
    }
    if (!differing.empty()) {
      std::string keys;
      for (const auto& k : differing) keys += (keys.empty() ? "" : ", ") + k;
      warnings.push_back("ranks differ in config key(s) " + keys + ": left out of the job's run.config");
    }
  }
}

// The job's step statistics: merged distributions, the mean breakdown.
void fill_job_steps(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  Report& job = jm.job;

  DistributionMerger wall, warmup_wall;
  HistogramMerger wall_histogram;
  std::uint64_t min_steps = std::numeric_limits<std::uint64_t>::max(), max_warmup = 0, max_unended = 0;
  StepBreakdown& b = job.steps.breakdown;
  for (const RankFacts& f : ranks) {
    const Report& r = *f.report;
    wall.add(r.steps.wall_ms);
    warmup_wall.add(r.steps.warmup_wall_ms);
    wall_histogram.add(r.steps.histogram);
    min_steps = std::min(min_steps, r.steps.count);
    max_warmup = std::max(max_warmup, r.steps.warmup_excluded);
    max_unended = std::max(max_unended, r.steps.unended_excluded);
    job.steps.unended_wall_ms = std::max(job.steps.unended_wall_ms, r.steps.unended_wall_ms);
    b.wall_ms += f.wall;
    for (PhaseKind k : kPhaseKinds) b.kind_ms[k] += f.kind_ms[k];
    b.unattributed_ms += f.unattributed;
    job.dropped_records += r.dropped_records;
    job.total_records += r.total_records;
  }
  const double nd = static_cast<double>(n);
  b.wall_ms /= nd;
  for (double& x : b.kind_ms) x /= nd;
  b.unattributed_ms /= nd;
  merge_between_steps(ranks, job.steps);
  // Steps every rank measured (they step together in a synchronous job); the
  // distributions hold every rank's steps.
  job.steps.count = min_steps;
  job.steps.warmup_excluded = max_warmup;
  job.steps.unended_excluded = max_unended;  // per rank, as warm-up: the most any rank left out
  job.steps.wall_ms = wall.result();
  wall_histogram.apply(job.steps.wall_ms);
  if (wall_histogram.usable()) job.steps.histogram = wall_histogram.histogram.to_data();
  job.steps.warmup_wall_ms = warmup_wall.result();
}

// System and device facts that mean the same for the job.
void fill_job_system_and_device(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  Report& job = jm.job;

  // System signals are per host and do not add up across ranks; keep the
  // ones that mean the same for the job (extremes), mark the rest unknown.
  job.system.available = false;
  job.system.input_on_cpu_fraction = -1;
  job.system.compute_on_cpu_fraction = -1;
  job.system.input_disk_wait_fraction = -1;
  for (const RankFacts& f : ranks) {
    const SystemSignals& s = f.report->system;
    job.system.wall_s = std::max(job.system.wall_s, s.wall_s);
    job.system.rss_peak_mb = std::max(job.system.rss_peak_mb, s.rss_peak_mb);
  }
  // Device facts: the mean over ranks that have them.
  {
    DeviceFactsSection sums, counts;  // each fact: its sum over the ranks that have it, and how many
    const auto add = [](const char*, std::optional<double>& sum, std::optional<double>& count,
                        const std::optional<double>& value) {
      if (!value) return;
      sum = sum.value_or(0.0) + *value;
      count = count.value_or(0.0) + 1.0;
    };
    int enabled = 0;
    for (const RankFacts& f : ranks) {
      const DeviceInfo& d = f.report->device;
      if (d.enabled) ++enabled;
      for_each_device_fact(add, sums, counts, d.facts);
      job.device.memory_peak_mb = std::max(job.device.memory_peak_mb, d.memory_peak_mb);
      job.device.memory_capacity_mb = std::max(job.device.memory_capacity_mb, d.memory_capacity_mb);
    }
    for_each_device_fact(
        [](const char*, std::optional<double>& mean, const std::optional<double>& sum,
           const std::optional<double>& count) {
          if (sum) mean = *sum / *count;
        },
        job.device.facts, sums, counts);
    job.device.enabled = enabled > 0;
    job.device.hta_ranks = hta_by_rank(ranks);
    job.device.status = ranks.front().report->device.status;
    job.device.reason = ranks.front().report->device.reason;
    job.device.name = ranks.front().report->device.name;
  }
}

// The rank with the median time outside communication (of two, the faster).
std::size_t typical_rank(const JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  // The verdict is the analyzer's on the typical rank: the rank with the
  // median time outside communication (of two, the faster). In a
  // synchronous job that is what most ranks live through — compute, then
  // waiting for the slowest rank, then the collective — whereas the mean over
  // ranks mixes the straggler's compute into everyone's (with few ranks it
  // would call a job that mostly waits compute-bound).
  std::size_t typical = 0;
  {
    std::vector<std::pair<double, std::size_t>> by_busy(n);
    for (std::size_t i = 0; i < n; ++i) by_busy[i] = {ranks[i].busy, i};
    std::sort(by_busy.begin(), by_busy.end());
    typical = by_busy[(n - 1) / 2].second;
  }
  return typical;
}

// The job's verdict, findings and what-if: the analyzer on the typical rank's
// breakdown with the job's counts, plus the evidence across ranks.
void judge_job(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  const MultiRank& m = jm.m;
  Report& job = jm.job;
  const std::size_t typical = typical_rank(jm);

  {
    Report facts = job;  // job-level counts, series and device facts
    const Report& t = *ranks[typical].report;
    facts.steps.breakdown = t.steps.breakdown;
    // The rank's carved parts came from its own system signals; the job's
    // verdict derives them from the job's (as it always has).
    facts.steps.breakdown.cpu_wait_ms = facts.steps.breakdown.page_fault_ms = 0;
    facts.steps.wall_ms = t.steps.wall_ms;
    for (PhaseSummary& p : facts.phases) {
      p.share_of_step = 0;
      for (const PhaseSummary& q : t.phases)
        if (q.name == p.name && q.kind == p.kind && q.thread_role == p.thread_role) p.share_of_step = q.share_of_step;
    }
    job.bottleneck = classify(facts);
  }
  job.findings = find_issues(job);
  job.what_if = project_what_if(job);
  Verdict& v = job.bottleneck;
  const bool straggling = !m.stragglers.empty();
  {
    Evidence e;
    e.signal = "typical_rank";
    e.value = ranks[typical].rank;
    e.comparison = "info";
    e.sentence = fmt::format(
        "The verdict describes the typical rank, rank {} (median time outside communication, {:.2f} ms/step): "
        "{:.2f} ms/step in communication of a {:.2f} ms step.",
        ranks[typical].rank, ranks[typical].busy, ranks[typical].comm(), ranks[typical].wall);
    v.evidence.push_back(std::move(e));
  }
  {
    Evidence e;
    e.signal = "rank_busy_imbalance";
    e.value = m.busy_ms.imbalance;
    e.threshold = kMaterialShare;
    e.comparison = ">=";
    e.supports = e.value >= e.threshold;
    e.sentence = fmt::format(
        "Time outside communication per step ranges from {:.2f} ms (rank {}) to {:.2f} ms (rank {}); the slowest "
        "rank is {:.1f}% above the mean.",
        m.busy_ms.min, m.busy_ms.min_rank, m.busy_ms.max, m.busy_ms.max_rank, 100 * m.busy_ms.imbalance);
    v.evidence.push_back(std::move(e));
  }
  if (m.comm_ms > 0) {
    Evidence e;
    e.signal = "comm_wait_fraction";
    e.value = m.comm_wait_fraction;
    e.threshold = 0.5;
    e.comparison = ">=";
    e.supports = e.value >= e.threshold;
    e.sentence = fmt::format(
        "Of {:.2f} ms/step in communication (mean over ranks), about {:.2f} ms is the collective itself and "
        "{:.2f} ms ({:.0f}%) waiting for slower ranks (compute imbalance predicts {:.2f} ms).",
        m.comm_ms, m.comm_collective_ms, m.comm_wait_ms, 100 * m.comm_wait_fraction, m.expected_wait_from_imbalance_ms);
    v.evidence.push_back(std::move(e));
  }
  {
    Evidence e;
    e.signal = "stragglers";
    e.value = static_cast<double>(m.stragglers.size());
    e.threshold = 1;
    e.comparison = ">=";
    e.supports = straggling;
    if (straggling) {
      const Straggler& s = m.stragglers.front();
      e.sentence = fmt::format(
          "Rank {} is a {} straggler in '{}': {:.2f} ms/step against a median of {:.2f} ms over the other ranks "
          "(+{:.2f} ms, robust z {:.1f}, slower in {:.0f}% of the steps).",
          s.rank, s.pattern, s.phase, s.rank_ms, s.median_ms, s.excess_ms, s.robust_z, 100 * s.slow_step_fraction);
    } else {
      e.sentence = fmt::format("No straggler: the {} ranks' per-phase times are statistically alike.", n);
    }
    v.evidence.push_back(std::move(e));
  }
}

// "rank 1 is a chronic straggler ...": the rank and the cause in the
// composition of its step (Straggler::cause), with the excess.
std::string straggler_with_cause(const Straggler& s) {
  const std::string rank = fmt::format("rank {} is a {} straggler", s.rank, s.pattern);
  if (s.cause == "input")
    return fmt::format("{} in '{}': its input pipeline (the loader) takes +{:.2f} ms/step over the median rank", rank,
                       s.phase, s.excess_ms);
  if (s.cause == "unattributed")
    return fmt::format("{} by work outside any phase (unattributed time +{:.2f} ms/step over the median rank)", rank,
                       s.excess_ms);
  if (s.cause == "step")
    return fmt::format("{} in its whole step (+{:.2f} ms/step outside communication over the median rank)", rank,
                       s.excess_ms);
  return fmt::format("{} in '{}' (extra phase time: +{:.2f} ms/step over the median rank)", rank, s.phase, s.excess_ms);
}

// A straggler becomes the verdict's first word, first recommendation, first
// what-if and first finding; without one, a communication verdict says the
// collective itself is the cost.
void explain_stragglers(JobMerge& jm) {
  const std::size_t n = jm.n;
  const double median_step = jm.median_step;
  const MultiRank& m = jm.m;
  Report& job = jm.job;
  Verdict& v = job.bottleneck;
  const StepBreakdown& b = job.steps.breakdown;
  const double nd = static_cast<double>(n);
  const bool straggling = !m.stragglers.empty();

  if (straggling) {
    const Straggler& s = m.stragglers.front();
    std::string straggler_host;
    for (const RankSummary& r : m.ranks)
      if (r.rank == s.rank) straggler_host = r.host;
    // What the ranks that are not stragglers wait, on average (m.comm_wait_ms
    // is the mean over every rank, the stragglers' near-zero wait included).
    double others_wait = 0;
    int others = 0;
    for (const RankSummary& r : m.ranks)
      if (!r.straggler) others_wait += r.comm_wait_ms, ++others;
    others_wait = others > 0 ? others_wait / others : m.comm_wait_ms;
    std::string who = straggler_with_cause(s);
    if (m.stragglers.size() > 1) who += fmt::format(", with {} more straggler(s)", m.stragglers.size() - 1);
    if (v.category == "communication") {
      v.summary = fmt::format(
          "The job is {} communication-bound because {}: the other ranks wait {:.2f} ms/step for it in collectives, "
          "the collective itself costs {:.2f} ms/step.",
          v.severity, who, others_wait, m.comm_collective_ms);
    } else {
      v.summary +=
          fmt::format(" Across ranks, {}; the others wait for it in collectives ({:.2f} ms/step).", who, others_wait);
    }
    v.recommendations.insert(
        v.recommendations.begin(),
        fmt::format("Fix rank {} first: every rank waits for it at each collective. Look at what differs on it in "
                    "{} (host {}: data shard or sample sizes, CPU/GPU clocks and thermal throttling, other "
                    "processes on its cores); {} slowness points at {}.",
                    s.rank,
                    s.cause == "input" ? fmt::format("its input pipeline ('{}': storage, DataLoader workers)", s.phase)
                    : s.cause == "unattributed"
                        ? std::string("the code between its phases (wrap it in a phase to see which part)")
                        : "'" + s.phase + "'",
                    straggler_host.empty() ? "?" : straggler_host, s.pattern,
                    s.pattern == "chronic" ? "the hardware, placement or an uneven data split"
                                           : "an event at the listed steps (GC, checkpoint, I/O stall, preemption)"));
    WhatIf w;
    w.target = fmt::format("rank {} at the median", s.rank);
    w.share = median_step > 0 ? s.excess_ms / median_step : 0;
    w.speedup = 0;
    w.step_ms_now = b.wall_ms;
    // In a synchronous job the step is set by the slowest rank: removing its
    // excess removes at most that much (and at most the waiting it causes).
    const double saved = std::min(s.excess_ms, std::max(0.0, m.comm_wait_ms + s.excess_ms / nd));
    w.step_ms_projected = std::max(0.0, b.wall_ms - saved);
    w.step_change_pct = b.wall_ms > 0 ? 100.0 * (w.step_ms_projected - b.wall_ms) / b.wall_ms : 0;
    w.note = "synchronous data parallelism: the others stop waiting for it";
    job.what_if.insert(job.what_if.begin(), std::move(w));
    Finding f;
    f.kind = "straggler";
    f.severity = s.excess_ms >= 0.2 * median_step ? "critical" : "warning";
    std::vector<int> ids;
    for (const Straggler& x : m.stragglers) ids.push_back(x.rank);
    f.message = fmt::format("straggler rank(s) {}: {}", rank_list(ids), who);
    f.values = {{"rank", s.rank},
                {"excess_ms", s.excess_ms},
                {"robust_z", s.robust_z},
                {"slow_step_fraction", s.slow_step_fraction}};
    job.findings.insert(job.findings.begin(), std::move(f));
  } else if (v.category == "communication") {
    v.summary += fmt::format(
        " No straggler: the ranks are statistically alike, so the cost is the collective itself ({:.2f} ms/step) "
        "rather than waiting ({:.2f} ms/step).",
        m.comm_collective_ms, m.comm_wait_ms);
  }
}

// How the ranks' runs ended. A job merged from a rank's flight-recorder
// snapshot (the rank was killed by SIGKILL or the OOM killer, crashed, or was
// still running) or from ranks a signal cut short is not a whole run: the
// merged report is then not complete, and a warning per way of ending names
// the ranks. A rank whose signal was caught (Python's KeyboardInterrupt)
// counts as interrupted. A rank an uncaught exception ended (in a DDP job,
// typically the rank that ran out of memory while the others waited for it)
// is named with its exception, one warning per rank.
void note_rank_endings(JobMerge& jm) {
  std::vector<int> snapshots;
  std::map<std::string, std::vector<int>> ended_by_signal, caught;
  std::vector<std::pair<int, std::string>> exceptions;
  std::string first_snapshot_time;
  for (const RankFacts& f : jm.ranks) {
    const Report& r = *f.report;
    if (!r.complete) {
      snapshots.push_back(f.rank);
      if (first_snapshot_time.empty() || (!r.snapshot_time_utc.empty() && r.snapshot_time_utc < first_snapshot_time))
        first_snapshot_time = r.snapshot_time_utc;
    } else if (r.ended_by.rfind("SIG", 0) == 0) {
      ended_by_signal[r.ended_by].push_back(f.rank);
    } else if (r.interrupted) {
      caught[r.interrupted->signal].push_back(f.rank);
    }
    if (r.complete && r.exception)
      exceptions.emplace_back(f.rank, detail::printable_exception(r.exception->type, r.exception->message));
  }
  std::vector<std::string>& warnings = jm.warnings;
  if (!snapshots.empty()) {
    jm.job.complete = false;
    warnings.push_back(fmt::format(
        "rank(s) {}: the report is a flight-recorder snapshot (complete: false{}): the rank was killed (SIGKILL, "
        "the OOM killer), crashed, or was still running; its numbers stop at its last snapshot",
        rank_list(snapshots), first_snapshot_time.empty() ? "" : ", the earliest at " + first_snapshot_time));
  }
  for (const auto& [signal, ids] : ended_by_signal)
    warnings.push_back(
        fmt::format("rank(s) {}: ended by {}: the numbers cover the run up to it", rank_list(ids), signal));
  for (const auto& [signal, ids] : caught)
    warnings.push_back(
        fmt::format("rank(s) {}: interrupted by {}, which the program caught; the numbers cover the run up to its exit",
                    rank_list(ids), signal));
  for (const auto& [rank, text] : exceptions)
    warnings.push_back(fmt::format(
        "rank {}: ended by an uncaught exception ({}): the numbers cover the run up to it; the other ranks may have "
        "waited for this one until they were stopped",
        rank, text));
}

// Findings and warnings of the ranks, once per kind with the ranks named.
void gather_rank_findings(JobMerge& jm) {
  const std::vector<RankFacts>& ranks = jm.ranks;
  const std::size_t n = jm.n;
  std::vector<std::string>& warnings = jm.warnings;
  Report& job = jm.job;

  {
    std::map<std::string, std::vector<int>> by_kind;
    for (const RankFacts& f : ranks)
      for (const Finding& x : f.report->findings) {
        auto& list = by_kind[x.kind];
        if (list.empty() || list.back() != f.rank) list.push_back(f.rank);
      }
    for (const auto& [kind, ids] : by_kind) {
      Finding f;
      f.kind = "ranks_" + kind;
      f.severity = "info";
      f.message = fmt::format("{} on {} of {} ranks ({})", kind, ids.size(), n, rank_list(ids));
      f.values = {{"ranks", static_cast<double>(ids.size())}};
      job.findings.push_back(std::move(f));
    }
    std::map<std::string, std::vector<int>> warned;
    for (const RankFacts& f : ranks)
      for (const std::string& w : f.report->warnings) warned[w].push_back(f.rank);
    for (const auto& [w, ids] : warned) warnings.push_back(fmt::format("rank(s) {}: {}", rank_list(ids), w));
  }
}

Report merge_impl(const std::vector<Report>& inputs, std::string& error) {
  if (inputs.empty()) {
    error = "no reports to merge";
    return Report{};
  }
  JobMerge jm;
  if (!order_ranks(inputs, jm, error)) return Report{};
  note_missing_ranks(jm);
  compare_rank_means(jm);
  merge_phases(jm);
  merge_top_operators(jm);
  align_series(jm);
  summarise_step_points(jm);
  split_communication(jm);
  find_stragglers(jm);
  add_rank_rows(jm);
  fill_job_run(jm);
  fill_job_steps(jm);
  fill_job_system_and_device(jm);
  judge_job(jm);
  explain_stragglers(jm);
  note_rank_endings(jm);
  gather_rank_findings(jm);
  jm.job.warnings = std::move(jm.warnings);
  jm.job.ranks = std::move(jm.m);
  return std::move(jm.job);
}

}  // namespace

Report merge_reports(const std::vector<Report>& ranks, std::string& error) {
  try {
    return merge_impl(ranks, error);
  } catch (const std::exception& e) {
    error = std::string("merge failed: ") + e.what();
  } catch (...) {
    error = "merge failed";
  }
  return Report{};
}

std::string format_multi_rank(const Report& merged) {
  try {
    if (!merged.ranks) return "";
    const MultiRank& m = *merged.ranks;
    std::string out;
    auto line = [&out](const std::string& s) {
      out += detail::printable(s);  // hosts and phase names come from the ranks' reports
      out += '\n';
    };
    line(fmt::format("== stepscope job: {} of {} ranks merged ==", m.ranks_merged, m.world_size));
    line(fmt::format("step ms/step across ranks: min {:.3f} (rank {}), median {:.3f}, max {:.3f} (rank {})",
                     m.step_ms.min, m.step_ms.min_rank, m.step_ms.median, m.step_ms.max, m.step_ms.max_rank));
    line(
        fmt::format("outside communication:     min {:.3f} (rank {}), median {:.3f}, max {:.3f} (rank {}), "
                    "imbalance {:.1f}%",
                    m.busy_ms.min, m.busy_ms.min_rank, m.busy_ms.median, m.busy_ms.max, m.busy_ms.max_rank,
                    100 * m.busy_ms.imbalance));
    if (m.comm_ms > 0)
      line(fmt::format("communication: {:.3f} ms/step = collective {:.3f} + waiting for slower ranks {:.3f} ({:.0f}%)",
                       m.comm_ms, m.comm_collective_ms, m.comm_wait_ms, 100 * m.comm_wait_fraction));
    if (m.stragglers.empty()) line("stragglers: none (ranks statistically alike)");
    for (const Straggler& s : m.stragglers)
      line(fmt::format(
          "straggler: rank {} {} in '{}' (cause: {}): {:.3f} vs median {:.3f} ms/step (+{:.3f}, z {:.1f}, slow in "
          "{:.0f}% of steps)",
          s.rank, s.pattern, s.phase, s.cause, s.rank_ms, s.median_ms, s.excess_ms, s.robust_z,
          100 * s.slow_step_fraction));
    line(fmt::format("  {:<20} {:>10} {:>10} {:>10} {:>10} {:>10}", "phase (ms/step)", "min", "median", "max",
                     "max rank", "imbalance"));
    std::size_t shown = 0;
    for (const PhaseAcrossRanks& p : m.phases) {
      if (shown++ >= 12) break;
      line(fmt::format("  {:<20} {:>10.3f} {:>10.3f} {:>10.3f} {:>10} {:>9.1f}%", detail::printable(p.name, 20),
                       p.per_step_ms.min, p.per_step_ms.median, p.per_step_ms.max, p.per_step_ms.max_rank,
                       100 * p.per_step_ms.imbalance));
    }
    if (!m.ranks.empty() && m.ranks.size() <= 16) {
      line(
          fmt::format("  {:>5} {:>10} {:>10} {:>10} {:>10}  {}", "rank", "step", "busy", "comm", "waiting", "verdict"));
      for (const RankSummary& r : m.ranks) {
        // A rank whose run did not end by itself says how it ended.
        const std::string ending = !r.complete                       ? "  (snapshot: killed or crashed?)"
                                   : !r.exception.empty()            ? "  (uncaught exception)"
                                   : r.ended_by.rfind("SIG", 0) == 0 ? "  (ended by " + r.ended_by + ")"
                                   : !r.interrupted.empty()          ? "  (interrupted by " + r.interrupted + ")"
                                                                     : "";
        line(fmt::format("  {:>5} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f}  {}{}{}", r.rank, r.step_ms, r.busy_ms,
                         r.kind_ms[PhaseKind::communication], r.comm_wait_ms, r.verdict,
                         r.straggler           ? "  <- straggler"
                         : r.waits_for.empty() ? ""
                                               : "  (waits for rank " + rank_list(r.waits_for) + ")",
                         ending));
      }
    }
    return out;
  } catch (...) {
    return "";
  }
}

}  // namespace v1
}  // namespace stepscope
