// merge_reports on synthetic rank reports built like a synchronous
// data-parallel job: every step, each rank computes (data + forward +
// backward), then waits in "allreduce" until the slowest rank arrives, then
// the collective itself runs. Cases: a chronic straggler, a one-off stall,
// ranks that differ only by noise (no straggler, many seeds), two ranks,
// imbalance arithmetic, the waiting/collective split, bad input, JSON.
#include <stepscope/analysis.hpp>
#include <stepscope/html.hpp>
#include <stepscope/merge.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace stepscope;

namespace {

struct JobSpec {
  int ranks = 8;
  int steps = 100;
  double data_ms = 2, forward_ms = 20, backward_ms = 40;
  double collective_ms = 5;
  double noise = 0.02;  // relative standard deviation of each phase per step
  unsigned seed = 1;
  // Extra forward time of one rank on every step (chronic straggler).
  int slow_rank = -1;
  double slow_extra_ms = 0;
  std::string slow_in = "forward";  // where its extra time goes: "forward", "data", "unattributed" (no phase)
  // One stall of one rank at one step (one-off).
  int stall_rank = -1;
  int stall_step = -1;
  double stall_ms = 0;
};

Distribution dist_of(const std::vector<double>& v) {
  Distribution d;
  d.count = v.size();
  if (v.empty()) return d;
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  d.total = sum;
  d.mean = sum / v.size();
  for (double x : v) sq += (x - d.mean) * (x - d.mean);
  d.stddev = std::sqrt(sq / v.size());
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  d.min = s.front();
  d.max = s.back();
  auto q = [&](double p) { return s[std::min(s.size() - 1, static_cast<std::size_t>(p * s.size()))]; };
  d.p50 = q(0.5);
  d.p90 = q(0.9);
  d.p99 = q(0.99);
  return d;
}

PhaseSummary phase(const std::string& name, PhaseKind kind, const std::vector<double>& per_step, double wall_mean) {
  PhaseSummary p;
  p.name = name;
  p.kind = kind;
  p.thread_role = ThreadRole::step;
  p.host_ms = dist_of(per_step);
  p.self_ms = p.host_ms;
  p.count = p.host_ms.count;
  p.share_of_step = wall_mean > 0 ? p.host_ms.mean / wall_mean : 0;
  p.threads = 1;
  return p;
}

std::vector<Report> make_job(const JobSpec& spec) {
  std::mt19937 rng(spec.seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  auto noisy = [&](double ms) { return std::max(0.0, ms * (1.0 + spec.noise * unit(rng))); };
  const std::size_t R = static_cast<std::size_t>(spec.ranks), S = static_cast<std::size_t>(spec.steps);
  std::vector<std::vector<double>> data(R, std::vector<double>(S)), fwd = data, bwd = data, busy = data, comm = data,
                                                                    unattributed = data;
  for (std::size_t s = 0; s < S; ++s) {
    double slowest = 0;
    for (std::size_t r = 0; r < R; ++r) {
      data[r][s] = noisy(spec.data_ms);
      fwd[r][s] = noisy(spec.forward_ms);
      bwd[r][s] = noisy(spec.backward_ms);
      if (static_cast<int>(r) == spec.slow_rank)
        (spec.slow_in == "data"           ? data
         : spec.slow_in == "unattributed" ? unattributed
                                          : fwd)[r][s] += spec.slow_extra_ms;
      if (static_cast<int>(r) == spec.stall_rank && static_cast<int>(s) == spec.stall_step) fwd[r][s] += spec.stall_ms;
      busy[r][s] = data[r][s] + fwd[r][s] + bwd[r][s] + unattributed[r][s];
      slowest = std::max(slowest, busy[r][s]);
    }
    const double collective = noisy(spec.collective_ms);
    for (std::size_t r = 0; r < R; ++r) comm[r][s] = (slowest - busy[r][s]) + collective;
  }
  std::vector<Report> out;
  for (std::size_t r = 0; r < R; ++r) {
    Report rep;
    rep.run.rank = static_cast<int>(r);
    rep.run.world_size = spec.ranks;
    rep.run.host = "node" + std::to_string(r / 4);
    rep.run.config = {{"batch_size", "32"}};
    rep.run.config_types = {{"batch_size", "number"}};
    std::vector<double> wall(S);
    for (std::size_t s = 0; s < S; ++s) wall[s] = busy[r][s] + comm[r][s];
    rep.steps.count = S;
    rep.steps.wall_ms = dist_of(wall);
    const double w = rep.steps.wall_ms.mean;
    auto mean = [](const std::vector<double>& v) {
      double t = 0;
      for (double x : v) t += x;
      return t / v.size();
    };
    StepBreakdown& b = rep.steps.breakdown;
    b.wall_ms = w;
    b.kind_ms[PhaseKind::input] = mean(data[r]);
    b.kind_ms[PhaseKind::compute] = mean(fwd[r]) + mean(bwd[r]);
    b.kind_ms[PhaseKind::communication] = mean(comm[r]);
    b.unattributed_ms = std::max(
        0.0, w - b.kind_ms[PhaseKind::input] - b.kind_ms[PhaseKind::compute] - b.kind_ms[PhaseKind::communication]);
    StepSeries& series = rep.steps.series;
    series.stride = 1;
    for (std::size_t s = 0; s < S; ++s) {
      series.first_step.push_back(s + 1);
      series.wall_ms.push_back(wall[s]);
      series.kind_ms[PhaseKind::input].push_back(data[r][s]);
      series.kind_ms[PhaseKind::compute].push_back(fwd[r][s] + bwd[r][s]);
      series.kind_ms[PhaseKind::memory].push_back(0);
      series.kind_ms[PhaseKind::communication].push_back(comm[r][s]);
      series.kind_ms[PhaseKind::other].push_back(0);
      series.unattributed_ms.push_back(unattributed[r][s]);
    }
    rep.phases.push_back(phase("data", PhaseKind::input, data[r], w));
    rep.phases.push_back(phase("forward", PhaseKind::compute, fwd[r], w));
    rep.phases.push_back(phase("backward", PhaseKind::compute, bwd[r], w));
    rep.phases.push_back(phase("allreduce", PhaseKind::communication, comm[r], w));
    rep.bottleneck.category = "compute";
    out.push_back(std::move(rep));
  }
  return out;
}

Report merge_ok(const std::vector<Report>& ranks) {
  std::string error;
  Report job = merge_reports(ranks, error);
  INFO(error);
  REQUIRE(error.empty());
  REQUIRE(job.ranks.has_value());
  return job;
}

}  // namespace

TEST_CASE("a chronic straggler is named, with its phase, and explains a communication verdict", "[merge]") {
  JobSpec spec;
  spec.data_ms = 1;
  spec.forward_ms = 5;
  spec.backward_ms = 10;
  spec.slow_rank = 5;
  spec.slow_extra_ms = 30;  // the others wait 30 ms of a ~51 ms step
  const Report job = merge_ok(make_job(spec));
  const MultiRank& m = *job.ranks;
  CHECK(job.run.source == "merge");
  CHECK(job.run.world_size == 8);
  CHECK(m.ranks_merged == 8);
  REQUIRE(m.stragglers.size() == 1);
  const Straggler& s = m.stragglers[0];
  CHECK(s.rank == 5);
  CHECK(s.phase == "forward");
  CHECK(s.pattern == "chronic");
  CHECK(s.slow_step_fraction > 0.9);
  CHECK(s.excess_ms == Approx(30).margin(1.5));
  CHECK(s.robust_z >= 3.5);
  CHECK(m.ranks[5].straggler);
  CHECK_FALSE(m.ranks[0].straggler);
  // The others wait ~30 ms for it; the straggler itself only pays the collective.
  CHECK(m.ranks[0].comm_wait_ms == Approx(30).margin(2.5));
  CHECK(m.ranks[5].comm_wait_ms < 2.5);
  CHECK(job.bottleneck.category == "communication");
  CHECK(job.bottleneck.summary.find("rank 5") != std::string::npos);
  CHECK(job.bottleneck.summary.find("chronic straggler in 'forward'") != std::string::npos);
  REQUIRE(!job.bottleneck.recommendations.empty());
  CHECK(job.bottleneck.recommendations[0].find("rank 5") != std::string::npos);
  REQUIRE(!job.findings.empty());
  CHECK(job.findings[0].kind == "straggler");
  REQUIRE(!job.what_if.empty());
  CHECK(job.what_if[0].step_change_pct < -10);
  // Per-phase across ranks: forward's max is rank 5.
  const auto fwd =
      std::find_if(m.phases.begin(), m.phases.end(), [](const PhaseAcrossRanks& p) { return p.name == "forward"; });
  REQUIRE(fwd != m.phases.end());
  CHECK(fwd->per_step_ms.max_rank == 5);
  CHECK(fwd->per_step_ms.median == Approx(5).margin(0.5));
  CHECK(fwd->per_step_ms.max == Approx(35).margin(1));
  // Per step across ranks: the busiest rank at each point is rank 5.
  REQUIRE(m.steps.size() == 100);
  int rank5_max = 0;
  for (const auto& p : m.steps) rank5_max += p.busy_ms.max_rank == 5;
  CHECK(rank5_max >= 95);
  CHECK(format_multi_rank(job).find("straggler: rank 5 chronic in 'forward'") != std::string::npos);
}

TEST_CASE("ranks that differ only by noise have no straggler (many seeds, several noise levels)", "[merge]") {
  for (double noise : {0.01, 0.05, 0.10}) {
    for (unsigned seed = 1; seed <= 25; ++seed) {
      JobSpec spec;
      spec.noise = noise;
      spec.seed = seed;
      const Report job = merge_ok(make_job(spec));
      INFO("noise " << noise << " seed " << seed);
      CHECK(job.ranks->stragglers.empty());
      CHECK(job.bottleneck.summary.find("straggler") == std::string::npos);
      for (const auto& r : job.ranks->ranks) CHECK_FALSE(r.straggler);
    }
  }
}

TEST_CASE("a rank that is systematically a little slower is not a straggler unless it matters", "[merge]") {
  JobSpec spec;
  spec.noise = 0.001;
  spec.slow_rank = 3;
  spec.slow_extra_ms = 1.0;  // statistically clear (z >> 3.5) but 1.5% of the step: not material
  const Report job = merge_ok(make_job(spec));
  CHECK(job.ranks->stragglers.empty());
}

TEST_CASE("a one-off stall is a one-off straggler at its step", "[merge]") {
  JobSpec spec;
  spec.stall_rank = 2;
  spec.stall_step = 39;  // series first_step 40
  spec.stall_ms = 2000;  // one 2 s stall in a ~6.7 s run
  const Report job = merge_ok(make_job(spec));
  const MultiRank& m = *job.ranks;
  REQUIRE(m.stragglers.size() == 1);
  const Straggler& s = m.stragglers[0];
  CHECK(s.rank == 2);
  CHECK(s.pattern == "one-off");
  CHECK(s.slow_step_fraction < 0.05);
  REQUIRE(!s.slow_steps.empty());
  CHECK(s.slow_steps[0] == 40);
  CHECK(job.bottleneck.summary.find("one-off") != std::string::npos);
}

TEST_CASE("two ranks: the slow one is found from the noise of its means", "[merge]") {
  JobSpec spec;
  spec.ranks = 2;
  spec.slow_rank = 1;
  spec.slow_extra_ms = 10;
  const Report job = merge_ok(make_job(spec));
  REQUIRE(job.ranks->stragglers.size() == 1);
  CHECK(job.ranks->stragglers[0].rank == 1);
  CHECK(job.ranks->stragglers[0].phase == "forward");

  JobSpec alike;
  alike.ranks = 2;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    alike.seed = seed;
    INFO("seed " << seed);
    CHECK(merge_ok(make_job(alike)).ranks->stragglers.empty());
  }
}

