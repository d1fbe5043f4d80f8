// Aggregator: self vs inclusive time, the step breakdown, background phases
// off the critical path, warm-up exclusion, bounded series; and how the trace
// recorder draws a loop of steps.
#include "core/aggregator.hpp"
#include "core/trace_recorder.hpp"

#include <stepscope/phase.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
  // Back to back (100 us apart): nothing between steps.
  for (std::uint32_t s = 1; s <= 10; ++s) push_step(agg, t, s * 100'000ull, s);
  Report r;
  agg.fill_report(r);
  REQUIRE(r.steps.count == 10);
  REQUIRE(r.steps.coverage == Approx(1.0));
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
  REQUIRE(b.kind_ms[PhaseKind::compute] == Approx(0.05));  // forward self + matmul: counted once
  REQUIRE(b.kind_ms[PhaseKind::input] == Approx(0.03));
  REQUIRE(b.unattributed_ms == Approx(0.02));
  REQUIRE(std::accumulate(b.kind_ms.begin(), b.kind_ms.end(), 0.0) + b.unattributed_ms == Approx(b.wall_ms));
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
  const PhaseSummary* forward = find(r, "forward", ThreadRole::step);
  REQUIRE(forward->count == 2);
  // ... with a row per call site, most time first.
  REQUIRE(forward->sites.size() == 2);
  CHECK(forward->sites[0].line == kForwardOtherSite.line);
  CHECK(forward->sites[0].host_ms.mean == Approx(0.002));
  CHECK(forward->sites[1].line == kForward.line);
  CHECK(forward->sites[1].host_ms.count == 1);
  CHECK(forward->sites[0].file == __FILE__);
  CHECK(forward->host_ms.mean == Approx(0.0015));
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
  REQUIRE(r.steps.breakdown.kind_ms[PhaseKind::input] == Approx(0.01 / 2));
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
  // The points hold each step with the gap before it (the steps here are
  // far apart), as the breakdown does.
  REQUIRE(weighted / steps == Approx(r.steps.breakdown.wall_ms));
  REQUIRE(r.steps.breakdown.wall_ms > r.steps.wall_ms.mean);
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

namespace {

// A random program: steps of nested phases on one thread (some outside any
// step), background phases on another, warm-up included. Records come out
// in push order (a scope's record after its children's), in chunks of one
// thread's records: the order in which the collector drains them.
struct Chunk {
  Aggregator::ThreadId thread;
  std::vector<PhaseRecord> records;
};

constexpr PhaseSite kSites[] = {
    {"data", PhaseKind::input, false, __FILE__, __LINE__},
    {"forward", PhaseKind::compute, false, __FILE__, __LINE__},
    {"matmul", PhaseKind::compute, false, __FILE__, __LINE__},
    {"backward", PhaseKind::compute, false, __FILE__, __LINE__},
    {"copy", PhaseKind::memory, false, __FILE__, __LINE__},
    {"allreduce", PhaseKind::communication, false, __FILE__, __LINE__},
    {"optimizer", PhaseKind::other, false, __FILE__, __LINE__},
    {"forward", PhaseKind::compute, false, __FILE__, __LINE__},
};
constexpr int kSiteCount = sizeof(kSites) / sizeof(kSites[0]);

void emit_phase(std::vector<PhaseRecord>& out, std::mt19937_64& rng, std::uint64_t& now, std::uint8_t depth,
                std::uint32_t step, bool in_step) {
  const std::uint64_t start = now;
  now += rng() % 50;
  if (depth < 5)
    for (std::uint64_t children = rng() % 3; children > 0; --children)
      emit_phase(out, rng, now, depth + 1, step, in_step);
  // Own time: mostly short, sometimes long, now and then zero.
  const std::uint64_t kind = rng() % 10;
  now += kind == 0 ? 0 : kind == 1 ? 1 + rng() % 100'000'000 : 1 + rng() % 200'000;
  out.push_back(PhaseRecord{&kSites[rng() % kSiteCount], start, now, step, 0, depth,
                            static_cast<std::uint8_t>(in_step ? kRecordInStep : 0)});
}

std::vector<Chunk> random_program(std::uint64_t seed, Aggregator::ThreadId main_thread, Aggregator::ThreadId loader) {
  std::mt19937_64 rng(seed);
  std::vector<Chunk> chunks;
  std::uint64_t now = 1000, loader_now = 0;
  for (std::uint32_t step = 1; step <= 60; ++step) {
    Chunk main{main_thread, {}};
    if (rng() % 4 == 0) emit_phase(main.records, rng, now, 0, step - 1, false);  // between steps
    const std::uint64_t start = now;
    for (std::uint64_t phases = 1 + rng() % 4; phases > 0; --phases) emit_phase(main.records, rng, now, 1, step, true);
    now += rng() % 1000;
    main.records.push_back(PhaseRecord{&kStep, start, now, step, 0, 0, kRecordInStep | kRecordIsStep});
    Chunk background{loader, {}};
    while (loader_now < now + 500'000) {  // the loader runs ahead of the steps
      const std::uint64_t begin = loader_now + rng() % 20'000;
      loader_now = begin + 1 + rng() % 300'000;
      background.records.push_back(PhaseRecord{&kDecode, begin, loader_now, step, 0, 0, 0});
    }
    chunks.push_back(std::move(background));
    chunks.push_back(std::move(main));
  }
  return chunks;
}

void require_same(const Distribution& a, const Distribution& b) {
  REQUIRE(a.count == b.count);
  for (auto [x, y] : {std::pair{a.total, b.total},
                      {a.mean, b.mean},
                      {a.stddev, b.stddev},
                      {a.min, b.min},
                      {a.max, b.max},
                      {a.p50, b.p50},
                      {a.p90, b.p90},
                      {a.p99, b.p99}}) {
    if (std::isnan(x) || std::isnan(y))
      REQUIRE((std::isnan(x) && std::isnan(y)));
    else
      REQUIRE(x == y);
  }
}

void require_same(const Report& a, const Report& b) {
  REQUIRE(a.total_records == b.total_records);
  REQUIRE(a.steps.count == b.steps.count);
  REQUIRE(a.steps.warmup_excluded == b.steps.warmup_excluded);
  require_same(a.steps.wall_ms, b.steps.wall_ms);
  require_same(a.steps.warmup_wall_ms, b.steps.warmup_wall_ms);
  for (PhaseKind k : kPhaseKinds) REQUIRE(a.steps.breakdown.kind_ms[k] == b.steps.breakdown.kind_ms[k]);
  REQUIRE(a.steps.breakdown.unattributed_ms == b.steps.breakdown.unattributed_ms);
  REQUIRE(a.steps.series.wall_ms == b.steps.series.wall_ms);
  REQUIRE(a.steps.series.kind_ms[PhaseKind::compute] == b.steps.series.kind_ms[PhaseKind::compute]);
  REQUIRE(a.phases.size() == b.phases.size());
  for (std::size_t i = 0; i < a.phases.size(); ++i) {
    const PhaseSummary &p = a.phases[i], &q = b.phases[i];
    INFO("phase " << p.name << " role " << static_cast<int>(p.thread_role));
    REQUIRE(p.name == q.name);
    REQUIRE(p.thread_role == q.thread_role);
    REQUIRE(p.count == q.count);
    require_same(p.host_ms, q.host_ms);
    require_same(p.self_ms, q.self_ms);
    REQUIRE(p.share_of_step == q.share_of_step);
    REQUIRE(p.overlap_with_steps == q.overlap_with_steps);
    REQUIRE(p.histogram.buckets == q.histogram.buckets);
  }
}

}  // namespace

TEST_CASE("consuming runs of records equals consuming them one at a time", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 3;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    Aggregator one(options, &f.clock), runs(options, &f.clock);
    const auto main_one = one.add_thread(1), loader_one = one.add_thread(2);
    const auto main_runs = runs.add_thread(1), loader_runs = runs.add_thread(2);
    REQUIRE(main_one == main_runs);
    REQUIRE(loader_one == loader_runs);
    std::mt19937_64 split(seed);
    std::uint64_t records = 0;
    for (const Chunk& c : random_program(seed, main_one, loader_one)) {
      for (const auto& r : c.records) one.consume(c.thread, r);
      for (std::size_t i = 0; i < c.records.size();) {  // runs of random length, as a ring wraps
        const std::size_t n = std::min<std::size_t>(c.records.size() - i, 1 + split() % 7);
        runs.consume(c.thread, c.records.data() + i, n);
        i += n;
      }
      records += c.records.size();
    }
    one.flush_pending();
    runs.flush_pending();
    Report a, b;
    one.fill_report(a);
    runs.fill_report(b);
    REQUIRE(a.total_records == records);
    require_same(a, b);
  }
}

