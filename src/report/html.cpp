// The HTML report: one self-contained page (inline CSS, inline SVG charts, a
// few lines of inline script), no network access of any kind. This file builds
// the page and its single-run sections; the Ranks card of a merged report is
// html_ranks.cpp's, and what both draw with (text helpers, the kinds' colours,
// chart axes) is html_parts.hpp's.
#include <stepscope/html.hpp>

#include "core/atomic_file.hpp"
#include "report/ending.hpp"
#include "report/html_parts.hpp"
#include "report/site_label.hpp"
#include "text/printable.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::html {

namespace {

// ---- the breakdown's carved parts, the verdict's colours --------------------

// Parts the analyzer carves out of the phases (StepBreakdown::cpu_wait_ms,
// page_fault_ms): rows of the breakdown when present, after the kinds.
constexpr KindStyle kCarvedParts[] = {
    {"cpu wait", "#ff9da7", "runnable but not running: waiting for a CPU (scheduling)"},
    {"page faults", "#76b7b2", "kernel time faulting fresh pages (memory)"},
};

std::vector<double> carved_parts(const StepBreakdown& b) {
  return {b.cpu_wait_ms, b.page_fault_ms};
}

// A category's colour (kBottlenecks' order); grey for "unknown".
const char* category_color(std::string_view name) {
  static constexpr std::array<const char*, kBottleneckCount> kColors = {"#f28e2b", "#4e79a7", "#b07aa1", "#59a14f",
                                                                        "#e15759"};
  const std::optional<Bottleneck> b = bottleneck_named(name);
  return b ? kColors[static_cast<std::size_t>(*b)] : "#7a7a7a";
}

// The series of breakdown part `part` (kKinds order).
const std::vector<double>& series_of(const StepSeries& s, std::size_t part) {
  return part < kPhaseKindCount ? s.kind_ms[kPhaseKinds[part]] : s.unattributed_ms;
}

// ---- sections ---------------------------------------------------------------

void header(std::string& o, const Report& r) {
  const RunInfo& run = r.run;
  std::string who = run.rank >= 0 ? fmt::format("rank {} of {}", run.rank, run.world_size) : "single process";
  std::string where = fmt::format("host {} · pid {}", run.host.empty() ? "?" : run.host, run.pid);
  if (r.ranks) {
    who = fmt::format("{} of {} ranks merged", r.ranks->ranks_merged, r.ranks->world_size);
    where = run.host;  // the merge names its hosts ("2 hosts"); there is no one pid
  }
  o += "<header><h1>stepscope report</h1><p class=\"sub\">";
  o += esc(fmt::format("{} · {} · {} · {} · stepscope {}", run.source, who, where,
                       run.time_utc.empty() ? "time unknown" : run.time_utc, run.library_version));
  o += "</p>";
  for (const std::string& note : detail::run_ending_notes(r)) o += "<p class=\"ending\">" + esc(note) + "</p>";
  o += "</header>\n";
}

void verdict_section(std::string& o, const Report& r) {
  const Verdict& v = r.bottleneck;
  const bool unknown = !v.bottleneck();
  o += fmt::format("<section id=\"verdict\" class=\"card verdict\" style=\"border-left-color:{}\">",
                   category_color(v.category));
  o += "<h2>Verdict</h2><p class=\"big\">";
  if (unknown)
    o += "<span class=\"cat\" style=\"color:#7a7a7a\">UNKNOWN</span>";
  else
    o += fmt::format("<span class=\"sev\">{}</span> <span class=\"cat\" style=\"color:{}\">{}-bound</span>",
                     esc(v.severity), category_color(v.category), esc(v.category));
  o += fmt::format(
      " <span class=\"conf\" title=\"confidence\">confidence {:.2f}<span class=\"meter\"><span "
      "style=\"width:{:.0f}%\"></span></span></span>",
      v.confidence, std::clamp(v.confidence, 0.0, 1.0) * 100);
  o += "</p>";
  if (!v.summary.empty()) o += "<p class=\"summary\">" + esc(v.summary) + "</p>";
  if (!v.ranking.empty()) {
    // What each category costs the step, as one stacked bar.
    o += "<div class=\"ranking\" title=\"what each category costs the step\">";
    for (const auto& [category, share] : v.ranking) {
      if (!(share > 0)) continue;
      o += fmt::format("<span style=\"width:{:.2f}%;background:{}\" title=\"{}: {}\">{}</span>",
                       std::min(share, 1.0) * 100, category_color(category), esc(category), pct(share),
                       share >= 0.08 ? esc(category) : "");
    }
    o += "</div><p class=\"note\">Share of step time by category: ";
    bool first = true;
    for (const auto& [category, share] : v.ranking) {
      o += (first ? "" : ", ") + esc(category) + " " + pct(share);
      first = false;
    }
    o += "</p>";
  }
  if (!v.evidence.empty()) {
    // The signals that carry the verdict first; the ones checked and not
    // crossed stay one click away (they explain what was ruled out).
    // Marks: for the verdict (crossed, and its category), against it (crossed
    // for another category: it points elsewhere), or below its threshold.
    auto rows = [&](bool supporting) {
      std::string t;
      for (const auto& e : v.evidence) {
        if (e.supports != supporting) continue;
        const bool against = !e.supports && e.crossed;
        t += fmt::format(
            "<tr class=\"{}\"><td title=\"{}\">{}</td><td><code>{}</code></td><td class=\"n\">{}</td><td "
            "class=\"n\">{} {}</td><td>{}</td></tr>",
            e.supports ? "yes"
            : against  ? "against"
                       : "no",
            e.supports ? "supports the verdict"
            : against  ? "crossed its threshold, points to another category"
                       : "below its threshold",
            e.supports ? "&#10004;"
            : against  ? "&#10008;"
                       : "&#183;",
            esc(e.signal), num(e.value), esc(e.comparison), num(e.threshold), esc(e.sentence));
      }
      return t;
    };
    const char* head =
        "<thead><tr><th></th><th>signal</th><th>value</th><th>threshold</th><th>meaning</th></tr></thead><tbody>";
    std::size_t supporting = 0, against = 0;
    for (const auto& e : v.evidence) {
      supporting += e.supports ? 1 : 0;
      against += !e.supports && e.crossed ? 1 : 0;
    }
    o += "<h3>Evidence</h3>";
    if (supporting > 0)
      o += std::string("<table id=\"evidence\" class=\"evidence sortable\">") + head + rows(true) + "</tbody></table>";
    if (supporting < v.evidence.size())
      o += fmt::format(
          "<details><summary>{} other signal{} checked ({} pointing to another category, the rest below their "
          "thresholds)</summary><table class=\"evidence sortable\">{}{}</tbody></table></details>",
          v.evidence.size() - supporting, v.evidence.size() - supporting == 1 ? "" : "s", against, head, rows(false));
  }
  if (!v.recommendations.empty()) {
    o += "<h3>What to try first</h3><ol class=\"recs\">";
    for (const auto& rec : v.recommendations) o += "<li>" + esc(rec) + "</li>";
    o += "</ol>";
  }
  o += "</section>\n";
}

void breakdown_section(std::string& o, const Report& r) {
  const StepStats& s = r.steps;
  o += "<section id=\"steps\" class=\"card\"><h2>Step breakdown</h2>";
  if (s.count == 0) {
    o += fmt::format(
        "<p class=\"warn\">No measured steps ({} warm-up steps excluded): there is nothing to break down.</p>",
        s.warmup_excluded);
  } else {
    const auto& w = s.wall_ms;
    o += fmt::format(
        "<p><b>{}</b> measured step{}, <b>{}</b> warm-up step{} excluded{}.</p>"
        "<table "
        "class=\"stats\"><tr><th>ms/step</th><th>mean</th><th>stddev</th><th>min</th><th>p50</th><th>p90</th><th>p99</"
        "th>"
        "<th>max</th></tr><tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>{}</table>",
        s.count, s.count == 1 ? "" : "s", s.warmup_excluded, s.warmup_excluded == 1 ? "" : "s",
        s.warmup_excluded > 0
            ? fmt::format(" (warm-up mean {} ms, max {} ms)", ms(s.warmup_wall_ms.mean), ms(s.warmup_wall_ms.max))
            : "",
        s.clock == "device" ? "wall (device)" : "wall", ms(w.mean), ms(w.stddev), ms(w.min), ms(w.p50), ms(w.p90),
        ms(w.p99), ms(w.max),
        s.host_wall_ms ? fmt::format("<tr><td>host clock</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
                                     "class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
                                     "class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                                     ms(s.host_wall_ms->mean), ms(s.host_wall_ms->stddev), ms(s.host_wall_ms->min),
                                     ms(s.host_wall_ms->p50), ms(s.host_wall_ms->p90), ms(s.host_wall_ms->p99),
                                     ms(s.host_wall_ms->max))
                       : std::string());
    // Mean breakdown as one horizontal stacked bar (SVG, 1000 units wide).
    // The settled accounting: the same numbers as the verdict and the summary.
    const StepBreakdown& settled = r.steps.shown_breakdown();
    const auto parts = breakdown_parts(settled);
    const auto carved = carved_parts(settled);
    double total = 0;
    for (double p : parts) total += std::max(0.0, p);
    for (double p : carved) total += std::max(0.0, p);
    // Time between steps (see StepBreakdown) closes the bar, in light grey.
    const double between = std::max(0.0, s.breakdown.between_steps_ms);
    total += between;
    o +=
        "<svg id=\"breakdown-chart\" class=\"chart\" viewBox=\"0 0 1000 46\" preserveAspectRatio=\"none\" role=\"img\" "
        "aria-label=\"mean step breakdown\">";
    double x = 0;
    for (std::size_t k = 0; k < kBreakdownPartCount; ++k) {
      const double part = std::max(0.0, parts[k]);
      if (total <= 0 || part <= 0) continue;
      const double width = part / total * 1000;
      o += fmt::format(
          "<rect x=\"{}\" y=\"0\" width=\"{}\" height=\"46\" fill=\"{}\"><title>{}: {} ms ({})</title></rect>", xy(x),
          xy(width), kKinds[k].color, kKinds[k].name, ms(part), pct(part / s.breakdown.wall_ms));
      x += width;
    }
    for (std::size_t k = 0; k < carved.size(); ++k) {
      const double part = std::max(0.0, carved[k]);
      if (total <= 0 || part <= 0) continue;
      const double width = part / total * 1000;
      o += fmt::format(
          "<rect x=\"{}\" y=\"0\" width=\"{}\" height=\"46\" fill=\"{}\"><title>{}: {} ms ({})</title></rect>", xy(x),
          xy(width), kCarvedParts[k].color, kCarvedParts[k].name, ms(part), pct(part / s.breakdown.wall_ms));
      x += width;
    }
    if (between > 0)
      o += fmt::format(
          "<rect x=\"{}\" y=\"0\" width=\"{}\" height=\"46\" fill=\"#d0d0d0\"><title>between steps: {} ms "
          "({})</title></rect>",
          xy(x), xy(between / total * 1000), ms(between), pct(between / s.breakdown.wall_ms));
    o += "</svg>";
    legend(o);
    o += "<table "
         "class=\"kinds\"><thead><tr><th>kind</th><th>ms/step</th><th>share</th><th>meaning</th></tr></thead><tbody>";
    for (std::size_t k = 0; k < kBreakdownPartCount; ++k) {
      const double part = parts[k];
      o += fmt::format(
          "<tr><td><i class=\"sw\" style=\"background:{}\"></i>{}</td><td class=\"n\">{}</td><td "
          "class=\"n\">{}</td><td>{}</td></tr>",
          kKinds[k].color, kKinds[k].name, ms(part), s.breakdown.wall_ms > 0 ? pct(part / s.breakdown.wall_ms) : "–",
          kKinds[k].meaning);
    }
    for (std::size_t k = 0; k < carved.size(); ++k) {
      if (carved[k] <= 0) continue;
      o += fmt::format(
          "<tr class=\"carved\"><td><i class=\"sw\" style=\"background:{}\"></i>{}</td><td class=\"n\">{}</td><td "
          "class=\"n\">{}</td><td>{}; taken out of the rows above, which are net of it</td></tr>",
          kCarvedParts[k].color, kCarvedParts[k].name, ms(carved[k]),
          s.breakdown.wall_ms > 0 ? pct(carved[k] / s.breakdown.wall_ms) : "–", kCarvedParts[k].meaning);
    }
    if (s.breakdown.between_steps_ms > 0)
      o += fmt::format(
          "<tr id=\"between-steps\"><td><i class=\"sw\" style=\"background:#d0d0d0\"></i>between steps</td><td "
          "class=\"n\">{}</td><td class=\"n\">{}</td><td>on the step thread between two steps, in no input phase "
          "(an uninstrumented fetch in the loop header, evaluation, logging)</td></tr>",
          ms(s.breakdown.between_steps_ms),
          s.breakdown.wall_ms > 0 ? pct(s.breakdown.between_steps_ms / s.breakdown.wall_ms) : "–");
    o += "</tbody></table>";
  }
  if (s.coverage)
    o += fmt::format(
        "<p id=\"coverage\" class=\"{}\">Steps cover <b>{}</b> of the step thread's time from its first step to "
        "its last: {} ms fell between steps, {} ms of it in input phases (counted as the input wait of the step "
        "that follows).</p>",
        *s.coverage < 0.9 ? "warn" : "note", pct(*s.coverage), ms(s.between_steps_ms), ms(s.between_steps_input_ms));
  // Epoch boundaries are outside every step and not in the coverage above.
  if (s.loop_boundaries > 0)
    o += fmt::format(
        "<p id=\"loop-boundaries\" class=\"note\">{} gap{} between <code>steps()</code> loops (epoch boundaries: "
        "evaluation, checkpointing, logging) took {} ms in all, outside every step: in neither the per-step "
        "numbers nor the coverage.</p>",
        s.loop_boundaries, s.loop_boundaries == 1 ? "" : "s", ms(s.between_loops_ms));
  o += "</section>\n";
}

void series_section(std::string& o, const Report& r) {
  const StepSeries& s = r.steps.series;
  const std::size_t n = s.first_step.size();
  o += "<section id=\"series\" class=\"card\"><h2>Step time over the run</h2>";
  if (n == 0) {
    o += "<p class=\"note\">No per-step series in this report.</p></section>\n";
    return;
  }
  auto at = [](const std::vector<double>& v, std::size_t i) {
    return i < v.size() && std::isfinite(v[i]) ? std::max(0.0, v[i]) : 0.0;
  };
  double top = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (std::size_t k = 0; k < kBreakdownPartCount; ++k) sum += at(series_of(s, k), i);
    top = std::max({top, sum, at(s.wall_ms, i)});
  }
  const auto axis = nice_axis(top, 5);
  const double axis_max = axis.first, tick = axis.second;  // not a structured binding: lambdas capture it (C++17)
  // Plot area inside a 1000 x 320 viewBox, margins for the axes.
  const double left = 64, right = 990, plot_top = 12, bottom = 280;
  const double plot_w = right - left, plot_h = bottom - plot_top;
  const double col_w = plot_w / static_cast<double>(n);
  auto y_of = [&](double v) { return bottom - v / axis_max * plot_h; };
  o += fmt::format(
      "<p class=\"note\">Each column is the mean of {} consecutive measured step{} (stride {}), stacked by kind; "
      "hover a column for its numbers.</p>",
      s.stride, s.stride == 1 ? "" : "s", s.stride);
  o += "<div class=\"readout\" id=\"series-readout\">&#160;</div>";
  o += "<svg id=\"series-chart\" class=\"chart\" viewBox=\"0 0 1000 320\" role=\"img\" aria-label=\"step breakdown "
       "over steps\">";
  y_axis_grid(o, left, right, axis_max, tick, y_of);
  o += fmt::format(
      "<text class=\"ax\" x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">ms / step</text>",
      xy((plot_top + bottom) / 2), xy((plot_top + bottom) / 2));
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t first = s.first_step[i];
    const std::uint64_t last = first + s.stride - 1;
    std::string info = s.stride == 1 ? fmt::format("step {}", first) : fmt::format("steps {}–{}", first, last);
    info += ": wall " + ms(at(s.wall_ms, i)) + " ms";
    for (std::size_t k = 0; k < kBreakdownPartCount; ++k)
      info += fmt::format(", {} {}", kKinds[k].name, ms(at(series_of(s, k), i)));
    if (i < s.rss_mb.size() && s.rss_mb[i] > 0) info += fmt::format(", RSS {:.0f} MB", s.rss_mb[i]);
    o += fmt::format("<g class=\"col\" data-info=\"{}\"><title>{}</title>", esc(info), esc(info));
    double base = 0;
    // A hair of overlap between dense columns avoids anti-aliasing seams; a
    // few wide columns are capped at 60 units so one step is not a wall.
    const double w = std::min(std::max(col_w * (n > 60 ? 1.0 : 0.86), 0.5) + (n > 60 ? 0.3 : 0), 60.0);
    const double x = left + col_w * static_cast<double>(i) + std::max(0.0, (col_w - w) / 2);
    for (std::size_t k = 0; k < kBreakdownPartCount; ++k) {
      const double v = at(series_of(s, k), i);
      if (v <= 0) continue;
      o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", xy(x), xy(y_of(base + v)),
                       xy(w), xy(v / axis_max * plot_h), kKinds[k].color);
      base += v;
    }
    // Invisible full-height target so the hover works over empty space too.
    o += fmt::format("<rect class=\"hit\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></g>", xy(x), xy(plot_top),
                     xy(col_w), xy(plot_h));
  }
  // Wall time as a line: equals the stack when the parts add up.
  std::string points;
  for (std::size_t i = 0; i < n && i < s.wall_ms.size(); ++i)
    points += xy(left + col_w * (static_cast<double>(i) + 0.5)) + "," + xy(y_of(at(s.wall_ms, i))) + " ";
  o += "<polyline class=\"wall\" points=\"" + points + "\"/>";
  o += fmt::format("<line class=\"axis\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>", xy(left), xy(right), xy(bottom),
                   xy(bottom));
  const std::size_t label_every = std::max<std::size_t>(1, n / 8);
  for (std::size_t i = 0; i < n; i += label_every)
    o += fmt::format("<text class=\"ax\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     xy(left + col_w * (static_cast<double>(i) + 0.5)), xy(bottom + 16), s.first_step[i]);
  o += fmt::format("<text class=\"ax\" x=\"{}\" y=\"312\" text-anchor=\"middle\">step</text>", xy((left + right) / 2));
  o += "</svg>";
  legend(o);

  // Resident memory over the run, when sampled: steady growth is a leak.
  std::vector<double> rss;
  for (std::size_t i = 0; i < n && i < s.rss_mb.size(); ++i) rss.push_back(s.rss_mb[i]);
  const bool have_rss = !rss.empty() && *std::min_element(rss.begin(), rss.end()) > 0;
  if (have_rss && rss.size() >= 2) {
    const double lo = *std::min_element(rss.begin(), rss.end()), hi = *std::max_element(rss.begin(), rss.end());
    const double span = std::max(hi - lo, std::max(1.0, hi * 0.01));
    std::string pts;
    for (std::size_t i = 0; i < rss.size(); ++i)
      pts += xy(left + col_w * (static_cast<double>(i) + 0.5)) + "," + xy(70 - (rss[i] - lo) / span * 60) + " ";
    o += fmt::format(
        "<h3>Resident memory</h3><svg id=\"rss-chart\" class=\"chart\" viewBox=\"0 0 1000 80\" role=\"img\" "
        "aria-label=\"RSS over steps\">"
        "<text class=\"ax\" x=\"{}\" y=\"14\" text-anchor=\"end\">{:.0f} MB</text><text class=\"ax\" x=\"{}\" y=\"74\" "
        "text-anchor=\"end\">{:.0f} MB</text>"
        "<polyline class=\"rss\" points=\"{}\"/></svg>",
        xy(left - 6), lo + span, xy(left - 6), lo, pts);
  }
  o += "</section>\n";
}

