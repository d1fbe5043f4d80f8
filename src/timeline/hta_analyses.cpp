// HTA-compatible analyses on a Timeline. Each mirrors one HTA analysis
// (hta/analyzers/breakdown_analysis.py, communication_analysis.py,
// cuda_kernel_analysis.py) closely enough to reproduce its numbers,
// including its quirks where they change results (see docs/timeline.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "timeline/correlation_map.hpp"
#include "timeline/device_analyses.hpp"
#include "timeline/presorted_sort.hpp"
#include "timeline/sweep.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace timeline {

std::vector<Interval> merge_intervals(std::vector<Interval> intervals) {
  detail::stable_sort_presorted(intervals.begin(), intervals.end(),
                                [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  std::vector<Interval> merged;
  // HTA starts a new group when an interval starts after the running maximum
  // of all previous ends; touching intervals merge. An interval whose end is
  // before its start (possible after microsecond rounding) stays as a group
  // of negative length, exactly as in HTA.
  std::int64_t running_max_end = 0;
  for (const Interval& iv : intervals) {
    if (merged.empty() || iv.start_ns > running_max_end) {
      merged.push_back(iv);
      running_max_end = merged.size() == 1 ? iv.end_ns : std::max(running_max_end, iv.end_ns);
    } else {
      merged.back().end_ns = std::max(merged.back().end_ns, iv.end_ns);
      running_max_end = std::max(running_max_end, iv.end_ns);
    }
  }
  return merged;
}

std::int64_t total_length(const std::vector<Interval>& merged) {
  std::int64_t total = 0;
  for (const Interval& iv : merged) total += iv.end_ns - iv.start_ns;
  return total;
}

std::int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::int64_t total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].start_ns, b[j].start_ns);
    const std::int64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (hi > lo) total += hi - lo;
    if (a[i].end_ns < b[j].end_ns)
      ++i;
    else
      ++j;
  }
  return total;
}

namespace {

std::vector<Interval> merged_where(const Timeline& tl, bool (*pred)(const DeviceInterval&)) {
  std::vector<Interval> v;
  for (const DeviceInterval& d : tl.device_ops)
    if (pred(d)) v.push_back({d.start_ns, d.end_ns});
  return merge_intervals(std::move(v));
}

bool is_computation(const DeviceInterval& d) {
  return d.cls == KernelClass::computation;
}
bool is_communication(const DeviceInterval& d) {
  return d.cls == KernelClass::communication;
}
bool is_memory(const DeviceInterval& d) {
  return d.cls == KernelClass::memory;
}

}  // namespace

TemporalBreakdown temporal_breakdown(const Timeline& timeline) {
  TemporalBreakdown out;
  const auto all = merged_where(timeline, [](const DeviceInterval&) { return true; });
  if (all.empty()) return out;
  // HTA: span = end of the last merged group - start of the first.
  out.span_ns = all.back().end_ns - all.front().start_ns;
  out.idle_ns = out.span_ns - total_length(all);
  out.compute_ns = total_length(merged_where(timeline, is_computation));
  out.non_compute_ns = out.span_ns - out.compute_ns - out.idle_ns;
  return out;
}

std::vector<KernelTypeSlice> kernel_type_breakdown(const Timeline& timeline) {
  const std::vector<detail::SweepLayer> layers = {
      {merged_where(timeline, is_computation), kComputationBit},
      {merged_where(timeline, is_communication), kCommunicationBit},
      {merged_where(timeline, is_memory), kMemoryBit},
  };
  const std::map<std::int64_t, std::int64_t> slices = detail::sweep_running_sums(layers);
  std::vector<KernelTypeSlice> out;
  std::int64_t total = 0;
  for (const auto& [running, time] : slices) {
    if (running <= 0) continue;
    KernelTypeSlice s;
    s.classes = static_cast<unsigned>(running);
    // HTA names a slice by the classes whose bit is set, in class order.
    static const std::pair<unsigned, const char*> kNames[] = {
        {kComputationBit, "COMPUTATION"}, {kCommunicationBit, "COMMUNICATION"}, {kMemoryBit, "MEMORY"}};
    for (const auto& [bit, text] : kNames) {
      if ((s.classes & bit) == 0) continue;
      if (!s.label.empty()) s.label += " overlapping ";
      s.label += text;
    }
    s.time_ns = time;
    total += time;
    out.push_back(std::move(s));
  }
  for (KernelTypeSlice& s : out)
    s.percent = total > 0 ? 100.0 * static_cast<double>(s.time_ns) / static_cast<double>(total) : 0.0;
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelTypeSlice& a, const KernelTypeSlice& b) { return a.time_ns > b.time_ns; });
  return out;
}