TEST_CASE("phase statistics equal a plain per-record computation", "[aggregator]") {
  // Leaves and parents are kept apart inside the aggregator (a leaf's self
  // time is its inclusive time); the report must not show it.
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 3;
  Aggregator agg(options, &f.clock);
  const auto main_thread = agg.add_thread(1), loader = agg.add_thread(2);
  struct Expected {
    DurationStats inclusive;
    std::vector<std::uint64_t> self;
  };
  std::map<std::pair<std::string, ThreadRole>, Expected> expected;
  std::array<std::uint64_t, 257> child_ns{};  // the main thread's; the loader's phases are not nested
  DurationStats steps;
  for (const Chunk& c : random_program(42, main_thread, loader)) {
    agg.consume(c.thread, c.records.data(), c.records.size());
    for (const PhaseRecord& r : c.records) {
      const std::uint64_t wall = r.end_ticks - r.start_ticks;  // ns: the test clock is CLOCK_MONOTONIC
      std::uint64_t self = wall;
      if (c.thread == main_thread) {
        const std::uint64_t children = child_ns[r.depth + 1];
        child_ns[r.depth + 1] = 0;
        child_ns[r.depth] += wall;
        self = wall > children ? wall - children : 0;
      }
      if (r.step <= options.warmup_steps) continue;
      if (r.flags & kRecordIsStep) {
        steps.add(wall);
        continue;
      }
      const ThreadRole role = c.thread == loader               ? ThreadRole::background
                              : (r.flags & kRecordInStep) != 0 ? ThreadRole::step
                                                               : ThreadRole::outside_step;
      Expected& e = expected[{r.site->name, role}];
      e.inclusive.add(wall);
      e.self.push_back(self);
    }
  }
  agg.flush_pending();
  Report r;
  agg.fill_report(r);
  require_same(r.steps.wall_ms, steps.to_distribution_ms());
  REQUIRE(r.phases.size() == expected.size());
  for (const auto& [key, e] : expected) {
    INFO("phase " << key.first << " role " << static_cast<int>(key.second));
    const PhaseSummary* p = find(r, key.first, key.second);
    REQUIRE(p != nullptr);
    REQUIRE(p->count == e.self.size());
    require_same(p->host_ms, e.inclusive.to_distribution_ms());
    // Self time, independently of RunningStats: integer sums, two-pass variance.
    std::uint64_t total = 0;
    for (auto v : e.self) total += v;
    const long double mean = static_cast<long double>(total) / e.self.size();
    long double scatter = 0;
    for (auto v : e.self) scatter += (v - mean) * (v - mean);
    REQUIRE(p->self_ms.count == e.self.size());
    REQUIRE(p->self_ms.total == static_cast<double>(total) * 1e-6);
    REQUIRE(p->self_ms.min == static_cast<double>(*std::min_element(e.self.begin(), e.self.end())) * 1e-6);
    REQUIRE(p->self_ms.max == static_cast<double>(*std::max_element(e.self.begin(), e.self.end())) * 1e-6);
    const double stddev =
        e.self.size() < 2 ? 0.0 : static_cast<double>(std::sqrt(scatter / (e.self.size() - 1))) * 1e-6;
    REQUIRE(p->self_ms.stddev == Approx(stddev).epsilon(1e-12).margin(1e-15));
  }
}