// Histogram bucket bounds in ns for the log-linear layout of src/stats/histogram.hpp.
std::pair<double, double> bucket_range_ns(std::uint32_t index, int sub_bits) {
  const std::uint64_t sub_count = 1ull << sub_bits;
  if (index < sub_count) return {static_cast<double>(index), static_cast<double>(index) + 1};
  const int shift = static_cast<int>(index >> sub_bits) - 1;
  const std::uint64_t sub = index & (sub_count - 1);
  if (shift > 62) return {0, 0};
  const double low = std::ldexp(static_cast<double>(sub_count + sub), shift);
  return {low, low + std::ldexp(1.0, shift)};
}

// A small histogram (log-spaced bins between the distribution's min and max).
std::string sparkline(const HistogramData& h, double min_ms, double max_ms) {
  if (h.buckets.empty() || h.sub_bucket_bits <= 0 || h.sub_bucket_bits > 20 || !(max_ms > 0)) return "";
  constexpr int kBins = 24;
  const double lo = std::log(std::max(min_ms, 1e-6)), hi = std::log(std::max(max_ms, min_ms * 1.0001 + 1e-6));
  std::vector<double> bins(kBins, 0);
  for (const auto& [index, count] : h.buckets) {
    const auto [low_ns, high_ns] = bucket_range_ns(index, h.sub_bucket_bits);
    const double mid_ms = (low_ns + high_ns) / 2 / 1e6;
    int b = hi > lo ? static_cast<int>((std::log(std::max(mid_ms, 1e-6)) - lo) / (hi - lo) * kBins) : 0;
    b = std::clamp(b, 0, kBins - 1);
    bins[static_cast<std::size_t>(b)] += static_cast<double>(count);
  }
  const double peak = *std::max_element(bins.begin(), bins.end());
  if (!(peak > 0)) return "";
  std::string o = "<svg class=\"spark\" viewBox=\"0 0 96 22\" preserveAspectRatio=\"none\">";
  for (int b = 0; b < kBins; ++b) {
    const double v = bins[static_cast<std::size_t>(b)];
    if (v <= 0) continue;
    // Square-root scale: the tail (a few slow occurrences) stays visible next to the mode.
    const double height = std::max(1.5, std::sqrt(v / peak) * 21);
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"3.4\" height=\"{}\"/>", b * 4, xy(22 - height), xy(height));
  }
  return o + "</svg>";
}

