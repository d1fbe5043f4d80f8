// The HTML report's Ranks card (merged multi-rank jobs): who is slow, by how
// much, and what the others wait. The rest of the page is html.cpp's.
#include "report/html_parts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::html {

namespace {

std::string rank_of(int rank) {
  return rank >= 0 ? fmt::format("rank {}", rank) : std::string("?");
}

std::string across(const AcrossRanks& a) {
  return fmt::format("min {} ({}) · median {} · max {} ({}) · imbalance {}", ms(a.min), rank_of(a.min_rank),
                     ms(a.median), ms(a.max), rank_of(a.max_rank), pct(a.imbalance));
}

// The job across ranks: reports merged, ranks missing, the summary table.
void ranks_summary(std::string& o, const MultiRank& m) {
  o += "<section id=\"ranks\" class=\"card\"><h2>Ranks</h2>";
  o += fmt::format("<p><b>{}</b> rank reports merged of a job of <b>{}</b>.", m.ranks_merged, m.world_size);
  const int missing = std::max(0, m.world_size - m.ranks_merged);
  if (!m.missing_ranks.empty() || missing > 0) {
    // Runs of consecutive ranks as ranges: "2–65", not 64 numbers.
    std::string list;
    for (std::size_t i = 0; i < m.missing_ranks.size();) {
      std::size_t j = i;
      while (j + 1 < m.missing_ranks.size() && m.missing_ranks[j + 1] == m.missing_ranks[j] + 1) ++j;
      list += (list.empty() ? "" : ", ") + (j > i ? fmt::format("{}–{}", m.missing_ranks[i], m.missing_ranks[j])
                                                  : std::to_string(m.missing_ranks[i]));
      i = j + 1;
    }
    const bool partial = static_cast<int>(m.missing_ranks.size()) < missing;
    o += fmt::format(" <span class=\"warn\">{} rank{} without a report{}{}{}.</span>", missing, missing == 1 ? "" : "s",
                     list.empty() ? "" : ": ", list, partial ? ", …" : "");
  }
  o += "</p>";
  std::vector<std::pair<std::string, std::string>> rows = {
      {"step ms", across(m.step_ms)},
      {"busy ms (outside communication)", across(m.busy_ms)},
      {"compute ms", across(m.compute_ms)},
      {"communication ms", across(m.communication_ms)},
      {"communication split",
       fmt::format("{} ms/step: collective {} ms, waiting for slower ranks {} ms ({})", ms(m.comm_ms),
                   ms(m.comm_collective_ms), ms(m.comm_wait_ms), pct(m.comm_wait_fraction))},
      {"wait predicted by compute imbalance", ms(m.expected_wait_from_imbalance_ms) + " ms/step"},
  };
  kv_table(o, rows, "rank-summary");
  if (!m.method.empty()) o += "<p class=\"note\">" + esc(m.method) + "</p>";
}

void straggler_table(std::string& o, const MultiRank& m) {
  if (!m.stragglers.empty()) {
    o += "<h3>Stragglers</h3>";
    table_head(o, "id=\"straggler-table\" class=\"sortable\"",
               {"rank", "where", "rank ms", "others' median", "excess ms", "robust z", "pattern", "slow steps"});
    for (const auto& s : m.stragglers) {
      std::string steps;
      for (auto step : s.slow_steps) steps += (steps.empty() ? "" : ", ") + std::to_string(step);
      o += fmt::format(
          "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
          "<td class=\"n\">{}</td><td>{} ({} of steps)</td><td>{}</td></tr>",
          s.rank, esc(s.phase), ms(s.rank_ms), ms(s.median_ms), ms(s.excess_ms), num(s.robust_z), esc(s.pattern),
          pct(s.slow_step_fraction), esc(steps));
    }
    o += "</tbody></table>";
  } else {
    o += "<p class=\"note\">No straggler: no rank is materially slower than the others.</p>";
  }
}

// Per-rank stacked columns (same kinds and colours as the step chart).
void rank_breakdown_chart(std::string& o, const MultiRank& m) {
  double top = 0;
  for (const auto& k : m.ranks) top = std::max(top, k.step_ms);
  const auto axis = nice_axis(top, 4);
  const double axis_max = axis.first, tick = axis.second;  // not a structured binding: lambdas capture it (C++17)
  const double left = 64, right = 990, plot_top = 10, bottom = 200;
  const double col_w = (right - left) / static_cast<double>(m.ranks.size());
  auto y_of = [&](double v) { return bottom - v / axis_max * (bottom - plot_top); };
  o += "<h3>Step breakdown per rank</h3><svg id=\"rank-chart\" class=\"chart\" viewBox=\"0 0 1000 230\" role=\"img\" "
       "aria-label=\"step breakdown per rank\">";
  y_axis_grid(o, left, right, axis_max, tick, y_of);
  for (std::size_t i = 0; i < m.ranks.size(); ++i) {
    const RankSummary& k = m.ranks[i];
    const std::vector<double> parts = breakdown_parts(k);
    const std::string info =
        fmt::format("rank {}{}: step {} ms, busy {} ms, communication {} ms (waiting {} ms), verdict {}", k.rank,
                    k.straggler ? " (straggler)" : "", ms(k.step_ms), ms(k.busy_ms),
                    ms(k.kind_ms[PhaseKind::communication]), ms(k.comm_wait_ms), k.verdict.empty() ? "?" : k.verdict);
    o += "<g class=\"col\"><title>" + esc(info) + "</title>";
    double base = 0;
    const double w = std::min(std::max(col_w * 0.86, 0.5), 60.0);
    const double x = left + col_w * static_cast<double>(i) + (col_w - w) / 2;
    for (std::size_t c = 0; c < kBreakdownPartCount; ++c) {
      const double v = std::isfinite(parts[c]) ? std::max(0.0, parts[c]) : 0;
      if (v <= 0) continue;
      o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", xy(x), xy(y_of(base + v)),
                       xy(w), xy(v / axis_max * (bottom - plot_top)), kKinds[c].color);
      base += v;
    }
    if (k.straggler)
      o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"strag\">&#9650;</text>", xy(x + w / 2),
                       xy(y_of(base) - 3));
    o += "</g>";
  }
  const std::size_t label_every = std::max<std::size_t>(1, m.ranks.size() / 16);
  for (std::size_t i = 0; i < m.ranks.size(); i += label_every)
    o += fmt::format("<text class=\"ax\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     xy(left + col_w * (static_cast<double>(i) + 0.5)), xy(bottom + 15), m.ranks[i].rank);
  o += fmt::format("<text class=\"ax\" x=\"{}\" y=\"226\" text-anchor=\"middle\">rank (&#9650; straggler)</text></svg>",
                   xy((left + right) / 2));
  legend(o);
}