TEST_CASE("imbalance and the waiting / collective split are exact on noiseless ranks", "[merge]") {
  JobSpec spec;
  spec.ranks = 4;
  spec.noise = 0;
  spec.slow_rank = 3;
  spec.slow_extra_ms = 18;  // busy: 62, 62, 62, 80
  const Report job = merge_ok(make_job(spec));
  const MultiRank& m = *job.ranks;
  CHECK(m.busy_ms.min == Approx(62));
  CHECK(m.busy_ms.max == Approx(80));
  CHECK(m.busy_ms.max_rank == 3);
  CHECK(m.busy_ms.median == Approx(62));
  CHECK(m.busy_ms.mean == Approx(66.5));
  CHECK(m.busy_ms.imbalance == Approx(80.0 / 66.5 - 1.0));
  // Every rank's step is 85 ms (80 of the slowest + 5 of collective).
  CHECK(m.step_ms.min == Approx(85));
  CHECK(m.step_ms.max == Approx(85));
  CHECK(m.comm_collective_ms == Approx(5));
  CHECK(m.comm_ms == Approx((23.0 * 3 + 5) / 4));
  CHECK(m.comm_wait_ms == Approx(18.0 * 3 / 4));
  CHECK(m.comm_wait_fraction == Approx((18.0 * 3 / 4) / ((23.0 * 3 + 5) / 4)));
  CHECK(m.expected_wait_from_imbalance_ms == Approx(80 - 66.5));
  CHECK(m.ranks[0].comm_wait_ms == Approx(18));
  CHECK(m.ranks[3].comm_wait_ms == Approx(0).margin(1e-9));
  REQUIRE(m.stragglers.size() == 1);
  CHECK(m.stragglers[0].rank == 3);
  CHECK(m.stragglers[0].excess_ms == Approx(18));
  // Job facts: means over ranks.
  CHECK(job.steps.breakdown.wall_ms == Approx(85));
  CHECK(job.steps.breakdown.kind_ms[PhaseKind::communication] == Approx((23.0 * 3 + 5) / 4));
  CHECK(job.steps.count == 100);
  CHECK(job.steps.wall_ms.count == 400);
  CHECK(job.run.config.at("batch_size") == "32");
}

