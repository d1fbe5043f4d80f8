// src/report/html_parts.hpp (not installed) — what the HTML report's files
// share: the text helpers (escaping, numbers, SVG coordinates), the step
// breakdown's kinds and colours, and the chart and table pieces several
// sections draw. html.cpp builds the page and the single-run sections,
// html_ranks.cpp the Ranks card of a merged report, html_parts.cpp defines
// what is declared here.
#pragma once

#include <stepscope/report.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::html {

// ---- text helpers -----------------------------------------------------------

// For element content and attribute values alike.
std::string esc(const std::string& text);

// Milliseconds with precision that suits their size.
std::string ms(double v);

std::string pct(double fraction);

std::string num(double v);

// SVG coordinates: finite, two decimals.
std::string xy(double v);

// ---- the step breakdown's kinds ---------------------------------------------

struct KindStyle {
  const char* name;
  const char* color;
  const char* meaning;
};

// The parts of a step's breakdown: the phase kinds (kPhaseKinds, whose order
// is the stacking order, bottom to top, in every chart), then the step time
// in no phase.
inline constexpr std::size_t kBreakdownPartCount = kPhaseKindCount + 1;
inline constexpr KindStyle kKinds[kBreakdownPartCount] = {
    {phase_kind_name(PhaseKind::input), "#f28e2b", "waiting for the input pipeline"},
    {phase_kind_name(PhaseKind::compute), "#4e79a7", "forward / backward / optimizer math"},
    {phase_kind_name(PhaseKind::memory), "#b07aa1", "copies and memory management"},
    {phase_kind_name(PhaseKind::communication), "#59a14f", "collectives and other ranks"},
    {phase_kind_name(PhaseKind::other), "#9c9c9c", "phases of kind other"},
    {"unattributed", "#e15759", "in the step, in no phase (framework, launch, scheduling)"},
};

// The breakdown's parts in kKinds order (ms per step): a step's, or a rank's.
template <class Parts>  // StepBreakdown or RankSummary
std::vector<double> breakdown_parts(const Parts& b) {
  std::vector<double> parts(b.kind_ms.begin(), b.kind_ms.end());
  parts.push_back(b.unattributed_ms);
  return parts;
}

// A "nice" axis maximum and tick step (1, 2, 5 × 10^k) for [0, max].
std::pair<double, double> nice_axis(double max_value, int ticks);

// A chart's horizontal grid lines from 0 to axis_max every `tick`, each
// labelled at the left edge; y_of maps a value to its SVG y.
template <class YOf>
void y_axis_grid(std::string& o, double left, double right, double axis_max, double tick, const YOf& y_of) {
  for (double t = 0; t <= axis_max * 1.0001; t += tick)
    o += fmt::format(
        "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text class=\"ax\" x=\"{}\" y=\"{}\" "
        "text-anchor=\"end\">{}</text>",
        xy(left), xy(right), xy(y_of(t)), xy(y_of(t)), xy(left - 6), xy(y_of(t) + 4), fmt::format("{:g}", t));
}

// The kinds' colour swatches with their names (their meaning on hover).
void legend(std::string& o);

// A table up to its first row: <table {attributes}><thead> with one <th> per
// header, then <tbody>; the caller writes the rows and "</tbody></table>".
void table_head(std::string& o, const char* attributes, std::initializer_list<const char*> headers);

// Right-aligned number cells, one <td class="n"> per value, in order.
void number_cells(std::string& o, std::initializer_list<std::string> values);

// A two-column table of names and values.
void kv_table(std::string& o, const std::vector<std::pair<std::string, std::string>>& rows, const char* id);

// ---- sections in their own files --------------------------------------------

// The Ranks card of a merged report (html_ranks.cpp); nothing for one process.
void ranks_section(std::string& o, const Report& r);

}  // namespace detail::html
}  // namespace v1
}  // namespace stepscope