// Phases whose name is used at several call sites: one row per site.
void call_sites_table(std::string& o, const Report& r) {
  bool any = false;
  for (const auto& p : r.phases) any = any || !p.sites.empty();
  if (!any) return;
  o += "<h3>Call sites</h3><p class=\"note\">Phases whose name is used in more than one place: the row above "
       "merges them; here each place on its own.</p>";
  table_head(o, "id=\"call-sites\" class=\"stats\"", {"phase", "role", "file:line", "count", "mean ms", "p50", "p99"});
  for (const auto& p : r.phases) {
    for (const auto& site : p.sites) {
      o += fmt::format("<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td>", esc(p.name), to_string(p.thread_role),
                       esc(detail::call_site_label(site)));
      number_cells(
          o, {std::to_string(site.host_ms.count), ms(site.host_ms.mean), ms(site.host_ms.p50), ms(site.host_ms.p99)});
      o += "</tr>";
    }
    if (p.sites_merged > 0)
      o += fmt::format(
          "<tr><td class=\"name\">{}</td><td colspan=\"6\">{} more call sites merged into "
          "\"(other call sites)\"</td></tr>",
          esc(p.name), p.sites_merged);
  }
  o += "</tbody></table>";
}

// Imported traces: each phase's top operators (aten:: ops on the host, then
// GPU kernels) by self time, TensorBoard's operator view per phase.
void top_operators_table(std::string& o, const Report& r) {
  bool any = false;
  for (const auto& p : r.phases) any = any || !p.top_operators.empty();
  if (!any) return;
  o += "<h3>Top operators per phase</h3><p class=\"note\">The trace's operators with the most self time inside each "
       "phase: cpu_op = host time minus nested ops, kernel = GPU time of the kernels the phase launched; totals over "
       "the measured steps.</p>";
  table_head(o, "id=\"top-operators\" class=\"stats\"", {"phase", "kind", "operator", "count", "self ms"});
  // Kernel names run to hundreds of characters: the full one is the cell's title.
  for (const auto& p : r.phases)
    for (const auto& op : p.top_operators) {
      o += fmt::format("<tr><td class=\"name\">{}</td><td>{}</td><td class=\"name\" title=\"{}\">{}</td>", esc(p.name),
                       esc(op.kind), esc(op.name), esc(detail::shortened(op.name, 90)));
      number_cells(o, {std::to_string(op.count), ms(op.self_ms)});
      o += "</tr>";
    }
  o += "</tbody></table>";
}