void rank_table(std::string& o, const MultiRank& m) {
  o += m.ranks.size() > 32 ? "<details><summary>Per-rank table</summary>" : "";
  table_head(o, "id=\"rank-table\" class=\"sortable\"",
             {"rank", "host", "steps", "step ms", "busy ms", "input", "compute", "memory", "comm.", "comm. wait",
              "unattributed", "verdict", "straggler"});
  for (const auto& k : m.ranks) {
    o += fmt::format("<tr{}><td class=\"n\">{}</td><td class=\"host\">{}</td>",
                     k.straggler ? " class=\"straggler\"" : "", k.rank, esc(k.host));
    number_cells(o, {std::to_string(k.steps), ms(k.step_ms), ms(k.busy_ms), ms(k.kind_ms[PhaseKind::input]),
                     ms(k.kind_ms[PhaseKind::compute]), ms(k.kind_ms[PhaseKind::memory]),
                     ms(k.kind_ms[PhaseKind::communication]), ms(k.comm_wait_ms), ms(k.unattributed_ms)});
    o += fmt::format("<td>{}</td><td>{}</td></tr>", esc(k.verdict), k.straggler ? "yes" : "");
  }
  o += "</tbody></table>";
  o += m.ranks.size() > 32 ? "</details>" : "";
}

