// A stepscope Report from an imported PyTorch-profiler trace, so GPU users get
// the same breakdown, verdict, evidence and what-if as a live run.
#include <stepscope/analysis.hpp>
#include <stepscope/phase.hpp>
#include <stepscope/version.hpp>
#include "core/atomic_file.hpp"
#include "import/hta_tables.hpp"
#include "import/kineto_reader_internal.hpp"
#include "import/phase_operators.hpp"
#include "import/trace_import.hpp"
#include "import/worker.hpp"

#include "stats/histogram.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {

namespace {

using detail::Worker;
using timeline::Timeline;

struct PhaseAcc {
  PhaseKind kind = PhaseKind::other;
  ThreadRole role = ThreadRole::step;
  detail::DurationStats inclusive, self;
  std::map<std::int64_t, bool> threads;
};

std::uint64_t ns(std::int64_t v) {
  return v > 0 ? static_cast<std::uint64_t>(v) : 0;
}

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
  std::string what =
      "nothing to time: the trace has no ProfilerStep#N ranges, no GPU activity and no two DataLoader fetches or "
      "Optimizer.step calls to mark iterations by";
  what += annotations > 0 ? " (its " + std::to_string(annotations) + " record_function ranges belong to no step)"
                          : ", nor any record_function annotation";
  what +=
      "; record it with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=5), "
      "on_trace_ready=...) and call prof.step() at the end of every iteration";
  return what;
}

namespace {

// --- report_from_timeline, step by step ----------------------------------------

void describe_run(const Timeline& tl, const std::string& source, RunInfo& run) {
  run.library_version = STEPSCOPE_VERSION_STRING;
  run.source = "kineto-import";
  run.host = source;
  // A trace without distributedInfo (torch without Kineto writes none, nor does
  // a job that never initialised torch.distributed) has no rank: -1, so that
  // `analyze --merge` of several such traces ranks them by their position
  // (and says so) rather than merging one and calling the rest duplicates.
  run.rank = tl.has_distributed_info ? tl.rank : -1;
  run.world_size = tl.world_size;
  run.config["trace"] = source;
  run.config_types["trace"] = "string";
  if (!tl.distributed_backend.empty()) {
    run.config["distributed_backend"] = tl.distributed_backend;
    run.config_types["distributed_backend"] = "string";
  }
  run.clock_source = "trace";
  run.warmup_steps = 0;  // the profiler's own schedule (wait/warmup/active) already left warm-up out
  run.warmup_source = "trace";
  run.build["importer"] = "kineto";
}

// Steps: the ProfilerStep#N ranges kept for analysis.
void summarise_steps(const Timeline& tl, StepStats& steps) {
  detail::DurationStats step_wall;
  for (const auto& s : tl.steps) step_wall.add(ns(s.end_ns - s.start_ns));
  steps.count = tl.steps.size();
  steps.wall_ms = step_wall.to_distribution_ms();
  steps.histogram = step_wall.histogram.to_data();
}

// The user's record_function annotations on the host, ordered by thread and
// start (outer first), each with the step it starts in and its self time
// (inclusive minus nested annotations on the same thread). PyTorch's own
// ranges (enumerate(DataLoader)#..., Optimizer.step#...) are not the user's:
// they become the framework phases.
struct Annotation {
  const timeline::Phase* phase = nullptr;
  const timeline::Step* step = nullptr;  // null: outside every step
  PhaseKind kind = PhaseKind::other;
  std::uint64_t self_ns = 0;
};

// The step holding instant t (the steps are sorted by start and disjoint).
const timeline::Step* step_at(const Timeline& tl, std::int64_t t) {
  const auto after = std::upper_bound(tl.steps.begin(), tl.steps.end(), t,
                                      [](std::int64_t v, const timeline::Step& s) { return v < s.start_ns; });
  if (after == tl.steps.begin()) return nullptr;
  const timeline::Step& s = *std::prev(after);
  return t < s.end_ns ? &s : nullptr;
}

std::vector<Annotation> user_annotations(const Timeline& tl) {
  std::vector<const timeline::Phase*> host;
  for (const auto& p : tl.phases)
    if (!p.on_device && !timeline::is_pytorch_range(tl.name_of(p.name))) host.push_back(&p);
  std::sort(host.begin(), host.end(), [](const timeline::Phase* a, const timeline::Phase* b) {
    if (a->tid != b->tid) return a->tid < b->tid;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
    return a->end_ns > b->end_ns;  // outer first
  });
  std::vector<std::int64_t> child_ns(host.size(), 0);
  std::vector<std::size_t> open;  // indices of the enclosing annotations on this thread
  for (std::size_t i = 0; i < host.size(); ++i) {
    while (!open.empty() && (host[open.back()]->tid != host[i]->tid || host[open.back()]->end_ns <= host[i]->start_ns))
      open.pop_back();
    if (!open.empty()) child_ns[open.back()] += host[i]->end_ns - host[i]->start_ns;
    open.push_back(i);
  }
  std::vector<Annotation> out(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    out[i].phase = host[i];
    out[i].step = step_at(tl, host[i]->start_ns);
    out[i].kind = default_phase_kind(tl.name_of(host[i]->name).c_str());
    out[i].self_ns = ns(host[i]->end_ns - host[i]->start_ns - child_ns[i]);
  }
  return out;
}

// Per-phase accumulators ("name#step" / "name#outside") and the per-kind self
// time inside steps that the breakdown divides by the step count.
struct PhaseTotals {
  std::map<std::string, PhaseAcc> phases;
  std::map<int, std::uint64_t> kind_self_ns;
  std::uint64_t attributed_ns = 0;
};

void add_user_phases(const Timeline& tl, const std::vector<Annotation>& annotations, PhaseTotals& totals) {
  for (const Annotation& a : annotations) {
    const auto& p = *a.phase;
    PhaseAcc& acc = totals.phases[tl.name_of(p.name) + (a.step ? "#step" : "#outside")];
    acc.kind = a.kind;
    acc.role = a.step ? ThreadRole::step : ThreadRole::outside_step;
    acc.inclusive.add(ns(p.end_ns - p.start_ns));
    acc.self.add(a.self_ns);
    acc.threads[p.tid] = true;
    if (a.step) {
      totals.kind_self_ns[static_cast<int>(a.kind)] += a.self_ns;
      totals.attributed_ns += a.self_ns;
    }
  }
}

// One PhaseSummary per accumulator, largest self time first.
std::vector<PhaseSummary> summarise_phases(const std::map<std::string, PhaseAcc>& phases, double step_total_ms) {
  std::vector<PhaseSummary> out;
  for (const auto& [key, acc] : phases) {
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
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const PhaseSummary& a, const PhaseSummary& b) { return a.self_ms.total > b.self_ms.total; });
  return out;
}

