// src/analysis/findings.cpp — secondary findings beside the verdict: things
// worth knowing even when they are not what holds the step back (a leak, a
// jittery step, warm-up, dropped records, mis-timed asynchronous work).
#include "analysis/facts.hpp"
#include "analysis/thresholds.hpp"

#include <stepscope/analysis.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace {

using detail::kThresholds;
using detail::safe_div;

Finding make(std::string kind, std::string severity, std::string message, std::map<std::string, double> values) {
  Finding f;
  f.kind = std::move(kind);
  f.severity = std::move(severity);
  f.message = std::move(message);
  f.values = std::move(values);
  return f;
}

void memory_growth(const Report& r, std::vector<Finding>& out) {
  const auto& t = kThresholds;
  const StepSeries& s = r.steps.series;
  std::vector<double> x, y;
  for (std::size_t i = 0; i < s.rss_mb.size(); ++i) {
    if (!(s.rss_mb[i] > 0)) continue;  // 0: unknown
    const double step = i < s.first_step.size()
                            ? static_cast<double>(s.first_step[i])
                            : static_cast<double>(i) * static_cast<double>(std::max<std::uint32_t>(s.stride, 1));
    x.push_back(step);
    y.push_back(s.rss_mb[i]);
  }
  if (x.size() < t.growth_min_points) return;
  const detail::LineFit fit = detail::fit_line(x, y);
  const double span = x.back() - x.front();
  const double growth = fit.slope * span;
  const double start = fit.intercept + fit.slope * x.front();
  const double needed = std::max(t.growth_min_mib, t.growth_min_fraction * std::max(start, 0.0));
  if (fit.slope <= 0 || fit.r2 < t.growth_min_r2 || growth < needed) return;
  out.push_back(make("memory_growth", "warning",
                     fmt::format("Memory grows steadily: RSS rises {:.3f} MB per step ({:.0f} MB over {:.0f} steps, "
                                 "R² = {:.2f}). A steady rise that does not level off is a leak or an unbounded cache "
                                 "(tensors kept in a list, a growing history, autograd graphs retained).",
                                 fit.slope, growth, span, fit.r2),
                     {{"slope_mb_per_step", fit.slope},
                      {"r2", fit.r2},
                      {"growth_mb", growth},
                      {"start_mb", start},
                      {"points", static_cast<double>(x.size())}}));
}

void page_faults(const Report& r, std::vector<Finding>& out) {
  if (!r.system.available || r.steps.count == 0) return;
  const double steps = static_cast<double>(r.steps.count);
  const double per_step = static_cast<double>(r.system.minor_faults) / steps;
  if (per_step < kThresholds.minor_faults_per_step) return;
  // On a GPU run the kernel time is mostly the CUDA driver's waits for the
  // device: a storm only where what is left costs a host-paced step.
  if (detail::clock_facts(r).device && !detail::fault_facts(r).storm) return;
  // Kernel time of the whole process per step, shown so the user can judge:
  // it holds every system call too, and on a VM misses the hypervisor's part
  // of a fault (the cost the remedy quotes is measured on this machine).
  const double sys_ms = r.system.cpu_system_s * 1000.0 / steps;
  const double step_ms = r.steps.wall_ms.mean;
  std::string cost;
  if (step_ms > 0 && sys_ms > 0)
    cost = fmt::format(
        " The process spent {:.2f} ms/step in the kernel ({:.0f}% of the step: faults and every system call, "
        "without a hypervisor's share of the faults).",
        sys_ms, 100.0 * sys_ms / step_ms);
  // Ranked by what it costs the step: the cost the remedy quotes, else the
  // kernel time (an upper bound). A storm that costs the step little is info;
  // one whose cost is unknown stays a warning.
  const detail::FaultCost fault = detail::page_fault_cost(r);
  const bool measured = fault.cost_ms > 0 && fault.step_ms > 0;
  const double cost_ms = measured ? fault.cost_ms : sys_ms;
  const double of_ms = measured ? fault.step_ms : step_ms;
  const bool cheap = of_ms > 0 && cost_ms > 0 && cost_ms < kThresholds.page_fault_warning_share * of_ms;
  out.push_back(make("page_fault_storm", cheap ? "info" : "warning", detail::page_fault_remedy(r) + cost,
                     {{"minor_faults_per_step", per_step},
                      {"threshold", kThresholds.minor_faults_per_step},
                      {"system_ms_per_step", sys_ms}}));
}

// The run's slow steps that lie on one period (below), from the threshold
// up: on a busy machine scattered slow steps above 2x the median can hide a
// period that stands far above them. `period` 0: none.
struct SlowStepPattern {
  std::uint64_t period = 0;
  std::vector<const SlowStep*> steps;
  bool all_known = false;  // every slow step is in r.steps.slowest
};
SlowStepPattern slow_step_pattern(const Report& r);

