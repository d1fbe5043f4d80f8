// The collector's background cost: its thread's CPU time as a share of one
// core while a training thread records at a steady rate, for the wake-up
// policies side by side in one run (issue 31: the cost is per wake-up, not per
// record, so the wait follows the record rate).
//
//   build/bench/collector_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// - BM_CollectorShare/<steps per s>/<longest wait ms>: a Collector with its own
//   thread and the system sampler on (as in a live run), a thread pushing a
//   step of 5 records (data, forward, backward, optimizer, step) at the given
//   rate for 2 s; the counter core_pct is the collector thread's CPU time over
//   the wall time, in % of one core. Longest wait 20 ms: the policy before
//   issue 31; 200 ms: the default since.
// - BM_CollectorWake: one quiet wake-up's work (drain of empty rings, the
//   sampler, the CPU-time note), without the futex round trip.
#include "core/collector.hpp"

#include <stepscope/clock.hpp>

#include <benchmark/benchmark.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace {

using namespace stepscope;
using namespace stepscope::detail;

constexpr PhaseSite kStep{"step", PhaseKind::other, true, __FILE__, __LINE__};
constexpr PhaseSite kData{"data", PhaseKind::input, false, __FILE__, __LINE__};
constexpr PhaseSite kForward{"forward", PhaseKind::compute, false, __FILE__, __LINE__};
constexpr PhaseSite kBackward{"backward", PhaseKind::compute, false, __FILE__, __LINE__};
constexpr PhaseSite kOptimizer{"optimizer", PhaseKind::compute, false, __FILE__, __LINE__};

void BM_CollectorShare(benchmark::State& state) {
  const auto steps_per_s = static_cast<int>(state.range(0));
  CollectorOptions options;
  options.interval = std::chrono::milliseconds(state.range(1));
  options.min_interval = std::chrono::milliseconds(1);
  options.aggregator.warmup_steps = 0;
  double share = 0;
  for (auto _ : state) {
    Collector collector(options);
    ThreadRing* ring = collector.register_thread(static_cast<std::int64_t>(::syscall(SYS_gettid)));
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = collector.facts().system.collector_cpu_ms;
    const auto period = std::chrono::nanoseconds(1'000'000'000 / steps_per_s);
    auto next = t0;
    for (std::uint32_t step = 1; std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2); ++step) {
      const std::uint64_t b = read_ticks();
      (void)ring->try_push(PhaseRecord{&kData, b, b + 1, step, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&kForward, b + 1, b + 2, step, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&kBackward, b + 2, b + 3, step, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&kOptimizer, b + 3, b + 4, step, 0, 1, kRecordInStep});
      (void)ring->try_push(PhaseRecord{&kStep, b, b + 5, step, 0, 0, kRecordInStep | kRecordIsStep});
      next += period;
      std::this_thread::sleep_until(next);
    }
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    share = (collector.facts().system.collector_cpu_ms - cpu0) / wall_ms * 100.0;
    collector.stop();
    state.counters["dropped"] = static_cast<double>(collector.dropped_records());
  }
  state.counters["core_pct"] = share;
}
BENCHMARK(BM_CollectorShare)
    ->ArgsProduct({{100, 1000, 10000}, {20, 100, 200}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_CollectorWake(benchmark::State& state) {
  CollectorOptions options;
  options.start_thread = false;
  Collector collector(options);
  (void)collector.register_thread(static_cast<std::int64_t>(::syscall(SYS_gettid)));
  for (auto _ : state) collector.drain_all();
  collector.stop();
}
BENCHMARK(BM_CollectorWake)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
