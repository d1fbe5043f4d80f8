// src/analysis/compare.cpp — comparing two runs ("change one variable at a
// time"): per-step and per-phase deltas of the means with their noise, the
// machine conditions of both runs, the verdict before and after, and which
// configuration keys changed.
//
// Step noise comes from batch means over each run's step series: steps are
// autocorrelated (drift, caches, a neighbour's load comes and goes), so the
// standard error sd/sqrt(n) of one run's steps understates how much its mean
// moves. With the series cut into B batches, the mean's standard error is
// sd(batch means)/sqrt(B). Phase noise (no per-phase series) is the combined
// standard error sqrt(sd_base²/n_base + sd_new²/n_new). A delta is
// significant when it is larger than 3 × noise and than 5% of the base mean (between-run drift: thresholds.hpp),
// and, for the step, than either run's own drift between its two halves.
//
// Two runs on differently loaded machines do not compare the code: when the
// runqueue wait, other processes' CPU, preemptions or load differ beyond
// their thresholds (kThresholds.conditions_*), the comparison says so first.
#include "analysis/facts.hpp"
#include "analysis/thresholds.hpp"
#include "text/printable.hpp"

#include <stepscope/analysis.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace stepscope {
inline namespace v1 {
namespace {

using detail::kThresholds;
using detail::safe_div;

double standard_error(const Distribution& d) {
  return d.count > 0 ? d.stddev / std::sqrt(static_cast<double>(d.count)) : 0.0;
}

// Standard error of a run's mean step time from batch means over its series;
// <0 when the series is too short for batches.
double batch_means_error(const StepSeries& s) {
  const std::size_t n = s.wall_ms.size();
  const std::size_t min_batches = static_cast<std::size_t>(kThresholds.batch_means_min_batches);
  if (n < 2 * min_batches) return -1;
  const std::size_t batches = std::max(min_batches, static_cast<std::size_t>(std::sqrt(static_cast<double>(n))));
  const std::size_t size = n / batches;  // points per batch; the remainder is left out
  std::vector<double> means(batches, 0.0);
  for (std::size_t b = 0; b < batches; ++b) {
    for (std::size_t i = 0; i < size; ++i) means[b] += s.wall_ms[b * size + i];
    means[b] /= static_cast<double>(size);
  }
  double mean = 0;
  for (double m : means) mean += m;
  mean /= static_cast<double>(batches);
  double sq = 0;
  for (double m : means) sq += (m - mean) * (m - mean);
  const double sd = std::sqrt(sq / static_cast<double>(batches - 1));
  return sd / std::sqrt(static_cast<double>(batches));
}

// A run's own drift: how far the means of its first and second halves lie
// apart, relative to its mean. Two halves of one run are two back-to-back runs
// of the same code on the same machine; when they differ by 4%, two separate
// runs can too, whatever the standard error says. 0 when the series is short.
double half_drift(const StepSeries& s) {
  const std::size_t n = s.wall_ms.size();
  if (n < 2 * static_cast<std::size_t>(kThresholds.batch_means_min_batches)) return 0;
  double first = 0, second = 0;
  for (std::size_t i = 0; i < n / 2; ++i) first += s.wall_ms[i];
  for (std::size_t i = n / 2; i < n; ++i) second += s.wall_ms[i];
  first /= static_cast<double>(n / 2);
  second /= static_cast<double>(n - n / 2);
  const double mean = 0.5 * (first + second);
  return mean > 0 ? std::fabs(first - second) / mean : 0;
}

void finish_delta(Delta& d) {
  d.noise_factor = kThresholds.noise_sigmas;
  d.delta_ms = d.new_ms - d.base_ms;
  d.delta_pct = d.base_ms != 0 ? 100.0 * d.delta_ms / d.base_ms : 0.0;
}

bool significant(const Delta& d) {
  return std::fabs(d.delta_ms) > d.noise_factor * d.noise_ms &&
         std::fabs(d.delta_ms) > std::max(kThresholds.min_relative_change, d.drift) * std::fabs(d.base_ms);
}

// A phase's change too small to move the step (phase_change_min_step_share
// of the base step's mean) is within noise, whatever its relative size. Its
// occurrences per step multiply it: a policy called 177 times an episode
// (pytorch/examples' reinforce) 0.036 ms slower a call is 6.4 ms a step.
void end_to_end_floor(Delta& d, double base_step_ms, double per_step) {
  if (d.significant && base_step_ms > 0 &&
      std::fabs(d.delta_ms) * std::max(1.0, per_step) < kThresholds.phase_change_min_step_share * base_step_ms)
    d.significant = false;
}

// A step phase's occurrences per measured step in `r` (1 for other roles).
double per_step(const Report& r, const PhaseSummary& p) {
  if (p.thread_role != ThreadRole::step || r.steps.count == 0) return 1;
  return static_cast<double>(p.count) / static_cast<double>(r.steps.count);
}

// A step phase's calls per step in each run where they differ by more than
// phase_calls_change (its rows then compare time per step); {0, 0} otherwise.
std::pair<double, double> changed_calls(const Report& base, const PhaseSummary& a, const Report& cand,
                                        const PhaseSummary& b) {
  if (a.thread_role != ThreadRole::step || b.thread_role != ThreadRole::step) return {0, 0};
  const double ca = per_step(base, a), cb = per_step(cand, b);
  if (ca <= 0 || cb <= 0 || std::fabs(cb / ca - 1.0) <= kThresholds.phase_calls_change) return {0, 0};
  return {ca, cb};
}

// `calls`: changed_calls of the pair (the means become time per step).
Delta phase_delta(const PhaseSummary& a, const PhaseSummary& b, std::pair<double, double> calls) {
  Delta d;
  d.name = a.name;
  // On the report's clock: a device-clocked phase's device time.
  const Distribution &ta = detail::clocked_ms(a), &tb = detail::clocked_ms(b);
  const double ka = calls.first > 0 ? calls.first : 1, kb = calls.second > 0 ? calls.second : 1;
  d.base_calls = calls.first;
  d.new_calls = calls.second;
  d.base_ms = ta.mean * ka;
  d.new_ms = tb.mean * kb;
  finish_delta(d);
  d.noise_ms = std::hypot(standard_error(ta) * ka, standard_error(tb) * kb);
  d.significant = ta.count > 0 && tb.count > 0 && significant(d);
  d.base_role = to_string(a.thread_role);
  d.new_role = to_string(b.thread_role);
  return d;
}

// The loop's time per step: the step scopes' mean and the mean time before
// each step outside every step (StepBreakdown; equal to breakdown.wall_ms in a
// live run's report): the one step time the summary, breakdown and what-ifs use.
double loop_step_ms(const Report& r) {
  const StepBreakdown& b = r.steps.breakdown;
  return r.steps.wall_ms.mean + std::max(0.0, b.between_steps_ms + b.between_steps_input_ms);
}

Delta step_delta(const Report& a, const Report& b) {
  Delta d;
  d.name = "step";
  // The loop's time per step (the step and the time before it outside every
  // step), the one step time the summary, breakdown and what-ifs use: the
  // series it is noise-checked on holds the same.
  d.base_ms = loop_step_ms(a);
  d.new_ms = loop_step_ms(b);
  finish_delta(d);
  const double ea = batch_means_error(a.steps.series), eb = batch_means_error(b.steps.series);
  if (ea >= 0 && eb >= 0) {
    // Never below the plain standard error: batches cannot make a run quieter than its steps.
    d.noise_ms =
        std::max(std::hypot(ea, eb), std::hypot(standard_error(a.steps.wall_ms), standard_error(b.steps.wall_ms)));
    d.noise_method = "batch_means";
    d.drift = std::max(half_drift(a.steps.series), half_drift(b.steps.series));
  } else {
    d.noise_ms = std::hypot(standard_error(a.steps.wall_ms), standard_error(b.steps.wall_ms));
  }
  d.significant = a.steps.wall_ms.count > 0 && b.steps.wall_ms.count > 0 && significant(d);
  d.base_role = d.new_role = "step";
  return d;
}

// The stored verdict, or a fresh one when the report was never analysed.
std::string verdict_of(const Report& r) {
  if (!r.bottleneck.summary.empty() || r.bottleneck.bottleneck()) return r.bottleneck.category;
  return classify(r).category;
}

// Signals of the machine around one run; <0 where not measured.
struct Load {
  double runqueue = -1, other_cores = -1, involuntary = -1, load_per_core = -1;
  double busy_share = -1;  // of the online CPUs, busy with this process or others
};

Load load_of(const Report& r) {
  Load l;
  const SystemSignals& s = r.system;
  if (!s.available || s.wall_s <= 0) return l;
  l.runqueue = detail::clamp01(s.runqueue_wait_s / s.wall_s);
  if (s.other_processes_cpu_s >= 0) l.other_cores = s.other_processes_cpu_s / s.wall_s;
  if (l.other_cores >= 0 && s.cores_online > 0)
    l.busy_share =
        (l.other_cores + (s.cpu_user_s + s.cpu_system_s + std::max(0.0, s.children_cpu_s)) / s.wall_s) / s.cores_online;
  l.involuntary = static_cast<double>(s.involuntary_switches) / s.wall_s;
  const int cores = s.cores_online > 0 ? s.cores_online : s.cores_available;
  if (s.load_average_start >= 0 && s.load_average_end >= 0 && cores > 0)
    l.load_per_core = 0.5 * (s.load_average_start + s.load_average_end) / cores;
  return l;
}

// Reasons a run's own threads can cause (its runqueue wait, preemptions, its
// share of the load average), as opposed to other processes' load.
constexpr const char* kOwnReasonPrefixes[] = {"the step threads waited", "involuntary context", "load average"};
bool own_reason(const std::string& reason) {
  for (const char* prefix : kOwnReasonPrefixes)
    if (reason.rfind(prefix, 0) == 0) return true;
  return false;
}

// Other processes used about as much CPU during both runs (measured in both).
bool others_unchanged(const RunConditions& c) {
  return c.base_other_cpu_cores >= 0 && c.new_other_cpu_cores >= 0 &&
         std::fabs(c.base_other_cpu_cores - c.new_other_cpu_cores) < kThresholds.conditions_other_cpu_cores;
}

RunConditions conditions_of(const Report& base, const Report& cand) {
  const auto& t = kThresholds;
  RunConditions c;
  const Load a = load_of(base), b = load_of(cand);
  c.base_runqueue_fraction = a.runqueue;
  c.new_runqueue_fraction = b.runqueue;
  c.base_other_cpu_cores = a.other_cores;
  c.new_other_cpu_cores = b.other_cores;
  c.base_involuntary_per_s = a.involuntary;
  c.new_involuntary_per_s = b.involuntary;
  c.base_load_per_core = a.load_per_core;
  c.new_load_per_core = b.load_per_core;
  if (a.runqueue >= 0 && b.runqueue >= 0 && std::fabs(a.runqueue - b.runqueue) >= t.conditions_runqueue_difference) {
    c.reasons.push_back(fmt::format("the step threads waited for a CPU {:.0f}% of the run in base vs {:.0f}% in new",
                                    100 * a.runqueue, 100 * b.runqueue));
  }
  // DataLoader workers are processes of their own, so "other processes" holds
  // them: a num_workers 0 -> 2 diff read as the machine's load alone (trials
  // 2026-12-04, docs/trials.md).
  const auto workers = [](const Report& r) {
    const auto it = r.run.config.find("num_workers");
    return it == r.run.config.end() ? std::string("0") : it->second;
  };
  const std::string wa = workers(base), wb = workers(cand);
  // Reports with children_cpu_s keep the workers out of other processes.
  const bool workers_apart = base.system.children_cpu_s >= 0 && cand.system.children_cpu_s >= 0;
  const std::string among =
      workers_apart ? std::string()
      : wa != wb
          ? fmt::format(", this run's DataLoader workers among them: num_workers {} -> {} moved part of it", wa, wb)
      : wa != "0" ? std::string(", this run's DataLoader workers among them")
                  : std::string();
  if (a.other_cores >= 0 && b.other_cores >= 0 &&
      std::fabs(a.other_cores - b.other_cores) >= t.conditions_other_cpu_cores) {
    c.reasons.push_back(fmt::format("other processes used {:.1f} cores during base vs {:.1f} during new{}",
                                    a.other_cores, b.other_cores, among.empty() ? "" : " (" + among.substr(2) + ")"));
  }
  const auto crowded = [&t](const Load& l) {
    return l.other_cores >= t.conditions_other_cpu_cores && l.busy_share >= t.conditions_busy_machine;
  };
  if (crowded(a) || crowded(b)) {
    const auto pct = [](double share) { return share < 0 ? std::string("?") : fmt::format("{:.0f}%", 100 * share); };
    c.shared = true;
    c.shared_reason = fmt::format(
        "the machine was busy: {} of its CPUs during base, {} during new (other processes {:.1f} and {:.1f} cores{}); "
        "neighbours on the same cores slow a step without making it wait for a CPU",
        pct(a.busy_share), pct(b.busy_share), std::max(0.0, a.other_cores), std::max(0.0, b.other_cores), among);
  }
  if (a.involuntary >= 0 && b.involuntary >= 0) {
    const double hi = std::max(a.involuntary, b.involuntary), lo = std::min(a.involuntary, b.involuntary);
    if (hi >= t.involuntary_switches_per_second && hi >= t.conditions_involuntary_ratio * std::max(lo, 1.0)) {
      c.reasons.push_back(fmt::format("involuntary context switches: {:.0f}/s in base vs {:.0f}/s in new",
                                      a.involuntary, b.involuntary));
    }
  }
  if (a.load_per_core >= 0 && b.load_per_core >= 0 &&
      std::fabs(a.load_per_core - b.load_per_core) >= t.conditions_load_per_core) {
    c.reasons.push_back(
        fmt::format("load average per core: {:.2f} in base vs {:.2f} in new", a.load_per_core, b.load_per_core));
  }
  if (base.system.cores_available > 0 && cand.system.cores_available > 0 &&
      base.system.cores_available != cand.system.cores_available)
    c.reasons.push_back(fmt::format("cores available: {} in base vs {} in new", base.system.cores_available,
                                    cand.system.cores_available));
  if (!base.run.host.empty() && !cand.run.host.empty() && base.run.host != cand.run.host)
    c.reasons.push_back(fmt::format("different hosts: {} vs {}", base.run.host, cand.run.host));
  c.differ = !c.reasons.empty();
  return c;
}

// The phase of `candidate` that corresponds to `a`: same name and thread
// role, else same name in another role.
const PhaseSummary* match(const PhaseSummary& a, const Report& candidate) {
  const PhaseSummary* any = nullptr;
  for (const PhaseSummary& p : candidate.phases) {
    if (p.name != a.name) continue;
    if (p.thread_role == a.thread_role) return &p;
    if (any == nullptr) any = &p;
  }
  return any;
}

// ---- repeated runs ----------------------------------------------------------

// Two-sided 99% Student t critical value for `df` degrees of freedom
// (tabulated to 30, then towards the normal 2.576).
double t99(double df) {
  static constexpr double kTable[] = {63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169,
                                      3.106,  3.055, 3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845,
                                      2.831,  2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750};
  if (!(df >= 1)) return kTable[0];
  if (df >= 30) return 2.576 + (kTable[29] - 2.576) * 30.0 / df;
  const auto lo = static_cast<std::size_t>(df);
  const double frac = df - static_cast<double>(lo);
  return lo >= 30 ? kTable[29] : kTable[lo - 1] + frac * (kTable[std::min<std::size_t>(lo, 29)] - kTable[lo - 1]);
}

struct RunSample {
  double mean = 0, var = 0;  // of the per-run values (sample variance)
  std::size_t n = 0;
};

RunSample sample_of(const std::vector<double>& v) {
  RunSample s;
  s.n = v.size();
  if (s.n == 0) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(s.n);
  if (s.n >= 2) {
    for (double x : v) s.var += (x - s.mean) * (x - s.mean);
    s.var /= static_cast<double>(s.n - 1);
  }
  return s;
}

// Delta between the means of per-run values; noise from their spread. With
// one run on a side, the other side's spread stands for both (same machine,
// same binary). `within` is the runs' own noise, a lower bound.
void between_runs_delta(Delta& d, const std::vector<double>& a, const std::vector<double>& b, double within) {
  const RunSample sa = sample_of(a), sb = sample_of(b);
  d.base_ms = sa.mean;
  d.new_ms = sb.mean;
  finish_delta(d);
  d.significant = false;
  if (sa.n == 0 || sb.n == 0) return;
  double se = 0, df = 1;
  if (sa.n >= 2 && sb.n >= 2) {
    const double va = sa.var / static_cast<double>(sa.n), vb = sb.var / static_cast<double>(sb.n);
    se = std::sqrt(va + vb);
    const double denom = va * va / static_cast<double>(sa.n - 1) + vb * vb / static_cast<double>(sb.n - 1);
    df = denom > 0 ? (va + vb) * (va + vb) / denom : static_cast<double>(sa.n + sb.n - 2);
  } else if (sa.n >= 2 || sb.n >= 2) {
    const RunSample& m = sa.n >= 2 ? sa : sb;
    se = std::sqrt(m.var * (1.0 / static_cast<double>(sa.n) + 1.0 / static_cast<double>(sb.n)));
    df = static_cast<double>(m.n - 1);
  }
  d.noise_ms = std::max(se, within);
  d.noise_method = "between_runs";
  d.noise_factor = t99(df);
  d.significant = std::fabs(d.delta_ms) > d.noise_factor * d.noise_ms &&
                  std::fabs(d.delta_ms) > kThresholds.min_relative_change_repeated * std::fabs(d.base_ms);
}

// The runs' own noise of their mean step (batch means when the series
// allows), averaged over the runs and scaled to the mean of n runs.
double within_step_noise(const std::vector<Report>& runs) {
  double sum = 0;
  for (const Report& r : runs) {
    const double e = batch_means_error(r.steps.series);
    sum += std::max(e, standard_error(r.steps.wall_ms));
  }
  const double n = static_cast<double>(runs.size());
  return sum / n / std::sqrt(n);
}

// A run that did not end by itself (a snapshot, a signal, an uncaught
// exception) covers only part of what it set out to do: its steps may stop
// before the phase mix settles, and a crash is no baseline. Said, not refused.
void note_cut_short(const Report& r, const std::string& which, std::vector<std::string>& warnings) {
  std::string how;
  if (!r.complete)
    how = "is a snapshot of a run still going (killed or crashed?)";
  else if (r.exception)
    how = "ended by an uncaught exception (" + r.exception->type + ")";
  else if (r.ended_by == "terminate")
    how = "ended by std::terminate";
  else if (r.ended_by.rfind("SIG", 0) == 0)
    how = "ended by " + r.ended_by;
  else if (r.interrupted)
    how = "was interrupted by " + r.interrupted->signal;
  if (!how.empty()) warnings.push_back(fmt::format("the {} {}: its numbers cover the run only up to then", which, how));
}

// Differences between runs of one side (config, verdict) that make the side
// not one experiment.
void check_side(const std::vector<Report>& runs, const char* side, std::vector<std::string>& warnings) {
  for (std::size_t i = 1; i < runs.size(); ++i) {
    note_cut_short(runs[i], fmt::format("{} run {}", side, i + 1), warnings);
    if (runs[i].run.config != runs[0].run.config)
      warnings.push_back(
          fmt::format("{} run {} has another config than {} run 1: repeats must be the same "
                      "experiment",
                      side, i + 1, side));
    if (verdict_of(runs[i]) != verdict_of(runs[0]))
      warnings.push_back(fmt::format("{} runs disagree on the bottleneck ({} in run 1, {} in run {})", side,
                                     verdict_of(runs[0]), verdict_of(runs[i]), i + 1));
  }
}

const PhaseSummary* step_phase(const Report& r, const std::string& name) {
  for (const PhaseSummary& p : r.phases)
    if (p.name == name && p.thread_role == ThreadRole::step) return &p;
  return nullptr;
}

// Self time per measured step (nested phases are not counted twice).
double self_per_step(const PhaseSummary& p, const Report& r) {
  return safe_div(p.self_ms.total, static_cast<double>(r.steps.count));
}

// What explains a significant step change, before the machine is blamed
// (c.explained_by): the config keys that changed (the experiment), and the
// step's phases that moved by at least half of the change. On differently
// loaded machines a phase explains the change only when the change is its
// own: it moved at least twice as much (relatively) as the rest of the step;
// a busier machine slows every part alike. With the change explained and
// other processes' load the same in both runs, the preemptions and run-queue
// wait that differ come from the runs' own threads (4 loader workers add
// context switches): a consequence of the change, not the machine's.
void explain_step(Comparison& c, const Report& base, const Report& cand) {
  c.explained_by.clear();
  if (!c.step.significant) return;
  for (const std::string& change : c.config_changes) c.explained_by.push_back("config " + change);
  struct Moved {
    std::string name;
    double base, delta;  // ms per step
  };
  std::vector<Moved> moved;
  for (const Delta& d : c.phases) {
    if (!d.significant || d.base_role != "step" || d.new_role != "step") continue;
    const PhaseSummary *a = step_phase(base, d.name), *b = step_phase(cand, d.name);
    if (a == nullptr || b == nullptr) continue;
    const double pa = self_per_step(*a, base), delta = self_per_step(*b, cand) - pa;
    if (delta * c.step.delta_ms > 0) moved.push_back({d.name, pa, delta});
  }
  std::sort(moved.begin(), moved.end(),
            [](const Moved& x, const Moved& y) { return std::fabs(x.delta) > std::fabs(y.delta); });
  double base_sum = 0, delta_sum = 0;
  std::size_t used = 0;
  while (used < moved.size() && std::fabs(delta_sum) < 0.5 * std::fabs(c.step.delta_ms)) {
    base_sum += moved[used].base;
    delta_sum += moved[used].delta;
    ++used;
  }
  // Phases' host time holds the step thread's CPU wait: what the wait added
  // or took between the runs (a busier machine) is no phase's own change.
  const auto wait_ms = [](const Report& r) {
    const SystemSignals& sys = r.system;
    return sys.available && sys.wall_s > 0 ? detail::clamp01(sys.runqueue_wait_s / sys.wall_s) * loop_step_ms(r) : 0.0;
  };
  const double wait_delta = wait_ms(cand) - wait_ms(base);
  const double own_delta = wait_delta * delta_sum > 0
                               ? (std::fabs(delta_sum) > std::fabs(wait_delta) ? delta_sum - wait_delta : 0.0)
                               : delta_sum;
  if (used > 0 && std::fabs(own_delta) >= 0.5 * std::fabs(c.step.delta_ms)) {
    const double rest_base = c.step.base_ms - base_sum, rest_delta = c.step.delta_ms - delta_sum;
    const double own = std::fabs(safe_div(delta_sum, base_sum)), rest = std::fabs(safe_div(rest_delta, rest_base));
    const bool machine_moved = c.conditions.differ || c.conditions.shared;
    if (!machine_moved || base_sum <= 0 || own >= 2.0 * rest)
      for (std::size_t i = 0; i < used; ++i)
        c.explained_by.push_back(fmt::format("phase '{}': {:+.2f} ms per step ({:+.1f}%) of the {:+.2f} ms step change",
                                             moved[i].name, moved[i].delta,
                                             100.0 * safe_div(moved[i].delta, moved[i].base), c.step.delta_ms));
  }
  // The wait for CPUs the job's own loader held (the verdict's
  // loader_cpu_wait_share) is input's cost, not the machine's: a cheaper
  // loader takes it away with the other processes' load unchanged (a loader
  // cut from 2 ms of CPU a sample to none read "the machine's noise",
  // docs/trials.md).
  const auto loader_wait_ms = [](const Report& r) {
    for (const Evidence& e : r.bottleneck.evidence)
      if (e.signal == "loader_cpu_wait_share") return e.value * loop_step_ms(r);
    return 0.0;
  };
  const double loader_delta = loader_wait_ms(cand) - loader_wait_ms(base);
  if (loader_delta * c.step.delta_ms > 0 && std::fabs(loader_delta) >= 0.25 * std::fabs(c.step.delta_ms) &&
      !c.conditions.shared && (!c.conditions.differ || others_unchanged(c.conditions)))
    c.explained_by.push_back(fmt::format(
        "the wait for CPUs the job's own loader held: {:.2f} -> {:.2f} ms per step ({:+.2f} ms of the {:+.2f} ms "
        "step change)",
        loader_wait_ms(base), loader_wait_ms(cand), loader_delta, c.step.delta_ms));
  if (c.explained_by.empty() || !c.conditions.differ || c.conditions.shared || !others_unchanged(c.conditions)) return;
  std::vector<std::string> machine;
  for (const std::string& reason : c.conditions.reasons) {
    if (own_reason(reason))
      c.explained_by.push_back("(its consequence, with other processes' load unchanged) " + reason);
    else
      machine.push_back(reason);
  }
  c.conditions.reasons = std::move(machine);
  c.conditions.differ = !c.conditions.reasons.empty();
}

// machine_noise() called the step change the machine's.
bool said_machine_noise(const Comparison& c) {
  return std::any_of(c.warnings.begin(), c.warnings.end(),
                     [](const std::string& w) { return w.rfind("the step moved", 0) == 0; });
}

// Two runs of one config on a busy or differently loaded machine whose step
// moved with nothing of its own to show for it (no phase moved more than the
// rest of the step): the machine's noise, not a change.
// With repeats on both sides the spread between them measured a busy
// machine's noise already: then only conditions that differ count.
void machine_noise(Comparison& c) {
  if (!c.step.significant || !c.explained_by.empty() || !c.config_changes.empty()) return;
  const bool repeated = c.base_runs > 1 && c.new_runs > 1;
  if (!c.conditions.differ && (!c.conditions.shared || repeated)) return;
  c.step.significant = false;
  // Its phases moved with it, by the same machine: no phase's change either.
  for (Delta& d : c.phases) d.significant = false;
  c.warnings.push_back(fmt::format(
      "the step moved {:+.1f}% between runs of the same config on {} machine, and no phase moved more than the "
      "rest of the step (a busier machine slows every part alike): counted as the machine's noise, not a change "
      "(the phases' deltas too); repeat both runs on a quiet machine to tell",
      c.step.delta_pct, c.conditions.differ ? "a differently loaded" : "a busy"));
}

// Steps that cover different shares of the loop measure different things:
// the step time compared is the loop's time per step in both runs, and what
// fell outside the steps is in neither run's phases.
void note_coverage(const Report& base, const Report& cand, std::vector<std::string>& warnings) {
  const double a = base.steps.coverage.value_or(1.0), b = cand.steps.coverage.value_or(1.0);
  const double floor = kThresholds.steps_coverage_min;
  if ((a >= floor && b >= floor) || std::fabs(a - b) < 1.0 - floor) return;
  warnings.push_back(fmt::format(
      "steps cover {:.0f}% of the loop in base vs {:.0f}% in new: the step time compared is the loop's time per step "
      "(steps plus the time between them: {:.3f} vs {:.3f} ms; the step scopes alone {:.3f} vs {:.3f} ms), and "
      "what fell between steps is in neither run's phases",
      100 * a, 100 * b, loop_step_ms(base), loop_step_ms(cand), base.steps.wall_ms.mean, cand.steps.wall_ms.mean));
}

// Warnings that depend on the step's significance (recomputed by compare_runs).
void add_step_warnings(Comparison& c) {
  if (c.conditions.shared && c.step.significant)
    c.warnings.push_back(c.conditions.shared_reason + ": the step time difference may be theirs; repeat both runs " +
                         (c.base_runs > 1 && c.new_runs > 1
                              ? "on a quiet machine"
                              : "on a quiet machine (or several of each: stepscope diff BASE... --vs NEW...)"));
  if (c.config_changes.empty() && c.step.significant && c.explained_by.empty())
    c.warnings.push_back(c.conditions.differ
                             ? "no config key changed and the machine conditions differ: the step time "
                               "difference is likely the machine's, not the code's"
                             : "no config key changed but the step time did: record what changed with set_config()");
  const bool machine_noise_said = said_machine_noise(c);
  if (c.base_runs == 1 && c.new_runs == 1 && !c.step.significant && !machine_noise_said &&
      std::fabs(c.step.delta_pct) > 100.0 * kThresholds.min_relative_change_repeated &&
      std::fabs(c.step.delta_ms) > kThresholds.noise_sigmas * c.step.noise_ms)
    c.warnings.push_back(fmt::format(
        "one run each: a {:+.1f}% step change is above the runs' own noise but below what separate runs of the "
        "same binary differ by ({:.0f}%); repeat each run (stepscope diff BASE... --vs NEW...) to tell",
        c.step.delta_pct, 100.0 * std::max(kThresholds.min_relative_change, c.step.drift)));
}

}  // namespace

const char* delta_verdict(const Delta& d) noexcept {
  if (!d.significant) return "within_noise";
  return d.delta_ms < 0 ? "faster" : "slower";
}

Comparison compare_reports(const Report& base, const Report& candidate) {
  Comparison c;
  c.step = step_delta(base, candidate);
  c.conditions = conditions_of(base, candidate);

  std::set<std::pair<std::string, int>> matched;  // candidate phases used (name, role)
  for (const PhaseSummary& a : base.phases) {
    const PhaseSummary* b = match(a, candidate);
    if (b == nullptr) {
      c.only_in_base.push_back(a.name);
      continue;
    }
    matched.insert({b->name, static_cast<int>(b->thread_role)});
    const std::pair<double, double> calls = changed_calls(base, a, candidate, *b);
    c.phases.push_back(phase_delta(a, *b, calls));
    end_to_end_floor(c.phases.back(), loop_step_ms(base), calls.first > 0 ? 1.0 : per_step(base, a));
    // On the step thread outside every step (a test loop, the fetch that found
    // the loop's end): no step waited for it, and a few samples of it are no
    // mean to call faster or slower.
    if (a.thread_role == ThreadRole::outside_step &&
        std::min(a.host_ms.count, b->host_ms.count) < kThresholds.min_measured_steps)
      c.phases.back().significant = false;
    if (a.thread_role != b->thread_role)
      c.warnings.push_back(fmt::format(
          "phase '{}' is compared across thread roles ({} in base, {} in new): on the step thread its time is "
          "time the step waited, on a background thread work beside the step",
          a.name, to_string(a.thread_role), to_string(b->thread_role)));
  }
  for (const PhaseSummary& p : candidate.phases) {
    if (matched.count({p.name, static_cast<int>(p.thread_role)}) > 0) continue;
    bool in_base = false;
    for (const PhaseSummary& a : base.phases) in_base |= a.name == p.name;
    if (!in_base) c.only_in_new.push_back(p.name);
  }

  c.base_verdict = verdict_of(base);
  c.new_verdict = verdict_of(candidate);
  c.verdict_changed = c.base_verdict != c.new_verdict;

  std::set<std::string> keys;
  for (const auto& kv : base.run.config) keys.insert(kv.first);
  for (const auto& kv : candidate.run.config) keys.insert(kv.first);
  for (const std::string& key : keys) {
    auto a = base.run.config.find(key);
    auto b = candidate.run.config.find(key);
    const std::string va = a == base.run.config.end() ? "(unset)" : a->second;
    const std::string vb = b == candidate.run.config.end() ? "(unset)" : b->second;
    if (va != vb) c.config_changes.push_back(fmt::format("{}: {} -> {}", key, va, vb));
  }
  if (c.config_changes.size() > 1)
    c.warnings.push_back(
        fmt::format("more than one config key changed ({}): the difference cannot be attributed to any one of "
                    "them — change one variable at a time",
                    c.config_changes.size()));
  explain_step(c, base, candidate);
  machine_noise(c);
  add_step_warnings(c);
  note_coverage(base, candidate, c.warnings);
  note_cut_short(base, "base run", c.warnings);
  note_cut_short(candidate, "new run", c.warnings);
  const std::uint64_t min_steps = kThresholds.min_measured_steps;
  if (base.steps.wall_ms.count < min_steps || candidate.steps.wall_ms.count < min_steps)
    c.warnings.push_back(
        fmt::format("fewer than {} measured steps in a run ({} vs {}): the noise estimate is unreliable", min_steps,
                    base.steps.wall_ms.count, candidate.steps.wall_ms.count));
  if (base.run.world_size != candidate.run.world_size)
    c.warnings.push_back(fmt::format("world size differs ({} vs {})", base.run.world_size, candidate.run.world_size));
  if (base.run.source != candidate.run.source)
    c.warnings.push_back(
        fmt::format("reports come from different sources ({} vs {})", base.run.source, candidate.run.source));
  return c;
}

Comparison compare_runs(const std::vector<Report>& base, const std::vector<Report>& candidate) {
  if (base.empty() || candidate.empty()) {
    Comparison c;
    c.base_runs = base.size();
    c.new_runs = candidate.size();
    c.warnings.push_back("compare_runs needs at least one report on each side");
    return c;
  }
  Comparison c = compare_reports(base.front(), candidate.front());
  if (base.size() == 1 && candidate.size() == 1) return c;
  c.base_runs = base.size();
  c.new_runs = candidate.size();
  // The step: means of the runs' mean step times.
  std::vector<double> a, b;
  for (const Report& r : base) a.push_back(loop_step_ms(r));
  for (const Report& r : candidate) b.push_back(loop_step_ms(r));
  between_runs_delta(c.step, a, b, std::hypot(within_step_noise(base), within_step_noise(candidate)));
  c.step.drift = 0;  // the spread between runs already holds it
  // Phases: the rows of the first pair, each from every run that has it.
  for (Delta& d : c.phases) {
    std::vector<double> pa, pb;
    double wa = 0, wb = 0;
    auto collect = [&](const std::vector<Report>& runs, const std::string& role, std::vector<double>& out,
                       double& within) {
      for (const Report& r : runs) {
        for (const PhaseSummary& p : r.phases) {
          const Distribution& t = detail::clocked_ms(p);
          if (p.name != d.name || to_string(p.thread_role) != role || t.count == 0) continue;
          out.push_back(t.mean * (d.base_calls > 0 ? per_step(r, p) : 1.0));  // per step where calls changed
          within += standard_error(t);
          break;
        }
      }
      if (!out.empty()) within /= static_cast<double>(out.size()) * std::sqrt(static_cast<double>(out.size()));
    };
    collect(base, d.base_role, pa, wa);
    collect(candidate, d.new_role, pb, wb);
    between_runs_delta(d, pa, pb, std::hypot(wa, wb));
    double calls = 1;
    for (const PhaseSummary& p : base.front().phases)
      if (p.name == d.name && to_string(p.thread_role) == d.base_role && d.base_calls <= 0)
        calls = per_step(base.front(), p);
    end_to_end_floor(d, c.step.base_ms, calls);
  }
  // Conditions: any base run against any new run.
  for (std::size_t i = 0; i < base.size() && !c.conditions.differ; ++i) {
    for (std::size_t j = 0; j < candidate.size(); ++j) {
      if (i == 0 && j == 0) continue;
      RunConditions k = conditions_of(base[i], candidate[j]);
      if (!k.differ) continue;
      for (std::string& r : k.reasons) r = fmt::format("base run {} vs new run {}: {}", i + 1, j + 1, r);
      c.conditions = std::move(k);
      break;
    }
  }
  // Warnings: drop the pair's step warnings, then the repeats' own.
  c.warnings.erase(std::remove_if(c.warnings.begin(), c.warnings.end(),
                                  [](const std::string& w) {
                                    return w.rfind("no config key changed", 0) == 0 ||
                                           w.rfind("one run each", 0) == 0 || w.rfind("the step moved", 0) == 0 ||
                                           w.rfind("the machine was busy", 0) == 0;
                                  }),
                   c.warnings.end());
  check_side(base, "base", c.warnings);
  check_side(candidate, "new", c.warnings);
  explain_step(c, base.front(), candidate.front());
  machine_noise(c);
  add_step_warnings(c);
  return c;
}

std::string format_comparison(const Comparison& c) {
  std::string out;
  // Before any verdict: a difference between differently loaded machines is
  // not the code's.
  if (c.conditions.differ) {
    out +=
        "machine conditions differ between the runs — a step time difference may be the machine's, not the "
        "code's:\n";
    for (const std::string& r : c.conditions.reasons) out += "  " + r + "\n";
    out += "\n";
  }
  const bool machine_noise_said = said_machine_noise(c);
  auto row = [&](const Delta& d) {
    std::string verdict = d.significant        ? (d.delta_ms < 0 ? "faster" : "slower")
                          : machine_noise_said ? "the machine's noise"
                                               : "within noise";
    if (d.significant && d.name == "step")
      verdict += !c.explained_by.empty() ? " (explained below)"
                 : c.conditions.differ   ? " (machine conditions differ)"
                                         : "";
    if (d.base_role == "outside_step" && d.new_role == "outside_step") verdict = "outside the steps";
    if (d.base_role != d.new_role) verdict += fmt::format(" ({} vs {} thread)", d.base_role, d.new_role);
    if (d.base_calls > 0)
      verdict += fmt::format(" (ms per step: {:.3g} -> {:.3g} calls a step)", d.base_calls, d.new_calls);
    out += fmt::format("{:<24} {:>11.3f} {:>11.3f} {:>+11.3f} {:>+8.1f}% {:>10.3f}  {}\n", detail::printable(d.name),
                       d.base_ms, d.new_ms, d.delta_ms, d.delta_pct, d.noise_ms, verdict);
  };
  out += fmt::format("{:<24} {:>11} {:>11} {:>11} {:>9} {:>10}  {}\n", "name", "base ms", "new ms", "delta ms", "delta",
                     "noise ms", "verdict");
  out += std::string(24 + 12 * 3 + 10 + 11 + 15, '-') + "\n";
  row(c.step);
  // Every change shows; of the rows within noise, the first kQuietRows of
  // each section (the reports' order: most expensive first), the rest
  // counted: reports with thousands of phases printed thousands of rows.
  constexpr std::size_t kQuietRows = 20;
  const auto rows_of = [&](const std::vector<Delta>& deltas, bool outside_section) {
    std::size_t quiet = 0, hidden = 0;
    bool heading = false;
    for (const Delta& d : deltas) {
      if ((d.base_role == "outside_step" && d.new_role == "outside_step") != outside_section) continue;
      if (outside_section && !heading)
        out += "outside the steps (no step waited for these; not part of the step time):\n";
      heading = true;
      if (!d.significant && ++quiet > kQuietRows) {
        ++hidden;
        continue;
      }
      row(d);
    }
    if (hidden > 0) out += fmt::format("({} more rows within noise)\n", hidden);
  };
  // The step's phases (and background work beside it) first; what ran on the
  // step thread outside every step apart: no step waited for it.
  rows_of(c.phases, false);
  rows_of(c.phases, true);
  // Names, config values and warnings come from the reports: printed escaped (text/printable.hpp).
  const auto only_in = [&out](const std::vector<std::string>& names, const char* which) {
    for (std::size_t i = 0; i < names.size() && i < kQuietRows; ++i)
      out += fmt::format("{:<24} only in {}\n", detail::printable(names[i]), which);
    if (names.size() > kQuietRows) out += fmt::format("({} more only in {})\n", names.size() - kQuietRows, which);
  };
  only_in(c.only_in_base, "base");
  only_in(c.only_in_new, "new");
  if (c.step.noise_method == "between_runs") {
    out += fmt::format(
        "(noise: spread between {} base and {} new runs; significant above {:.2f} x noise and "
        "{:.0f}% of the base)\n",
        c.base_runs, c.new_runs, c.step.noise_factor, 100.0 * kThresholds.min_relative_change_repeated);
  } else {
    out +=
        fmt::format("(step noise: {}", c.step.noise_method == "batch_means" ? "batch means over each run's step series"
                                                                            : "standard error of the step times");
    out += fmt::format(
        "; one run each: a step change below {:.1f}% of the base or {:.2f} x its noise is within noise{})\n",
        100.0 * std::max(kThresholds.min_relative_change, c.step.drift), c.step.noise_factor,
        c.step.drift > kThresholds.min_relative_change
            ? fmt::format(", a run's own halves differ by {:.1f}%", 100.0 * c.step.drift)
            : std::string());
  }
  out += "\n";
  out += c.verdict_changed ? fmt::format("bottleneck: {} -> {}\n", c.base_verdict, c.new_verdict)
                           : fmt::format("bottleneck: {} (unchanged)\n", c.base_verdict);
  if (!c.explained_by.empty()) {
    out += "the step change is explained by:\n";
    for (const std::string& e : c.explained_by) out += "  " + detail::printable(e) + "\n";
  }
  if (c.config_changes.empty()) {
    out += "config: no changes\n";
  } else {
    out += "config changes:\n";
    for (const std::string& s : c.config_changes) out += "  " + detail::printable(s) + "\n";
  }
  for (const std::string& w : c.warnings) out += "warning: " + detail::printable(w) + "\n";
  return out;
}

std::string comparison_to_json(const Comparison& c) {
  using nlohmann::json;
  try {
    auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    auto signal = [&](double v) { return v < 0 ? json(nullptr) : num(v); };
    auto delta = [&](const Delta& d) {
      return json{{"name", d.name},
                  {"base_ms", num(d.base_ms)},
                  {"new_ms", num(d.new_ms)},
                  {"delta_ms", num(d.delta_ms)},
                  {"delta_pct", num(d.delta_pct)},
                  {"noise_ms", num(d.noise_ms)},
                  {"noise_method", d.noise_method},
                  {"noise_factor", num(d.noise_factor)},
                  {"drift", num(d.drift)},
                  {"significant", d.significant},
                  {"verdict", delta_verdict(d)},
                  {"base_role", d.base_role},
                  {"new_role", d.new_role},
                  {"base_calls_per_step", d.base_calls > 0 ? num(d.base_calls) : json(nullptr)},
                  {"new_calls_per_step", d.new_calls > 0 ? num(d.new_calls) : json(nullptr)}};
    };
    json phases = json::array();
    for (const Delta& d : c.phases) phases.push_back(delta(d));
    const RunConditions& k = c.conditions;
    json conditions{{"differ", k.differ},
                    {"reasons", k.reasons},
                    {"shared", k.shared},
                    {"shared_reason", k.shared_reason},
                    {"base",
                     {{"runqueue_fraction", signal(k.base_runqueue_fraction)},
                      {"other_cpu_cores", signal(k.base_other_cpu_cores)},
                      {"involuntary_per_s", signal(k.base_involuntary_per_s)},
                      {"load_per_core", signal(k.base_load_per_core)}}},
                    {"new",
                     {{"runqueue_fraction", signal(k.new_runqueue_fraction)},
                      {"other_cpu_cores", signal(k.new_other_cpu_cores)},
                      {"involuntary_per_s", signal(k.new_involuntary_per_s)},
                      {"load_per_core", signal(k.new_load_per_core)}}}};
    json out{{"runs", {{"base", c.base_runs}, {"new", c.new_runs}}},
             {"step", delta(c.step)},
             {"phases", phases},
             {"only_in_base", c.only_in_base},
             {"only_in_new", c.only_in_new},
             {"conditions", conditions},
             {"bottleneck", {{"base", c.base_verdict}, {"new", c.new_verdict}, {"changed", c.verdict_changed}}},
             {"config_changes", c.config_changes},
             {"explained_by", c.explained_by},
             {"warnings", c.warnings}};
    // Replace invalid UTF-8 (phase names come from user code) rather than throw.
    return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  } catch (...) {
    return "{\"error\": \"comparison could not be serialised\"}\n";
  }
}

}  // namespace v1
}  // namespace stepscope