TEST_CASE("many call sites and new phases while threads hold cached aggregates", "[aggregator]") {
  // More call sites than the per-thread cache holds: collisions, evictions and
  // phases created while another thread has cached pointers into its own
  // aggregates (which creating a phase reallocates).
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  std::vector<std::string> names;
  for (int i = 0; i < 300; ++i) names.push_back("phase" + std::to_string(i));
  std::vector<PhaseSite> sites;
  for (int i = 0; i < 300; ++i)
    sites.push_back(PhaseSite{names[i].c_str(), PhaseKind::compute, false, __FILE__, __LINE__});
  const auto a = agg.add_thread(1), b = agg.add_thread(2);
  std::map<std::string, std::uint64_t> count, total;
  auto run = [&](Aggregator::ThreadId thread, int first, int last, int repeat, bool in_step) {
    std::vector<PhaseRecord> records;
    std::uint64_t now = 0;
    for (int k = 0; k < repeat; ++k)
      for (int i = first; i < last; ++i) {
        const std::uint64_t len = 1 + static_cast<std::uint64_t>(i) * 7 + static_cast<std::uint64_t>(k);
        records.push_back(
            PhaseRecord{&sites[i], now, now + len, 1, 0, 1, static_cast<std::uint8_t>(in_step ? kRecordInStep : 0)});
        now += len;
        ++count[names[i]];
        total[names[i]] += len;
      }
    agg.consume(thread, records.data(), records.size());
  };
  run(a, 0, 10, 3, true);    // a caches pointers to phases 0..9
  run(b, 10, 300, 2, true);  // 290 new phases: a's aggregates move
  run(a, 0, 10, 3, true);    // a's cache must not point to the old ones
  run(a, 0, 300, 4, true);   // round-robin over 300 sites: collisions in both caches
  run(b, 0, 300, 2, false);  // the same sites outside steps: other aggregates
  run(a, 150, 300, 3, true);
  agg.consume(a, PhaseRecord{&kStep, 0, 1'000'000'000, 1, 0, 0, kRecordInStep | kRecordIsStep});
  agg.flush_pending();
  Report r;
  agg.fill_report(r);
  std::map<std::string, std::uint64_t> seen_count, seen_total;
  for (const auto& p : r.phases) {
    seen_count[p.name] += p.count;
    seen_total[p.name] += static_cast<std::uint64_t>(std::llround(p.host_ms.total * 1e6));
  }
  REQUIRE(seen_count == count);
  REQUIRE(seen_total == total);
}

TEST_CASE("background overlap looks at the most recent steps kept", "[aggregator]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  options.step_intervals_kept = 3;  // rounded up to 4
  Aggregator agg(options, &f.clock);
  const auto main_thread = agg.add_thread(1), loader = agg.add_thread(2);
  // Steps [s*1000, s*1000+500] for s = 1..10.
  for (std::uint32_t s = 1; s <= 10; ++s) agg.consume(main_thread, rec(kStep, s * 1000, s * 1000 + 500, s, 0, true));
  // [7000, 10000] overlaps steps 7, 8 and 9 (1500 ns), all among the 4 kept.
  agg.consume(loader, rec(kDecode, 7000, 10000, 10, 0, false));
  Report r;
  agg.fill_report(r);
  const auto* decode = find(r, "decode", ThreadRole::background);
  REQUIRE(decode);
  REQUIRE(decode->overlap_with_steps.has_value());
  REQUIRE(*decode->overlap_with_steps == Approx(1500.0 / 3000.0));
}

TEST_CASE("records at the clamped depth are counted and still aggregated", "[aggregator]") {
  // The recording thread clamps nesting at kMaxDepth (63); a record's depth is
  // an 8-bit field, so any value must be safe to index with.
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  std::vector<PhaseRecord> records;
  for (std::uint8_t depth : {std::uint8_t{255}, std::uint8_t{200}, std::uint8_t{63}, std::uint8_t{62}, std::uint8_t{1}})
    records.push_back(PhaseRecord{&kMatmul, 100, 200, 1, 0, depth, kRecordInStep});
  records.push_back(PhaseRecord{&kStep, 0, 1000, 1, 0, 0, kRecordInStep | kRecordIsStep});
  agg.consume(t, records.data(), records.size());
  Report r;
  agg.fill_report(r);
  const auto* matmul = find(r, "matmul", ThreadRole::step);
  REQUIRE(matmul);
  REQUIRE(matmul->count == 5);
  REQUIRE(matmul->host_ms.total == Approx(5 * 100 * 1e-6));
  const auto notes = agg.notes();
  REQUIRE(notes.size() == 1);
  REQUIRE(notes[0].find("(3 records)") != std::string::npos);  // depths 255, 200 and 63
}

TEST_CASE("background overlap is exact when several step threads complete steps out of order", "[aggregator]") {
  // Two step threads whose steps overlap each other and complete out of
  // order; background records are settled after every step is in. The
  // overlap must equal the brute-force union of the step intervals.
  std::mt19937_64 rng(13);
  for (int round = 0; round < 20; ++round) {
    Fixture f;
    AggregatorOptions options;
    options.warmup_steps = 0;
    Aggregator agg(options, &f.clock);
    const auto a = agg.add_thread(1), b = agg.add_thread(2), loader = agg.add_thread(3);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> steps, steps_a, steps_b;
    std::uint64_t ta = 1000, tb = 1500;
    for (std::uint32_t s = 1; s <= 200; ++s) {
      const std::uint64_t la = 100 + rng() % 900, lb = 100 + rng() % 2000;
      steps_a.emplace_back(ta, ta + la);
      steps_b.emplace_back(tb, tb + lb);
      ta += la + rng() % 300;
      tb += lb + rng() % 500;
    }
    steps = steps_a;
    steps.insert(steps.end(), steps_b.begin(), steps_b.end());
    // As the collector sees them: each thread's ring in turn, a batch of
    // steps at a time, so one thread's steps arrive after later-ending ones.
    std::uint32_t n = 0;
    for (std::size_t ia = 0, ib = 0; ia < steps_a.size() || ib < steps_b.size();) {
      for (std::size_t k = 1 + rng() % 12; k > 0 && ia < steps_a.size(); --k, ++ia)
        agg.consume(a, rec(kStep, steps_a[ia].first, steps_a[ia].second, ++n, 0, true));
      for (std::size_t k = 1 + rng() % 12; k > 0 && ib < steps_b.size(); --k, ++ib)
        agg.consume(b, rec(kStep, steps_b[ib].first, steps_b[ib].second, ++n, 0, true));
    }
    std::vector<char> covered(std::max(ta, tb) + 3000, 0);
    for (const auto& [s, e] : steps)
      std::fill(covered.begin() + static_cast<long>(s), covered.begin() + static_cast<long>(e), 1);
    std::uint64_t expected = 0, measured = 0;
    for (int i = 0; i < 300; ++i) {
      const std::uint64_t s = rng() % (covered.size() - 2000), e = s + 1 + rng() % 1500;
      agg.consume(loader, rec(kDecode, s, e, n, 0, false));
      for (std::uint64_t t = s; t < e; ++t) expected += static_cast<std::uint64_t>(covered[t]);
      measured += e - s;
    }
    agg.flush_pending();
    Report r;
    agg.fill_report(r);
    const auto* decode = find(r, "decode", ThreadRole::background);
    REQUIRE(decode);
    REQUIRE(decode->overlap_with_steps.has_value());
    REQUIRE(*decode->overlap_with_steps ==
            Approx(static_cast<double>(expected) / static_cast<double>(measured)).epsilon(1e-9));
  }
}

TEST_CASE("coverage: time between steps, and input between steps counted as the next step's input",
          "[aggregator][coverage]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  const auto loader = agg.add_thread(2);
  const std::uint64_t us = 1000;
  // Steps [0,100], [150,250], [300,400] us. Between them the step thread
  // fetches: [100,140] (10 us of the gap in no phase) and [250,300] (all of
  // it). A background thread's input between steps is not the step's wait.
  agg.consume(t, rec(kStep, 0, 100 * us, 1, 0, true));
  agg.consume(t, rec(kData, 100 * us, 140 * us, 1, 0, false));
  agg.consume(loader, rec(kDecode, 100 * us, 150 * us, 1, 0, false));
  agg.consume(t, rec(kForward, 150 * us, 250 * us, 2, 1, true));
  agg.consume(t, rec(kStep, 150 * us, 250 * us, 2, 0, true));
  agg.consume(t, rec(kData, 250 * us, 300 * us, 2, 0, false));
  agg.consume(t, rec(kStep, 300 * us, 400 * us, 3, 0, true));
  agg.flush_pending();
  Report r;
  agg.fill_report(r);
  REQUIRE(r.steps.count == 3);
  REQUIRE(r.steps.coverage.has_value());
  CHECK(*r.steps.coverage == Approx(300.0 / 400.0));
  CHECK(r.steps.between_steps_ms == Approx(0.100));
  CHECK(r.steps.between_steps_input_ms == Approx(0.090));
  // Per measured step: the step scopes' own 100 us plus the gaps, split.
  const StepBreakdown& b = r.steps.breakdown;
  CHECK(r.steps.wall_ms.mean == Approx(0.100));
  CHECK(b.wall_ms == Approx((300.0 + 100.0) / 3 * 1e-3));
  CHECK(b.between_steps_input_ms == Approx(0.090 / 3));
  CHECK(b.kind_ms[PhaseKind::input] == Approx(0.090 / 3));  // only the between-step fetches are input here
  CHECK(b.between_steps_ms == Approx(0.010 / 3));
  CHECK(b.kind_ms[PhaseKind::compute] == Approx(0.100 / 3));
  CHECK(std::accumulate(b.kind_ms.begin(), b.kind_ms.end(), 0.0) + b.unattributed_ms + b.between_steps_ms ==
        Approx(b.wall_ms));
  // The series holds the same accounting.
  double series_between = 0;
  for (double x : r.steps.series.between_steps_ms) series_between += x;
  CHECK(series_between == Approx(0.010));  // stride 1: the points are the steps
  // The fetches stay visible as a phase outside steps.
  const PhaseSummary* data = find(r, "data", ThreadRole::outside_step);
  REQUIRE(data);
  CHECK(data->count == 2);
}

TEST_CASE("coverage: a step that holds a step is a loop of steps; one step gives no coverage; warm-up steps count",
          "[aggregator][coverage]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 1;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  agg.consume(t, rec(kStep, 0, 1000, 1, 0, true));
  Report one;
  agg.fill_report(one);
  CHECK_FALSE(one.steps.coverage.has_value());
  // Step 2 (1000-2000) holds step 3 (a step() inside a steps() loop): its
  // fetch (1000-1200) was recorded before step 3 opened at 1500.
  agg.consume(t, rec(kData, 1000, 1200, 2, 1, true));
  agg.consume(t, PhaseRecord{&kStep, 1500, 1500, 3, 0, 1, kRecordHoldsSteps});
  agg.consume(t, rec(kForward, 1500, 1700, 3, 2, true));
  agg.consume(t, rec(kStep, 1500, 1800, 3, 1, true));
  agg.consume(t, PhaseRecord{&kStep, 1000, 2000, 2, 0, 0, kRecordInStep | kRecordIsStep | kRecordOuterStep});
  agg.consume(t, rec(kStep, 3000, 4000, 4, 0, true));
  Report r;
  agg.fill_report(r);
  CHECK(r.steps.count == 2);  // 3 and 4
  CHECK(r.steps.outer_excluded == 1);
  REQUIRE(r.steps.coverage.has_value());
  CHECK(*r.steps.coverage == Approx(2300.0 / 4000.0));
  // Step 3's gap (1000-1500) holds the fetch: input, the next step's, once.
  CHECK(r.steps.between_steps_input_ms == Approx(200 * 1e-6));
  CHECK(r.steps.between_steps_ms == Approx(1700 * 1e-6));  // 1000-1500 and 1800-3000
  const StepBreakdown& b = r.steps.breakdown;
  CHECK(b.kind_ms[PhaseKind::input] == Approx(100 * 1e-6));  // 200 ns over the 2 measured steps
  CHECK(b.kind_ms[PhaseKind::compute] == Approx(100 * 1e-6));
  CHECK(b.wall_ms == Approx((300 + 500 + 1000 + 1200) * 1e-6 / 2));
  double parts = b.unattributed_ms + b.between_steps_ms;
  for (PhaseKind k : kPhaseKinds) parts += b.kind_ms[k];
  CHECK(parts == Approx(b.wall_ms));
}

TEST_CASE("per-site rows are capped; the rest share one row and are counted", "[aggregator][sites]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  constexpr int kSites = static_cast<int>(kMaxSitesPerPhase) + 4;
  std::vector<PhaseSite> sites;
  for (int i = 0; i < kSites; ++i)
    sites.push_back(PhaseSite{"backward", PhaseKind::compute, false, "model.cpp", 100 + i});
  // The same place spelled by a second site object (a second translation unit).
  const std::string file_copy = "model.cpp";
  const PhaseSite again{"backward", PhaseKind::compute, false, file_copy.c_str(), 100};
  std::uint64_t now = 0;
  for (int i = 0; i < kSites; ++i) {
    agg.consume(t, rec(sites[static_cast<std::size_t>(i)], now, now + 1000 * (i + 1), 1, 1, true));
    now += 1000 * (i + 1);
  }
  agg.consume(t, rec(again, now, now + 1000, 1, 1, true));
  agg.consume(t, rec(kStep, 0, now + 1000, 1, 0, true));
  Report r;
  agg.fill_report(r);
  const PhaseSummary* backward = find(r, "backward", ThreadRole::step);
  REQUIRE(backward);
  CHECK(backward->count == static_cast<std::uint64_t>(kSites) + 1);
  REQUIRE(backward->sites.size() == kMaxSitesPerPhase + 1);
  CHECK(backward->sites_merged == 4);
  std::uint64_t in_rows = 0;
  bool other_row = false;
  for (const auto& s : backward->sites) {
    in_rows += s.host_ms.count;
    if (s.file == "(other call sites)") {
      other_row = true;
      CHECK(s.host_ms.count == 4);
    }
    if (s.line == 100) CHECK(s.host_ms.count == 2);  // both spellings of model.cpp:100
  }
  CHECK(other_row);
  CHECK(in_rows == backward->count);
  // Most time first.
  for (std::size_t i = 1; i < backward->sites.size(); ++i)
    CHECK(backward->sites[i - 1].host_ms.total >= backward->sites[i].host_ms.total);
}

TEST_CASE("the slowest steps are kept, bounded, with where their time went; loop starts and nested steps are not",
          "[aggregator][slowest]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  const std::uint64_t us = 1000;
  // 400 steps of 100 us (forward 60 us); every 50th also spends 900 us in no
  // phase (a checkpoint); step 77 is 500 us of forward. 50 us between steps.
  std::uint64_t at = 0;
  for (std::uint32_t step = 1; step <= 400; ++step) {
    const bool checkpoint = step % 50 == 0;
    const std::uint64_t forward = step == 77 ? 500 * us : 60 * us;
    const std::uint64_t wall = forward + 40 * us + (checkpoint ? 900 * us : 0);
    agg.consume(t, rec(kForward, at, at + forward, step, 1, true));
    agg.consume(t, rec(kStep, at, at + wall, step, 0, true));
    at += wall + 50 * us;
  }
  // A step that holds a step (a loop of steps, left out; the step in it is
  // the slowest), and the first step of a second steps() loop (left out).
  agg.consume(t, PhaseRecord{&kStep, at + 10, at + 10, 402, 0, 1, kRecordHoldsSteps});
  agg.consume(t, rec(kStep, at + 10, at + 4000 * us, 402, 1, true));
  agg.consume(t, PhaseRecord{&kStep, at, at + 5000 * us, 401, 0, 0,
                             kRecordInStep | kRecordIsStep | kRecordOuterStep | kRecordLoopEnd});
  at += 6000 * us;
  agg.consume(t, rec(kStep, at, at + 3000 * us, 403, 0, true));  // opens a loop after the one that ended
  agg.flush_pending();
  Report r;
  agg.fill_report(r);
  REQUIRE(r.steps.loop_first_steps == 1);
  const std::vector<SlowStep>& slow = r.steps.slowest;
  REQUIRE(slow.size() == StepStats::kSlowestStepsKept);
  // Slowest first: step 402 (4 ms + the gap), the eight checkpoints (1 ms + the gap), step 77, then 100 us steps.
  CHECK(slow[0].step == 402);
  CHECK(slow[0].wall_ms == Approx(4.050));
  for (std::size_t i = 1; i <= 8; ++i) {
    INFO("rank " << i);
    CHECK(slow[i].step % 50 == 0);
    CHECK(slow[i].wall_ms == Approx(1.050));  // the step and the 50 us gap before it
    CHECK(slow[i].unattributed_ms == Approx(0.940));
    CHECK(slow[i].kind_ms[PhaseKind::compute] == Approx(0.060));
    CHECK(slow[i].between_steps_ms == Approx(0.050));
  }
  CHECK(slow[1].step < slow[2].step);  // equal walls: in step order
  CHECK(slow[9].step == 77);
  CHECK(slow[9].kind_ms[PhaseKind::compute] == Approx(0.500));
  for (const SlowStep& s : slow) {
    CHECK(s.step != 401);
    CHECK(s.step != 403);
    CHECK(s.wall_ms >= slow.back().wall_ms);
  }
  for (std::size_t i = 1; i < slow.size(); ++i) CHECK(slow[i - 1].wall_ms >= slow[i].wall_ms);
}

TEST_CASE("steps that run different numbers of phases: how much of the step time's variance that number explains",
          "[aggregator][calls]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const std::uint64_t us = 1000;
  {
    // The same phases every step, each once: nothing varies, no phase is named.
    const auto steady = agg.add_thread(1);
    for (std::uint32_t i = 0; i < 10; ++i) push_step(agg, steady, i * 100 * us, i + 1);
    agg.flush_pending();
    Report r;
    agg.fill_report(r);
    REQUIRE(r.steps.calls_per_step);
    CHECK(r.steps.calls_per_step->min == 3);  // forward, its matmul, data
    CHECK(r.steps.calls_per_step->max == 3);
    CHECK(r.steps.calls_per_step->explained_variance == 0);
    CHECK(r.steps.calls_per_step->phase.empty());
  }
  // An episode per step (pytorch/examples' reinforce): 1, 11, 21, 31 or 41
  // policy calls of 10 us, one 5 us fetch, 20 us of the step's own.
  Aggregator episodes(options, &f.clock);
  const auto t = episodes.add_thread(2);
  std::uint64_t at = 0;
  for (std::uint32_t i = 0; i < 50; ++i) {
    const std::uint64_t start = at;
    episodes.consume(t, rec(kData, at, at + 5 * us, i + 1, 1, true));
    at += 5 * us;
    for (std::uint32_t call = 0; call < 1 + (i % 5) * 10; ++call, at += 10 * us)
      episodes.consume(t, rec(kForward, at, at + 10 * us, i + 1, 1, true));
    at += 20 * us;
    episodes.consume(t, rec(kStep, start, at, i + 1, 0, true));
  }
  episodes.retire_thread(t);  // a step thread that ended keeps its counts
  episodes.flush_pending();
  Report r;
  episodes.fill_report(r);
  REQUIRE(r.steps.count == 50);
  REQUIRE(r.steps.calls_per_step);
  const CallsPerStep& c = *r.steps.calls_per_step;
  CHECK(c.min == 2);
  CHECK(c.max == 42);
  CHECK(c.mean == Approx(22));
  CHECK(c.explained_variance == Approx(1).epsilon(1e-6));  // step time is linear in the calls
  CHECK(c.phase == "forward");
  CHECK(c.phase_mean == Approx(21));  // 1, 11, 21, 31, 41
  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(r), back, error));
  REQUIRE(back.steps.calls_per_step);
  CHECK(back.steps.calls_per_step->phase == "forward");
  CHECK(back.steps.calls_per_step->explained_variance == Approx(c.explained_variance));
  CHECK(back.steps.calls_per_step->max == 42);
}

