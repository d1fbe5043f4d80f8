// Hot-path overhead and collector throughput, measured in one run so the
// ratios compare like with like on a shared, noisy machine.
//
//   build/bench/overhead_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// - BM_Floor:          two reads of the clock in use + one 32-byte store into a ring-like
//                      buffer (the least any timer that keeps its records can do): the
//                      floor BM_PhaseEnabled is judged against (<= 1.10x, issue 31)
// - BM_FloorTsc, BM_FloorMonotonic: the same floor with RDTSC and with CLOCK_MONOTONIC,
//                      whichever the run uses: on a VM whose kernel distrusts the TSC the
//                      clock, not stepscope, is the difference (run.clock.reason)
// - BM_PhaseEnabled:   one STEPSCOPE_PHASE scope, recording, collector draining
// - BM_PhaseDisabled:  the same scope with stepscope disabled at run time (STEPSCOPE=0 path)
// - BM_RuntimeSitePhase: ScopedPhase on a run-time-named site (stepscope::site(), interned
//                      once before the loop): the hot path of a literal site, so the ratio
//                      to BM_PhaseEnabled should be 1 within noise (docs/python.md)
// - BM_RuntimeSiteLookup: stepscope::site(name, kind) of a name already interned (the cold
//                      call: a lock and a hash probe), for scale
// - BM_CollectorDrain: records/s through drain + aggregation (collector thread work)
#include <stepscope/stepscope.hpp>

#include "core/collector.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <vector>

namespace {

using namespace stepscope;
using namespace stepscope::detail;

template <typename Clock>
void floor_loop(benchmark::State& state, Clock clock) {
  constexpr std::size_t kSlots = 1 << 14;
  std::vector<PhaseRecord> ring(kSlots);
  static constexpr PhaseSite site{"floor", PhaseKind::compute, false, __FILE__, __LINE__};
  std::size_t head = 0;
  for (auto _ : state) {
    const std::uint64_t start = clock();
    const std::uint64_t end = clock();
    ring[head++ & (kSlots - 1)] = PhaseRecord{&site, start, end, 0, 0, 0, 0};
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(ring.data());
}

void BM_Floor(benchmark::State& state) {
  (void)stepscope::enabled();  // same clock choice as the scopes
  state.SetLabel(g_use_tsc ? "tsc" : "clock_monotonic");
  floor_loop(state, [] { return read_ticks(); });
}
BENCHMARK(BM_Floor);

void BM_FloorTsc(benchmark::State& state) {
#if STEPSCOPE_DETAIL_HAVE_TSC
  floor_loop(state, [] { return static_cast<std::uint64_t>(__rdtsc()); });
#else
  state.SkipWithError("no TSC on this architecture");
#endif
}
BENCHMARK(BM_FloorTsc);

void BM_FloorMonotonic(benchmark::State& state) {
  floor_loop(state, [] { return monotonic_ns(); });
}
BENCHMARK(BM_FloorMonotonic);

// The benchmark loop alone, to subtract from the disabled scope's time.
void BM_EmptyLoop(benchmark::State& state) {
  for (auto _ : state) benchmark::ClobberMemory();
}
BENCHMARK(BM_EmptyLoop);

void BM_PhaseEnabled(benchmark::State& state) {
  if (!stepscope::enabled()) {
    state.SkipWithError("stepscope is disabled (STEPSCOPE=0?)");
    return;
  }
  const std::uint64_t dropped_before = stepscope::snapshot().dropped_records;
  for (auto _ : state) {
    STEPSCOPE_PHASE("bench");
    benchmark::ClobberMemory();
  }
  state.counters["dropped"] = static_cast<double>(stepscope::snapshot().dropped_records - dropped_before);
}
BENCHMARK(BM_PhaseEnabled);

void BM_PhaseDisabled(benchmark::State& state) {
  (void)stepscope::enabled();
  const std::uint8_t mode = g_mode.load();
  g_mode.store(kModeDisabled);  // exactly what STEPSCOPE=0 leaves behind
  for (auto _ : state) {
    STEPSCOPE_PHASE("bench_disabled");
    benchmark::ClobberMemory();
  }
  g_mode.store(mode);
}
BENCHMARK(BM_PhaseDisabled);

void BM_RuntimeSitePhase(benchmark::State& state) {
  if (!stepscope::enabled()) {
    state.SkipWithError("stepscope is disabled (STEPSCOPE=0?)");
    return;
  }
  const Site bench_site = stepscope::site("bench_runtime", PhaseKind::compute);
  const std::uint64_t dropped_before = stepscope::snapshot().dropped_records;
  for (auto _ : state) {
    ScopedPhase scope{bench_site};
    benchmark::ClobberMemory();
  }
  state.counters["dropped"] = static_cast<double>(stepscope::snapshot().dropped_records - dropped_before);
}
BENCHMARK(BM_RuntimeSitePhase);

void BM_RuntimeSiteLookup(benchmark::State& state) {
  (void)stepscope::site("bench_lookup.layer.17", PhaseKind::compute);
  for (auto _ : state) benchmark::DoNotOptimize(stepscope::site("bench_lookup.layer.17", PhaseKind::compute).get());
}
BENCHMARK(BM_RuntimeSiteLookup);

// A realistic record mix: a step with four phases, one of them nested.
void BM_CollectorDrain(benchmark::State& state) {
  CollectorOptions options;
  options.ring_capacity = 1 << 16;
  options.start_thread = false;
  options.sample_system = false;
  options.aggregator.warmup_steps = 0;
  Collector collector(options);
  ThreadRing* ring = collector.register_thread(1);
  static constexpr PhaseSite step{"step", PhaseKind::other, true, __FILE__, __LINE__};
  static constexpr PhaseSite data{"data", PhaseKind::input, false, __FILE__, __LINE__};
  static constexpr PhaseSite forward{"forward", PhaseKind::compute, false, __FILE__, __LINE__};
  static constexpr PhaseSite matmul{"matmul", PhaseKind::compute, false, __FILE__, __LINE__};
  static constexpr PhaseSite backward{"backward", PhaseKind::compute, false, __FILE__, __LINE__};
  std::uint64_t t = 0;
  std::uint32_t step_no = 0;
  std::uint64_t records = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (std::uint32_t i = 0; i < options.ring_capacity / 5; ++i) {
      ++step_no;
      const std::uint64_t b = t;
      (void)ring->try_push(PhaseRecord{&data, b + 10, b + 300, step_no, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&matmul, b + 350, b + 600, step_no, 0, 2, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&forward, b + 300, b + 700, step_no, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&backward, b + 700, b + 990, step_no, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&step, b, b + 1000, step_no, 0, 0, kRecordInStep | kRecordIsStep});
      t += 1000;
    }
    state.ResumeTiming();
    collector.drain_all();
    records += (options.ring_capacity / 5) * 5;
  }
  state.counters["records_per_second"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
  collector.stop();
}
BENCHMARK(BM_CollectorDrain)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  // A large ring and a fast collector, so the enabled benchmark measures the
  // recording path rather than the drop path; drops are reported anyway.
  setenv("STEPSCOPE_RING_RECORDS", "4194304", 0);
  setenv("STEPSCOPE_INTERVAL_MS", "1", 0);
  setenv("STEPSCOPE_QUIET", "1", 0);
  setenv("STEPSCOPE_OUT", "/tmp/stepscope-overhead-bench-report.json", 0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