CommComputeOverlap comm_compute_overlap(const Timeline& timeline) {
  CommComputeOverlap out;
  auto comm = merged_where(timeline, is_communication);
  auto comp = merged_where(timeline, is_computation);
  out.has_communication = !comm.empty();
  out.communication_ns = total_length(comm);
  out.computation_ns = total_length(comp);
  // HTA sweeps +1/-1 (comm) and +2/-2 (comp) and counts time at running == 3.
  const auto slices = detail::sweep_running_sums({{std::move(comm), 1}, {std::move(comp), 2}});
  const auto both = slices.find(3);
  out.overlapped_ns = both == slices.end() ? 0 : both->second;
  out.exposed_communication_ns = std::max<std::int64_t>(0, out.communication_ns - out.overlapped_ns);
  return out;
}

std::vector<StreamIdleBreakdown> idle_time_breakdown(const Timeline& timeline, std::int64_t kernel_wait_threshold_ns) {
  // Start of the host event that launched each device op (HTA's
  // index_correlation join); the last one wins when a correlation repeats.
  std::vector<char> device_side(timeline.names.size(), 0);  // device-side in HTA
  for (std::size_t i = 0; i < timeline.names.size(); ++i)
    device_side[i] = timeline.names[i] == "Event Sync" || timeline.names[i] == "Context Sync";
  detail::CorrelationMap<std::int64_t> runtime_start(timeline.host_ops.size() / 2);
  for (const HostInterval& h : timeline.host_ops) {
    if (h.correlation == -1 || device_side[h.name]) continue;
    runtime_start[h.correlation] = h.start_ns;
  }

  // Each stream's ops in timeline order (then by start), the streams in order
  // of first appearance. Few streams, thousands of ops: a flat index per
  // stream instead of a node-based map.
  std::vector<StreamIdleBreakdown> out;
  std::vector<std::vector<const DeviceInterval*>> ops_of;  // parallel to out
  detail::CorrelationMap<std::size_t> slot_of_stream(16);  // stream -> index in out + 1
  for (const DeviceInterval& d : timeline.device_ops) {
    if (d.kind != DeviceOpKind::kernel && d.kind != DeviceOpKind::memcpy && d.kind != DeviceOpKind::memset) continue;
    std::size_t& slot = slot_of_stream[d.stream];
    if (slot == 0) {
      StreamIdleBreakdown s;
      s.stream = d.stream;
      out.push_back(s);
      ops_of.emplace_back();
      slot = out.size();
    }
    ops_of[slot - 1].push_back(&d);
  }
  for (std::size_t k = 0; k < out.size(); ++k) {
    StreamIdleBreakdown& s = out[k];
    auto& ops = ops_of[k];
    detail::stable_sort_presorted(ops.begin(), ops.end(), [](const DeviceInterval* a, const DeviceInterval* b) {
      return a->start_ns < b->start_ns;
    });
    ++s.other_count;  // the first op has no gap; HTA files it under "other"
    for (std::size_t i = 1; i < ops.size(); ++i) {
      const std::int64_t previous_end = ops[i - 1]->end_ns;
      const std::int64_t gap = ops[i]->start_ns - previous_end;
      const std::int64_t* runtime = ops[i]->correlation != -1 ? runtime_start.find(ops[i]->correlation) : nullptr;
      const bool host_wait = runtime != nullptr && *runtime > previous_end;
      if (host_wait) {
        s.host_wait_ns += gap;
        ++s.host_wait_count;
      } else if (gap < kernel_wait_threshold_ns) {
        s.kernel_wait_ns += gap;
        ++s.kernel_wait_count;
      } else {
        s.other_ns += gap;
        ++s.other_count;
      }
    }
  }
  return out;
}

namespace {

bool is_launch_name(const std::string& name) {
  return name == "cudaLaunchKernel" || name == "cudaLaunchKernelExC" || name == "cudaMemcpyAsync" ||
         name == "cudaMemsetAsync" || name == "runFunction - job_prep_and_submit_for_execution";
}
// ROCm's counterparts (the `cuda_runtime` events of a HIP trace); HTA does not match them.
bool is_hip_launch_name(const std::string& name) {
  return name == "hipLaunchKernel" || name == "hipExtLaunchKernel" || name == "hipModuleLaunchKernel" ||
         name == "hipExtModuleLaunchKernel" || name == "hipMemcpyAsync" || name == "hipMemsetAsync";
}

// numpy's default (linear interpolation) percentile: the values at ranks lo
// and lo + 1 of the sorted list, found by selection instead of a full sort.
// Reorders `values`.
double percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0.0;
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = static_cast<std::size_t>(std::ceil(rank));
  const double frac = rank - static_cast<double>(lo);
  const auto at_lo = values.begin() + static_cast<std::ptrdiff_t>(lo);
  std::nth_element(values.begin(), at_lo, values.end());
  // After the selection every value behind rank lo is >= it: the next rank is their minimum.
  const double lo_value = *at_lo;
  const double hi_value = hi == lo ? lo_value : *std::min_element(at_lo + 1, values.end());
  return lo_value + (hi_value - lo_value) * frac;
}

}  // namespace

