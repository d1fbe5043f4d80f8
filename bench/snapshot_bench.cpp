// The flight recorder's cost: CPU time of one snapshot of the report, the work
// the collector thread does every STEPSCOPE_SNAPSHOT_S seconds (see
// write_snapshot in src/core/runtime.cpp): the collector's facts, the
// analyzer's verdict, the JSON text, and the atomic rewrite of the file
// (temporary file + rename, no fsync), for a run with 30 (typical), 1k and
// 100k phases.
//
//   build/bench/snapshot_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// CPU time (the thread's own clock) is the figure that matters: it is taken
// from the training process; wall time also includes waiting for the disk.
#include <stepscope/analysis.hpp>
#include <stepscope/report.hpp>

#include "core/atomic_file.hpp"
#include "core/collector.hpp"

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace stepscope;
using namespace stepscope::detail;

void BM_Snapshot(benchmark::State& state) {
  const auto phases = static_cast<std::size_t>(state.range(0));
  // Sites need static storage for the run: PhaseSite points at its name.
  static std::vector<std::string> names;
  static std::vector<PhaseSite> sites;
  names.clear();
  sites.clear();
  names.reserve(phases);
  sites.reserve(phases + 1);
  for (std::size_t i = 0; i < phases; ++i) {
    names.push_back("phase_" + std::to_string(i));
    sites.push_back(PhaseSite{names.back().c_str(), PhaseKind::compute, false, __FILE__, __LINE__});
  }
  static constexpr PhaseSite step{"step", PhaseKind::other, true, __FILE__, __LINE__};

  CollectorOptions options;
  options.start_thread = false;
  options.sample_system = false;
  options.ring_capacity = 1u << 20;
  options.aggregator.warmup_steps = 0;
  Collector collector(options);
  ThreadRing* ring = collector.register_thread(1);
  // 20 steps, each with every phase once inside it.
  std::uint64_t t = 1000;
  for (std::uint32_t s = 1; s <= 20; ++s) {
    const std::uint64_t step_start = t;
    for (const PhaseSite& site : sites) {
      while (!ring->try_push(PhaseRecord{&site, t, t + 100, s, 0, 1, kRecordInStep})) collector.drain_all();
      t += 150;
    }
    while (!ring->try_push(PhaseRecord{&step, step_start, t, s, 0, 0, kRecordInStep | kRecordIsStep}))
      collector.drain_all();
    t += 10;
  }
  collector.drain_all();

  char dir_template[] = "/tmp/stepscope-snapshot-bench-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template) != nullptr ? dir_template : "/tmp";
  const std::string path = dir + "/stepscope-report.json";
  std::size_t bytes = 0;
  for (auto _ : state) {
    Report report = collector.facts();
    analyze(report);
    report.complete = false;
    const std::string text = report_to_json(report) + "\n";
    std::string error;
    if (!write_file_atomically(path, text, error, /*durable=*/false)) {
      state.SkipWithError(error.c_str());
      break;
    }
    bytes = text.size();
  }
  state.counters["report_bytes"] = static_cast<double>(bytes);
  ::unlink(path.c_str());
  if (dir != "/tmp") ::rmdir(dir.c_str());
}
BENCHMARK(BM_Snapshot)->Arg(30)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