void jitter_and_outliers(const Report& r, std::vector<Finding>& out) {
  const auto& t = kThresholds;
  const Distribution& w = r.steps.wall_ms;
  // Fewer steps than a verdict needs say nothing about their spread (a run
  // SIGTERM ended after 3 steps read "varies a lot: CV 14%"); few_steps
  // says why.
  if (w.count < t.min_measured_steps || w.mean <= 0) return;
  const double cv = w.stddev / w.mean;
  // Steps that vary between steps() loops more than inside them: the loops
  // run different work (pytorch/examples' forward-forward trains its two
  // layers in two loops, 1.9 and 1.1 s a step: "CV 22% ... look for periodic
  // work"; mnist with its one-batch test loop wrapped: CV 100%). Either a
  // loop's own spread is under the jitter tier, or nearly all of the
  // variance lies between loops (the same mnist beside two busy loops: 12%
  // within a loop, 98% of the variance between loops).
  const std::optional<double>& within = r.steps.within_loop_stddev_ms;
  const bool have_loops = within && r.steps.clock == "host" && cv >= t.jitter_cv;
  const double within_cv = have_loops ? *within / w.mean : cv;
  const double between_variance = have_loops ? std::max(0.0, 1 - (within_cv * within_cv) / (cv * cv)) : 0;
  // A loop's own spread under the tier says the loops differ only where
  // they account for much of the variance: PyTorch's mnist, its test loop
  // no steps, read "varies between steps() loops, not within them: 10% over
  // all steps, 10% about each loop's own mean (11% of the variance is
  // between loops)".
  const bool loops_apart = have_loops && ((within_cv < t.jitter_cv && between_variance >= t.loops_differ_variance) ||
                                          between_variance >= t.loops_apart_variance);
  // More of the variance between loops than within them (minGPT-ddp's
  // trainer runs its test loader through the same steps() loop: 619
  // training steps of ~730 ms, 70 evaluation steps of 313 ms, 14% within a
  // loop on 2 shared cores, 64% of the variance between loops, read "CV 23%
  // ... look for periodic work"): jitter judges a loop's own spread.
  const bool loops_differ = loops_apart || (have_loops && between_variance >= t.loops_differ_variance);
  // Steps that run different amounts of work (pytorch/examples' reinforce,
  // an episode per step: 12 to 503 phases, 'forward' once per action, read
  // "CV 95% ... look for periodic work"): the spread is the work's where the
  // number of phases a step ran explains nearly all of its variance.
  const std::optional<CallsPerStep>& calls = r.steps.calls_per_step;
  const bool work_varies = !loops_apart && calls && r.steps.clock == "host" && cv >= t.jitter_cv &&
                           calls->max > calls->min && calls->explained_variance >= t.work_explains_variance;
  const double work_cv = work_varies ? cv * std::sqrt(std::max(0.0, 1 - calls->explained_variance)) : cv;
  const std::string work_said =
      work_varies
          ? fmt::format(
                "its steps ran {:.0f} to {:.0f} phases{}, and that number explains {:.0f}% of the step time's "
                "variance (coefficient of variation {:.0f}% over all steps, {:.0f}% about what the work predicts)",
                calls->min, calls->max,
                calls->phase.empty()
                    ? std::string()
                    : fmt::format(", most of them '{}' ({:.1f} per step on average)", calls->phase, calls->phase_mean),
                100 * calls->explained_variance, 100 * cv, 100 * work_cv)
          : std::string();
  const std::string loops_said =
      loops_differ ? fmt::format(
                         "coefficient of variation {:.0f}% over all steps, {:.0f}% about each loop's own mean "
                         "({:.0f}% of the variance is between loops)",
                         100 * cv, 100 * within_cv, 100 * between_variance)
                   : std::string();
  if (loops_apart && within_cv < t.jitter_cv) {
    out.push_back(make("jitter", "info",
                       fmt::format("Step time varies between steps() loops, not within them: {}. The loops run "
                                   "different work (training and evaluation loops, stages of different sizes), and "
                                   "the step statistics mix them: compare one loop's steps with another run's same "
                                   "loop, or mark only the training steps.",
                                   loops_said),
                       {{"cv", cv}, {"within_loop_cv", within_cv}, {"stddev_ms", w.stddev}, {"mean_ms", w.mean}}));
  } else if (work_varies) {
    out.push_back(make("jitter", "info",
                       fmt::format("Step time varies with the work each step does: {}. The spread is the work's "
                                   "(episodes, sequences or inner loops of different lengths), not noise: compare "
                                   "time per occurrence (the phase table) or steps of equal work.",
                                   work_said),
                       {{"cv", cv},
                        {"work_cv", work_cv},
                        {"explained_variance", calls->explained_variance},
                        {"stddev_ms", w.stddev},
                        {"mean_ms", w.mean}}));
  } else if (cv >= t.jitter_cv) {
    // Where the loops differ, the spread judged is each loop's own.
    const double judged = loops_differ ? within_cv : cv;
    // Where the step waited for CPUs other processes held, their load is the
    // first suspect, not the user's code (pytorch/examples' gcn beside two
    // busy loops: CV 20% quiet, 40% "critical" busy, 37% of the step waiting
    // for a CPU): said so, and no more than a warning.
    const detail::StepShares shares = detail::step_shares(r);
    const bool others_load = shares.cpu_wait >= t.cpu_contention_finding && detail::cpu_holders(r.system).others_hold;
    // A slow step every N steps that periodic_slow_steps names and places.
    const std::uint64_t period = slow_step_pattern(r).period;
    // The step phase that carries most of the spread (its self time's
    // per-step variance, calls taken as independent): where to look first.
    // PyTorch's DDP tutorial on 2 cores read only "CV 78% ... look for
    // periodic work or contention"; the spread was the all-reduce's. Not
    // where the loops differ: a phase's spread then mixes them too.
    const PhaseSummary* spread = nullptr;
    double spread_sd = 0;
    for (const PhaseSummary& p : r.phases) {
      if (p.thread_role != ThreadRole::step || p.count == 0 || r.steps.clock != "host" || loops_differ) continue;
      const double sd = p.self_ms.stddev * std::sqrt(static_cast<double>(p.count) / static_cast<double>(w.count));
      if (sd > spread_sd) spread = &p, spread_sd = sd;
    }
    const std::string in_phase =
        spread != nullptr && spread_sd >= t.jitter_phase_share * w.stddev
            ? fmt::format(" Most of the spread is in '{}' ({}: stddev {:.2f} ms per step about a mean of {:.2f} ms).",
                          spread->name, phase_kind_name(spread->kind), spread_sd,
                          spread->self_ms.mean * static_cast<double>(spread->count) / static_cast<double>(w.count))
            : std::string();
    std::string look =
        others_load ? fmt::format(
                          "The step thread waited for a CPU {:.0f}% of the step while other processes held "
                          "them: their load varies, and the step with it.",
                          100 * shares.cpu_wait)
        : period != 0 ? fmt::format(
                            "It comes from one slow step in every {} (the periodic_slow_steps finding says "
                            "where their time goes).",
                            period)
                      : std::string(
                            "Means hide this; look for periodic work (logging, checkpointing, garbage "
                            "collection) or contention.");
    const bool explained = others_load || period != 0;
    const std::string what =
        loops_differ ? fmt::format(
                           "Step time varies within its steps() loops, and more between them (loops of "
                           "different work): {}.",
                           loops_said)
                     : fmt::format(
                           "Step time varies a lot: coefficient of variation {:.0f}% (stddev {:.2f} ms over a "
                           "mean of {:.2f} ms).",
                           100 * cv, w.stddev, w.mean);
    out.push_back(make("jitter", judged >= t.jitter_cv_critical && !explained ? "critical" : "warning",
                       fmt::format("{}{} {}", what, in_phase, look),
                       {{"cv", cv}, {"within_loop_cv", within_cv}, {"stddev_ms", w.stddev}, {"mean_ms", w.mean}}));
  }
  if (w.p50 <= 0) return;
  const double p99_ratio = w.p99 / w.p50;
  const double max_ratio = w.max / w.p50;
  if (p99_ratio >= t.outlier_p99_over_p50 || max_ratio >= t.outlier_max_over_p50) {
    const bool slowest_opened_a_loop = r.steps.loop_first_compared > 0 && r.steps.loop_first_max_ms >= 0.999 * w.max;
    // Where the steps vary between loops and not within them, the slow steps
    // are another loop's (pytorch/examples' mnist with both loaders wrapped:
    // its one-batch test loop, 8.5x the training step, read "Slow steps ...
    // The slowest is the first step of a steps() loop (an epoch start)").
    const std::string where =
        loops_apart ? fmt::format(
                          " Within their own steps() loops the steps vary by {:.0f}% ({:.0f}% of the variance is "
                          "between loops): the slow steps are loops that run other work (an evaluation pass over "
                          "larger batches), and the percentiles mix the loops.",
                          100 * within_cv, 100 * between_variance)
        : work_varies ? fmt::format(
                            " The slow steps are those that did the most work: the number of phases a step ran "
                            "({:.0f} to {:.0f}) explains {:.0f}% of the step time's variance.",
                            calls->min, calls->max, 100 * calls->explained_variance)
        : slowest_opened_a_loop ? " The slowest is the first step of a steps() loop (an epoch start)."
                                : "";
    out.push_back(make("step_outliers",
                       p99_ratio >= t.outlier_p99_over_p50 && !loops_apart && !work_varies ? "warning" : "info",
                       fmt::format("Slow steps: p99 is {:.1f}x and the slowest step {:.1f}x the median ({:.2f} ms).{}",
                                   p99_ratio, max_ratio, w.p50, where),
                       {{"p50_ms", w.p50},
                        {"p99_ms", w.p99},
                        {"max_ms", w.max},
                        {"p99_over_p50", p99_ratio},
                        {"max_over_p50", max_ratio}}));
  }
}