std::vector<LaunchPair> launch_pairs(const Timeline& timeline, const LaunchStatsOptions& options) {
  // Correlations of launch calls, then an inner join of host (stream -1) and
  // device events on them, as HTA's pd.merge does (a repeated correlation
  // yields every combination).
  // Per name: 0 not a launch, 1 a CUDA launch, 2 a ROCm launch.
  std::vector<char> launch_name(timeline.names.size(), 0);
  for (std::size_t i = 0; i < timeline.names.size(); ++i) {
    if (is_launch_name(timeline.names[i]))
      launch_name[i] = 1;
    else if (options.include_hip_launches && is_hip_launch_name(timeline.names[i]))
      launch_name[i] = 2;
  }
  // Per launch correlation, the host ops that carry it as a list in host_ops
  // order: first and last index, then `next` links (kNone ends a list).
  constexpr std::uint32_t kNone = ~std::uint32_t{0};
  struct HostList {
    std::uint32_t first = kNone, last = kNone;
  };
  detail::CorrelationMap<HostList> cpu_side(timeline.host_ops.size() / 2);
  for (const HostInterval& h : timeline.host_ops)
    if (launch_name[h.name]) cpu_side[h.correlation];
  for (const DeviceInterval& d : timeline.device_ops)
    if (launch_name[d.name]) cpu_side[d.correlation];
  std::vector<std::uint32_t> next(timeline.host_ops.size(), kNone);
  for (std::size_t i = 0; i < timeline.host_ops.size(); ++i) {
    HostList* list = cpu_side.find(timeline.host_ops[i].correlation);
    if (list == nullptr) continue;
    const auto index = static_cast<std::uint32_t>(i);
    if (list->first == kNone)
      list->first = index;
    else
      next[list->last] = index;
    list->last = index;
  }

  std::vector<LaunchPair> out;
  for (const DeviceInterval& d : timeline.device_ops) {
    const HostList* list = cpu_side.find(d.correlation);
    if (list == nullptr) continue;
    for (std::uint32_t i = list->first; i != kNone; i = next[i]) {
      const HostInterval& h = timeline.host_ops[i];
      LaunchPair p;
      p.correlation = d.correlation;
      p.cpu_duration_ns = h.duration_ns();
      p.gpu_duration_ns = d.duration_ns();
      p.launch_delay_ns = std::max<std::int64_t>(0, d.start_ns - h.end_ns);
      p.hip = launch_name[h.name] == 2;
      out.push_back(p);
    }
  }
  return out;
}

LaunchStats launch_statistics(const Timeline& timeline, const LaunchStatsOptions& options) {
  const std::vector<LaunchPair> pairs = launch_pairs(timeline, options);
  LaunchStats out;
  out.pairs = static_cast<std::int64_t>(pairs.size());
  std::vector<double> delays, runtimes;
  delays.reserve(pairs.size());
  runtimes.reserve(pairs.size());
  for (const LaunchPair& p : pairs) {
    // HTA's plot definitions (visualize_cuda_launch_kernel_info).
    if (p.cpu_duration_ns <= options.runtime_cutoff_ns && p.gpu_duration_ns < p.cpu_duration_ns) ++out.short_kernels;
    if (p.cpu_duration_ns > options.runtime_cutoff_ns) ++out.runtime_outliers;
    runtimes.push_back(static_cast<double>(p.cpu_duration_ns));
    if (p.hip) continue;  // its clocks need not agree with the device's (LaunchStatsOptions)
    if (p.launch_delay_ns > options.launch_delay_cutoff_ns) ++out.launch_delay_outliers;
    delays.push_back(static_cast<double>(p.launch_delay_ns));
  }
  out.launch_delay_p50_ns = percentile(delays, 50);
  out.launch_delay_p90_ns = percentile(delays, 90);
  out.launch_delay_p99_ns = percentile(delays, 99);
  out.runtime_p50_ns = percentile(runtimes, 50);
  out.runtime_p90_ns = percentile(runtimes, 90);
  const auto steps = std::max<std::size_t>(1, timeline.steps.size());
  out.launches_per_step = static_cast<double>(out.pairs) / static_cast<double>(steps);
  return out;
}

SharedDeviceAnalyses shared_device_analyses(const Timeline& timeline) {
  SharedDeviceAnalyses out;
  out.overlap = comm_compute_overlap(timeline);
  out.idle = idle_time_breakdown(timeline);
  const LaunchStatsOptions cuda_only;
  out.cuda_launches = launch_statistics(timeline, cuda_only);
  const bool any_hip_launch = std::any_of(timeline.names.begin(), timeline.names.end(), is_hip_launch_name);
  if (any_hip_launch) {
    LaunchStatsOptions with_hip;
    with_hip.include_hip_launches = true;
    out.launches_with_hip = launch_statistics(timeline, with_hip);
  } else {
    out.launches_with_hip = out.cuda_launches;
  }
  return out;
}

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope
