// Collector: conservation (produced = aggregated + dropped, exactly) with
// concurrent producers, a timer-driven drain, and thread retirement.
#include "core/collector.hpp"

#include <stepscope/phase.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using namespace stepscope;
using namespace stepscope::detail;

namespace {
constexpr PhaseSite kWork{"work", PhaseKind::compute, false, __FILE__, __LINE__};
constexpr PhaseSite kStep{"step", PhaseKind::other, true, __FILE__, __LINE__};
}  // namespace

TEST_CASE("concurrent producers: produced = aggregated + dropped, exactly", "[collector][concurrency]") {
  g_use_tsc = false;
  CollectorOptions options;
  options.ring_capacity = 256;  // small, so some records are dropped
  options.interval = std::chrono::milliseconds(1);
  options.aggregator.warmup_steps = 0;
  options.sample_system = false;
  Collector collector(options);

  constexpr int kThreads = 4;
  constexpr std::uint64_t kPerThread = 200'000;
  std::vector<std::uint64_t> pushed(kThreads, 0);
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      ThreadRing* ring = collector.register_thread(100 + t);
      REQUIRE(ring != nullptr);
      for (std::uint64_t i = 0; i < kPerThread; ++i) {
        const std::uint64_t start = i * 10;
        if (ring->try_push(PhaseRecord{&kWork, start, start + 5, 1, 0, 0, 0})) ++pushed[t];
      }
      collector.retire(ring);  // as a thread does when it exits
    });
  }
  for (auto& p : producers) p.join();
  collector.stop();
  const Report facts = collector.facts();
  std::uint64_t accepted = 0;
  for (auto n : pushed) accepted += n;
  const std::uint64_t produced = kThreads * kPerThread;
  REQUIRE(facts.total_records == produced);
  REQUIRE(facts.total_records - facts.dropped_records == accepted);
  REQUIRE(accepted + facts.dropped_records == produced);
  std::uint64_t aggregated = 0;
  for (const auto& p : facts.phases) aggregated += p.count;
  REQUIRE(aggregated == accepted);
}

