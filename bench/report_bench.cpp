// The tail of `stepscope analyze`: everything after the V100 trace's
// timeline exists (68 692 events, 45 k kept). report_from_timeline builds
// the phases, PyTorch's own phases and their top operators, the device
// facts, HTA's tables and the verdict; the pieces are timed alone so a
// change can be pinned to one of them. The import itself is measured in
// import_bench (BM_V100AnalyzeTraceFile is the whole path).
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <string>

#include "import/trace_import.hpp"
#include "timeline/timeline.hpp"

namespace {

const std::string kV100 = STEPSCOPE_TEST_DATA_DIR "/traces/v100_single_rank_compute.json.gz";

// The timeline, imported once per process.
const stepscope::ImportResult& v100() {
  static const stepscope::ImportResult imported = stepscope::import_kineto_trace(kV100);
  return imported;
}

double process_cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
  };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// Runs `body` once per iteration on the imported timeline and reports the
// process CPU per iteration (both threads where the tail uses two).
template <typename Body>
void run_on_v100(benchmark::State& state, Body body) {
  const stepscope::ImportResult& imported = v100();
  if (!imported.ok) {
    state.SkipWithError(imported.error.c_str());
    return;
  }
  const double start = process_cpu_ms();
  for (auto _ : state) body(imported.trace);
  state.counters["process_cpu_ms"] =
      benchmark::Counter((process_cpu_ms() - start) / static_cast<double>(state.iterations()));
}

// What analyze_trace_file does after the import.
void BM_V100ReportFromTimeline(benchmark::State& state) {
  run_on_v100(state, [](const stepscope::timeline::Timeline& tl) {
    stepscope::Report report = stepscope::report_from_timeline(tl, kV100);
    benchmark::DoNotOptimize(report.bottleneck.category.data());
  });
}
BENCHMARK(BM_V100ReportFromTimeline)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_V100FrameworkPhases(benchmark::State& state) {
  run_on_v100(state, [](const stepscope::timeline::Timeline& tl) {
    benchmark::DoNotOptimize(stepscope::timeline::framework_phases(tl));
  });
}
BENCHMARK(BM_V100FrameworkPhases)->Unit(benchmark::kMillisecond);

// The top operators of PyTorch's own phases (forward, backward, optimizer).
void BM_V100TopOperators(benchmark::State& state) {
  run_on_v100(state, [](const stepscope::timeline::Timeline& tl) {
    std::vector<stepscope::PhaseSummary> phases(4);
    const char* names[] = {"data", "forward", "backward", "optimizer"};
    for (std::size_t i = 0; i < phases.size(); ++i) {
      phases[i].name = names[i];
      phases[i].thread_role = stepscope::ThreadRole::step;
    }
    stepscope::attach_top_operators(tl, phases);
    benchmark::DoNotOptimize(phases.data());
  });
}
BENCHMARK(BM_V100TopOperators)->Unit(benchmark::kMillisecond);

void BM_V100DeviceFacts(benchmark::State& state) {
  run_on_v100(state, [](const stepscope::timeline::Timeline& tl) {
    benchmark::DoNotOptimize(stepscope::timeline::device_facts(tl));
  });
}
BENCHMARK(BM_V100DeviceFacts)->Unit(benchmark::kMillisecond);

void BM_V100HtaTables(benchmark::State& state) {
  run_on_v100(state,
              [](const stepscope::timeline::Timeline& tl) { benchmark::DoNotOptimize(stepscope::hta_tables(tl)); });
}
BENCHMARK(BM_V100HtaTables)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
