// stepscope's own per-step view: how busy the device was in each step and,
// when it idled, what the host was doing at that moment. This is what turns
// "GPU idle 80%" into a category (io / scheduling / sync) for the analyzer.
#include <algorithm>
#include <array>
#include <cctype>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stepscope/phase.hpp"
#include "stepscope/report.hpp"
#include "timeline/device_analyses.hpp"
#include "timeline/interval_set.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {
namespace timeline {
namespace {

using detail::clip;
using detail::intersect;
using detail::Intervals;
using detail::length;
using detail::normalise;
using detail::subtract;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A user annotation is an input phase by the kind its name gives
// (default_phase_kind, the rule of live phases and the report's phases),
// or by the caller's own markers where it sets them.
bool is_input_phase(const std::string& name, const AttributionOptions& options) {
  if (options.input_phase_markers.empty()) return default_phase_kind(name.c_str()) == PhaseKind::input;
  const std::string lowered = lower(name);
  for (const std::string& marker : options.input_phase_markers)
    if (!marker.empty() && lowered.find(lower(marker)) != std::string::npos) return true;
  return false;
}

// Only a range someone named (a user annotation, PyTorch's
// enumerate(DataLoader)#...) is an input phase by its name. Operators and
// Python frames are named by their code: "input" in them is an argument
// ("modeling_bert.py: get_input_embeddings", "aten::_input_check"), not a
// data phase; for them only the DataLoader itself counts.
bool is_input_host_op(HostOpKind kind, const std::string& name, const AttributionOptions& options) {
  if (kind == HostOpKind::annotation) return is_input_phase(name, options);
  return lower(name).find("dataloader") != std::string::npos;
}

// Who is responsible for a sync call: the innermost user annotation on the
// same thread around it, else the outermost framework op (e.g. aten::item),
// else the runtime call itself; of two as long, the first in the trace.
// Candidates are kept by thread and start with a running maximum of their
// ends, so a call looks back only as far as something may still enclose it
// (a scan of every host op per call made the per-step usage quadratic: 6.5 ms
// of a 45 ms import of a 67 k-kernel trace).
class SyncOwners {
 public:
  explicit SyncOwners(const Timeline& tl) : tl_(tl) {
    std::map<std::int64_t, std::vector<Candidate>> by_thread;
    for (std::size_t i = 0; i < tl.host_ops.size(); ++i) {
      const HostInterval& h = tl.host_ops[i];
      if (h.kind == HostOpKind::annotation || h.kind == HostOpKind::framework_op) by_thread[h.tid].push_back({&h, i});
    }
    for (auto& [tid, list] : by_thread) {
      // By start, then place in the trace (the list is in trace order).
      std::stable_sort(list.begin(), list.end(),
                       [](const Candidate& a, const Candidate& b) { return a.op->start_ns < b.op->start_ns; });
      threads_.emplace(tid, Candidates(
                                std::move(list), [](const Candidate& c) { return c.op->start_ns; },
                                [](const Candidate& c) { return c.op->end_ns; }));
    }
  }

  std::string operator()(const HostInterval& sync) const {
    const Candidate* innermost_annotation = nullptr;
    const Candidate* outermost_op = nullptr;
    const auto before = [](const Candidate& a, const Candidate* b, bool longer) {
      const std::int64_t da = a.op->duration_ns(), db = b->op->duration_ns();
      return (longer ? da > db : da < db) || (da == db && a.index < b->index);
    };
    if (const auto it = threads_.find(sync.tid); it != threads_.end())
      // What starts at or before the call and may end at or after its end.
      it->second.reach_back(sync.start_ns, sync.end_ns - 1, [&](const Candidate& c) {
        if (c.op->end_ns < sync.end_ns) return true;
        if (c.op->kind == HostOpKind::annotation) {
          if (innermost_annotation == nullptr || before(c, innermost_annotation, false)) innermost_annotation = &c;
        } else if (outermost_op == nullptr || before(c, outermost_op, true)) {
          outermost_op = &c;
        }
        return true;
      });
    if (innermost_annotation != nullptr) return tl_.name_of(innermost_annotation->op->name);
    if (outermost_op != nullptr) return tl_.name_of(outermost_op->op->name);
    return tl_.name_of(sync.name);
  }