TEST_CASE("no straggler and communication-bound: the collective itself is the cost", "[merge]") {
  JobSpec spec;
  spec.collective_ms = 150;  // collectives dominate
  const Report job = merge_ok(make_job(spec));
  CHECK(job.ranks->stragglers.empty());
  CHECK(job.bottleneck.category == "communication");
  CHECK(job.bottleneck.summary.find("No straggler") != std::string::npos);
  // Said for collectives and for an RPC job's round trips alike.
  CHECK(job.bottleneck.summary.find("so the cost is the communication itself") != std::string::npos);
  CHECK(job.ranks->comm_collective_ms == Approx(150).epsilon(0.1));
  CHECK(job.ranks->comm_wait_fraction < 0.2);
}

TEST_CASE("a merged job's advice is worded as its ranks': a Python run's calls, a trace's profiler", "[merge]") {
  JobSpec spec;
  spec.ranks = 2;
  spec.collective_ms = 150;  // communication-bound, no collective sizes noted: the advice names note_collectives
  std::vector<Report> ranks = make_job(spec);
  const auto advice = [](const Report& job) {
    std::string all;
    for (const std::string& a : job.bottleneck.recommendations) all += a + "\n";
    return all;
  };
  CHECK(advice(merge_ok(ranks)).find("stepscope::note_collectives") != std::string::npos);
  for (Report& r : ranks) {
    r.run.source = "live";
    r.run.build["frontend"] = "python";
  }
  const std::string python = advice(merge_ok(ranks));
  CHECK(python.find("stepscope.note_collectives") != std::string::npos);
  CHECK(python.find("stepscope::") == std::string::npos);
  for (Report& r : ranks) {
    r.run.source = "kineto-import";
    r.run.clock_source = "trace";
    r.run.build.clear();
  }
  CHECK(advice(merge_ok(ranks)).find("note_collectives") == std::string::npos);  // a trace has no such call
}

