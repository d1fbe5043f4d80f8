// Aggregator: self vs inclusive time, the step breakdown, background phases
// off the critical path, warm-up exclusion, bounded series.
#include "core/aggregator.hpp"

#include <stepscope/phase.hpp>

#include <catch2/catch.hpp>

using namespace stepscope;
using namespace stepscope::detail;

namespace {

constexpr PhaseSite kStep{"step", PhaseKind::other, true, __FILE__, __LINE__};
constexpr PhaseSite kForward{"forward", PhaseKind::compute, false, __FILE__, __LINE__};
constexpr PhaseSite kMatmul{"matmul", PhaseKind::compute, false, __FILE__, __LINE__};
constexpr PhaseSite kData{"data", PhaseKind::input, false, __FILE__, __LINE__};
constexpr PhaseSite kDecode{"decode", PhaseKind::input, false, __FILE__, __LINE__};
constexpr PhaseSite kForwardOtherSite{"forward", PhaseKind::compute, false, __FILE__, __LINE__};

// Ticks are nanoseconds here: the converter runs on CLOCK_MONOTONIC.
struct Fixture {
  TickConverter clock;
  Fixture() {
    g_use_tsc = false;
    clock.start();
  }
};

PhaseRecord rec(const PhaseSite& site, std::uint64_t start, std::uint64_t end, std::uint32_t step, std::uint8_t depth,
                bool in_step) {
  std::uint8_t flags = in_step ? kRecordInStep : 0;
  if (site.is_step) flags |= kRecordIsStep;
  return PhaseRecord{&site, start, end, step, 0, depth, flags};
}

// One step [base, base+100us] on the step thread: forward [10,60] with a
// nested matmul [20,50], data [60,90]; 20 us in no phase.
void push_step(Aggregator& agg, Aggregator::ThreadId t, std::uint64_t base, std::uint32_t step) {
  const std::uint64_t us = 1000;
  agg.consume(t, rec(kMatmul, base + 20 * us, base + 50 * us, step, 2, true));
  agg.consume(t, rec(kForward, base + 10 * us, base + 60 * us, step, 1, true));
  agg.consume(t, rec(kData, base + 60 * us, base + 90 * us, step, 1, true));
  agg.consume(t, rec(kStep, base, base + 100 * us, step, 0, true));
}

const PhaseSummary* find(const Report& r, const std::string& name, ThreadRole role) {
  for (const auto& p : r.phases)
    if (p.name == name && p.thread_role == role) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("nested phases: self and inclusive time, breakdown adds up to the step", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  for (std::uint32_t s = 1; s <= 10; ++s) push_step(agg, t, s * 1'000'000ull, s);
  Report r;
  agg.fill_report(r);
  REQUIRE(r.steps.count == 10);
  REQUIRE(r.steps.wall_ms.mean == Approx(0.1));
  const auto* forward = find(r, "forward", ThreadRole::step);
  const auto* matmul = find(r, "matmul", ThreadRole::step);
  const auto* data = find(r, "data", ThreadRole::step);
  REQUIRE(forward);
  REQUIRE(matmul);
  REQUIRE(data);
  REQUIRE(forward->host_ms.mean == Approx(0.05));
  REQUIRE(forward->self_ms.mean == Approx(0.02));
  REQUIRE(matmul->self_ms.mean == Approx(0.03));
  REQUIRE(data->share_of_step == Approx(0.3));
  const auto& b = r.steps.breakdown;
  REQUIRE(b.compute_ms == Approx(0.05));  // forward self + matmul: counted once
  REQUIRE(b.input_ms == Approx(0.03));
  REQUIRE(b.unattributed_ms == Approx(0.02));
  REQUIRE(b.input_ms + b.compute_ms + b.memory_ms + b.communication_ms + b.other_ms + b.unattributed_ms ==
          Approx(b.wall_ms));
  REQUIRE(r.total_records == 40);
}

TEST_CASE("call sites with the same name are one phase", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  agg.consume(t, rec(kForward, 0, 1000, 1, 1, true));
  agg.consume(t, rec(kForwardOtherSite, 1000, 3000, 1, 1, true));
  agg.consume(t, rec(kStep, 0, 3000, 1, 0, true));
  Report r;
  agg.fill_report(r);
  REQUIRE(find(r, "forward", ThreadRole::step)->count == 2);
}

TEST_CASE("background phases are off the critical path, with their overlap", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto main_thread = agg.add_thread(1);
  const auto loader = agg.add_thread(2);
  // The loader decodes [0, 50us] while the step runs [20us, 120us]: 30 us overlap.
  // Its record arrives before the step's (pending until the step completes).
  agg.consume(loader, rec(kDecode, 0, 50'000, 0, 0, false));
  agg.consume(main_thread, rec(kData, 20'000, 30'000, 1, 1, true));
  agg.consume(main_thread, rec(kStep, 20'000, 120'000, 1, 0, true));
  // A second decode entirely between steps: no overlap.
  agg.consume(loader, rec(kDecode, 130'000, 150'000, 1, 0, false));
  agg.consume(main_thread, rec(kStep, 200'000, 300'000, 2, 0, true));
  Report r;
  agg.fill_report(r);
  const auto* decode = find(r, "decode", ThreadRole::background);
  REQUIRE(decode);
  REQUIRE(decode->count == 2);
  REQUIRE(decode->share_of_step == 0);  // the step did not wait for it
  REQUIRE(decode->overlap_with_steps.has_value());
  REQUIRE(*decode->overlap_with_steps == Approx(30.0 / 70.0));
  // The step's input time is only the data phase on the step thread.
  REQUIRE(r.steps.breakdown.input_ms == Approx(0.01 / 2));
  REQUIRE(find(r, "decode", ThreadRole::step) == nullptr);
}

TEST_CASE("phases outside steps on the step thread are outside_step", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  agg.consume(t, rec(kData, 0, 1000, 0, 0, false));  // setup before the first step
  agg.consume(t, rec(kStep, 2000, 5000, 1, 0, true));
  Report r;
  agg.fill_report(r);
  REQUIRE(find(r, "data", ThreadRole::outside_step) != nullptr);
  REQUIRE(find(r, "data", ThreadRole::background) == nullptr);
}

TEST_CASE("warm-up steps are excluded from statistics but reported", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 2;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  for (std::uint32_t s = 1; s <= 5; ++s) {
    const std::uint64_t base = s * 10'000'000ull;
    const std::uint64_t len = s <= 2 ? 5'000'000 : 1'000'000;  // slow warm-up
    agg.consume(t, rec(kForward, base, base + len / 2, s, 1, true));
    agg.consume(t, rec(kStep, base, base + len, s, 0, true));
  }
  Report r;
  agg.fill_report(r);
  REQUIRE(r.steps.count == 3);
  REQUIRE(r.steps.warmup_excluded == 2);
  REQUIRE(r.steps.wall_ms.mean == Approx(1.0));
  REQUIRE(r.steps.warmup_wall_ms.mean == Approx(5.0));
  REQUIRE(find(r, "forward", ThreadRole::step)->count == 3);
}

TEST_CASE("the step series stays bounded and keeps the totals", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  options.series_capacity = 8;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  for (std::uint32_t s = 1; s <= 1000; ++s) agg.consume(t, rec(kStep, s * 10'000ull, s * 10'000ull + s, s, 0, true));
  Report r;
  agg.fill_report(r);
  const auto& series = r.steps.series;
  REQUIRE(series.wall_ms.size() <= 9);
  REQUIRE(series.stride >= 128);
  REQUIRE((series.stride & (series.stride - 1)) == 0);
  REQUIRE(series.first_step.front() == 1);
  // Weighted mean of the points equals the mean over all steps.
  double weighted = 0, steps = 0;
  for (std::size_t i = 0; i < series.wall_ms.size(); ++i) {
    const double n = (i + 1 < series.first_step.size()) ? double(series.first_step[i + 1] - series.first_step[i])
                                                        : double(1001 - series.first_step[i]);
    weighted += series.wall_ms[i] * n;
    steps += n;
  }
  REQUIRE(steps == 1000);
  REQUIRE(weighted / steps == Approx(r.steps.wall_ms.mean));
}

TEST_CASE("a retired thread's statistics stay in the report", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto main_thread = agg.add_thread(1);
  const auto worker = agg.add_thread(2);
  agg.consume(worker, rec(kDecode, 0, 4000, 1, 0, false));
  agg.consume(main_thread, rec(kStep, 0, 10000, 1, 0, true));
  agg.retire_thread(worker);
  const auto worker2 = agg.add_thread(3);
  agg.consume(worker2, rec(kDecode, 10000, 12000, 1, 0, false));
  Report r;
  agg.fill_report(r);
  const auto* decode = find(r, "decode", ThreadRole::background);
  REQUIRE(decode);
  REQUIRE(decode->count == 2);
  REQUIRE(decode->threads == 2);
}