// The mean step's breakdown by phase kind (needs at least one step).
void break_down_mean_step(const PhaseTotals& totals, StepStats& steps) {
  const double n = static_cast<double>(steps.count);
  auto mean_ms = [&](PhaseKind k) {
    const auto found = totals.kind_self_ns.find(static_cast<int>(k));
    return found == totals.kind_self_ns.end() ? 0.0 : static_cast<double>(found->second) * 1e-6 / n;
  };
  auto& b = steps.breakdown;
  b.wall_ms = steps.wall_ms.mean;
  for (PhaseKind k : kPhaseKinds) b.kind_ms[k] = mean_ms(k);
  // Annotations may overlap across threads; never let the parts exceed the step.
  b.unattributed_ms = std::max(0.0, b.wall_ms - static_cast<double>(totals.attributed_ns) * 1e-6 / n);
}

// The per-step series: wall time and each kind's self time, step by step.
void fill_step_series(const Timeline& tl, const std::vector<Annotation>& annotations,
                      const std::vector<timeline::StepFrameworkPhases>& framework, StepSeries& series) {
  for (const auto& s : tl.steps) {
    series.first_step.push_back(static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.number)));
    series.wall_ms.push_back(static_cast<double>(s.end_ns - s.start_ns) * 1e-6);
  }
  series.stride = 1;
  const std::size_t m = series.wall_ms.size();
  for (auto& v : series.kind_ms) v.assign(m, 0.0);
  for (auto* v : {&series.unattributed_ms, &series.rss_mb}) v->assign(m, 0.0);
  for (const Annotation& a : annotations) {
    if (!a.step) continue;
    const std::size_t idx = static_cast<std::size_t>(a.step - tl.steps.data());
    series.kind_ms[a.kind][idx] += static_cast<double>(a.self_ns) * 1e-6;
  }
  for (std::size_t i = 0; i < framework.size() && i < m; ++i) {
    for (std::size_t k = 0; k < timeline::kFrameworkPhaseCount; ++k) {
      const double ms = static_cast<double>(framework[i].phase_ns[k]) * 1e-6;
      const bool data = static_cast<timeline::FrameworkPhase>(k) == timeline::FrameworkPhase::data;
      series.kind_ms[data ? PhaseKind::input : PhaseKind::compute][i] += ms;
    }
  }
  for (std::size_t i = 0; i < m; ++i) {
    double parts = 0;
    for (const auto& kind : series.kind_ms) parts += kind[i];
    series.unattributed_ms[i] = std::max(0.0, series.wall_ms[i] - parts);
  }
}