TEST_CASE("missing, duplicate and unranked reports; inputs in any order", "[merge]") {
  JobSpec spec;
  spec.ranks = 4;
  std::vector<Report> ranks = make_job(spec);
  std::reverse(ranks.begin(), ranks.end());
  ranks.erase(ranks.begin());     // rank 3 missing
  ranks.push_back(ranks.back());  // rank 0 twice
  const Report job = merge_ok(ranks);
  CHECK(job.ranks->ranks_merged == 3);
  CHECK(job.ranks->world_size == 4);
  CHECK(job.ranks->missing_ranks == std::vector<int>{3});
  REQUIRE(job.ranks->ranks.size() == 3);
  CHECK(job.ranks->ranks[0].rank == 0);
  CHECK(job.ranks->ranks[2].rank == 2);
  bool warned_missing = false, warned_duplicate = false;
  for (const auto& w : job.warnings) {
    warned_missing |= w.find("no report") != std::string::npos;
    warned_duplicate |= w.find("duplicate") != std::string::npos;
  }
  CHECK(warned_missing);
  CHECK(warned_duplicate);
}

TEST_CASE("bad input: an error and an empty report, never an exception", "[merge]") {
  std::string error;
  Report job = merge_reports({}, error);
  CHECK(!error.empty());
  CHECK(!job.ranks);

  JobSpec spec;
  spec.ranks = 2;
  Report merged = merge_ok(make_job(spec));
  error.clear();
  job = merge_reports({merged}, error);
  CHECK(error.find("already") != std::string::npos);

  std::vector<Report> ranks = make_job(spec);
  ranks[1].schema_version = 99;
  error.clear();
  CHECK_NOTHROW(job = merge_reports(ranks, error));
  CHECK(error.find("schema_version") != std::string::npos);

  // Garbage numbers do not crash the merge.
  ranks = make_job(spec);
  ranks[0].steps.breakdown.wall_ms = std::nan("");
  ranks[1].steps.series.wall_ms.resize(3);
  ranks[1].phases[0].histogram.sub_bucket_bits = 3;
  ranks[1].phases[0].histogram.buckets = {{5, 1}};
  error.clear();
  CHECK_NOTHROW(job = merge_reports(ranks, error));

  Report empty;
  empty.run.rank = 0;
  error.clear();
  job = merge_reports({empty}, error);
  CHECK(error.find("measured steps") != std::string::npos);
}

TEST_CASE("the ranks section survives JSON; reports without it still load", "[merge][json]") {
  JobSpec spec;
  spec.slow_rank = 1;
  spec.slow_extra_ms = 20;
  spec.ranks = 4;
  const Report job = merge_ok(make_job(spec));
  const std::string text = report_to_json(job);
  Report back;
  std::string error;
  REQUIRE(report_from_json(text, back, error));
  REQUIRE(back.ranks.has_value());
  CHECK(back.run.source == "merge");
  CHECK(back.ranks->world_size == 4);
  REQUIRE(back.ranks->stragglers.size() == 1);
  CHECK(back.ranks->stragglers[0].rank == 1);
  CHECK(back.ranks->stragglers[0].pattern == "chronic");
  CHECK(back.ranks->stragglers[0].excess_ms == Approx(job.ranks->stragglers[0].excess_ms));
  CHECK(back.ranks->ranks.size() == 4);
  CHECK(back.ranks->ranks[1].straggler);
  CHECK(back.ranks->phases.size() == job.ranks->phases.size());
  CHECK(back.ranks->steps.size() == job.ranks->steps.size());
  CHECK(back.ranks->comm_wait_ms == Approx(job.ranks->comm_wait_ms));
  CHECK(report_to_json(back) == text);

  Report single = make_job(spec)[0];
  REQUIRE(report_from_json(report_to_json(single), back, error));
  CHECK(!back.ranks.has_value());
  CHECK(report_to_json(single).find("\"ranks\"") == std::string::npos);
}

TEST_CASE("few ranks: measured against the other ranks' spread, no false alarms", "[merge]") {
  for (int world : {3, 4, 5}) {
    for (unsigned seed = 1; seed <= 20; ++seed) {
      JobSpec alike;
      alike.ranks = world;
      alike.noise = 0.05;
      alike.seed = seed;
      INFO("world " << world << " seed " << seed);
      CHECK(merge_ok(make_job(alike)).ranks->stragglers.empty());
    }
  }
  // Three ranks whose two victims differ a lot (one is starved of CPU): the
  // straggler still stands out from the *other* ranks' spread.
  JobSpec spec;
  spec.ranks = 3;
  spec.noise = 0.02;
  spec.slow_rank = 1;
  spec.slow_extra_ms = 60;
  std::vector<Report> ranks = make_job(spec);
  const Report job = merge_ok(ranks);
  REQUIRE(job.ranks->stragglers.size() == 1);
  CHECK(job.ranks->stragglers[0].rank == 1);
}