 private:
  struct Candidate {
    const HostInterval* op;
    std::size_t index;  // its place in the trace: ties go to the first
  };
  using Candidates = detail::ByStart<Candidate>;
  const Timeline& tl_;
  std::map<std::int64_t, Candidates> threads_;
};

struct Windows {
  std::vector<std::int64_t> numbers;
  Intervals spans;
};

Windows analysis_windows(const Timeline& tl) {
  Windows w;
  for (const Step& s : tl.steps) {
    if (s.end_ns <= s.start_ns) continue;
    w.numbers.push_back(s.number);
    w.spans.push_back({s.start_ns, s.end_ns});
  }
  if (!w.spans.empty()) return w;
  // No steps: one window over everything the trace saw.
  const Step whole = whole_trace_window(tl);
  if (whole.end_ns > whole.start_ns) {
    w.numbers.push_back(whole.number);
    w.spans.push_back({whole.start_ns, whole.end_ns});
  }
  return w;
}

}  // namespace

Step whole_trace_window(const Timeline& tl) {
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const DeviceInterval& d : tl.device_ops) {
    lo = std::min(lo, d.start_ns);
    hi = std::max(hi, d.end_ns);
  }
  for (const HostInterval& h : tl.host_ops) {
    lo = std::min(lo, h.start_ns);
    hi = std::max(hi, h.end_ns);
  }
  Step s;
  s.number = -1;
  if (hi > lo) {
    s.start_ns = lo;
    s.end_ns = hi;
  }
  return s;
}

