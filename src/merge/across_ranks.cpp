// src/merge/across_ranks.cpp — the ranks against each other: stragglers (a
// rank's time outside communication, each of its step-thread phases and its
// unattributed time against the other ranks' median, in robust z), the rank
// rows, the job verdict on the typical rank with the evidence across ranks,
// the straggler's explanation, and the multi-rank table. docs/multi-rank.md.
#include "merge/job_merge.hpp"
#include "text/printable.hpp"

#include <stepscope/analysis.hpp>
#include <stepscope/merge.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace merging {
namespace {

// A straggler candidate from one metric.
struct Candidate {
  std::string phase;
  double rank_ms = 0, median_ms = 0, excess = 0, z = 0;
  PhaseKind kind = PhaseKind::other;
  bool whole_step = false;
};

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

constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

// A straggler as the report shows it: where its excess is, its cause, and in
// how many aligned step points it was materially slower. others_cpu_wait: the
// median of the other ranks' CPU wait (kNotMeasured: not measured).
Straggler describe_straggler(const RankFacts& rank, const Candidate& best, PointPass& pass, double others_cpu_wait) {
  Straggler s;
  s.rank = rank.rank;
  s.phase = best.phase;
  s.rank_ms = best.rank_ms;
  s.median_ms = best.median_ms;
  s.excess_ms = best.excess;
  s.robust_z = best.z;
  s.cause = best.whole_step || best.phase == "step" ? "step"
            : best.phase == kUnattributedPhase      ? "unattributed"
            : best.kind == PhaseKind::input         ? "input"
                                                    : "phase";
  // A rank whose step threads waited for a CPU that much longer than the
  // median rank's was slowed by its host's cores (oversubscribed by other
  // processes or threads), wherever the wait fell.
  if (std::isfinite(rank.cpu_wait) && std::isfinite(others_cpu_wait) &&
      rank.cpu_wait - others_cpu_wait >= kCpuWaitCauseShare * s.excess_ms)
    s.cause = "cpu_wait";
  // Chronic or one-off: in how many aligned points it was materially slower.
  if (pass.valid_points > 0) {
    s.slow_step_fraction = static_cast<double>(pass.slow.size()) / pass.valid_points;
    s.pattern = s.slow_step_fraction >= kChronicFraction ? "chronic" : "one-off";
    std::sort(pass.slow.begin(), pass.slow.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t j = 0; j < pass.slow.size() && j < kMaxSlowSteps; ++j) s.slow_steps.push_back(pass.slow[j].second);
    std::sort(s.slow_steps.begin(), s.slow_steps.end());
  } else {
    s.pattern = "chronic";  // no series: only the means, which say "on average"
    s.slow_step_fraction = 1.0;
  }
  return s;
}

}  // namespace

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
  std::vector<double> cpu_wait(n);
  for (std::size_t i = 0; i < n; ++i) cpu_wait[i] = ranks[i].cpu_wait;
  const RankSample cpu_wait_sample(cpu_wait, rank_ids);

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
    const bool cpu_wait_known = cpu_wait_sample.size() >= 2 && cpu_wait_sample.has(i);
    m.stragglers.push_back(
        describe_straggler(ranks[i], best, pass, cpu_wait_known ? cpu_wait_sample.median_without(i) : kNotMeasured));
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

namespace {

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

}  // namespace

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
    // The job's OS signals are unknown (per host), so what only the rank's
    // own could show -- its compute phases waited rather than computed (an
    // RPC, the interpreter lock) -- would be lost: the job's verdict is no
    // surer than the typical rank's own, and where the rank's run times bound
    // its compute below its communication (an RPC trainer: ddp_rpc's job read
    // "conflicting signals" while both trainers read communication), the job
    // takes that verdict too.
    Verdict own = classify(t);
    const bool bounded = std::any_of(own.evidence.begin(), own.evidence.end(),
                                     [](const Evidence& e) { return e.signal == "compute_on_cpu_bound" && e.crossed; });
    if (own.category != job.bottleneck.category && (own.category == "unknown" || bounded)) {
      own.summary = fmt::format("Rank {} (the typical rank): {}", ranks[typical].rank, own.summary);
      job.bottleneck = std::move(own);
    }
  }
  job.findings = find_issues(job);
  job.what_if = project_what_if(job);
  job.steps.settled_breakdown = settled_breakdown(job);  // what the writers print
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

namespace {

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
  if (s.cause == "cpu_wait")
    return fmt::format(
        "{}: its step threads waited for a CPU on its host (+{:.2f} ms/step over the median rank, "
        "that much more waiting for a core)",
        rank, s.excess_ms);
  if (s.cause == "step")
    return fmt::format("{} in its whole step (+{:.2f} ms/step outside communication over the median rank)", rank,
                       s.excess_ms);
  return fmt::format("{} in '{}' (extra phase time: +{:.2f} ms/step over the median rank)", rank, s.phase, s.excess_ms);
}

}  // namespace

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
    if (v.bottleneck() == Bottleneck::communication) {
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
                    : s.cause == "cpu_wait"
                        ? std::string("its host's cores (more runnable threads than cores: other processes, "
                                      "DataLoader workers, intra-op threads per rank)")
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
  } else if (v.bottleneck() == Bottleneck::communication) {
    v.summary += fmt::format(
        " No straggler: the ranks are statistically alike, so the cost is the communication itself ({:.2f} "
        "ms/step) rather than ranks waiting for one another ({:.2f} ms/step).",
        m.comm_collective_ms, m.comm_wait_ms);
  }
}

}  // namespace merging

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
                                               : "  (waits for rank " + merging::rank_list(r.waits_for) + ")",
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