// The device side: the verdict's facts and HTA's tables, from one run of the
// launch, idle and overlap analyses they share. The timeline is only read.
struct DeviceAnalyses {
  timeline::DeviceFacts facts;
  HtaTables hta;
};

// HTA's tables read the trace as HTA would; the verdict's facts read the
// steps the report analyses (the same timeline unless the importer inferred
// the iterations of a trace without ProfilerStep#N). The shared analyses
// depend on no step.
DeviceAnalyses analyse_device(const Timeline& trace, const Timeline& stepped) {
  DeviceAnalyses out;
  const timeline::SharedDeviceAnalyses shared = timeline::shared_device_analyses(trace);
  out.facts = timeline::device_facts(stepped, timeline::AttributionOptions{}, shared);
  if (!trace.device_ops.empty()) out.hta = hta_tables(trace, shared);  // the tables exist only with device activity
  return out;
}

// The device analyses and the host side of the report (phases, PyTorch's
// phases, top operators) read the timeline only and share nothing: the
// device side runs on the worker meanwhile (≈ half the tail's work on the
// V100 trace; analyze_trace_file's worker parsed half the trace before).
// Where the worker cannot take it, it runs on this thread. The worker is
// waited for on every path (the destructor); when the analyses failed
// there (bad_alloc), get() runs them again here, where the error reaches
// report_on's handler.
class DeviceAnalysesInBackground {
 public:
  // Below this many ops the analyses cost less than handing them over
  // (~0.2 ms here; the V100 trace's 60 k ops take ~1.5 ms).
  static constexpr std::size_t kMinOpsForThread = 8192;

  DeviceAnalysesInBackground(const Timeline& trace, const Timeline& stepped, Worker& worker)
      : trace_(trace), stepped_(stepped), worker_(worker) {
    if (trace.host_ops.size() + trace.device_ops.size() < kMinOpsForThread) return;
    (void)worker.post([this] {
      try {
        result_ = analyse_device(trace_, stepped_);
        ok_ = true;
      } catch (...) {
        // bad_alloc: get() tries again on the caller's thread, where it reports
      }
    });
  }
  ~DeviceAnalysesInBackground() { worker_.wait(); }
  DeviceAnalysesInBackground(const DeviceAnalysesInBackground&) = delete;
  DeviceAnalysesInBackground& operator=(const DeviceAnalysesInBackground&) = delete;

  // Not posted, or failed there: computed here.
  DeviceAnalyses get() {
    worker_.wait();
    return ok_ ? std::move(result_) : analyse_device(trace_, stepped_);
  }

 private:
  const Timeline& trace_;
  const Timeline& stepped_;
  Worker& worker_;
  bool ok_ = false;        // written by the worker, read after wait()
  DeviceAnalyses result_;  // likewise
};

// Where the GPU's sync idle time goes: a phase of the report when the owner
// of the sync call is one, else the operator or runtime call itself (a trace
// without annotations has no phase around `aten::item`) — never a phase that
// does not exist.
std::string sync_idle_warning(const std::string& owner, const std::vector<PhaseSummary>& phases) {
  for (const PhaseSummary& p : phases)
    if (p.name == owner) return "most sync idle time is in phase '" + owner + "'";
  return "most sync idle time is in '" + owner + "' (an operator or runtime call outside every phase)";
}

// Device side: the timeline analyses' facts drive the GPU verdict.
void describe_device(const Timeline& tl, DeviceAnalyses analyses, Report& r) {
  const timeline::DeviceFacts& f = analyses.facts;
  r.device.enabled = f.has_device_activity;
  r.device.status = f.has_device_activity ? "ok" : "no_device_activity";
  r.device.reason =
      f.has_device_activity ? "device timeline imported from the trace" : "the trace holds no device (GPU) activity";
  if (!tl.devices.empty()) {
    r.device.name = tl.devices.front().name;
    if (tl.devices.front().total_memory_bytes > 0)
      r.device.memory_capacity_mb = static_cast<double>(tl.devices.front().total_memory_bytes) / (1024.0 * 1024.0);
  }
  if (!f.has_device_activity) return;
  timeline::add_device_facts(f, r.device.facts);
  r.device.hta = std::move(analyses.hta);
  if (!f.top_sync_phase.empty()) r.warnings.push_back(sync_idle_warning(f.top_sync_phase, r.phases));
}

}  // namespace

