// A stepscope Report from an imported PyTorch-profiler trace, so GPU users get
// the same breakdown, verdict, evidence and what-if as a live run.
#include <stepscope/analysis.hpp>
#include <stepscope/import.hpp>
#include <stepscope/phase.hpp>
#include <stepscope/version.hpp>

#include "stats/histogram.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace stepscope {

namespace {

using timeline::Timeline;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains_any(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (text.find(w) != std::string::npos) return true;
  return false;
}

// Kind of a user annotation from its name. PyTorch code names its ranges
// freely ("## forward ##", "DataLoader", "optimizer.step#SGD.step"), so match
// words rather than exact names; anything unrecognised is "other".
PhaseKind annotation_kind(const std::string& name) {
  const std::string n = lower(name);
  if (contains_any(n, {"dataloader", "data_load", "data loading", "## data", "next_batch", "get_batch", "prefetch", "input"}) ||
      n == "data")
    return PhaseKind::input;
  if (contains_any(n, {"allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter", "broadcast", "nccl", "comm"}))
    return PhaseKind::communication;
  if (contains_any(n, {"h2d", "d2h", "memcpy", "copy", "to_device", ".to("})) return PhaseKind::memory;
  if (contains_any(n, {"forward", "backward", "optimizer", "loss", "zero_grad"})) return PhaseKind::compute;
  return default_phase_kind(name.c_str());
}

struct PhaseAcc {
  PhaseKind kind = PhaseKind::other;
  ThreadRole role = ThreadRole::step;
  detail::DurationStats inclusive, self;
  std::map<std::int64_t, bool> threads;
};

std::uint64_t ns(std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : 0; }

// PyTorch's own phases (timeline::framework_phases), one sample per step in
// which the phase took time: "data" is input, the others compute
// (default_phase_kind). They sit on the step's thread, disjoint from the
// user's annotations there, so their time adds to the attributed total.
void add_framework_phases(const std::vector<timeline::StepFrameworkPhases>& steps,
                          std::map<std::string, PhaseAcc>& phases, std::map<int, std::uint64_t>& kind_self_ns,
                          std::uint64_t& attributed_ns) {
  for (const auto& step : steps) {
    for (std::size_t k = 0; k < timeline::kFrameworkPhaseCount; ++k) {
      const std::uint64_t t = ns(step.phase_ns[k]);
      if (t == 0) continue;
      const char* name = timeline::to_string(static_cast<timeline::FrameworkPhase>(k));
      PhaseAcc& acc = phases[std::string(name) + "#step"];
      acc.kind = default_phase_kind(name);
      acc.role = ThreadRole::step;
      acc.inclusive.add(t);
      acc.self.add(t);
      acc.threads[step.tid] = true;
      kind_self_ns[static_cast<int>(acc.kind)] += t;
      attributed_ns += t;
    }
  }
}

}  // namespace

std::string nothing_to_time(const Timeline& tl) {
  std::size_t annotations = 0;
  for (const auto& p : tl.phases)
    if (!p.on_device && !timeline::is_pytorch_range(tl.name_of(p.name))) ++annotations;
  std::string what = "nothing to time: the trace has no ProfilerStep#N ranges and no GPU activity";
  what += annotations > 0 ? " (its " + std::to_string(annotations) + " record_function ranges belong to no step)"
                          : ", nor any record_function annotation";
  what +=
      "; record it with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=5), "
      "on_trace_ready=...) and call prof.step() at the end of every iteration";
  return what;
}

