// The HTML report's shared pieces (html_parts.hpp): text helpers, the nice
// chart axis, the kinds' legend and the key-value table.
#include "report/html_parts.hpp"

#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail::html {

std::string esc(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab/newline are invalid in HTML text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
          out += "&#xFFFD;";
        else
          out += c;
    }
  }
  return out;
}

std::string ms(double v) {
  if (!std::isfinite(v)) return "–";
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a < 0.01) return fmt::format("{:.4f}", v);
  if (a < 1) return fmt::format("{:.3f}", v);
  if (a < 100) return fmt::format("{:.2f}", v);
  return fmt::format("{:.1f}", v);
}

std::string pct(double fraction) {
  if (!std::isfinite(fraction)) return "–";
  return fmt::format("{:.1f}%", fraction * 100);
}

std::string num(double v) {
  if (!std::isfinite(v)) return "–";
  return fmt::format("{:.4g}", v);
}

std::string xy(double v) {
  if (!std::isfinite(v)) v = 0;
  return fmt::format("{:.2f}", v);
}

std::pair<double, double> nice_axis(double max_value, int ticks) {
  if (!(max_value > 0) || !std::isfinite(max_value)) return {1, 0.25};
  const double raw = max_value / ticks;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  return {std::ceil(max_value / step) * step, step};
}

void legend(std::string& o) {
  o += "<p class=\"legend\">";
  for (const auto& k : kKinds)
    o += fmt::format("<span title=\"{}\"><i style=\"background:{}\"></i>{}</span>", esc(k.meaning), k.color, k.name);
  o += "</p>";
}

void table_head(std::string& o, const char* attributes, std::initializer_list<const char*> headers) {
  o += fmt::format("<table {}><thead><tr>", attributes);
  for (const char* header : headers) o += fmt::format("<th>{}</th>", header);
  o += "</tr></thead><tbody>";
}

void number_cells(std::string& o, std::initializer_list<std::string> values) {
  for (const std::string& value : values) o += "<td class=\"n\">" + value + "</td>";
}

void kv_table(std::string& o, const std::vector<std::pair<std::string, std::string>>& rows, const char* id) {
  o += fmt::format("<table class=\"kv\" id=\"{}\"><tbody>", id);
  for (const auto& [k, v] : rows) o += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>";
  o += "</tbody></table>";
}

}  // namespace detail::html
}  // namespace v1
}  // namespace stepscope