AnalysedSteps analysed_steps(const Timeline& trace) {
  AnalysedSteps out;
  if (!trace.steps.empty()) return out;
  timeline::InferredIterations inferred = timeline::infer_iterations(trace);
  if (!inferred.steps.empty()) {
    // The first iteration starts the loader's workers, the first CUDA calls
    // and the allocator's pools: warm-up, reported as such.
    const std::size_t total = inferred.steps.size();
    if (total >= 3) {
      out.warmup.push_back(inferred.steps.front());
      inferred.steps.erase(inferred.steps.begin());
    }
    out.warning = "the trace has no ProfilerStep#N annotations: " + std::to_string(total) +
                  " iterations inferred from its " + inferred.marked_by +
                  (out.warmup.empty() ? "" : " (the first left out as warm-up)") +
                  ", the one after the last is not in the trace; record with a profiler schedule and prof.step() "
                  "for exact steps";
    out.timeline = trace;
    out.timeline.steps = std::move(inferred.steps);
    out.restepped = true;
  } else if (!trace.device_ops.empty()) {
    out.warning = "the trace has no ProfilerStep#N annotations: analysed as one window";
    const timeline::Step whole = timeline::whole_trace_window(trace);
    if (whole.end_ns > whole.start_ns) {
      out.timeline = trace;
      out.timeline.steps.push_back(whole);
      out.restepped = true;
    }
  }
  return out;
}

namespace {

// The report, with the device analyses on `worker` beside the rest.
Report report_on(const Timeline& trace, const std::string& source, Worker& worker) noexcept {
  Report r;
  try {
    const AnalysedSteps analysed = analysed_steps(trace);
    if (!analysed.warning.empty()) r.warnings.push_back(analysed.warning);
    const Timeline& tl = analysed.restepped ? analysed.timeline : trace;
    const std::vector<timeline::Step>& warmup = analysed.warmup;
    DeviceAnalysesInBackground device(trace, tl, worker);
    describe_run(tl, source, r.run);
    summarise_steps(tl, r.steps);
    if (!warmup.empty()) {
      r.run.warmup_steps = warmup.size();
      r.run.warmup_source = "inferred";
      r.steps.warmup_excluded = warmup.size();
      detail::DurationStats warm;
      for (const auto& s : warmup) warm.add(ns(s.end_ns - s.start_ns));
      r.steps.warmup_wall_ms = warm.to_distribution_ms();
    }
    const std::vector<Annotation> annotations = user_annotations(tl);
    const timeline::FrameworkMarks marks = timeline::framework_marks(tl);
    const std::vector<timeline::StepFrameworkPhases> framework = timeline::framework_phases(tl, marks);
    PhaseTotals totals;
    add_user_phases(tl, annotations, totals);
    add_framework_phases(framework, totals.phases, totals.kind_self_ns, totals.attributed_ns);
    r.phases = summarise_phases(totals.phases, r.steps.wall_ms.total);
    attach_top_operators(tl, marks, r.phases);
    if (r.steps.count > 0) {
      break_down_mean_step(totals, r.steps);
      fill_step_series(tl, annotations, framework, r.steps.series);
    }
    describe_device(tl, device.get(), r);
    analyze(r);  // ends with reword_advice (src/analysis/advice_wording.cpp): the trace's language
  } catch (const std::exception& e) {
    r.warnings.push_back(std::string("analysis incomplete: ") + e.what());
  } catch (...) {
    r.warnings.push_back("analysis incomplete");
  }
  return r;
}

}  // namespace

Report report_from_timeline(const Timeline& trace, const std::string& source) noexcept {
  detail::Worker worker;
  return report_on(trace, source, worker);
}

bool write_trace_report_file(const Report& report, const std::string& path, std::string& error) {
  try {
    return detail::write_file_atomically(path, report_to_json(report) + "\n", error, /*durable=*/false);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
}

bool analyze_trace_file(const std::string& path, Report& out, std::string& error) noexcept {
  return analyze_trace_file(path, ImportOptions{}, out, error);
}

bool analyze_trace_file(const std::string& path, const ImportOptions& options, Report& out,
                        std::string& error) noexcept {
  try {
    // One worker thread for both: started before the trace is inflated when
    // it is large enough to split, it parses half of it, then runs the
    // device analyses beside the report (worker.hpp says why ahead).
    detail::Worker worker;
    detail::ImportTuning tuning;
    tuning.worker = &worker;
    ImportResult imported =
        detail::import_kineto_trace_with(path, options, detail::KinetoParser::automatic, nullptr, tuning);
    if (!imported.ok) {
      error = imported.error;
      return false;
    }
    out = report_on(imported.trace, path, worker);
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

}  // namespace v1
}  // namespace stepscope