// The model run with gradients off inside every training step: an
// evaluation (metrics on the training and validation nodes) each step
// (pytorch/examples' gat: two of three forwards, 39% of the step, read as
// "compute, mostly in 'forward'"). Steps of an evaluation loop of their own
// run it less often than the training steps run backward, and are not named.
void evaluation_in_step(const Report& r, std::vector<Finding>& out) {
  const PhaseSummary* eval = nullptr;
  const PhaseSummary* backward = nullptr;
  for (const PhaseSummary& p : r.phases) {
    if (p.thread_role != ThreadRole::step) continue;
    if (p.name == "forward_no_grad") eval = &p;
    if (p.name == "backward") backward = &p;
  }
  if (eval == nullptr || backward == nullptr || backward->count == 0 || eval->count < backward->count ||
      eval->share_of_step < kThresholds.evaluation_in_step_share || r.steps.count == 0)
    return;
  const double per_step = static_cast<double>(eval->count) / static_cast<double>(r.steps.count);
  out.push_back(make(
      "evaluation_in_step", "warning",
      fmt::format("The model ran with gradients off (forward_no_grad: an evaluation) {:.1f} times per training step, "
                  "{:.0f}% of the step: every step pays for it. Evaluate every N steps or once per epoch, outside "
                  "the steps, or take the training metrics from the training forward's output.",
                  per_step, 100 * eval->share_of_step),
      {{"calls_per_step", per_step}, {"share_of_step", eval->share_of_step}}));
}

// The first step of each later steps() loop (epoch 2, 3, ...) pays again for
// what the first epoch's warm-up paid once: a DataLoader with workers starts
// new worker processes on every iter(loader) (pytorch/examples' dcgan at 2
// workers: the first step of epoch 2 took 9.3x the median, docs/trials.md).
void loop_restart(const Report& r, std::vector<Finding>& out) {
  const auto& t = kThresholds;
  const StepStats& s = r.steps;
  // Each first step against the rest of its own loop: an evaluation loop's
  // steps (a larger batch, forward only) are not the training loop's, and a
  // loop of one step has nothing to be compared with (pytorch/examples' mnist
  // with both loaders wrapped read "1240 ms, 7.0x the median step ... do it
  // once, outside the epoch loop" for its one-batch test loop).
  if (s.loop_first_compared == 0 || s.loop_first_rest_ms <= 0 || s.wall_ms.total <= 0) return;
  const double n = static_cast<double>(s.loop_first_compared);
  const double mean = s.loop_first_compared_ms / n;
  const double rest = s.loop_first_rest_ms / n;
  const double ratio = mean / rest;
  if (ratio < t.loop_restart_over_rest) return;
  const double extra_ms = s.loop_first_compared_ms - s.loop_first_rest_ms;
  const double share = extra_ms / s.wall_ms.total;
  // What the loop restarts, where stepscope.torch.steps() recorded the
  // DataLoader's num_workers and persistent_workers; the general case
  // otherwise (C++, other loaders).
  const auto config = [&r](const char* key) {
    const auto it = r.run.config.find(key);
    return it == r.run.config.end() ? std::string() : it->second;
  };
  std::string cause;
  if (config("num_workers") == "0")
    cause =
        "The DataLoader has no workers, so it is not their start: something the loop's start does again every "
        "epoch (shuffling a large index, building the sampler or the dataset's iterator, a cache that is "
        "cleared) is paid in the first step; do it once, outside the epoch loop.";
  else if (config("persistent_workers") == "true")
    // No remedy is offered that is not known to act: a larger prefetch_factor
    // did not shorten this wait (2, 4, 8 gave 209, 202, 234 ms in a trial,
    // docs/trials.md): each epoch's first batch is fetched from scratch however
    // deep the queue. What it costs is the finding.
    cause = fmt::format(
        "The DataLoader's workers persist (persistent_workers=True{}), but each epoch's iter(loader) starts their "
        "sampling again: the first step waits while a worker fetches its first batch from scratch. That costs "
        "{:.1f} ms per epoch; a deeper prefetch queue does not shorten it (the first batch is still fetched "
        "whole). A faster first batch (cheaper per-sample work) or fewer, longer epochs (one sampler that spans "
        "them) do.",
        config("prefetch_factor").empty() ? "" : ", prefetch_factor=" + config("prefetch_factor"), extra_ms / n);
  else
    cause =
        "Something restarts with every loop: a DataLoader with workers starts new worker processes on each "
        "iter(loader) (DataLoader(..., persistent_workers=True) keeps them); otherwise create iterators, pools "
        "and caches once, outside the epoch loop.";
  out.push_back(make(
      "loop_restart", share >= t.loop_restart_warning_share ? "warning" : "info",
      fmt::format("The first step of each later steps() loop ({} epoch start{}) took {:.2f} ms on average, {:.1f}x "
                  "the rest of its own loop's steps ({:.2f} ms on average): {:.1f} ms in all, {:.1f}% of the steps' "
                  "time. {}",
                  s.loop_first_compared, s.loop_first_compared == 1 ? "" : "s", mean, ratio, rest, extra_ms,
                  100 * share, cause),
      {{"loop_first_steps", n},
       {"loop_first_mean_ms", mean},
       {"loop_rest_mean_ms", rest},
       {"over_rest", ratio},
       {"extra_ms", extra_ms},
       {"share_of_steps", share}}));
}