TEST_CASE("time outside steps: breakdown parts averaged, run totals summed, coverage the worst rank's", "[merge]") {
  JobSpec spec;
  spec.ranks = 4;
  spec.noise = 0;
  std::vector<Report> ranks = make_job(spec);
  const double coverage[] = {0.99, 0.72, 0.95, 0.9};
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    StepStats& s = ranks[r].steps;
    s.coverage = coverage[r];
    s.between_steps_ms = 100.0 * static_cast<double>(r + 1);  // 100, 200, 300, 400 over the run
    s.between_steps_input_ms = 10.0 * static_cast<double>(r + 1);
    s.breakdown.between_steps_ms = 1.0 * static_cast<double>(r + 1);  // 1, 2, 3, 4 per step
    s.breakdown.between_steps_input_ms = 0.5;
  }
  const Report job = merge_ok(ranks);
  REQUIRE(job.steps.coverage.has_value());
  CHECK(*job.steps.coverage == Approx(0.72));
  CHECK(job.steps.between_steps_ms == Approx(1000));
  CHECK(job.steps.between_steps_input_ms == Approx(100));
  CHECK(job.steps.breakdown.between_steps_ms == Approx(2.5));
  CHECK(job.steps.breakdown.between_steps_input_ms == Approx(0.5));

  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(job), back, error));
  REQUIRE(back.steps.coverage.has_value());
  CHECK(*back.steps.coverage == Approx(0.72));
  CHECK(back.steps.between_steps_ms == Approx(1000));
  CHECK(back.steps.breakdown.between_steps_ms == Approx(2.5));

  // Ranks that measured no coverage (no thread completed two steps): none for the job.
  for (auto& r : ranks) r.steps.coverage.reset();
  CHECK(!merge_ok(ranks).steps.coverage.has_value());

  // The spread inside steps() loops: each rank's variance weighted alike;
  // none where a rank has none (one loop).
  const double within[] = {1, 1, 7, 7};
  for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r].steps.within_loop_stddev_ms = within[r];
  const Report loops = merge_ok(ranks);
  REQUIRE(loops.steps.within_loop_stddev_ms.has_value());
  CHECK(*loops.steps.within_loop_stddev_ms == Approx(5));  // sqrt((1 + 1 + 49 + 49) / 4)
  ranks[2].steps.within_loop_stddev_ms.reset();
  CHECK_FALSE(merge_ok(ranks).steps.within_loop_stddev_ms.has_value());
}

TEST_CASE("a job of device-clocked ranks is device-clocked, with the host figures beside", "[merge][json]") {
  JobSpec spec;
  spec.ranks = 4;
  spec.noise = 0;
  std::vector<Report> ranks = make_job(spec);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    StepStats& s = ranks[r].steps;
    s.clock = "device";
    Distribution host = s.wall_ms;
    host.mean = host.p50 = 50.0 + 10.0 * static_cast<double>(r);  // 50, 60, 70, 80
    host.total = host.mean * static_cast<double>(host.count);
    host.min = host.max = host.mean;
    host.stddev = 0;
    s.host_wall_ms = host;
    StepBreakdown hb = s.breakdown;
    hb.wall_ms = host.mean;
    hb.unattributed_ms = 2.0 * static_cast<double>(r + 1);  // 2, 4, 6, 8
    s.host_breakdown = hb;
    for (PhaseSummary& p : ranks[r].phases) {
      p.host_share_of_step = p.share_of_step;
      if (p.name == "allreduce") p.host_share_of_step = 0.1 * static_cast<double>(r + 1);  // 0.1 .. 0.4
    }
  }
  const Report job = merge_ok(ranks);
  CHECK(job.steps.clock == "device");
  REQUIRE(job.steps.host_wall_ms.has_value());
  CHECK(job.steps.host_wall_ms->mean == Approx(65));
  CHECK(job.steps.host_wall_ms->count == ranks[0].steps.wall_ms.count * 4);
  REQUIRE(job.steps.host_breakdown.has_value());
  CHECK(job.steps.host_breakdown->wall_ms == Approx(65));
  CHECK(job.steps.host_breakdown->unattributed_ms == Approx(5));
  const PhaseSummary* allreduce = nullptr;
  for (const PhaseSummary& p : job.phases)
    if (p.name == "allreduce") allreduce = &p;
  REQUIRE(allreduce != nullptr);
  REQUIRE(allreduce->host_share_of_step.has_value());
  CHECK(*allreduce->host_share_of_step == Approx(0.25));

  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(job), back, error));
  CHECK(back.steps.clock == "device");
  REQUIRE(back.steps.host_breakdown.has_value());
  CHECK(back.steps.host_breakdown->unattributed_ms == Approx(5));

  // One rank with the host's clock only: the job cannot claim the device's, and says so.
  ranks[2].steps.clock = "host";
  ranks[2].steps.host_wall_ms.reset();
  ranks[2].steps.host_breakdown.reset();
  const Report mixed = merge_ok(ranks);
  CHECK(mixed.steps.clock == "host");
  CHECK_FALSE(mixed.steps.host_wall_ms.has_value());
  bool warned = false;
  for (const std::string& w : mixed.warnings) warned = warned || w.find("3 of 4 ranks") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("each rank's HTA tables are carried, by rank, and survive JSON", "[merge][json]") {
  JobSpec spec;
  spec.ranks = 3;
  std::vector<Report> ranks = make_job(spec);
  // Inputs out of order: the tables come out in rank order all the same.
  std::swap(ranks[0], ranks[2]);
  for (Report& r : ranks) {
    HtaTables& h = r.device.hta;
    h.present = true;
    h.rank = r.run.rank;
    h.temporal_breakdown.idle_us = 1000.0 * (r.run.rank + 1);
    h.temporal_breakdown.idle_pctg = 10.0 * (r.run.rank + 1);
    h.kernel_type_breakdown.push_back({"COMPUTATION", 500.0 + r.run.rank, 90});
    h.steps_kept = {1, 2, 3};
  }
  const Report job = merge_ok(ranks);
  REQUIRE(job.device.hta_ranks.size() == 3);
  for (int r = 0; r < 3; ++r) {
    const HtaTables& h = job.device.hta_ranks[static_cast<std::size_t>(r)];
    CHECK(h.rank == r);
    CHECK(h.temporal_breakdown.idle_us == Approx(1000.0 * (r + 1)));
    REQUIRE(h.kernel_type_breakdown.size() == 1);
    CHECK(h.kernel_type_breakdown[0].sum_us == Approx(500.0 + r));
  }
  CHECK(!job.device.hta.present);  // HTA's tables are per rank: no job-wide table is made up

  const std::string text = report_to_json(job);
  CHECK(text.find("\"hta_ranks\"") != std::string::npos);
  Report back;
  std::string error;
  REQUIRE(report_from_json(text, back, error));
  REQUIRE(back.device.hta_ranks.size() == 3);
  CHECK(back.device.hta_ranks[2].temporal_breakdown.idle_pctg == Approx(30));
  CHECK(report_to_json(back) == text);

  // Ranks without HTA tables (live runs): no device.hta_ranks at all.
  const std::string plain = report_to_json(merge_ok(make_job(spec)));
  CHECK(plain.find("\"hta_ranks\"") == std::string::npos);
}

