// merge_reports on synthetic rank reports shaped like live ones: 8 step
// phases + 2 background phases with histograms, a full 1024-point step series
// (the aggregator's capacity), one chronic straggler. Target: 1024 ranks
// merged in < 1 s (docs/benchmarks-merge.md).
//
//   ninja -C build bench/merge_bench && build/merge_bench --benchmark_min_time=2
#include <stepscope/merge.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace stepscope;

namespace {

constexpr std::size_t kSeriesPoints = 1024;

Distribution dist(double mean, double sd, std::uint64_t n) {
  Distribution d;
  d.count = n;
  d.mean = mean;
  d.total = mean * static_cast<double>(n);
  d.stddev = sd;
  d.min = mean - 2 * sd;
  d.max = mean + 4 * sd;
  d.p50 = mean;
  d.p90 = mean + 1.3 * sd;
  d.p99 = mean + 2.3 * sd;
  return d;
}

// Buckets of the log-linear ns histogram around `mean_ms` (sub_bucket_bits 7).
HistogramData histogram(double mean_ms, std::mt19937& rng) {
  HistogramData h;
  h.sub_bucket_bits = 7;
  const auto ns = static_cast<std::uint64_t>(mean_ms * 1e6);
  const int exponent = 63 - __builtin_clzll(ns);
  const std::uint32_t base = static_cast<std::uint32_t>((exponent - 7 + 1) << 7);
  for (std::uint32_t i = 0; i < 40; ++i) h.buckets.emplace_back(base + 40 + i, 1 + rng() % 50);
  return h;
}

std::vector<Report> make_ranks(int world, std::uint64_t steps) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.02);
  const char* names[] = {"data", "h2d", "forward", "backward", "optimizer", "loss", "zero_grad", "allreduce"};
  const PhaseKind kinds[] = {PhaseKind::input,   PhaseKind::memory,  PhaseKind::compute, PhaseKind::compute,
                             PhaseKind::compute, PhaseKind::compute, PhaseKind::other,   PhaseKind::communication};
  const double means[] = {3, 2, 30, 60, 5, 1, 0.5, 10};
  std::vector<Report> ranks(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    Report& rep = ranks[static_cast<std::size_t>(r)];
    rep.run.rank = r;
    rep.run.world_size = world;
    rep.run.host = "node" + std::to_string(r / 8);
    rep.run.config = {{"batch_size", "32"}, {"precision", "bf16"}};
    rep.steps.count = steps;
    const double slow = r == world / 3 ? 20.0 : 0.0;
    double wall = 0;
    for (int p = 0; p < 8; ++p) {
      PhaseSummary ph;
      ph.name = names[p];
      ph.kind = kinds[p];
      ph.thread_role = ThreadRole::step;
      const double mean = means[p] * (1 + noise(rng)) + (p == 2 ? slow : 0);
      ph.host_ms = ph.self_ms = dist(mean, 0.05 * mean, steps);
      ph.count = steps;
      ph.histogram = histogram(mean, rng);
      ph.threads = 1;
      wall += mean;
      rep.phases.push_back(std::move(ph));
    }
    for (const char* bg : {"decode", "prefetch"}) {
      PhaseSummary ph;
      ph.name = bg;
      ph.kind = PhaseKind::input;
      ph.thread_role = ThreadRole::background;
      ph.host_ms = ph.self_ms = dist(4, 0.3, steps * 8);
      ph.count = steps * 8;
      ph.overlap_with_steps = 0.9;
      ph.threads = 4;
      ph.histogram = histogram(4, rng);
      rep.phases.push_back(std::move(ph));
    }
    for (auto& ph : rep.phases)
      if (ph.thread_role == ThreadRole::step) ph.share_of_step = ph.self_ms.mean / wall;
    rep.steps.wall_ms = dist(wall, 2, steps);
    rep.steps.histogram = histogram(wall, rng);
    StepBreakdown& b = rep.steps.breakdown;
    b.wall_ms = wall;
    b.kind_ms[PhaseKind::input] = means[0];
    b.kind_ms[PhaseKind::memory] = means[1];
    b.kind_ms[PhaseKind::compute] = wall - means[0] - means[1] - means[7] - means[6];
    b.kind_ms[PhaseKind::other] = means[6];
    b.kind_ms[PhaseKind::communication] = means[7];
    StepSeries& s = rep.steps.series;
    s.stride = static_cast<std::uint32_t>(steps / kSeriesPoints);
    for (std::size_t k = 0; k < kSeriesPoints; ++k) {
      s.first_step.push_back(1 + k * s.stride);
      const double w = wall * (1 + noise(rng));
      s.wall_ms.push_back(w);
      // The step's noise lands in communication (waiting for the other ranks).
      for (PhaseKind kind : kPhaseKinds)
        s.kind_ms[kind].push_back(b.kind_ms[kind] + (kind == PhaseKind::communication ? w - wall : 0.0));
      s.unattributed_ms.push_back(0);
      s.rss_mb.push_back(2048);
    }
    rep.bottleneck.category = "compute";
  }
  return ranks;
}

void BM_MergeReports(benchmark::State& state) {
  const std::vector<Report> ranks = make_ranks(static_cast<int>(state.range(0)), 8192);
  for (auto _ : state) {
    std::string error;
    Report job = merge_reports(ranks, error);
    if (!job.ranks || job.ranks->stragglers.size() != 1) state.SkipWithError("merge did not find the straggler");
    benchmark::DoNotOptimize(job);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["ranks"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_MergeReports)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);

// The whole offline path for 1024 ranks: parse each rank's JSON, then merge.
void BM_ParseAndMerge1024(benchmark::State& state) {
  std::vector<std::string> texts;
  for (const Report& r : make_ranks(1024, 8192)) texts.push_back(report_to_json(r, -1));
  std::size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  for (auto _ : state) {
    std::vector<Report> ranks(texts.size());
    std::string error;
    for (std::size_t i = 0; i < texts.size(); ++i) report_from_json(texts[i], ranks[i], error);
    Report job = merge_reports(ranks, error);
    benchmark::DoNotOptimize(job);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_ParseAndMerge1024)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