Report report_from_timeline(const Timeline& tl, const std::string& source) noexcept {
  Report r;
  try {
    r.run.library_version = STEPSCOPE_VERSION_STRING;
    r.run.source = "kineto-import";
    r.run.host = source;
    r.run.rank = tl.rank;
    r.run.world_size = tl.world_size;
    r.run.config["trace"] = source;
    r.run.config_types["trace"] = "string";
    if (!tl.distributed_backend.empty()) {
      r.run.config["distributed_backend"] = tl.distributed_backend;
      r.run.config_types["distributed_backend"] = "string";
    }
    r.run.clock_source = "trace";
    r.run.warmup_steps = 0;  // the profiler's own schedule (wait/warmup/active) already left warm-up out
    r.run.warmup_source = "trace";
    r.run.build["importer"] = "kineto";

    // Steps: ProfilerStep#N ranges kept for analysis.
    detail::DurationStats step_wall;
    for (const auto& s : tl.steps) step_wall.add(ns(s.end_ns - s.start_ns));
    r.steps.count = tl.steps.size();
    r.steps.wall_ms = step_wall.to_distribution_ms();
    r.steps.histogram = step_wall.histogram.to_data();

    // Host phases: user annotations, with self time from their nesting on
    // the same thread, attributed to the step they fall in.
    // PyTorch's own ranges (enumerate(DataLoader)#..., Optimizer.step#...)
    // are not the user's: they become the framework phases below.
    std::vector<const timeline::Phase*> host;
    for (const auto& p : tl.phases)
      if (!p.on_device && !timeline::is_pytorch_range(tl.name_of(p.name))) host.push_back(&p);
    std::sort(host.begin(), host.end(), [](const timeline::Phase* a, const timeline::Phase* b) {
      if (a->tid != b->tid) return a->tid < b->tid;
      if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
      return a->end_ns > b->end_ns;  // outer first
    });
    std::vector<std::int64_t> child_ns(host.size(), 0);
    {
      std::vector<std::size_t> stack;
      for (std::size_t i = 0; i < host.size(); ++i) {
        while (!stack.empty() && (host[stack.back()]->tid != host[i]->tid || host[stack.back()]->end_ns <= host[i]->start_ns))
          stack.pop_back();
        if (!stack.empty()) child_ns[stack.back()] += host[i]->end_ns - host[i]->start_ns;
        stack.push_back(i);
      }
    }
    auto step_of = [&](std::int64_t t) -> const timeline::Step* {
      for (const auto& s : tl.steps)
        if (t >= s.start_ns && t < s.end_ns) return &s;
      return nullptr;
    };
    // Thread(s) that run steps: the ones whose annotations fall inside steps.
    std::map<std::string, PhaseAcc> phases;
    std::map<int, std::uint64_t> kind_self_ns;
    std::uint64_t attributed_ns = 0;
    for (std::size_t i = 0; i < host.size(); ++i) {
      const auto& p = *host[i];
      const std::string& name = tl.name_of(p.name);
      const auto* step = step_of(p.start_ns);
      const PhaseKind kind = annotation_kind(name);
      const std::string key = name + (step ? "#step" : "#outside");
      PhaseAcc& acc = phases[key];
      acc.kind = kind;
      acc.role = step ? ThreadRole::step : ThreadRole::outside_step;
      const std::uint64_t inclusive = ns(p.end_ns - p.start_ns);
      const std::uint64_t self = ns(p.end_ns - p.start_ns - child_ns[i]);
      acc.inclusive.add(inclusive);
      acc.self.add(self);
      acc.threads[p.tid] = true;
      if (step) {
        kind_self_ns[static_cast<int>(kind)] += self;
        attributed_ns += self;
      }
    }
    const std::vector<timeline::StepFrameworkPhases> framework = timeline::framework_phases(tl);
    add_framework_phases(framework, phases, kind_self_ns, attributed_ns);
    const double step_total_ms = r.steps.wall_ms.total;
    for (auto& [key, acc] : phases) {
      PhaseSummary s;
      s.name = key.substr(0, key.rfind('#'));
      s.kind = acc.kind;
      s.thread_role = acc.role;
      s.count = acc.inclusive.moments.count();
      s.host_ms = acc.inclusive.to_distribution_ms();
      s.self_ms = acc.self.to_distribution_ms();
      s.share_of_step = (acc.role == ThreadRole::step && step_total_ms > 0) ? s.self_ms.total / step_total_ms : 0;
      s.threads = static_cast<std::uint32_t>(acc.threads.size());
      s.histogram = acc.inclusive.histogram.to_data();
      r.phases.push_back(std::move(s));
    }
    std::stable_sort(r.phases.begin(), r.phases.end(),
                     [](const PhaseSummary& a, const PhaseSummary& b) { return a.self_ms.total > b.self_ms.total; });
    if (r.steps.count > 0) {
      const double n = static_cast<double>(r.steps.count);
      auto mean_ms = [&](PhaseKind k) { return static_cast<double>(kind_self_ns[static_cast<int>(k)]) * 1e-6 / n; };
      auto& b = r.steps.breakdown;
      b.wall_ms = r.steps.wall_ms.mean;
      b.input_ms = mean_ms(PhaseKind::input);
      b.compute_ms = mean_ms(PhaseKind::compute);
      b.memory_ms = mean_ms(PhaseKind::memory);
      b.communication_ms = mean_ms(PhaseKind::communication);
      b.other_ms = mean_ms(PhaseKind::other);
      // Annotations may overlap across threads; never let the parts exceed the step.
      b.unattributed_ms = std::max(0.0, b.wall_ms - static_cast<double>(attributed_ns) * 1e-6 / n);
      // Per-step series.
      for (const auto& s : tl.steps) {
        r.steps.series.first_step.push_back(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.number)));
        r.steps.series.wall_ms.push_back(static_cast<double>(s.end_ns - s.start_ns) * 1e-6);
      }
      r.steps.series.stride = 1;
      const std::size_t m = r.steps.series.wall_ms.size();
      for (auto* v : {&r.steps.series.input_ms, &r.steps.series.compute_ms, &r.steps.series.memory_ms,
                      &r.steps.series.communication_ms, &r.steps.series.other_ms, &r.steps.series.unattributed_ms,
                      &r.steps.series.rss_mb})
        v->assign(m, 0.0);
      // Fill per-step kind times from the annotations of each step.
      for (std::size_t i = 0; i < host.size(); ++i) {
        const auto& p = *host[i];
        const auto* step = step_of(p.start_ns);
        if (!step) continue;
        const std::size_t idx = static_cast<std::size_t>(step - tl.steps.data());
        const double self_ms = static_cast<double>(ns(p.end_ns - p.start_ns - child_ns[i])) * 1e-6;
        std::vector<double>* target = &r.steps.series.other_ms;
        switch (annotation_kind(tl.name_of(p.name))) {
          case PhaseKind::input: target = &r.steps.series.input_ms; break;
          case PhaseKind::compute: target = &r.steps.series.compute_ms; break;
          case PhaseKind::memory: target = &r.steps.series.memory_ms; break;
          case PhaseKind::communication: target = &r.steps.series.communication_ms; break;
          case PhaseKind::other: break;
        }
        (*target)[idx] += self_ms;
      }
      for (std::size_t i = 0; i < framework.size() && i < m; ++i) {
        for (std::size_t k = 0; k < timeline::kFrameworkPhaseCount; ++k) {
          const double ms = static_cast<double>(framework[i].phase_ns[k]) * 1e-6;
          const bool data = static_cast<timeline::FrameworkPhase>(k) == timeline::FrameworkPhase::data;
          (data ? r.steps.series.input_ms : r.steps.series.compute_ms)[i] += ms;
        }
      }
      for (std::size_t i = 0; i < m; ++i) {
        const double parts = r.steps.series.input_ms[i] + r.steps.series.compute_ms[i] + r.steps.series.memory_ms[i] +
                             r.steps.series.communication_ms[i] + r.steps.series.other_ms[i];
        r.steps.series.unattributed_ms[i] = std::max(0.0, r.steps.series.wall_ms[i] - parts);
      }
    }

    // Device side: the timeline analyses' facts drive the GPU verdict.
    const timeline::DeviceFacts f = timeline::device_facts(tl);
    r.device.enabled = f.has_device_activity;
    r.device.status = f.has_device_activity ? "ok" : "no_device_activity";
    r.device.reason = f.has_device_activity ? "device timeline imported from the trace"
                                            : "the trace holds no device (GPU) activity";
    if (!tl.devices.empty()) {
      r.device.name = tl.devices.front().name;
      if (tl.devices.front().total_memory_bytes > 0)
        r.device.memory_capacity_mb = static_cast<double>(tl.devices.front().total_memory_bytes) / (1024.0 * 1024.0);
    }
    if (f.has_device_activity) {
      timeline::add_device_facts(f, r.device.facts);
      r.device.hta = hta_tables(tl);
      if (!f.top_sync_phase.empty()) r.warnings.push_back("most sync idle time is in phase '" + f.top_sync_phase + "'");
      // Without ProfilerStep annotations the whole trace is one window.
      if (r.steps.count == 0 && f.steps > 0) {
        r.steps.count = static_cast<std::uint64_t>(f.steps);
        r.steps.wall_ms.count = r.steps.count;
        r.steps.wall_ms.mean = r.steps.wall_ms.p50 = r.steps.wall_ms.p90 = r.steps.wall_ms.p99 = r.steps.wall_ms.min =
            r.steps.wall_ms.max = f.step_time_mean_ns * 1e-6;
        r.steps.wall_ms.total = r.steps.wall_ms.mean * static_cast<double>(f.steps);
        r.steps.breakdown.wall_ms = r.steps.wall_ms.mean;
        r.steps.breakdown.unattributed_ms = r.steps.wall_ms.mean;
        r.warnings.push_back("the trace has no ProfilerStep#N annotations: analysed as one window");
      }
    }
    analyze(r);  // ends with reword_advice_for_trace (src/analysis/advice_wording.cpp): the trace's language
  } catch (const std::exception& e) {
    r.warnings.push_back(std::string("analysis incomplete: ") + e.what());
  } catch (...) {
    r.warnings.push_back("analysis incomplete");
  }
  return r;
}

bool analyze_trace_file(const std::string& path, Report& out, std::string& error) noexcept {
  try {
    ImportResult imported = import_kineto_trace(path);
    if (!imported.ok) {
      error = imported.error;
      return false;
    }
    out = report_from_timeline(imported.trace, path);
    if (out.steps.count == 0) {
      error = path + ": " + nothing_to_time(imported.trace);
      return false;
    }
    return true;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unexpected failure";
  }
  return false;
}

}  // namespace stepscope
