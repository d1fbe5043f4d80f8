// src/analysis/compare.cpp — comparing two runs ("change one variable at a
// time"): per-step and per-phase deltas of the means with their noise, the
// verdict before and after, and which configuration keys changed.
//
// Noise is the combined standard error of the two means,
//   noise = sqrt(sd_base² / n_base + sd_new² / n_new),
// from the stored distributions; a delta is significant when it is larger
// than 3 × noise and than 1% of the base mean (kThresholds).
#include "analysis/facts.hpp"
#include "analysis/thresholds.hpp"
#include "report/text.hpp"

#include <stepscope/analysis.hpp>

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace stepscope {
namespace {

using detail::kThresholds;

Delta delta_of(std::string name, const Distribution& a, const Distribution& b) {
  Delta d;
  d.name = std::move(name);
  d.base_ms = a.mean;
  d.new_ms = b.mean;
  d.delta_ms = b.mean - a.mean;
  d.delta_pct = a.mean != 0 ? 100.0 * d.delta_ms / a.mean : 0.0;
  const double va = a.count > 0 ? a.stddev * a.stddev / static_cast<double>(a.count) : 0.0;
  const double vb = b.count > 0 ? b.stddev * b.stddev / static_cast<double>(b.count) : 0.0;
  d.noise_ms = std::sqrt(va + vb);
  d.significant = a.count > 0 && b.count > 0 &&
                  std::fabs(d.delta_ms) > kThresholds.noise_sigmas * d.noise_ms &&
                  std::fabs(d.delta_ms) > kThresholds.min_relative_change * std::fabs(a.mean);
  return d;
}

// The stored verdict, or a fresh one when the report was never analysed.
std::string verdict_of(const Report& r) {
  if (!r.bottleneck.summary.empty() || r.bottleneck.category != "unknown")
    return r.bottleneck.category;
  return classify(r).category;
}

}  // namespace

Comparison compare_reports(const Report& base, const Report& candidate) {
  Comparison c;
  c.step = delta_of("step", base.steps.wall_ms, candidate.steps.wall_ms);

  std::set<std::string> seen;
  for (const PhaseSummary& a : base.phases) {
    const PhaseSummary* b = nullptr;
    for (const PhaseSummary& p : candidate.phases)
      if (p.name == a.name) b = &p;
    seen.insert(a.name);
    if (b == nullptr) {
      c.only_in_base.push_back(a.name);
      continue;
    }
    c.phases.push_back(delta_of(a.name, a.host_ms, b->host_ms));
  }
  for (const PhaseSummary& p : candidate.phases)
    if (seen.count(p.name) == 0) c.only_in_new.push_back(p.name);

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
    c.warnings.push_back(fmt::format(
        "more than one config key changed ({}): the difference cannot be attributed to any one of "
        "them — change one variable at a time",
        c.config_changes.size()));
  if (c.config_changes.empty() && c.step.significant)
    c.warnings.push_back(
        "no config key changed but the step time did: record what changed with set_config()");
  const std::uint64_t min_steps = kThresholds.min_measured_steps;
  if (base.steps.wall_ms.count < min_steps || candidate.steps.wall_ms.count < min_steps)
    c.warnings.push_back(fmt::format(
        "fewer than {} measured steps in a run ({} vs {}): the noise estimate is unreliable",
        min_steps, base.steps.wall_ms.count, candidate.steps.wall_ms.count));
  if (base.run.world_size != candidate.run.world_size)
    c.warnings.push_back(fmt::format("world size differs ({} vs {})", base.run.world_size,
                                     candidate.run.world_size));
  if (base.run.source != candidate.run.source)
    c.warnings.push_back(fmt::format("reports come from different sources ({} vs {})",
                                     base.run.source, candidate.run.source));
  return c;
}

std::string format_comparison(const Comparison& c) {
  std::string out;
  auto row = [&](const Delta& d) {
    out += fmt::format("{:<24} {:>11.3f} {:>11.3f} {:>+11.3f} {:>+8.1f}% {:>10.3f}  {}\n", detail::printable(d.name),
                       d.base_ms, d.new_ms, d.delta_ms, d.delta_pct, d.noise_ms,
                       d.significant ? (d.delta_ms < 0 ? "faster" : "slower") : "within noise");
  };
  out += fmt::format("{:<24} {:>11} {:>11} {:>11} {:>9} {:>10}  {}\n", "name", "base ms", "new ms",
                     "delta ms", "delta", "noise ms", "verdict");
  out += std::string(24 + 12 * 3 + 10 + 11 + 15, '-') + "\n";
  row(c.step);
  for (const Delta& d : c.phases) row(d);
  // Names, config values and warnings come from the reports: printed escaped (report/text.hpp).
  for (const std::string& n : c.only_in_base) out += fmt::format("{:<24} only in base\n", detail::printable(n));
  for (const std::string& n : c.only_in_new) out += fmt::format("{:<24} only in new\n", detail::printable(n));
  out += "\n";
  out += c.verdict_changed
             ? fmt::format("bottleneck: {} -> {}\n", c.base_verdict, c.new_verdict)
             : fmt::format("bottleneck: {} (unchanged)\n", c.base_verdict);
  if (c.config_changes.empty()) {
    out += "config: no changes\n";
  } else {
    out += "config changes:\n";
    for (const std::string& s : c.config_changes) out += "  " + detail::printable(s) + "\n";
  }
  for (const std::string& w : c.warnings) out += "warning: " + detail::printable(w) + "\n";
  return out;
}

}  // namespace stepscope