// The steps of StepStats::slowest at or above `threshold` ms that lie on one
// period (a, a+P, a+2P, ...), in step order, and P; 0 when they do not.
// `all_known`: the list held every step at or above the threshold.
std::uint64_t slow_step_period(const StepStats& s, double threshold, std::vector<const SlowStep*>& periodic,
                               bool& all_known) {
  const auto& t = kThresholds;
  periodic.clear();
  std::vector<const SlowStep*> slow;
  for (const SlowStep& x : s.slowest)
    if (x.wall_ms >= threshold) slow.push_back(&x);
  if (static_cast<double>(slow.size()) < t.periodic_min_steps) return 0;
  std::sort(slow.begin(), slow.end(), [](const SlowStep* a, const SlowStep* b) { return a->step < b->step; });
  // When the list also holds steps that are not slow, it holds every slow
  // step of the run: the period's slots between the first and the last can
  // be checked for slow steps that are missing.
  all_known = slow.size() < s.slowest.size();
  // Candidate periods: the gaps between consecutive slow steps, and their
  // common divisors (when only some of the period's steps are among the
  // slowest, no gap is the period itself).
  std::vector<std::uint64_t> candidates;
  std::uint64_t all_gaps = 0;
  for (std::size_t i = 1; i < slow.size(); ++i) {
    const std::uint64_t gap = slow[i]->step - slow[i - 1]->step;
    candidates.push_back(gap);
    if (i >= 2) candidates.push_back(std::gcd(gap, slow[i - 1]->step - slow[i - 2]->step));
    all_gaps = std::gcd(all_gaps, gap);
  }
  candidates.push_back(all_gaps);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  // A period is taken when most slow steps lie on it, far more than chance
  // puts there (1/P of scattered steps), and, where every slow step is known,
  // most of its slots between the first and the last are slow; of those, the
  // one most slow steps lie on (the shortest on a tie).
  const double count = static_cast<double>(slow.size());
  std::uint64_t best_period = 0, best_phase = 0;
  std::size_t best_support = 0;
  for (const std::uint64_t period : candidates) {
    if (period < 2) continue;
    std::map<std::uint64_t, std::size_t> by_phase;
    for (const SlowStep* x : slow) ++by_phase[x->step % period];
    const auto top = std::max_element(by_phase.begin(), by_phase.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
    const double n = static_cast<double>(top->second);
    if (n < t.periodic_min_steps || n < t.periodic_fit * count || n < 2 * count / static_cast<double>(period)) continue;
    if (all_known) {
      std::uint64_t first = 0, last = 0;
      bool any = false;
      for (const SlowStep* x : slow) {
        if (x->step % period != top->first) continue;
        if (!any) first = x->step;
        last = x->step;
        any = true;
      }
      if (n < t.periodic_fit * static_cast<double>((last - first) / period + 1)) continue;
    }
    if (top->second > best_support) {
      best_support = top->second;
      best_period = period;
      best_phase = top->first;
    }
  }
  for (const SlowStep* x : slow)
    if (best_period != 0 && x->step % best_period == best_phase) periodic.push_back(x);
  return best_period;
}

SlowStepPattern slow_step_pattern(const Report& r) {
  const auto& t = kThresholds;
  SlowStepPattern out;
  const StepStats& s = r.steps;
  if (s.wall_ms.p50 <= 0 || s.wall_ms.total <= 0 || s.slowest.empty()) return out;
  for (double factor = t.periodic_over_p50; out.period == 0 && factor <= 16 * t.periodic_over_p50; factor *= 2)
    out.period = slow_step_period(s, factor * s.wall_ms.p50, out.steps, out.all_known);
  return out;
}

// Work a loop does every N steps without a phase around it (a checkpoint,
// logging that reads the loss, an evaluation): a few steps far slower than
// the rest, at step numbers a period apart. The mean and the p99 blur it into
// jitter; the period names it. Read from the slowest steps the aggregator
// keeps (StepStats::slowest), with where their extra time went.
void periodic_slow_steps(const Report& r, std::vector<Finding>& out) {
  const auto& t = kThresholds;
  const StepStats& s = r.steps;
  // On a device-paced run the slowest steps are the device's (the host's,
  // blocked where the queue fills, smear one slow step over the queue's depth).
  const double p50 = s.wall_ms.p50;
  const SlowStepPattern pattern = slow_step_pattern(r);
  if (pattern.period == 0) return;
  const std::uint64_t best_period = pattern.period;
  const std::vector<const SlowStep*>& periodic = pattern.steps;
  const bool all_slow_known = pattern.all_known;
  // Where their time went beyond an ordinary step's (the breakdown's means).
  const StepBreakdown& b = s.breakdown;
  double wall = 0, extra = 0, unattributed = 0, between = 0;
  PerKind<double> kinds;
  for (const SlowStep* x : periodic) {
    wall += x->wall_ms;
    extra += x->wall_ms - p50;
    unattributed += x->unattributed_ms - b.unattributed_ms;
    between += x->between_steps_ms - b.between_steps_ms;
    for (PhaseKind k : kPhaseKinds) kinds[k] += x->kind_ms[k] - b.kind_ms[k];
  }
  const double share = extra / s.wall_ms.total;
  std::string where = "outside every phase";
  double where_ms = unattributed;
  if (between > where_ms) {
    where = "between steps, outside every phase";
    where_ms = between;
  }
  for (PhaseKind k : kPhaseKinds) {
    if (kinds[k] > where_ms) {
      where = k == PhaseKind::input ? "in the steps' input phases" : fmt::format("in {} phases", phase_kind_name(k));
      where_ms = kinds[k];
    }
  }
  const double where_share = extra > 0 ? std::clamp(where_ms / extra, 0.0, 1.0) : 0.0;
  std::string numbers;
  for (std::size_t i = 0; i < periodic.size() && i < 4; ++i)
    numbers += fmt::format("{}#{}", i == 0 ? "" : ", ", periodic[i]->step);
  if (periodic.size() > 4) numbers += ", ...";
  std::string advice;
  const auto workers = r.run.config.find("num_workers");
  const long num_workers = workers != r.run.config.end() ? std::atol(workers->second.c_str()) : 0;
  if (where == "in the steps' input phases" && num_workers >= 2 &&
      best_period == static_cast<std::uint64_t>(num_workers))
    advice = fmt::format(
        "The input stalls once per round of the {} loader workers (num_workers={}): each worker builds a whole "
        "batch, so their batches come ready together and the step waits once a round. The loader as a whole is "
        "slower than the step: make each batch cheaper to build, or add workers where cores are free.",
        num_workers, num_workers);
  else if (where == "in the steps' input phases")
    advice =
        "The input stalls every {} steps: a shard or file boundary, a cache refilled, or the loader's prefetch "
        "running dry behind a slow batch.";
  else if (where.rfind("in ", 0) == 0)
    advice = "Those phases do more every {} steps than in the others: look at what runs only on those steps.";
  else
    advice =
        "That is work the loop does every {} steps with no phase around it (a checkpoint, logging that reads the "
        "loss, an evaluation): put it in STEPSCOPE_PHASE scopes to see what it costs, then do it less often or "
        "off the step's thread.";
  out.push_back(
      make("periodic_slow_steps", share >= t.periodic_warning_share ? "warning" : "info",
           fmt::format(
               "One step in every {} is slow: {}{} steps ({}) took {:.2f} ms on average against a median of {:.2f} ms, "
               "{:.1f}% of the steps' time{}; {:.0f}% of their extra time is {}. ",
               best_period, all_slow_known ? "" : "at least ", periodic.size(), numbers,
               wall / static_cast<double>(periodic.size()), p50, 100 * share, all_slow_known ? "" : " at least",
               100 * where_share, where) +
               fmt::format(fmt::runtime(advice), best_period),
           {{"period_steps", static_cast<double>(best_period)},
            {"slow_steps", static_cast<double>(periodic.size())},
            {"mean_ms", wall / static_cast<double>(periodic.size())},
            {"p50_ms", p50},
            {"extra_ms", extra},
            {"share_of_steps", share},
            {"extra_where_share", where_share}}));
}

void warmup(const Report& r, std::vector<Finding>& out) {
  const double warm = r.steps.warmup_wall_ms.mean;
  const double steady = r.steps.wall_ms.mean;
  if (r.steps.warmup_excluded == 0 || warm <= 0 || steady <= 0) return;
  const double ratio = warm / steady;
  if (ratio < kThresholds.warmup_over_steady) return;
  out.push_back(make("warmup_slow", "info",
                     fmt::format("The {} warm-up step(s) averaged {:.2f} ms, {:.1f}x the steady state ({:.2f} ms); "
                                 "they are excluded from the statistics (compilation, autotuning, allocator and "
                                 "cache warm-up).",
                                 r.steps.warmup_excluded, warm, ratio, steady),
                     {{"warmup_mean_ms", warm}, {"steady_mean_ms", steady}, {"ratio", ratio}}));
}

void host_device(const Report& r, std::vector<Finding>& out) {
  const double step_ms = detail::mean_step_ms(r);
  for (const PhaseSummary& p : r.phases) {
    if (!p.device_ms || p.device_ms->count == 0 || p.host_ms.mean <= 0) continue;
    const double ratio = p.device_ms->mean / p.host_ms.mean;
    if (ratio < kThresholds.device_over_host) continue;
    // A difference that matters: in ms, and of the step.
    const double gap = p.device_ms->mean - p.host_ms.mean;
    if (gap < kThresholds.device_host_min_ms || gap < kThresholds.device_host_min_share * step_ms) continue;
    out.push_back(make("host_device_mismatch", "warning",
                       fmt::format("Phase '{}': the device took {:.2f} ms but the host clock saw {:.2f} ms ({:.1f}x). "
                                   "This is asynchronous work timed by host clocks: the host timer measures the "
                                   "launch only; the device time is the real cost.",
                                   p.name, p.device_ms->mean, p.host_ms.mean, ratio),
                       {{"host_mean_ms", p.host_ms.mean}, {"device_mean_ms", p.device_ms->mean}, {"ratio", ratio}}));
  }
}

// A device-clocked run: a phase whose host time is mostly a wait for the
// device is where the host pays for the backlog the phases before it queued
// (a loss.item(), a synchronize, a full launch queue), not what it costs.
// Named with the phase whose device time exceeds its host time the most: the
// device work really behind the wait.
void host_waits_for_device(const Report& r, std::vector<Finding>& out) {
  const detail::ClockFacts clock = detail::clock_facts(r);
  const double step_ms = r.steps.breakdown.wall_ms;
  if (!clock.device || step_ms <= 0) return;
  const PhaseSummary* behind = nullptr;
  double behind_excess = 0;
  for (const PhaseSummary& p : r.phases) {
    if (p.thread_role != ThreadRole::step || !p.device_ms) continue;
    const double excess = detail::phase_device_ms_per_step(p, r) - detail::phase_host_ms_per_step(p, r);
    if (excess > behind_excess) {
      behind = &p;
      behind_excess = excess;
    }
  }
  for (const PhaseSummary& p : r.phases) {
    if (p.thread_role != ThreadRole::step || p.kind == PhaseKind::input || !p.device_ms || &p == behind) continue;
    const double host = detail::phase_host_ms_per_step(p, r), device = detail::phase_device_ms_per_step(p, r);
    const double wait = host - device;
    if (wait < kThresholds.host_wait_phase_share * step_ms || wait < 0.5 * host) continue;
    std::string where;
    if (behind != nullptr)
      where = fmt::format(
          " The device work behind it is mostly in '{}' ({:.2f} ms per step on the device, {:.2f} ms "
          "on the host clock).",
          behind->name, detail::phase_device_ms_per_step(*behind, r), detail::phase_host_ms_per_step(*behind, r));
    out.push_back(
        make("host_waits_for_device", "info",
             fmt::format("The host waits for the GPU in '{}': {:.2f} ms per step on the host clock ({:.0f}% "
                         "of the host's step), {:.2f} ms on the device. This is where the backlog is paid "
                         "(a value read back, a synchronize, a full launch queue), not the cost of '{}': "
                         "its share of the step is its device time.{}",
                         p.name, host, 100 * detail::safe_div(host, clock.host_wall_ms), device, p.name, where),
             {{"host_ms", host},
              {"device_ms", device},
              {"wait_ms", wait},
              {"wait_share", wait / step_ms},
              {"behind_device_ms", behind != nullptr ? detail::phase_device_ms_per_step(*behind, r) : 0}}));
  }
}

// A device that ran behind the host (timeline::AttributionOptions): its work
// ran after the steps that launched it, so the step windows alone would have
// read it idle. Said where the user reads, beside the verdict it changes.
void device_behind_host(const Report& r, std::vector<Finding>& out) {
  const auto& t = r.device.facts;
  if (!t.host_window_idle_fraction || !t.device_span_busy_fraction) return;
  out.push_back(make("device_behind_host", "info",
                     fmt::format("The GPU ran behind the host: busy {:.1f}% of its own span (first to last device "
                                 "op) while the host's step windows saw it idle {:.1f}%: its work ran queued, after "
                                 "the steps that launched it. The device numbers above are over its own span; the "
                                 "host is not what the GPU waits for.",
                                 100 * *t.device_span_busy_fraction, 100 * *t.host_window_idle_fraction),
                     {{"device_span_busy_fraction", *t.device_span_busy_fraction},
                      {"host_window_idle_fraction", *t.host_window_idle_fraction}}));
}

// The step thread waited for a CPU a good part of the step, yet another
// category leads: the verdict stands, but every number beside it carries
// the machine's load (pytorch/examples' mnist at 2 loader workers beside two
// busy loops on 2 cores: "compute 43%" with 36% of the step waiting for a
// CPU, docs/trials.md). Whose threads held the CPUs decides the remedy.
void cpu_contention(const Report& r, std::vector<Finding>& out) {
  if (r.steps.count == 0 || r.bottleneck.bottleneck() == Bottleneck::scheduling) return;
  const detail::StepShares shares = detail::step_shares(r);
  if (shares.cpu_wait < kThresholds.cpu_contention_finding) return;
  const detail::CpuHolders h = detail::cpu_holders(r.system);
  const double own = h.own_cores, others = h.other_cores;
  const int cores = h.cores;
  // Loader workers are named only where the run has them: a run that says
  // num_workers 0 (stepscope.torch records it) has none to blame.
  const auto workers = r.run.config.find("num_workers");
  const bool no_workers = workers != r.run.config.end() && workers->second == "0";
  std::string whose;
  // Reports before children_cpu_s counted worker processes as other processes.
  const bool workers_apart = r.system.children_cpu_s >= 0;
  // Processes of the same program its parent started beside it
  // (pytorch/examples' mnist_hogwild: mp.Process trainers with no rank) are
  // the job's as its ranks are.
  const bool by_rank = r.run.local_ranks > 1;
  const int local_ranks = by_rank ? r.run.local_ranks : r.system.sibling_processes + 1;
  // The job's other ranks on this host hold CPUs too (mpirun -np 2 of
  // PyTorch's C++ dist-mnist on 2 cores beside two busy loops read "other
  // processes kept 1.5 of the 2 CPUs busy"): their share is the job's to fix.
  // Where they hold a quarter of the machine the wait is theirs too, before
  // the machine counts as full (PyTorch's DDP tutorial, 2 ranks on 2 cores:
  // the other rank 0.5 of them, this one 0.7, read "its own threads
  // outnumber the cores").
  const bool ranks_hold =
      local_ranks > 1 && (h.others_hold || others >= kThresholds.other_processes_filling * r.system.cores_online);
  if (ranks_hold) {
    const int online = r.system.cores_online;
    const int threads = std::max(1, std::min(cores, online / local_ranks));
    const char* unit = by_rank ? "rank" : "process";
    const char* units = by_rank ? "ranks" : "processes";
    // The other ranks' own CPU, where they are this process's siblings
    // (torchrun's agent, mpirun and mp.spawn start them all).
    const bool siblings_known = r.system.sibling_processes > 0 && r.system.siblings_cpu_s >= 0 && r.system.wall_s > 0;
    // Ranks whose intra-op threads together fit the host
    // (stepscope.torch records torch.get_num_threads()): the wait is the other
    // processes' load, not the job's (pytorch/examples' minGPT-ddp, 2 ranks
    // of 1 thread on 2 cores beside two busy loops, read "Give each rank at
    // most 1 intra-op thread" of ranks that had one each).
    const auto intra = r.run.config.find("intra_op_threads");
    const double intra_threads = intra != r.run.config.end() ? std::atof(intra->second.c_str()) : 0;
    const bool job_fits = intra_threads >= 1 && local_ranks * intra_threads <= online;
    const std::string remedy =
        job_fits ? fmt::format(
                       ": the job's {} {} of {:.0f} intra-op thread{} each fit its {} CPUs, so the wait is the other "
                       "processes' load. Measure where no other job shares the host.",
                       local_ranks, units, intra_threads, intra_threads == 1 ? "" : "s", online)
                 : fmt::format(
                       ": the job's {} {} here share them{}. Give each {} at most {} intra-op thread{} "
                       "(torch.set_num_threads, OMP_NUM_THREADS) or run fewer {} per host, and measure where no "
                       "other job shares the host.",
                       local_ranks, units,
                       cores < online ? fmt::format(" (this {} is bound to {} of them)", unit, cores) : std::string(),
                       unit, threads, threads == 1 ? "" : "s", units);
    whose = fmt::format(
        "Other processes, this job's {} other {}{} on this host among them, kept {:.1f} of the machine's {} CPUs "
        "busy{}, this process {:.1f}{}",
        local_ranks - 1, local_ranks == 2 ? unit : units,
        by_rank ? "" : " (the same program, started by the same parent)", others, online,
        siblings_known ? fmt::format(" ({} {:.1f} of them)",
                                     local_ranks == 2 ? (by_rank ? "that rank" : "that process")
                                                      : (by_rank ? "those ranks" : "those processes"),
                                     r.system.siblings_cpu_s / r.system.wall_s)
                       : std::string(),
        own, remedy);
  } else if (h.others_hold) {
    // Workers that used under a twentieth of a core are neither shown nor
    // advised against (imagenet's 4 FakeData workers beside a resnet step:
    // "its worker processes 0.0 ... fewer workers").
    const bool workers_busy = !workers_apart || h.children_cores >= 0.05;
    whose = fmt::format(
        "Other processes{} kept {:.1f} of the machine's {} CPUs busy, this process {:.1f}{}: measure again where the "
        "job has its cores to itself ({}no other jobs, taskset or the batch system's exclusive allocation).",
        no_workers || workers == r.run.config.end() || workers_apart ? ""
                                                                     : " (this run's DataLoader workers among them)",
        others, r.system.cores_online, own,
        workers_apart && workers_busy ? fmt::format(" and its worker processes {:.1f}", h.children_cores)
                                      : std::string(),
        no_workers     ? ""
        : workers_busy ? "fewer workers or intra-op threads, "
                       : "fewer intra-op threads, ");
  } else if (const detail::SharedCores shared = detail::shared_cores(r, settled_breakdown(r)); shared.active)
    whose = fmt::format(
        "This process{} used {:.1f} of its {} CPUs, its {} {:.2f} ms of CPU per batch beside the step's own "
        "{:.2f} ms: the wait is the loader's doing (the advice and the what-if for the loader say what making it "
        "cheaper buys).",
        h.children_cores > 0 ? " and its worker processes" : "", own + h.children_cores, cores, shared.loader,
        shared.loader_cpu_ms, shared.step_work_ms);
  else if (cores > 0 && own >= 0)
    whose = fmt::format(
        "This process used {:.1f} of its {} CPUs: its own threads ({}) outnumber the cores; keep threads <= cores.",
        own, cores, no_workers ? "intra-op threads" : "intra-op threads, loader threads");
  out.push_back(make("cpu_contention", "warning",
                     fmt::format("The step thread waited for a CPU {:.1f}% of the step ({:.2f} ms): {}its times "
                                 "include the machine's load. {}",
                                 100 * shares.cpu_wait, shares.cpu_wait * shares.wall_ms,
                                 r.bottleneck.category == "unknown"
                                     ? std::string()
                                     : fmt::format("the {} verdict stands, but ", r.bottleneck.category),
                                 whose),
                     {{"cpu_wait_share", shares.cpu_wait},
                      {"own_cores", own},
                      {"other_processes_cores", others},
                      {"cores", static_cast<double>(cores)}}));
}

// Python step threads taking turns on the interpreter lock (facts.hpp,
// InterpreterLock): every number beside the verdict carries the wait.
void interpreter_lock(const Report& r, std::vector<Finding>& out) {
  const detail::InterpreterLock lock = detail::interpreter_lock(r);
  if (!lock.active) return;
  if (lock.background) {
    // A pure-Python thread beside a torch step (the step 100x slower), or an
    // RPC trainer whose forward waits for the parameter server while the RPC
    // agent's threads poll (pytorch/examples' rpc/parameter_server: 6% on a
    // CPU, those threads 0.52 CPUs): both look alike here, and both are said.
    out.push_back(make(
        "interpreter_lock", "warning",
        fmt::format("The step thread was on a CPU {} ({:.2f} CPUs over the "
                    "run) while this process's threads that run no steps kept {:.2f} CPUs busy. If those threads run "
                    "Python, they hold the interpreter lock (the GIL) and the step thread waits for it at every "
                    "turn, inside whatever phase it is in: move their work to another process (multiprocessing, "
                    "DataLoader workers) or into code that releases the lock (torch and numpy operators). If the "
                    "compute phases wait for work done elsewhere (an RPC, a queue), time that wait as a phase of "
                    "kind communication.",
                    lock.compute_on_cpu.phrase(), lock.on_cpu_cores, lock.other_threads_cores),
        {{"threads", static_cast<double>(lock.threads)},
         {"on_cpu_cores", lock.on_cpu_cores},
         {"compute_cores", lock.compute_cores},
         {"other_threads_cores", lock.other_threads_cores}}));
    return;
  }
  out.push_back(make(
      "interpreter_lock", "warning",
      fmt::format("{} Python threads ran steps side by side, together on {:.2f} CPUs while their compute phases held "
                  "{:.2f} CPUs' worth of time and the machine had CPUs free: they take turns on the interpreter lock "
                  "(the GIL), and each one's wait for it lands in whatever phase it waited in, so the phase times "
                  "and the verdict carry it (its confidence is lowered to match). Run each loop in a process of its "
                  "own (torch.multiprocessing), or keep the threads' work in code that releases the lock (torch "
                  "operators do; Python loops do not).",
                  lock.threads, lock.on_cpu_cores, lock.compute_cores),
      {{"threads", static_cast<double>(lock.threads)},
       {"on_cpu_cores", lock.on_cpu_cores},
       {"compute_cores", lock.compute_cores}}));
}

// What the process paid before its measured steps (start-up, the warm-up
// steps, lazy initialisation in the first step), reported as such: it is in
// no per-step figure (system counters cover the measured steps only). Said
// when it faulted as many fresh pages as a page-fault storm's worth of steps.
void startup_cost(const Report& r, std::vector<Finding>& out) {
  const SystemSignals& s = r.system;
  if (!s.available || s.window_steps <= 0 || r.steps.count == 0) return;
  const double faults = static_cast<double>(s.before_steps_minor_faults);
  if (faults < kThresholds.minor_faults_per_step * static_cast<double>(r.steps.count)) return;
  out.push_back(
      make("startup_cost", "info",
           fmt::format("Before the measured steps (start-up and {} warm-up step{}, {:.2f} s) the process "
                       "touched {:.0f} MiB of fresh memory and spent {:.2f} s in the kernel: a one-time "
                       "cost, charged to no step (the per-step figures cover the measured steps only).",
                       r.steps.warmup_excluded, r.steps.warmup_excluded == 1 ? "" : "s", s.before_steps_wall_s,
                       faults * 4096.0 / (1024.0 * 1024.0), s.before_steps_cpu_system_s),
           {{"before_steps_minor_faults", faults},
            {"before_steps_wall_s", s.before_steps_wall_s},
            {"before_steps_cpu_system_s", s.before_steps_cpu_system_s}}));
}

void dropped(const Report& r, std::vector<Finding>& out) {
  if (r.dropped_records == 0) return;
  const double produced = static_cast<double>(std::max(r.total_records, r.dropped_records));
  const double fraction = safe_div(static_cast<double>(r.dropped_records), produced);
  out.push_back(
      make("dropped_records", fraction >= kThresholds.dropped_critical_fraction ? "critical" : "warning",
           fmt::format("{} of {} records ({:.2f}%) were dropped because a thread's ring was full; "
                       "statistics cover the rest. Enlarge the ring or drain more often.",
                       r.dropped_records, static_cast<std::uint64_t>(produced), 100 * fraction),
           {{"dropped", static_cast<double>(r.dropped_records)}, {"produced", produced}, {"fraction", fraction}}));
}

void unattributed(const Report& r, std::vector<Finding>& out) {
  if (r.steps.count == 0) return;
  const detail::StepShares s = detail::step_shares(r);
  if (s.wall_ms <= 0 || s.unattributed < kThresholds.unattributed_finding) return;
  // A PyTorch step timed by stepscope.torch.instrument(): the models it was
  // not given run outside its phases (pytorch/examples' fast_neural_style:
  // its VGG loss network, 43% of the step).
  const bool instrumented =
      detail::python_run(r) && std::any_of(r.phases.begin(), r.phases.end(), [](const PhaseSummary& p) {
        return p.thread_role == ThreadRole::step && (p.name == "forward" || p.name == "forward_no_grad");
      });
  out.push_back(make("unattributed_time", "warning",
                     fmt::format("{:.0f}% of the step ({:.2f} ms) is in no phase: framework overhead, "
                                 "synchronisation or uninstrumented work{}. Wrap it in STEPSCOPE_PHASE scopes.",
                                 100 * s.unattributed, s.unattributed * s.wall_ms,
                                 instrumented ? " (a model the step calls that stepscope.torch.instrument() was not "
                                                "given, such as a loss network, a teacher or a target network, runs "
                                                "there: instrument it too, with name= for phases of its own)"
                                              : ""),
                     {{"share", s.unattributed}, {"ms_per_step", s.unattributed * s.wall_ms}}));
}

// Steps that leave part of the loop out: the usual cause is a range-for whose
// fetch (in the loop header) runs between the bodies that STEPSCOPE_STEP() times.
void steps_coverage(const Report& r, std::vector<Finding>& out) {
  if (!r.steps.coverage || *r.steps.coverage >= kThresholds.steps_coverage_min) return;
  const double coverage = *r.steps.coverage;
  const double between_ms = r.steps.between_steps_ms;
  const double input_ms = r.steps.between_steps_input_ms;
  const double per_step = r.steps.breakdown.between_steps_ms + r.steps.breakdown.between_steps_input_ms;
  const std::string cause =
      r.steps.outer_excluded > 0
          ? fmt::format(
                "{} step{} held steps of {} own (a steps() loop whose body opens STEPSCOPE_STEP(), or a "
                "steps() loop inside another): steps do not nest on a thread, so the inner ones are the steps "
                "and what the outer ones did around them fell between steps. Mark each step once: drop the "
                "inner STEPSCOPE_STEP() (the steps() loop marks the step and times its fetch), or iterate an "
                "outer loop of epochs without steps().",
                r.steps.outer_excluded, r.steps.outer_excluded == 1 ? "" : "s",
                r.steps.outer_excluded == 1 ? "its" : "their")
          : "the fetch in the loop header (a range-for's `for (auto& batch : *loader)`) runs between the bodies "
            "that STEPSCOPE_STEP() times. Iterate `stepscope::steps(*loader)` instead (each fetch becomes its step's "
            "data phase), or call `stepscope::next_step()` at the top of the body in place of STEPSCOPE_STEP().";
  out.push_back(
      make("steps_coverage", coverage < kThresholds.steps_coverage_critical ? "critical" : "warning",
           fmt::format("Steps cover only {:.0f}% of the step thread's time from its first step to its last: {:.1f} ms "
                       "fell between steps ({:.2f} ms per step, {:.1f} ms of it in input phases), and the "
                       "per-step numbers leave it out. The likely cause: {}",
                       100 * coverage, between_ms, per_step, input_ms, cause),
           {{"coverage", coverage},
            {"threshold", kThresholds.steps_coverage_min},
            {"between_steps_ms", between_ms},
            {"between_steps_input_ms", input_ms},
            {"between_ms_per_step", per_step}}));
}

void few_steps(const Report& r, std::vector<Finding>& out) {
  const bool timeline = detail::device_facts(r).present;
  const std::uint64_t needed = timeline ? kThresholds.min_steps_with_device_timeline : kThresholds.min_measured_steps;
  if (r.steps.count >= needed) return;
  // No step at all with phases timed (a DataLoader worker's report): more
  // steps would not come; the verdict says what to do instead.
  if (r.steps.count == 0 && r.steps.warmup_excluded == 0 && !r.phases.empty()) return;
  out.push_back(make("few_steps", "warning",
                     fmt::format("Only {} measured step(s); at least {} are needed for reliable "
                                 "statistics and a verdict.",
                                 r.steps.count, needed),
                     {{"steps", static_cast<double>(r.steps.count)}, {"needed", static_cast<double>(needed)}}));
}

}  // namespace

std::vector<Finding> find_issues(const Report& facts) {
  std::vector<Finding> out;
  few_steps(facts, out);
  steps_coverage(facts, out);
  dropped(facts, out);
  memory_growth(facts, out);
  page_faults(facts, out);
  jitter_and_outliers(facts, out);
  loop_restart(facts, out);
  evaluation_in_step(facts, out);
  periodic_slow_steps(facts, out);
  warmup(facts, out);
  host_device(facts, out);
  host_waits_for_device(facts, out);
  device_behind_host(facts, out);
  cpu_contention(facts, out);
  interpreter_lock(facts, out);
  startup_cost(facts, out);
  unattributed(facts, out);
  return out;
}

}  // namespace v1
}  // namespace stepscope