namespace {

// The device's activity as normalised interval sets, built once for the
// per-step windows and for the device's own span.
struct DeviceActivity {
  Intervals busy, compute, communication, memcpy, pageable;
};

DeviceActivity device_activity(const Timeline& tl) {
  DeviceActivity a;
  for (const DeviceInterval& d : tl.device_ops) {
    const Interval iv{d.start_ns, d.end_ns};
    a.busy.push_back(iv);
    if (d.cls == KernelClass::computation) a.compute.push_back(iv);
    if (d.cls == KernelClass::communication) a.communication.push_back(iv);
    if (d.kind == DeviceOpKind::memcpy) {
      a.memcpy.push_back(iv);
      if (d.host_memory == HostMemoryKind::pageable) a.pageable.push_back(iv);
    }
  }
  a.busy = normalise(std::move(a.busy));
  a.compute = normalise(std::move(a.compute));
  a.communication = normalise(std::move(a.communication));
  a.memcpy = normalise(std::move(a.memcpy));
  a.pageable = normalise(std::move(a.pageable));
  return a;
}

std::vector<StepDeviceUsage> usage_per_step(const Timeline& tl, const AttributionOptions& options,
                                            const DeviceActivity& activity) {
  const Intervals& busy = activity.busy;
  const Intervals& compute = activity.compute;
  const Intervals& communication = activity.communication;
  const Intervals& memcpy = activity.memcpy;
  const Intervals& pageable = activity.pageable;

  Intervals sync, input, host_busy;
  std::vector<const HostInterval*> sync_calls;
  // Per name: 0 not yet looked at, 1 an input phase, 2 not one.
  std::vector<unsigned char> input_name(tl.names.size(), 0);
  for (const HostInterval& h : tl.host_ops) {
    const Interval iv{h.start_ns, h.end_ns};
    if (h.kind == HostOpKind::step) continue;
    host_busy.push_back(iv);
    if (h.kind == HostOpKind::runtime_sync) {
      sync.push_back(iv);
      sync_calls.push_back(&h);
    }
    if (h.kind == HostOpKind::annotation || h.kind == HostOpKind::framework_op || h.kind == HostOpKind::python) {
      unsigned char& is_input = input_name[h.name];
      if (is_input == 0) is_input = is_input_host_op(h.kind, tl.name_of(h.name), options) ? 1 : 2;
      if (is_input == 1) input.push_back(iv);
    }
  }
  sync = normalise(std::move(sync));
  input = normalise(std::move(input));
  host_busy = normalise(std::move(host_busy));

  // Sync calls by start: a window visits only the calls that reach into it.
  std::sort(sync_calls.begin(), sync_calls.end(),
            [](const HostInterval* a, const HostInterval* b) { return a->start_ns < b->start_ns; });
  const detail::ByStart<const HostInterval*> syncs(
      std::move(sync_calls), [](const HostInterval* c) { return c->start_ns; },
      [](const HostInterval* c) { return c->end_ns; });

  // Kernel starts in order, counted per window by binary search.
  std::vector<std::int64_t> kernel_starts;
  for (const DeviceInterval& d : tl.device_ops)
    if (d.kind == DeviceOpKind::kernel) kernel_starts.push_back(d.start_ns);
  std::sort(kernel_starts.begin(), kernel_starts.end());

  const Windows windows = analysis_windows(tl);
  const SyncOwners sync_owner(tl);
  std::vector<StepDeviceUsage> out;
  for (std::size_t w = 0; w < windows.spans.size(); ++w) {
    const Interval span = windows.spans[w];
    StepDeviceUsage u;
    u.step = windows.numbers[w];
    u.start_ns = span.start_ns;
    u.end_ns = span.end_ns;
    // Every set clipped to the window first: the set operations walk their
    // inputs from the start (a whole trace's host ops per window made this
    // loop quadratic).
    const auto window = [&span](const Intervals& v) { return clip(v, span.start_ns, span.end_ns); };
    const Intervals window_busy = window(busy);
    u.busy_ns = length(window_busy);
    const Intervals idle = subtract({span}, window_busy);
    u.idle_ns = length(idle);

    const Intervals window_sync = window(sync), window_input = window(input);
    const Intervals idle_sync = intersect(idle, window_sync);
    const Intervals not_sync = subtract(idle, window_sync);
    const Intervals idle_input = intersect(not_sync, window_input);
    const Intervals rest = subtract(not_sync, window_input);
    u.idle_host_sync_ns = length(idle_sync);
    u.idle_host_input_ns = length(idle_input);
    u.idle_host_scheduling_ns = length(intersect(rest, window(host_busy)));
    u.idle_unattributed_ns = u.idle_ns - u.idle_host_sync_ns - u.idle_host_input_ns - u.idle_host_scheduling_ns;

    std::map<std::string, std::int64_t> by_phase;
    syncs.reach_back(span.end_ns - 1, span.start_ns, [&](const HostInterval* call) {
      const std::int64_t t = length(clip(idle_sync, call->start_ns, call->end_ns));
      if (t > 0) by_phase[sync_owner(*call)] += t;
      return true;
    });
    for (auto& [phase, t] : by_phase) u.sync_by_phase.push_back({phase, t});
    std::stable_sort(u.sync_by_phase.begin(), u.sync_by_phase.end(),
                     [](const SyncIdle& a, const SyncIdle& b) { return a.idle_ns > b.idle_ns; });

    const Intervals window_compute = window(compute);
    const Intervals window_comm = window(communication);
    u.compute_ns = length(window_compute);
    u.communication_ns = length(window_comm);
    u.exposed_communication_ns = length(subtract(window_comm, window_compute));
    u.memcpy_ns = length(window(memcpy));
    u.pageable_memcpy_ns = length(window(pageable));
    u.kernels =
        static_cast<decltype(u.kernels)>(std::lower_bound(kernel_starts.begin(), kernel_starts.end(), span.end_ns) -
                                         std::lower_bound(kernel_starts.begin(), kernel_starts.end(), span.start_ns));
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace

std::vector<StepDeviceUsage> per_step_device_usage(const Timeline& tl, const AttributionOptions& options) {
  return usage_per_step(tl, options, device_activity(tl));
}

DeviceFacts device_facts(const Timeline& tl, const AttributionOptions& options) {
  SharedDeviceAnalyses shared;
  shared.overlap = comm_compute_overlap(tl);
  shared.idle = idle_time_breakdown(tl);
  // ROCm's launches count too: the verdict needs the launch evidence on any GPU
  // (device.hta keeps HTA's CUDA-only pairing).
  LaunchStatsOptions launch_options;
  launch_options.include_hip_launches = true;
  shared.launches_with_hip = launch_statistics(tl, launch_options);
  return device_facts(tl, options, shared);
}

DeviceFacts device_facts(const Timeline& tl, const AttributionOptions& options, const SharedDeviceAnalyses& shared) {
  DeviceFacts f;
  f.rank = tl.rank;
  f.world_size = tl.world_size;
  f.has_device_activity = !tl.device_ops.empty();
  const DeviceActivity activity = device_activity(tl);
  const std::vector<StepDeviceUsage> usage = usage_per_step(tl, options, activity);
  f.steps = static_cast<std::int64_t>(usage.size());
  // Each part of the steps' device time, summed over the steps, as a fraction of their span.
  using Part = std::pair<std::int64_t StepDeviceUsage::*, double DeviceFacts::*>;
  static constexpr Part kParts[] = {
      {&StepDeviceUsage::busy_ns, &DeviceFacts::device_busy_fraction},
      {&StepDeviceUsage::idle_ns, &DeviceFacts::device_idle_fraction},
      {&StepDeviceUsage::idle_host_input_ns, &DeviceFacts::idle_host_input_fraction},
      {&StepDeviceUsage::idle_host_scheduling_ns, &DeviceFacts::idle_host_launch_bound_fraction},
      {&StepDeviceUsage::idle_host_sync_ns, &DeviceFacts::idle_sync_fraction},
      {&StepDeviceUsage::idle_unattributed_ns, &DeviceFacts::idle_unattributed_fraction},
      {&StepDeviceUsage::compute_ns, &DeviceFacts::compute_fraction},
      {&StepDeviceUsage::communication_ns, &DeviceFacts::communication_fraction},
      {&StepDeviceUsage::exposed_communication_ns, &DeviceFacts::exposed_communication_fraction},
      {&StepDeviceUsage::memcpy_ns, &DeviceFacts::memcpy_fraction},
      {&StepDeviceUsage::pageable_memcpy_ns, &DeviceFacts::pageable_memcpy_fraction}};
  std::array<std::int64_t, std::size(kParts)> sums{};
  std::int64_t span = 0, kernels = 0;
  std::map<std::string, std::int64_t> sync_phase;
  for (const StepDeviceUsage& u : usage) {
    span += u.span_ns();
    kernels += u.kernels;
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += u.*kParts[i].first;
    for (const SyncIdle& s : u.sync_by_phase) sync_phase[s.phase] += s.idle_ns;
  }
  if (f.steps > 0) f.step_time_mean_ns = static_cast<double>(span) / static_cast<double>(f.steps);
  for (std::size_t i = 0; i < sums.size(); ++i)
    f.*kParts[i].second = span > 0 ? static_cast<double>(sums[i]) / static_cast<double>(span) : 0.0;
  std::int64_t best = 0;
  for (const auto& [phase, t] : sync_phase) {
    if (t > best) {
      best = t;
      f.top_sync_phase = phase;
    }
  }
  if (f.steps > 0) f.kernels_per_step = static_cast<double>(kernels) / static_cast<double>(f.steps);

  f.comm_compute_overlap_fraction = shared.overlap.overlap_percent() / 100.0;

  // The device's own span, on its clock alone.
  {
    const Intervals& all = activity.busy;
    if (!all.empty() && all.back().end_ns > all.front().start_ns) {
      const double device_span = static_cast<double>(all.back().end_ns - all.front().start_ns);
      const auto over_span = [device_span](const Intervals& v) { return static_cast<double>(length(v)) / device_span; };
      f.device_span_busy_fraction = over_span(all);
      // Only a device whose span is about as long as the steps it ran for
      // (shifted, not short): one kernel in a 13 s step is busy 100% of its
      // own span, and the step is still idle.
      if (f.steps > 0 && f.device_span_busy_fraction >= options.device_behind_busy &&
          f.device_idle_fraction >= options.device_behind_window_idle &&
          device_span >= options.device_behind_min_span * static_cast<double>(span)) {
        f.host_window_idle_fraction = f.device_idle_fraction;
        const double idle_now = std::max(0.0, 1.0 - f.device_span_busy_fraction);
        const double scale = idle_now / f.device_idle_fraction;  // the causes keep their proportions
        f.idle_host_input_fraction *= scale;
        f.idle_host_launch_bound_fraction *= scale;
        f.idle_sync_fraction *= scale;
        f.idle_unattributed_fraction *= scale;
        f.device_busy_fraction = f.device_span_busy_fraction;
        f.device_idle_fraction = idle_now;
        f.compute_fraction = over_span(activity.compute);
        f.communication_fraction = over_span(activity.communication);
        f.exposed_communication_fraction = over_span(subtract(activity.communication, activity.compute));
        f.memcpy_fraction = over_span(activity.memcpy);
        f.pageable_memcpy_fraction = over_span(activity.pageable);
      }
    }
  }

  const LaunchStats& launches = shared.launches_with_hip;
  f.launches_per_step = f.steps > 0 ? static_cast<double>(launches.pairs) / static_cast<double>(f.steps) : 0.0;
  if (launches.pairs > 0) {
    f.short_kernel_fraction = static_cast<double>(launches.short_kernels) / static_cast<double>(launches.pairs);
    f.runtime_outlier_fraction = static_cast<double>(launches.runtime_outliers) / static_cast<double>(launches.pairs);
  }
  f.launch_delay_p50_ns = launches.launch_delay_p50_ns;
  f.launch_delay_p90_ns = launches.launch_delay_p90_ns;

  std::int64_t host_wait = 0, kernel_wait = 0, total_idle = 0;
  for (const StreamIdleBreakdown& s : shared.idle) {
    host_wait += s.host_wait_ns;
    kernel_wait += s.kernel_wait_ns;
    total_idle += s.total_ns();
  }
  if (total_idle > 0) {
    f.host_wait_idle_fraction = static_cast<double>(host_wait) / static_cast<double>(total_idle);
    f.kernel_wait_idle_fraction = static_cast<double>(kernel_wait) / static_cast<double>(total_idle);
  }
  return f;
}

void add_device_facts(const DeviceFacts& f, DeviceFactsSection& out) {
  out.steps = static_cast<double>(f.steps);
  out.step_time_mean_ms = f.step_time_mean_ns * 1e-6;
  out.device_busy_fraction = f.device_busy_fraction;
  out.device_idle_fraction = f.device_idle_fraction;
  out.idle_host_input_fraction = f.idle_host_input_fraction;
  out.idle_host_launch_bound_fraction = f.idle_host_launch_bound_fraction;
  out.idle_sync_fraction = f.idle_sync_fraction;
  out.idle_unattributed_fraction = f.idle_unattributed_fraction;
  out.compute_fraction = f.compute_fraction;
  out.communication_fraction = f.communication_fraction;
  out.exposed_communication_fraction = f.exposed_communication_fraction;
  out.comm_compute_overlap_fraction = f.comm_compute_overlap_fraction;
  out.memcpy_fraction = f.memcpy_fraction;
  out.pageable_memcpy_fraction = f.pageable_memcpy_fraction;
  out.kernels_per_step = f.kernels_per_step;
  out.launches_per_step = f.launches_per_step;
  out.short_kernel_fraction = f.short_kernel_fraction;
  out.runtime_outlier_fraction = f.runtime_outlier_fraction;
  out.launch_delay_p50_us = f.launch_delay_p50_ns * 1e-3;
  out.launch_delay_p90_us = f.launch_delay_p90_ns * 1e-3;
  out.host_wait_idle_fraction = f.host_wait_idle_fraction;
  out.kernel_wait_idle_fraction = f.kernel_wait_idle_fraction;
  if (f.has_device_activity) out.device_span_busy_fraction = f.device_span_busy_fraction;
  if (f.host_window_idle_fraction >= 0) out.host_window_idle_fraction = f.host_window_idle_fraction;
}

}  // namespace timeline
}  // namespace v1
}  // namespace stepscope