void phases_section(std::string& o, const Report& r) {
  o += "<section id=\"phases\" class=\"card\"><h2>Phases</h2>";
  if (r.phases.empty()) {
    o += "<p class=\"note\">No phases were recorded.</p></section>\n";
    return;
  }
  // One shared log axis for every phase's box plot, so phases compare at a glance.
  double lo = 1e300, hi = 0;
  for (const auto& p : r.phases) {
    if (p.count == 0) continue;
    lo = std::min(lo, std::max(p.host_ms.min, 1e-4));
    hi = std::max(hi, p.host_ms.max);
  }
  if (!(hi > 0) || lo > hi) {
    lo = 1e-3;
    hi = 1;
  }
  const double log_lo = std::floor(std::log10(lo)), log_hi = std::max(std::ceil(std::log10(hi)), log_lo + 1);
  auto x_of = [&](double v) {
    const double l = std::log10(std::max(v, std::pow(10, log_lo)));
    return 4 + (l - log_lo) / (log_hi - log_lo) * 202;  // 210-unit wide box plot
  };
  o += "<p class=\"note\">Box plots of each phase's duration per occurrence (host clock, inclusive), on a shared log "
       "axis: "
       "whiskers min–p99, box p50–p90, dot max. The small histogram is the full distribution (log-spaced bins, "
       "square-root heights). "
       "Self = exclusive of nested phases. Share = self time as a fraction of step time (step-thread phases; on a "
       "device-clocked run, the phase's device time, with the host clock's share beside it); "
       "background "
       "phases show how much of their time overlapped a step instead. Click a column header to sort.</p>";
  o += "<table id=\"phase-table\" class=\"phases "
       "sortable\"><thead><tr><th>phase</th><th>kind</th><th>role</th><th>count</th>"
       "<th>mean ms</th><th>p50</th><th>p99</th><th>max</th><th>self ms</th><th>share</th><th>device "
       "ms</th><th>distribution ";
  o += fmt::format("<span class=\"ax\">({} ms … {} ms)</span></th><th>histogram</th></tr></thead><tbody>",
                   ms(std::pow(10, log_lo)), ms(std::pow(10, log_hi)));
  for (const auto& p : r.phases) {
    const auto& d = p.host_ms;
    // Device-clocked runs: the share is the device's; the host clock's beside it.
    const std::string share =
        p.thread_role == ThreadRole::step
            ? pct(p.share_of_step) + (p.host_share_of_step ? " (host " + pct(*p.host_share_of_step) + ")" : "")
            : (p.overlap_with_steps ? "overlap " + pct(*p.overlap_with_steps) : std::string("–"));
    const double share_sort = p.thread_role == ThreadRole::step ? p.share_of_step : -1;
    o += fmt::format(
        "<tr><td class=\"name\">{}</td><td><i class=\"sw\" style=\"background:{}\"></i>{}</td><td>{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\" data-sort=\"{}\">{}</td><td class=\"n\">{}</td>",
        esc(p.name), kKinds[detail::kind_index(p.kind)].color, to_string(p.kind), to_string(p.thread_role), p.count,
        ms(d.mean), ms(d.p50), ms(d.p99), ms(d.max), ms(p.self_ms.mean), num(share_sort), share,
        p.device_ms ? ms(p.device_ms->mean) : "–");
    if (p.count > 0) {
      const double x_min = x_of(d.min), x_p50 = x_of(d.p50), x_p90 = x_of(d.p90), x_p99 = x_of(d.p99),
                   x_max = x_of(d.max);
      o += fmt::format(
          "<td><svg class=\"box\" viewBox=\"0 0 210 22\"><title>min {} · p50 {} · p90 {} · p99 {} · max {} ms</title>"
          "<line class=\"whisker\" x1=\"{}\" x2=\"{}\" y1=\"11\" y2=\"11\"/><line class=\"whisker\" x1=\"{}\" "
          "x2=\"{}\" y1=\"5\" y2=\"17\"/>"
          "<line class=\"whisker\" x1=\"{}\" x2=\"{}\" y1=\"5\" y2=\"17\"/>"
          "<rect class=\"iqr\" x=\"{}\" y=\"4\" width=\"{}\" height=\"14\"/><line class=\"median\" x1=\"{}\" x2=\"{}\" "
          "y1=\"3\" y2=\"19\"/>"
          "<circle class=\"max\" cx=\"{}\" cy=\"11\" r=\"2.5\"/></svg></td>",
          ms(d.min), ms(d.p50), ms(d.p90), ms(d.p99), ms(d.max), xy(x_min), xy(x_p99), xy(x_min), xy(x_min), xy(x_p99),
          xy(x_p99), xy(x_p50), xy(std::max(1.5, x_p90 - x_p50)), xy(x_p50), xy(x_p50), xy(x_max));
    } else {
      o += "<td></td>";
    }
    o += "<td>" + sparkline(p.histogram, d.min, d.max) + "</td></tr>";
  }
  o += "</tbody></table>";
  call_sites_table(o, r);
  top_operators_table(o, r);
  o += "</section>\n";
}

void what_if_section(std::string& o, const Report& r) {
  o += "<section id=\"what-if\" class=\"card\"><h2>What if…</h2>";
  if (r.what_if.empty()) {
    o += "<p class=\"note\">No projections (no measured steps or no significant phase).</p></section>\n";
    return;
  }
  o +=
      "<p class=\"note\">Amdahl projections from the measured shares: what the whole step would become if one part got "
      "faster. Change one thing at a time and measure again.</p>";
  o += "<table id=\"what-if-table\" class=\"sortable\"><thead><tr><th>if</th><th>were</th><th>share</th><th>step now "
       "ms</th>"
       "<th>projected ms</th><th>change</th><th></th><th>note</th></tr></thead><tbody>";
  for (const auto& x : r.what_if) {
    const double gain = std::clamp(-x.step_change_pct, 0.0, 100.0);
    o += fmt::format(
        "<tr><td>{}</td><td class=\"nw\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\" data-sort=\"{}\">{:+.1f}%</td><td><span class=\"gain\" "
        "style=\"width:{:.0f}px\"></span></td><td>{}</td></tr>",
        esc(x.target), x.speedup == 0 ? std::string("free") : esc(fmt::format("{:g}× faster", x.speedup)), pct(x.share),
        ms(x.step_ms_now), ms(x.step_ms_projected), num(x.step_change_pct), x.step_change_pct, gain * 1.2, esc(x.note));
  }
  o += "</tbody></table></section>\n";
}

void findings_section(std::string& o, const Report& r) {
  o += "<section id=\"findings\" class=\"card\"><h2>Findings</h2>";
  if (r.findings.empty()) {
    o += "<p class=\"note\">No findings.</p>";
  } else {
    o += "<ul class=\"findings\">";
    for (const auto& f : r.findings) {
      o += fmt::format("<li class=\"{}\"><span class=\"badge\">{}</span> <code>{}</code> {}", esc(f.severity),
                       esc(f.severity), esc(f.kind), esc(f.message));
      if (!f.values.empty()) {
        o += "<span class=\"vals\">";
        for (const auto& [key, value] : f.values) o += " " + esc(key) + "=" + num(value);
        o += "</span>";
      }
      o += "</li>";
    }
    o += "</ul>";
  }
  o += "</section>\n";
}

void warnings_section(std::string& o, const Report& r) {
  o += "<section id=\"warnings\" class=\"card\"><h2>Warnings and dropped records</h2>";
  if (r.dropped_records > 0)
    o += fmt::format(
        "<p class=\"warn\" id=\"dropped\"><b>{} of {} records were dropped</b> (a ring was full): the statistics "
        "undercount those phases.</p>",
        r.dropped_records, r.total_records);
  else
    o += fmt::format("<p id=\"dropped\">No records dropped ({} recorded).</p>", r.total_records);
  if (r.steps.warmup_excluded > 0)
    o += fmt::format("<p>{} warm-up step{} left out of the statistics (source: {}).</p>", r.steps.warmup_excluded,
                     r.steps.warmup_excluded == 1 ? "" : "s",
                     esc(r.run.warmup_source.empty() ? "?" : r.run.warmup_source));
  for (const std::string& note : detail::steps_left_out_notes(r.steps)) o += "<p>" + esc(note) + ".</p>";
  if (!r.warnings.empty()) {
    o += "<ul class=\"warnings\">";
    for (const auto& w : r.warnings) o += "<li>" + esc(w) + "</li>";
    o += "</ul>";
  } else {
    o += "<p class=\"note\">No warnings.</p>";
  }
  o += "</section>\n";
}

void run_section(std::string& o, const Report& r) {
  o += "<section id=\"run\" class=\"card\"><h2>Run</h2><div class=\"cols\"><div><h3>Configuration</h3>";
  if (r.run.config.empty()) {
    o += "<p class=\"note\">No set_config() values: comparisons will not know what changed between runs.</p>";
  } else {
    std::vector<std::pair<std::string, std::string>> rows(r.run.config.begin(), r.run.config.end());
    kv_table(o, rows, "config");
  }
  o += "<h3>Build and clock</h3>";
  std::vector<std::pair<std::string, std::string>> build(r.run.build.begin(), r.run.build.end());
  build.emplace_back("clock", r.run.clock_source.empty() ? "?" : r.run.clock_source);
  if (r.run.clock_tsc_ghz > 0)
    build.emplace_back("TSC", fmt::format("{:.3f} GHz (±{:.1f} ppm)", r.run.clock_tsc_ghz, r.run.clock_error_ppm));
  build.emplace_back("warm-up steps", fmt::format("{} ({})", r.run.warmup_steps, r.run.warmup_source));
  build.emplace_back("schema version", std::to_string(r.schema_version));
  kv_table(o, build, "build");
  o += "</div><div><h3>System</h3>";
  const SystemSignals& s = r.system;
  if (!s.available) {
    o += "<p class=\"note\">No system signals in this report.</p>";
  } else {
    std::vector<std::pair<std::string, std::string>> rows = {
        {"wall", fmt::format("{:.2f} s", s.wall_s)},
        {"CPU user / system", fmt::format("{:.2f} s / {:.2f} s", s.cpu_user_s, s.cpu_system_s)},
        {"cores available", std::to_string(s.cores_available)},
        {"CPU utilisation", pct(s.cpu_utilization)},
        {"page faults minor / major", fmt::format("{} / {}", s.minor_faults, s.major_faults)},
        {"context switches vol. / invol.", fmt::format("{} / {}", s.voluntary_switches, s.involuntary_switches)},
        {"storage read / write", fmt::format("{:.1f} MB / {:.1f} MB", static_cast<double>(s.read_bytes) / 1e6,
                                             static_cast<double>(s.write_bytes) / 1e6)},
        {"RSS start / peak / end",
         fmt::format("{:.0f} / {:.0f} / {:.0f} MB", s.rss_start_mb, s.rss_peak_mb, s.rss_end_mb)},
        {"input phases on CPU", s.input_on_cpu_fraction < 0 ? "not measured" : pct(s.input_on_cpu_fraction)},
        {"input phases in disk wait",
         s.input_disk_wait_fraction < 0 ? "not measured" : pct(s.input_disk_wait_fraction)},
        {"samples (cost)", fmt::format("{} ({} ms)", s.samples, ms(s.sampling_cost_ms))},
        {"stepscope's collector thread", fmt::format("{} ms of CPU", ms(s.collector_cpu_ms))},
    };
    kv_table(o, rows, "system");
  }
  o += "<h3>Device</h3>";
  const DeviceInfo& d = r.device;
  std::vector<std::pair<std::string, std::string>> dev = {{"status", d.status.empty() ? "?" : d.status}};
  if (!d.reason.empty()) dev.emplace_back("reason", d.reason);
  if (!d.name.empty()) dev.emplace_back("name", d.name);
  if (d.memory_capacity_mb > 0)
    dev.emplace_back("memory peak / capacity",
                     fmt::format("{:.0f} / {:.0f} MB", d.memory_peak_mb, d.memory_capacity_mb));
  std::vector<std::pair<std::string, double>> facts;  // by key, as the JSON lists them
  for_each_device_fact(
      [&facts](const char* key, const std::optional<double>& value) {
        if (value) facts.emplace_back(key, *value);
      },
      d.facts);
  std::sort(facts.begin(), facts.end());
  for (const auto& [k, v] : facts) dev.emplace_back(k, num(v));
  kv_table(o, dev, "device");
  o += "</div></div></section>\n";
}