TEST_CASE("steps that differ between steps() loops and not inside them: the spread about each loop's mean",
          "[aggregator][loops]") {
  Fixture f;
  AggregatorOptions options;
  options.warmup_steps = 0;
  Aggregator agg(options, &f.clock);
  const auto t = agg.add_thread(1);
  const std::uint64_t us = 1000;
  std::uint64_t at = 0;
  std::uint32_t step = 0;
  // A loop of 20 steps of 1000 +- 10 us, its end found by a fetch, then a
  // loop of 20 steps of 500 +- 10 us.
  const auto loop = [&](std::uint64_t wall_us) {
    for (int i = 0; i < 20; ++i) {
      const std::uint64_t wall = (wall_us + (i % 2 == 0 ? 10 : -10)) * us;
      agg.consume(t, rec(kStep, at, at + wall, ++step, 0, true));
      at += wall;
    }
    agg.consume(t, PhaseRecord{&kData, at, at + us, step, 0, 0, kRecordLoopEnd});
    at += 100 * us;
  };
  loop(1000);
  {
    Report one;
    agg.fill_report(one);
    CHECK_FALSE(one.steps.within_loop_stddev_ms);  // one loop: nothing to tell apart
  }
  loop(500);
  agg.flush_pending();
  Report r;
  agg.fill_report(r);
  REQUIRE(r.steps.count == 40);
  CHECK(r.steps.wall_ms.stddev > 0.2);  // ms: the loops' means differ by 0.5 ms
  REQUIRE(r.steps.within_loop_stddev_ms);
  CHECK(*r.steps.within_loop_stddev_ms == Approx(0.010).epsilon(0.05));  // the +-10 us inside each
  // The second loop's first step (510 us) is judged against the rest of its
  // own loop (mean 500 +- 10 us over 19 steps), not against the first loop.
  CHECK(r.steps.loop_first_steps == 1);
  CHECK(r.steps.loop_first_compared == 1);
  CHECK(r.steps.loop_first_compared_ms == Approx(0.510));
  CHECK(r.steps.loop_first_rest_ms == Approx((500.0 * 19 - 10) / 19 / 1000));
  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(r), back, error));
  REQUIRE(back.steps.within_loop_stddev_ms);
  CHECK(*back.steps.within_loop_stddev_ms == Approx(*r.steps.within_loop_stddev_ms));
  CHECK(back.steps.loop_first_rest_ms == Approx(r.steps.loop_first_rest_ms));
  // A third loop of one step: counted as a later loop's first, not compared.
  agg.consume(t, rec(kStep, at, at + 3000 * us, ++step, 0, true));
  agg.flush_pending();
  Report three;
  agg.fill_report(three);
  CHECK(three.steps.loop_first_steps == 2);
  CHECK(three.steps.loop_first_compared == 1);
}

TEST_CASE("the trace draws a step that held steps as a loop of steps, and not the mark", "[aggregator][trace]") {
  Fixture f;
  TraceWindow window;
  REQUIRE(parse_trace_window("1-5", window));
  TraceRecorder trace(window, 100, &f.clock);
  // Step 1 (an epoch of a steps() loop) holds steps 1 and 2 (its first inner step takes its number).
  trace.on_record(7, true, PhaseRecord{&kStep, 100, 100, 1, 0, 1, kRecordHoldsSteps}, 0);
  trace.on_record(7, true, rec(kStep, 100, 200, 1, 1, true), 0);
  trace.on_record(7, true, rec(kStep, 200, 300, 2, 1, true), 0);
  trace.on_record(7, true, PhaseRecord{&kStep, 50, 400, 1, 0, 0, kRecordInStep | kRecordIsStep | kRecordOuterStep}, 0);
  const TraceCapture capture = trace.take();
  REQUIRE(capture.events.size() == 3);
  std::vector<std::string> names;
  for (const TraceEvent& e : capture.events) names.push_back(e.is_step ? "step" : e.name);
  CHECK(names == std::vector<std::string>{"loop of steps", "step", "step"});  // by start
}