TEST_CASE("how each rank ended is carried: snapshots make the job incomplete, signals are named", "[merge]") {
  JobSpec spec;
  spec.ranks = 4;
  std::vector<Report> ranks = make_job(spec);
  ranks[1].complete = false;  // killed (SIGKILL, OOM): its last flight-recorder snapshot
  ranks[1].ended_by.clear();
  ranks[1].snapshot_time_utc = "2026-12-02T10:00:00Z";
  ranks[2].ended_by = "SIGTERM";  // preempted
  ranks[2].interrupted = Report::Interruption{"SIGTERM", 40};
  ranks[3].ended_by = "exit";  // Ctrl-C caught by torch.multiprocessing.spawn's worker
  ranks[3].interrupted = Report::Interruption{"SIGINT", 41};
  ranks[0].ended_by = "exit";
  const Report job = merge_ok(ranks);
  CHECK_FALSE(job.complete);
  const auto& rows = job.ranks->ranks;
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].complete);
  CHECK(rows[0].ended_by == "exit");
  CHECK(rows[0].interrupted.empty());
  CHECK_FALSE(rows[1].complete);
  CHECK(rows[2].ended_by == "SIGTERM");
  CHECK(rows[3].interrupted == "SIGINT");
  auto warned = [&job](const std::string& text) {
    for (const auto& w : job.warnings)
      if (w.find(text) != std::string::npos) return true;
    return false;
  };
  CHECK(warned("rank(s) 1: the report is a flight-recorder snapshot"));
  CHECK(warned("2026-12-02T10:00:00Z"));
  CHECK(warned("rank(s) 2: ended by SIGTERM"));
  CHECK(warned("rank(s) 3: interrupted by SIGINT, which the program caught"));
  const std::string table = format_multi_rank(job);
  CHECK(table.find("(snapshot: killed or crashed?)") != std::string::npos);
  CHECK(table.find("(ended by SIGTERM)") != std::string::npos);
  CHECK(table.find("(interrupted by SIGINT)") != std::string::npos);
  CHECK(format_summary(job).find("merged from at least one rank's snapshot") != std::string::npos);
  CHECK(html_report(job).find("<p class=\"ending\">merged from at least one rank") != std::string::npos);

  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(job), back, error));
  CHECK_FALSE(back.complete);
  CHECK_FALSE(back.ranks->ranks[1].complete);
  CHECK(back.ranks->ranks[2].ended_by == "SIGTERM");
  CHECK(back.ranks->ranks[3].interrupted == "SIGINT");
  CHECK(back.ranks->ranks[0].interrupted.empty());

  // Every rank ended by itself: complete, no ending warnings, no notes in the table.
  const Report whole = merge_ok(make_job(spec));
  CHECK(whole.complete);
  for (const auto& w : whole.warnings) CHECK(w.find("snapshot") == std::string::npos);
  CHECK(format_multi_rank(whole).find("(ended by") == std::string::npos);
  CHECK(html_report(whole).find("class=\"ending\"") == std::string::npos);
}

