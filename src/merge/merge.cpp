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
// The comparison of the ranks (stragglers, rank rows, the job verdict, the
// table) is in across_ranks.cpp; what the steps share in job_merge.hpp.
// Cost: O(ranks x (phases + points)) time, O(ranks x points) memory with
// points capped at kMaxStepPoints.
#include "merge/job_merge.hpp"
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
namespace merging {
namespace {

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
  if (r.system.available && r.system.window_steps > 0)
    f.cpu_wait = 1e3 * r.system.runqueue_wait_s / r.system.window_steps;
  return f;
}

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
  // The spread inside steps() loops, pooled over the ranks (each rank's
  // variance weighted alike), where every rank has one.
  double within_sq = 0;
  bool within_everywhere = true;
  for (const RankFacts& f : ranks) {
    const std::optional<double>& w = f.report->steps.within_loop_stddev_ms;
    within_everywhere = within_everywhere && w.has_value();
    if (w) within_sq += *w * *w / n;
  }
  if (within_everywhere && !ranks.empty()) job.within_loop_stddev_ms = std::sqrt(within_sq);
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
    job.evaluation_loops += s.evaluation_loops;
    job.loop_first_steps += s.loop_first_steps;
    job.loop_first_ms += s.loop_first_ms;
    job.loop_first_max_ms = std::max(job.loop_first_max_ms, s.loop_first_max_ms);
    job.loop_first_compared += s.loop_first_compared;
    job.loop_first_compared_ms += s.loop_first_compared_ms;
    job.loop_first_rest_ms += s.loop_first_rest_ms;
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
  for (const RankFacts& f : ranks) {  // the advice reads ratios: sums over the ranks keep them
    const CommunicationVolume& c = f.report->communication;
    job.communication.collectives += c.collectives;
    job.communication.bytes += c.bytes;
    job.communication.steps += c.steps;
  }
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
    job.steps.outer_excluded = std::max(job.steps.outer_excluded, r.steps.outer_excluded);
    job.steps.next_step_ignored = std::max(job.steps.next_step_ignored, r.steps.next_step_ignored);
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
  job.system.unattributed_on_cpu_fraction = -1;
  job.system.step_threads_on_cpu_s = -1;
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
  merge_step_clock(jm);
  fill_job_system_and_device(jm);
  judge_job(jm);
  explain_stragglers(jm);
  note_rank_endings(jm);
  gather_rank_findings(jm);
  reword_advice(jm.job);  // the ranks' language: their traces', or the Python package's
  jm.job.warnings = std::move(jm.warnings);
  jm.job.ranks = std::move(jm.m);
  return std::move(jm.job);
}

}  // namespace
}  // namespace merging

Report merge_reports(const std::vector<Report>& ranks, std::string& error) {
  try {
    return merging::merge_impl(ranks, error);
  } catch (const std::exception& e) {
    error = std::string("merge failed: ") + e.what();
  } catch (...) {
    error = "merge failed";
  }
  return Report{};
}

}  // namespace v1
}  // namespace stepscope