// Inline, no external resources. Light and dark follow the viewer's setting.
constexpr const char* kStyle = R"CSS(
:root{--bg:#f6f7f9;--card:#fff;--fg:#1d2330;--mut:#5f6b7a;--line:#dfe3e8;--grid:#eceff3}
@media (prefers-color-scheme:dark){:root{--bg:#15181d;--card:#1e232a;--fg:#e6e9ee;--mut:#9aa5b1;--line:#333a44;--grid:#2a3038}}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1200px;margin:0 auto;padding:16px 20px 40px}header h1{margin:8px 0 0;font-size:22px}.sub{color:var(--mut);margin:2px 0 14px}.ending{margin:0 0 10px;padding:6px 10px;border-left:4px solid #c0392b;background:#fdf0ee}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:0 0 14px}
h2{font-size:17px;margin:0 0 8px}h3{font-size:14px;margin:14px 0 6px;color:var(--mut)}
.verdict{border-left:8px solid}.big{font-size:24px;margin:4px 0}.cat{font-weight:700;text-transform:uppercase}.sev{color:var(--mut)}
.conf{font-size:14px;color:var(--mut);margin-left:12px;white-space:nowrap}
.meter{display:inline-block;width:90px;height:8px;background:var(--grid);border-radius:4px;margin-left:6px;vertical-align:middle;overflow:hidden}
.meter span{display:block;height:100%;background:var(--mut)}
.summary{font-size:15px;margin:6px 0 10px}.note{color:var(--mut);font-size:13px;margin:6px 0}
.ranking{display:flex;height:22px;border-radius:4px;overflow:hidden;background:var(--grid)}
.ranking span{color:#fff;font-size:12px;line-height:22px;padding-left:5px;white-space:nowrap;overflow:hidden}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:middle}
th{font-weight:600;color:var(--mut);font-size:12px}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.sortable th{cursor:pointer;user-select:none}table.sortable th.sorted::after{content:" \2195"}
table.stats{width:auto}table.kv{width:auto}table.kv th{padding-right:18px}
tr.no td{color:var(--mut)}tr.yes td:first-child{color:#2e9d4f;font-weight:700}tr.against td:first-child{color:#c0392b;font-weight:700}
details summary{cursor:pointer;color:var(--mut);font-size:13px;margin:6px 0}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
.chart{width:100%;height:auto;display:block}#breakdown-chart{height:46px;border-radius:4px}
.legend span{margin-right:14px;white-space:nowrap;font-size:12px}.legend i,i.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.grid{stroke:var(--grid);stroke-width:1}.axis{stroke:var(--mut);stroke-width:1}.ax{fill:var(--mut);font-size:11px}
.wall{fill:none;stroke:var(--fg);stroke-width:1.2;stroke-opacity:.55}.rss{fill:none;stroke:#b07aa1;stroke-width:1.6}
.col .hit{fill:transparent}.col:hover rect:not(.hit){opacity:.75}
.readout{font:12px ui-monospace,Menlo,Consolas,monospace;color:var(--mut);min-height:18px}
.box{width:210px;height:22px}.whisker{stroke:var(--mut);stroke-width:1.3}.iqr{fill:#4e79a7;fill-opacity:.35;stroke:#4e79a7}
.median{stroke:var(--fg);stroke-width:2}.max{fill:#e15759}.spark{width:72px;height:22px;fill:#4e79a7}
table.phases{font-size:13px}table.phases td,table.phases th{padding:4px 5px}
td.host{max-width:220px;overflow-wrap:anywhere;font-size:12px}td.nw{white-space:nowrap}
td.name{font-weight:600;min-width:90px;max-width:240px;overflow-wrap:anywhere}
.gain{display:inline-block;height:10px;background:#59a14f;border-radius:2px}
ul.findings{padding-left:0;list-style:none}ul.findings li{padding:5px 0;border-bottom:1px solid var(--line)}
.badge{display:inline-block;font-size:11px;border-radius:3px;padding:0 6px;color:#fff;background:#7a7a7a;text-transform:uppercase}
li.warning .badge{background:#e8a33d}li.critical .badge{background:#d64545}li.info .badge{background:#4e79a7}
.vals{color:var(--mut);font-size:12px}.warn{color:#b3261e}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:24px}@media (max-width:800px){.cols{grid-template-columns:1fr}}
.band{fill:#4e79a7;fill-opacity:.25}.strag{fill:#d64545;font-size:10px}tr.straggler td{color:#d64545}
footer{color:var(--mut);font-size:12px;text-align:center}
)CSS";

// Runs first: any later script error lands in data-errors (the tests read it).
constexpr const char* kErrorCatcher = R"JS(
window.onerror=function(msg,src,line,col){var r=document.documentElement;
r.setAttribute('data-errors',(r.getAttribute('data-errors')||'')+msg+' (line '+line+':'+col+'); ');};
)JS";

// Hover readout for the step chart and sortable tables; then marks the page rendered.
constexpr const char* kScript = R"JS(
(function(){
var readout=document.getElementById('series-readout');
var cols=document.querySelectorAll('#series-chart .col');
for(var i=0;i<cols.length;i++){cols[i].addEventListener('mouseenter',function(){if(readout)readout.textContent=this.getAttribute('data-info');});}
function key(td){var s=td.getAttribute('data-sort');var t=(s!==null?s:td.textContent).trim();var v=parseFloat(t);
return /^[-+]?\.?[0-9]/.test(t)&&!isNaN(v)?v:t.toLowerCase();}
var tables=document.querySelectorAll('table.sortable');
for(var t=0;t<tables.length;t++){(function(table){var ths=table.querySelectorAll('thead th');
for(var c=0;c<ths.length;c++){(function(col,th){th.addEventListener('click',function(){
var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);var desc=th.getAttribute('data-dir')!=='desc';
rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);
var d=typeof x==='number'&&typeof y==='number'?x-y:(String(x)<String(y)?-1:String(x)>String(y)?1:0);return desc?-d:d;});
for(var r=0;r<rows.length;r++)body.appendChild(rows[r]);
for(var k=0;k<ths.length;k++){ths[k].classList.remove('sorted');}th.classList.add('sorted');th.setAttribute('data-dir',desc?'desc':'asc');});})(c,ths[c]);}
})(tables[t]);}
document.documentElement.setAttribute('data-rendered','ok');
})();
)JS";

std::string build_page(const Report& r) {
  std::string o;
  o.reserve(64 * 1024 + r.steps.series.first_step.size() * 700);
  const std::string title = fmt::format(
      "stepscope: {} ({})", r.bottleneck.category.empty() ? "unknown" : r.bottleneck.category, r.run.source);
  o += "<!DOCTYPE html>\n<html lang=\"en\" data-rendered=\"pending\"><head><meta charset=\"utf-8\">";
  o += "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">";
  // No network, even by accident: the page may only use what it carries.
  o += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "script-src 'unsafe-inline'; img-src data:\">";
  o += "<title>" + esc(title) + "</title><script>" + kErrorCatcher + "</script><style>" + kStyle +
       "</style></head>\n<body><main>\n";
  header(o, r);
  verdict_section(o, r);
  breakdown_section(o, r);
  series_section(o, r);
  phases_section(o, r);
  what_if_section(o, r);
  findings_section(o, r);
  ranks_section(o, r);
  warnings_section(o, r);
  run_section(o, r);
  o += "<footer>Written by stepscope " + esc(r.run.library_version) + " · report schema " +
       std::to_string(r.schema_version) + "</footer>\n</main><script>";
  o += kScript;
  o += "</script></body></html>\n";
  return o;
}

}  // namespace
}  // namespace detail::html

std::string html_report(const Report& report) {
  try {
    return detail::html::build_page(report);
  } catch (...) {
    return "<!DOCTYPE html><html><body><p>stepscope: could not build the HTML report (out of "
           "memory?)</p></body></html>\n";
  }
}

bool write_html_report(const Report& report, const std::string& path, std::string& error) {
  try {
    return detail::write_file_atomically(path, html_report(report), error);  // a browser never opens half a page
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

}  // namespace v1
}  // namespace stepscope