TEST_CASE("the collector drains on its timer while producers run", "[collector]") {
  g_use_tsc = false;
  CollectorOptions options;
  options.ring_capacity = 64;
  options.interval = std::chrono::milliseconds(2);
  options.aggregator.warmup_steps = 0;
  options.sample_system = false;
  Collector collector(options);
  ThreadRing* ring = collector.register_thread(1);
  REQUIRE(ring);
  // 10x the ring's capacity: only the timer-driven drains make room. A
  // rejected push is counted as dropped, then retried after a pause.
  std::uint64_t attempts = 0;
  for (std::uint32_t i = 1; i <= 640; ++i) {
    for (;;) {
      ++attempts;
      if (ring->try_push(PhaseRecord{&kStep, i * 100ull, i * 100ull + 50, i, 0, 0, kRecordIsStep | kRecordInStep}))
        break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
  collector.stop();
  const Report facts = collector.facts();
  REQUIRE(facts.steps.count == 640);
  REQUIRE(facts.steps.count + facts.dropped_records == attempts);
  REQUIRE(facts.total_records == attempts);
}

TEST_CASE("a ring half full wakes a collector whose wait is long", "[collector]") {
  // A quiet spell grew the wait; then a burst. The loop's timer alone would
  // not drain for an hour: the producer's half-full ring wakes it.
  CollectorOptions options;
  options.ring_capacity = 1024;
  options.interval = options.min_interval = std::chrono::milliseconds(3600 * 1000);
  options.sample_system = false;
  options.aggregator.warmup_steps = 0;
  Collector collector(options);
  ThreadRing* ring = collector.register_thread(1);
  REQUIRE(ring != nullptr);
  // The burst comes once the loop waits: it first measures the scope floor
  // (visible in facts()), then drains at once if an earlier collector left
  // a drain request behind (the flag is the process's). A burst during that
  // drain (TSan, clean-clone CI: 359 records drained, the other 241 below
  // half a ring) would test the timing, not the wake.
  for (int i = 0; i < 20000 && collector.facts().overhead.scope_ns == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  static constexpr PhaseSite step{"step", PhaseKind::other, true, __FILE__, __LINE__};
  for (std::uint32_t i = 1; i <= 600; ++i)
    REQUIRE(ring->try_push(PhaseRecord{&step, i, i + 1, i, 0, 0, kRecordInStep | kRecordIsStep}));
  // Waits for the drain (bounded, so a missing wake fails instead of hanging).
  for (int i = 0; i < 20000 && ring->consumed() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(ring->consumed() >= 512);
  CHECK(ring->dropped() == 0);
  collector.stop();
  CHECK(collector.facts().steps.count == 600);
}

TEST_CASE("the collector's timer adapts to how full the rings get", "[collector]") {
  using ms = std::chrono::milliseconds;
  const ms shortest{1}, longest{20};
  // Quiet rings: back off to the longest wait, never past it.
  REQUIRE(Collector::next_interval(ms{5}, 0, shortest, longest) == ms{10});
  REQUIRE(Collector::next_interval(ms{10}, 10, shortest, longest) == ms{20});
  REQUIRE(Collector::next_interval(ms{20}, 0, shortest, longest) == ms{20});
  // A ring over an eighth full: the wait that would have filled an eighth at
  // that rate (at most half the last one), down to the shortest.
  REQUIRE(Collector::next_interval(ms{20}, 300, shortest, longest) == ms{8});
  REQUIRE(Collector::next_interval(ms{20}, 200, shortest, longest) == ms{10});
  REQUIRE(Collector::next_interval(ms{100}, 1024, shortest, ms{100}) == ms{12});
  REQUIRE(Collector::next_interval(ms{1}, 1024, shortest, longest) == ms{1});
  // In between: keep the pace.
  REQUIRE(Collector::next_interval(ms{4}, 128, shortest, longest) == ms{4});
  REQUIRE(Collector::next_interval(ms{4}, 100, shortest, longest) == ms{4});
  // From a burst at 1 ms back to quiet: 1, 2, 4, 8, 16, 20.
  ms wait{1};
  int steps = 0;
  while (wait < longest && steps < 10) {
    wait = Collector::next_interval(wait, 0, shortest, longest);
    ++steps;
  }
  REQUIRE(wait == longest);
  REQUIRE(steps == 5);
  // Fixed timer (shortest == longest): never moves.
  REQUIRE(Collector::next_interval(ms{5}, 1024, ms{5}, ms{5}) == ms{5});
  REQUIRE(Collector::next_interval(ms{5}, 0, ms{5}, ms{5}) == ms{5});
}

TEST_CASE("a snapshot with nothing to write yet is offered again soon, a written one after the interval",
          "[collector][snapshot]") {
  CollectorOptions options;
  options.interval = std::chrono::milliseconds(5);
  options.sample_system = false;
  options.first_snapshot_s = 0.02;
  options.snapshot_interval_s = 3600;
  std::mutex mutex;
  std::condition_variable changed;
  int offers = 0;
  options.on_snapshot = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    ++offers;
    changed.notify_all();
    return offers >= 3;  // the first two find nothing to write
  };
  Collector collector(options);
  std::unique_lock<std::mutex> lock(mutex);
  // Bounded: a collector that waited the hour after a fruitless offer fails here.
  REQUIRE(changed.wait_for(lock, std::chrono::seconds(60), [&] { return offers >= 3; }));
  // Written: the next offer is an hour away.
  CHECK_FALSE(changed.wait_for(lock, std::chrono::milliseconds(300), [&] { return offers > 3; }));
  lock.unlock();
  collector.stop();
}

TEST_CASE("the quiet wait grows where a wake-up costs more", "[collector]") {
  using ms = std::chrono::milliseconds;
  const ms interval{200};
  // Cheap wake-ups (a small process): the configured quiet wait.
  REQUIRE(Collector::quiet_ceiling(0, interval) == interval);
  REQUIRE(Collector::quiet_ceiling(20'000, interval) == interval);  // 20 us x 5000 = 100 ms
  // Dear ones: as long as keeps quiet wake-ups at 1/5000 of a core (0.02%)...
  REQUIRE(Collector::quiet_ceiling(100'000, interval) == ms{500});
  // ... up to two seconds, however dear (the sampler still needs samples).
  REQUIRE(Collector::quiet_ceiling(5'000'000, interval) == Collector::kLongestQuietWait);
  REQUIRE(Collector::quiet_ceiling(~0ull, interval) == Collector::kLongestQuietWait);
  // A configured wait above the ceiling is kept.
  REQUIRE(Collector::quiet_ceiling(5'000'000, ms{3000}) == ms{3000});
}

namespace {
// A device backend that records what the collector hands it.
struct RecordingBackend final : DeviceBackend {
  int configured = 0;
  std::uint64_t warmup_steps = 0;
  bool polled_before_configure = false;
  void on_record(const PhaseRecord&) override {}
  void poll(Aggregator&) override { polled_before_configure = polled_before_configure || configured == 0; }
  void finish(Aggregator&, DeviceInfo&) override {}
  void configure(const DeviceSettings& settings) noexcept override {
    ++configured;
    warmup_steps = settings.warmup_steps;
  }
};
}  // namespace

// The backend may exist before the settings are read (a program that already
// uses the GPU gets it on its first scope's thread): the warm-up reaches it
// through the interface, once, before its first poll (issue 17: it used to
// read the settings while they were still the defaults).
TEST_CASE("the collector hands the warm-up to the device backend before its first poll", "[collector]") {
  auto backend = std::make_unique<RecordingBackend>();
  RecordingBackend* seen = backend.get();
  CollectorOptions options;
  options.start_thread = false;
  options.sample_system = false;
  options.aggregator.warmup_steps = 17;  // not the default (5)
  Collector collector(options, std::move(backend));
  CHECK(seen->configured == 1);
  CHECK(seen->warmup_steps == 17);
  collector.drain_all();  // polls the backend
  CHECK_FALSE(seen->polled_before_configure);
  collector.stop();
  CHECK(seen->configured == 1);
}