void phases_across_ranks_table(std::string& o, const MultiRank& m) {
  if (m.phases.empty()) return;
  o += "<h3>Phases across ranks (self ms per step)</h3>";
  table_head(o, "id=\"rank-phase-table\" class=\"sortable\"",
             {"phase", "kind", "ranks", "min", "median", "max", "slowest", "imbalance"});
  for (const auto& p : m.phases) {
    o += fmt::format("<tr><td class=\"name\">{}</td><td>{}</td>", esc(p.name), to_string(p.kind));
    number_cells(o, {std::to_string(p.ranks), ms(p.per_step_ms.min), ms(p.per_step_ms.median), ms(p.per_step_ms.max)});
    o += fmt::format("<td>{}</td><td class=\"n\" data-sort=\"{}\">{}</td></tr>", rank_of(p.per_step_ms.max_rank),
                     num(p.per_step_ms.imbalance), pct(p.per_step_ms.imbalance));
  }
  o += "</tbody></table>";
}

// Aligned steps: the band between the fastest and the slowest rank.
void rank_steps_chart(std::string& o, const MultiRank& m) {
  if (m.steps.size() < 2) return;
  double top = 0;
  for (const auto& s : m.steps) top = std::max(top, s.wall_ms.max);
  const auto axis = nice_axis(top, 4);
  const double axis_max = axis.first, tick = axis.second;  // not a structured binding: lambdas capture it (C++17)
  const double left = 64, right = 990, plot_top = 10, bottom = 170;
  const double dx = (right - left) / static_cast<double>(m.steps.size() - 1);
  auto y_of = [&](double v) { return bottom - (std::isfinite(v) ? v : 0) / axis_max * (bottom - plot_top); };
  std::string band_top, band_bottom, median;
  for (std::size_t i = 0; i < m.steps.size(); ++i) {
    const double x = left + dx * static_cast<double>(i);
    band_top += xy(x) + "," + xy(y_of(m.steps[i].wall_ms.max)) + " ";
    median += xy(x) + "," + xy(y_of(m.steps[i].wall_ms.median)) + " ";
  }
  for (std::size_t i = m.steps.size(); i-- > 0;)
    band_bottom += xy(left + dx * static_cast<double>(i)) + "," + xy(y_of(m.steps[i].wall_ms.min)) + " ";
  o += fmt::format("<h3>Step time across ranks (min–max band, median line; {} step{} per point)</h3>", m.step_stride,
                   m.step_stride == 1 ? "" : "s");
  o += "<svg id=\"rank-steps-chart\" class=\"chart\" viewBox=\"0 0 1000 195\" role=\"img\" aria-label=\"step time "
       "across ranks\">";
  y_axis_grid(o, left, right, axis_max, tick, y_of);
  o += "<polygon class=\"band\" points=\"" + band_top + band_bottom + "\"/><polyline class=\"wall\" points=\"" +
       median + "\"/>";
  const std::size_t label_every = std::max<std::size_t>(1, m.steps.size() / 8);
  for (std::size_t i = 0; i < m.steps.size(); i += label_every)
    o += fmt::format("<text class=\"ax\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     xy(left + dx * static_cast<double>(i)), xy(bottom + 15), m.steps[i].first_step);
  o += "</svg>";
}

}  // namespace

// The ranks card of a merged report: the job's summary across ranks, the
// stragglers, the per-rank breakdown (chart and table), the phases across
// ranks and the step time across ranks.
void ranks_section(std::string& o, const Report& r) {
  if (!r.ranks) return;
  const MultiRank& m = *r.ranks;
  ranks_summary(o, m);
  straggler_table(o, m);
  if (!m.ranks.empty()) {
    rank_breakdown_chart(o, m);
    rank_table(o, m);
  }
  phases_across_ranks_table(o, m);
  rank_steps_chart(o, m);
  o += "</section>\n";
}

}  // namespace detail::html
}  // namespace v1
}  // namespace stepscope