TEST_CASE("a rank an uncaught exception ended is named with its exception", "[merge]") {
  // A DDP job: rank 2 ran out of memory; the others waited for it in their collectives until they were stopped.
  JobSpec spec;
  spec.ranks = 4;
  std::vector<Report> ranks = make_job(spec);
  for (auto& r : ranks) r.ended_by = "exit";
  ranks[2].exception = Report::UncaughtException{"torch.cuda.OutOfMemoryError", "CUDA out of memory.\x1b[2J", 30};
  ranks[3].ended_by = "SIGTERM";
  const Report job = merge_ok(ranks);
  CHECK(job.complete);  // every rank's report is final
  const auto& rows = job.ranks->ranks;
  REQUIRE(rows.size() == 4);
  CHECK(rows[2].exception == "torch.cuda.OutOfMemoryError: CUDA out of memory.\\x1b[2J");  // made printable
  CHECK(rows[0].exception.empty());
  std::size_t exception_warnings = 0;
  for (const auto& w : job.warnings)
    if (w.find("uncaught exception") != std::string::npos) {
      ++exception_warnings;
      CHECK(w.find("rank 2: ended by an uncaught exception (torch.cuda.OutOfMemoryError: CUDA out of memory.") == 0);
    }
  CHECK(exception_warnings == 1);
  const std::string table = format_multi_rank(job);
  CHECK(table.find("(uncaught exception)") != std::string::npos);
  CHECK(table.find("(ended by SIGTERM)") != std::string::npos);

  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(job), back, error));
  CHECK(back.ranks->ranks[2].exception == rows[2].exception);
  CHECK(back.ranks->ranks[1].exception.empty());
}

TEST_CASE("call sites that are not a place in a file say what they are, in the summary and the page", "[report]") {
  // A Python user who names a phase "data" and loops with steps(): two sites under one phase.
  Report r = make_job(JobSpec{}).front();
  PhaseSummary& data = r.phases.front();
  data.sites.clear();
  for (const auto& [file, line] : {std::pair<std::string, int>{"(run time)", 0},
                                   {"(python)", 0},
                                   {"train.cpp", 42},
                                   {"(other call sites)", 0},
                                   {"evil\x1b[2J.cpp", 7}}) {
    PhaseCallSite site;
    site.file = file;
    site.line = line;
    site.host_ms.count = 3;
    data.sites.push_back(site);
  }
  const std::string summary = format_summary(r);
  CHECK(summary.find("at stepscope.phase() / stepscope::site() (named at run time) — 3 ×") != std::string::npos);
  CHECK(summary.find("at the steps() loop's fetch / next_step() (Python) — 3 ×") != std::string::npos);
  CHECK(summary.find("at train.cpp:42 — 3 ×") != std::string::npos);
  CHECK(summary.find("at (other call sites) — 3 ×") != std::string::npos);
  CHECK(summary.find("(run time):0") == std::string::npos);
  CHECK(summary.find("evil\\x1b[2J.cpp:7") != std::string::npos);  // a file name from a report, made printable
  CHECK(summary.find('\x1b') == std::string::npos);
  const std::string page = html_report(r);
  CHECK(page.find("<td>the steps() loop&#39;s fetch / next_step() (Python)</td>") != std::string::npos);
  CHECK(page.find("<td>train.cpp:42</td>") != std::string::npos);
}

TEST_CASE("the straggler is named by its cause: extra phase time, unattributed work, its loader", "[merge]") {
  struct Case {
    std::string slow_in, cause, phase;
  };
  for (const Case& c : {Case{"forward", "phase", "forward"}, Case{"unattributed", "unattributed", "(unattributed)"},
                        Case{"data", "input", "data"}})
    for (int ranks : {2, 4}) {
      JobSpec spec;
      spec.ranks = ranks;
      spec.steps = 20;
      spec.data_ms = 1;
      spec.forward_ms = 5;
      spec.backward_ms = 10;
      spec.slow_rank = ranks - 1;
      spec.slow_extra_ms = 30;
      spec.slow_in = c.slow_in;
      INFO(c.slow_in << " on " << ranks << " ranks");
      const Report job = merge_ok(make_job(spec));
      const MultiRank& m = *job.ranks;
      REQUIRE(m.stragglers.size() == 1);
      CHECK(m.stragglers[0].rank == ranks - 1);
      CHECK(m.stragglers[0].cause == c.cause);
      CHECK(m.stragglers[0].phase == c.phase);
      CHECK(m.stragglers[0].excess_ms == Approx(30).margin(3));
      CHECK(job.bottleneck.summary.find("rank " + std::to_string(ranks - 1) + " is a chronic straggler") !=
            std::string::npos);
      for (const RankSummary& r : m.ranks)
        CHECK(r.waits_for == (r.rank == ranks - 1 ? std::vector<int>{} : std::vector<int>{ranks - 1}));
      if (c.cause == "input") CHECK(job.bottleneck.summary.find("the loader") != std::string::npos);
      if (c.cause == "unattributed") CHECK(job.bottleneck.summary.find("outside any phase") != std::string::npos);
      // The cause and whom the others wait for survive the JSON report.
      Report loaded;
      std::string error;
      REQUIRE(report_from_json(report_to_json(job, -1), loaded, error));
      CHECK(loaded.ranks->stragglers[0].cause == c.cause);
      CHECK(loaded.ranks->ranks[0].waits_for == m.ranks[0].waits_for);
    }
  JobSpec balanced;
  balanced.ranks = 4;
  balanced.steps = 20;
  const Report job = merge_ok(make_job(balanced));
  CHECK(job.ranks->stragglers.empty());
  for (const RankSummary& r : job.ranks->ranks) CHECK(r.waits_for.empty());
}

