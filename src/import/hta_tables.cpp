// HTA's tables (report.device.hta) from an imported timeline, and their text
// view. The numbers come from the timeline analyses that reproduce Holistic
// Trace Analysis 0.6.1 (tests/timeline/reference_test.cpp); this file only
// lays them out under HTA's names, units (microseconds) and denominators.
#include "import/hta_tables.hpp"
#include "import/trace_import.hpp"

#include <fmt/format.h>

#include <string>

namespace stepscope {
inline namespace v1 {

namespace {

double us(std::int64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

double ratio(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

}  // namespace

HtaTables hta_tables(const timeline::Timeline& tl) {
  if (tl.device_ops.empty()) return HtaTables{};
  return hta_tables(tl, timeline::shared_device_analyses(tl));
}

HtaTables hta_tables(const timeline::Timeline& tl, const timeline::SharedDeviceAnalyses& shared) {
  HtaTables h;
  if (tl.device_ops.empty()) return h;
  h.present = true;
  h.rank = tl.rank;
  for (const auto& s : tl.steps) h.steps_kept.push_back(s.number);

  const timeline::TemporalBreakdown t = timeline::temporal_breakdown(tl);
  h.temporal_breakdown = {us(t.idle_ns),    us(t.compute_ns),    us(t.non_compute_ns),   us(t.span_ns),
                          t.idle_percent(), t.compute_percent(), t.non_compute_percent()};

  for (const auto& slice : timeline::kernel_type_breakdown(tl))
    h.kernel_type_breakdown.push_back({slice.label, us(slice.time_ns), slice.percent});

  const timeline::CommComputeOverlap& overlap = shared.overlap;
  if (overlap.has_communication) h.comp_comm_overlap_pctg = overlap.overlap_percent();

  // HTA lists a category only when some op fell in it; "other" always (it
  // holds each stream's first op).
  for (const auto& s : shared.idle) {
    const std::int64_t total = s.total_ns();
    if (s.host_wait_count > 0)
      h.idle_time_breakdown.push_back({s.stream, "host_wait", us(s.host_wait_ns), ratio(s.host_wait_ns, total)});
    if (s.kernel_wait_count > 0)
      h.idle_time_breakdown.push_back({s.stream, "kernel_wait", us(s.kernel_wait_ns), ratio(s.kernel_wait_ns, total)});
    h.idle_time_breakdown.push_back({s.stream, "other", us(s.other_ns), ratio(s.other_ns, total)});
  }

  const timeline::LaunchStatsOptions cutoffs;  // the options shared.cuda_launches was computed with
  const timeline::LaunchStats& l = shared.cuda_launches;
  h.launch_stats = {l.pairs,
                    l.short_kernels,
                    l.runtime_outliers,
                    l.launch_delay_outliers,
                    us(cutoffs.runtime_cutoff_ns),
                    us(cutoffs.launch_delay_cutoff_ns)};
  return h;
}

std::string format_hta(const Report& r) {
  const HtaTables& h = r.device.hta;
  if (!h.present) return "HTA tables: none (the report holds no imported device timeline)\n";
  std::string out = fmt::format("== HTA tables, rank {} (Holistic Trace Analysis 0.6.1 definitions) ==\n", h.rank);
  out += "steps kept:";
  for (const auto s : h.steps_kept) out += fmt::format(" {}", s);
  out += h.steps_kept.empty() ? " none (no ProfilerStep#N: the whole trace)\n" : "\n";

  const auto& t = h.temporal_breakdown;
  out += "\ntemporal breakdown (over the kernel span)\n";
  out += fmt::format("  {:<16} {:>14} {:>8}\n", "", "time (us)", "%");
  out += fmt::format("  {:<16} {:>14.0f} {:>8.2f}\n", "idle", t.idle_us, t.idle_pctg);
  out += fmt::format("  {:<16} {:>14.0f} {:>8.2f}\n", "compute", t.compute_us, t.compute_pctg);
  out += fmt::format("  {:<16} {:>14.0f} {:>8.2f}\n", "non-compute", t.non_compute_us, t.non_compute_pctg);
  out += fmt::format("  {:<16} {:>14.0f}\n", "kernel time", t.kernel_time_us);

  out += "\nkernel type breakdown\n";
  for (const auto& k : h.kernel_type_breakdown)
    out += fmt::format("  {:<40} {:>14.0f} us {:>6.1f}%\n", k.kernel_type, k.sum_us, k.percentage);
  if (h.comp_comm_overlap_pctg)
    out += fmt::format("  computation/communication overlap: {:.2f}% of communication\n", *h.comp_comm_overlap_pctg);

  out += "\nidle time breakdown (per stream)\n";
  for (const auto& i : h.idle_time_breakdown)
    out += fmt::format("  stream {:<6} {:<12} {:>14.0f} us  ratio {:.2f}\n", i.stream, i.idle_category, i.idle_time_us,
                       i.idle_time_ratio);

  const auto& l = h.launch_stats;
  out += fmt::format(
      "\nlaunch stats: {} launch/op pairs; {} short kernels (ran shorter than their launch); {} runtime outliers "
      "(> {:.0f} us); {} launch-delay outliers (> {:.0f} us)\n",
      l.pairs, l.short_kernels, l.runtime_outliers, l.runtime_cutoff_us, l.launch_delay_outliers,
      l.launch_delay_cutoff_us);
  return out;
}

}  // namespace v1
}  // namespace stepscope
