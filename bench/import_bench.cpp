// End-to-end cost of analysing a real PyTorch-profiler trace: inflate the
// 1.15 MB gzip (15 MB of JSON), parse it, build the timeline and run every
// analysis. HTA 0.6.1 takes ~1.3 s just to load the same file.
#include <benchmark/benchmark.h>

#include <string>

#include "stepscope/import.hpp"
#include "stepscope/timeline.hpp"

namespace {

const std::string kV100 = STEPSCOPE_SHARED_DIR "/traces/v100_single_rank_compute.json.gz";

void run_all_analyses(const stepscope::timeline::Timeline& tl) {
  namespace t = stepscope::timeline;
  benchmark::DoNotOptimize(t::temporal_breakdown(tl));
  benchmark::DoNotOptimize(t::kernel_type_breakdown(tl));
  benchmark::DoNotOptimize(t::comm_compute_overlap(tl));
  benchmark::DoNotOptimize(t::idle_time_breakdown(tl));
  benchmark::DoNotOptimize(t::launch_statistics(tl));
  benchmark::DoNotOptimize(t::device_facts(tl));
}

void BM_V100EndToEnd(benchmark::State& state) {
  stepscope::ImportOptions options;
  options.pipelined_decompression = state.range(0) != 0;
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    const stepscope::ImportResult r = stepscope::import_kineto_trace(kV100, options);
    if (!r.ok) {
      state.SkipWithError(r.error.c_str());
      return;
    }
    run_all_analyses(r.trace);
    bytes = r.stats.uncompressed_bytes;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_V100EndToEnd)->Arg(1)->Arg(0)->ArgName("pipelined")->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_V100AnalysesOnly(benchmark::State& state) {
  const stepscope::ImportResult r = stepscope::import_kineto_trace(kV100);
  if (!r.ok) {
    state.SkipWithError(r.error.c_str());
    return;
  }
  for (auto _ : state) run_all_analyses(r.trace);
}
BENCHMARK(BM_V100AnalysesOnly)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