TEST_CASE("a straggler whose step threads waited for a CPU is named by its host's cores, not its code", "[merge]") {
  JobSpec spec;
  spec.ranks = 4;
  spec.steps = 20;
  spec.forward_ms = 5;
  spec.slow_rank = 1;
  spec.slow_extra_ms = 3;
  spec.slow_in = "unattributed";
  for (double slow_wait_ms : {0.0, 2.5}) {
    std::vector<Report> ranks = make_job(spec);
    for (Report& r : ranks) {
      r.system.available = true;
      r.system.window_steps = spec.steps;
      r.system.runqueue_wait_s = 1e-3 * spec.steps * (0.1 + (r.run.rank == spec.slow_rank ? slow_wait_ms : 0.0));
    }
    INFO("the straggler's extra CPU wait: " << slow_wait_ms << " ms/step");
    const Report job = merge_ok(ranks);
    REQUIRE(job.ranks->stragglers.size() == 1);
    const Straggler& s = job.ranks->stragglers[0];
    CHECK(s.rank == 1);
    if (slow_wait_ms == 0) {
      CHECK(s.cause == "unattributed");  // as much waiting as the others: its own work
    } else {
      CHECK(s.cause == "cpu_wait");
      CHECK(job.bottleneck.summary.find("waited for a CPU on its host") != std::string::npos);
      REQUIRE(!job.bottleneck.recommendations.empty());
      CHECK(job.bottleneck.recommendations[0].find("its host's cores") != std::string::npos);
    }
  }
}

TEST_CASE("the ranks' JSON texts merge as their reports do; a rank that sent nothing is missing", "[merge]") {
  JobSpec spec;
  spec.ranks = 3;
  spec.steps = 20;
  spec.slow_rank = 2;
  spec.slow_extra_ms = 30;
  const std::vector<Report> ranks = make_job(spec);
  std::vector<std::string> texts = {report_to_json(ranks[0], -1), "", report_to_json(ranks[2], -1), "{not json"};
  std::string error;
  const Report job = merge_report_texts(texts, error);
  REQUIRE(job.ranks);
  CHECK(job.ranks->world_size == 4);
  CHECK(job.ranks->missing_ranks == std::vector<int>{1, 3});
  CHECK(std::any_of(job.warnings.begin(), job.warnings.end(),
                    [](const std::string& w) { return w.find("rank 3 sent an unreadable report") == 0; }));
  CHECK(format_job_written(job, "job.json").find("merged job report written to job.json") != std::string::npos);
  CHECK_FALSE(merge_report_texts({"", ""}, error).ranks);
}

// A rank on 2 cores whose step thread ran `on_cpu` of its wall time and whose
// process used `user` CPUs.
void on_two_cores_ran(Report& r, double on_cpu, double user) {
  SystemSignals& s = r.system;
  s.available = true;
  s.cores_online = s.cores_available = 2;
  s.wall_s = static_cast<double>(r.steps.count) * r.steps.breakdown.wall_ms * 1e-3;
  s.step_threads_on_cpu_s = on_cpu * s.wall_s;
  s.cpu_user_s = user * s.wall_s;
}

TEST_CASE("ranks whose compute phases waited rather than computed leave the job without a verdict too", "[merge]") {
  // pytorch/examples' rpc/ddp_rpc: each trainer's forward, backward and
  // optimizer wait for a parameter server; each rank's own report said
  // unknown, the job's "highly compute-bound" (its OS signals are per host).
  JobSpec spec;
  spec.ranks = 2;
  std::vector<Report> ranks = make_job(spec);
  for (Report& r : ranks) {
    on_two_cores_ran(r, 0.10, 0.15);
    REQUIRE(classify(r).category == "unknown");
  }
  const Report job = merge_ok(ranks);
  CHECK(job.bottleneck.category == "unknown");
  CHECK(job.bottleneck.summary.find("(the typical rank): Unknown: compute phases hold") != std::string::npos);
  // Ranks that computed: the job's verdict as before.
  for (Report& r : ranks) r.system.step_threads_on_cpu_s = 0.95 * r.system.wall_s;
  CHECK(merge_ok(ranks).bottleneck.category == "compute");
}

TEST_CASE("ranks whose run times bound their compute below their communication give the job that verdict", "[merge]") {
  // pytorch/examples' rpc/ddp_rpc with its round trips timed (rpc.wait):
  // both trainers read communication (compute phases on a CPU at most a
  // third of their time), the job "conflicting signals" from the ranks'
  // breakdown alone.
  JobSpec spec;
  spec.ranks = 2;
  spec.forward_ms = 10;
  spec.backward_ms = 12;
  spec.collective_ms = 20;
  std::vector<Report> ranks = make_job(spec);
  for (Report& r : ranks) {
    on_two_cores_ran(r, 0.15, 0.6);
    REQUIRE(classify(r).category == "communication");
  }
  const Report job = merge_ok(ranks);
  CHECK(job.bottleneck.category == "communication");
  CHECK(job.bottleneck.summary.find("(the typical rank): The step is") != std::string::npos);
  // Without the ranks' run times the job and its ranks read the same breakdown alike.
  for (Report& r : ranks) r.system.step_threads_on_cpu_s = -1;
  CHECK(merge_ok(ranks).bottleneck.category == classify(ranks[0]).category);
}
