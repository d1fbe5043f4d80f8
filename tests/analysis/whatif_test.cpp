// Tests of src/analysis/what_if.cpp: Amdahl projections, the local
// optimisation trap, overlap honesty for background phases.
#include "analysis/facts.hpp"
#include "analysis/report_builder.hpp"
#include "analysis/thresholds.hpp"

#include <catch2/catch.hpp>

using namespace stepscope;
using namespace stepscope::test;

namespace {

const WhatIf* find(const std::vector<WhatIf>& all, const std::string& target, double speedup) {
  for (const WhatIf& w : all)
    if (w.target == target && w.speedup == speedup) return &w;
  return nullptr;
}
const WhatIf* find(std::vector<WhatIf>&&, const std::string&, double) = delete;

Report five_percent_report() {
  Shares s;
  s.input = 0.05;
  s.compute = 0.90;
  s.unattributed = 0.05;
  Report r = host_report(s, 100, 200);
  add_phase(r, "custom_kernel", PhaseKind::input, ThreadRole::step, 0.05, 10);
  add_phase(r, "train", PhaseKind::compute, ThreadRole::step, 0.90, 180);
  return r;
}

}  // namespace

TEST_CASE("what-if: a phase at 5% made 2x faster changes the step by 2.5%", "[analysis][whatif]") {
  const std::vector<WhatIf> all = project_what_if(five_percent_report());
  const WhatIf* twice = find(all, "custom_kernel", 2);
  REQUIRE(twice != nullptr);
  CHECK(twice->share == Approx(0.05));
  CHECK(twice->step_ms_now == Approx(200));
  CHECK(twice->step_ms_projected == Approx(195));
  CHECK(twice->step_change_pct == Approx(-2.5));

  const WhatIf* free = find(all, "custom_kernel", 0);
  REQUIRE(free != nullptr);
  CHECK(free->step_ms_projected == Approx(190));
  CHECK(free->step_change_pct == Approx(-5.0));

  // The dominant phase is where the step time is.
  const WhatIf* train = find(all, "train", 2);
  REQUIRE(train != nullptr);
  CHECK(train->step_change_pct == Approx(-45.0));
  // Sorted by gain: the biggest saving first.
  CHECK(all.front().target == "train");
  CHECK(all.front().speedup == 0);
  CHECK(all.front().step_change_pct == Approx(-90.0));
}

TEST_CASE("what-if: formula for several speedups", "[analysis][whatif]") {
  // projected = step - share * (1 - 1/k) * step
  struct Row {
    double share, speedup, change_pct;
  };
  for (const Row& row : {Row{0.5, 2, -25}, Row{0.5, 0, -50}, Row{0.2, 2, -10}, Row{0.2, 0, -20}}) {
    Shares s;
    s.compute = row.share;
    s.input = 1 - row.share;
    Report r = host_report(s);
    add_phase(r, "p", PhaseKind::compute, ThreadRole::step, row.share, 100 * row.share);
    const std::vector<WhatIf> all = project_what_if(r);
    const WhatIf* w = find(all, "p", row.speedup);
    REQUIRE(w != nullptr);
    INFO("share " << row.share << " speedup " << row.speedup);
    CHECK(w->step_change_pct == Approx(row.change_pct));
  }
}

TEST_CASE("what-if: only phases at or above the minimum share", "[analysis][whatif]") {
  const double m = stepscope::detail::kThresholds.what_if_min_share;
  Report r = five_percent_report();
  add_phase(r, "below", PhaseKind::other, ThreadRole::step, m - 0.001, 3.8);
  add_phase(r, "at", PhaseKind::other, ThreadRole::step, m, 4);
  const std::vector<WhatIf> all = project_what_if(r);
  CHECK(find(all, "below", 2) == nullptr);
  CHECK(find(all, "at", 2) != nullptr);
}

TEST_CASE("what-if: background phases gain nothing while overlapped", "[analysis][whatif]") {
  Report r = five_percent_report();
  PhaseSummary& bg = add_phase(r, "decode", PhaseKind::input, ThreadRole::background, 0, 150);
  bg.overlap_with_steps = 0.98;
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* w = find(all, "decode", 2);
  REQUIRE(w != nullptr);
  CHECK(w->share == 0);
  CHECK(w->step_ms_projected == Approx(w->step_ms_now));
  CHECK(w->step_change_pct == Approx(0).margin(1e-12));
  CHECK(w->note.find("overlapped") != std::string::npos);
}

TEST_CASE("what-if: kinds and unattributed time", "[analysis][whatif]") {
  const std::vector<WhatIf> all = project_what_if(five_percent_report());
  const WhatIf* kind = find(all, "kind:compute", 2);
  REQUIRE(kind != nullptr);
  CHECK(kind->step_change_pct == Approx(-45));
  const WhatIf* unattributed = find(all, "unattributed", 0);
  REQUIRE(unattributed != nullptr);
  CHECK(unattributed->step_change_pct == Approx(-5));
  CHECK(find(all, "kind:memory", 2) == nullptr);  // 0% of the step
}

TEST_CASE("what-if: phases with device time say how they were projected", "[analysis][whatif]") {
  Report r = five_percent_report();
  PhaseSummary& fwd = add_phase(r, "forward", PhaseKind::compute, ThreadRole::step, 0.1, 2);
  fwd.device_ms = dist(40, 1, fwd.count);
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* w = find(all, "forward", 2);
  REQUIRE(w != nullptr);
  CHECK(w->step_change_pct == Approx(-5));
  CHECK(w->note.find("device time") != std::string::npos);
}

TEST_CASE("what-if: nothing to project without steps", "[analysis][whatif]") {
  CHECK(project_what_if(Report{}).empty());
}

TEST_CASE("what-if: bounded by the background loader's time per batch", "[analysis][whatif][pipeline]") {
  // The pipeline: 3.8 ms of compute per step, fed by a background
  // loader that needs `loader_ms` per batch (bounded queue, overlapped).
  struct Row {
    double loader_ms;
    int loader_threads;
    double compute_2x_ms, compute_free_ms;  // expected projections
    const char* note;
  };
  for (const Row& row : {Row{2.5, 1, 2.5, 2.5, "then input-bound: the loader needs 2.50 ms per batch"},
                         Row{2.5, 2, 1.9, 1.25, nullptr},  // two workers: 1.25 ms per batch
                         Row{1.0, 1, 1.9, 1.0, "keeps up"}}) {
    Shares s;
    s.input = 0.0;
    s.compute = 1.0;
    Report r = host_report(s, 200, 3.8);
    add_phase(r, "forward", PhaseKind::compute, ThreadRole::step, 1.0, 3.8);
    PhaseSummary& read = add_phase(r, "read", PhaseKind::input, ThreadRole::background, 0, row.loader_ms);
    read.threads = static_cast<std::uint32_t>(row.loader_threads);
    read.overlap_with_steps = 1.0;
    const std::vector<WhatIf> all = project_what_if(r);
    INFO("loader " << row.loader_ms << " ms on " << row.loader_threads << " thread(s)");
    const WhatIf* twice = find(all, "kind:compute", 2.0);
    const WhatIf* gone = find(all, "forward", 0.0);
    REQUIRE(twice != nullptr);
    REQUIRE(gone != nullptr);
    CHECK(twice->step_ms_projected == Approx(row.compute_2x_ms));
    CHECK(gone->step_ms_projected == Approx(row.compute_free_ms));
    CHECK(twice->step_change_pct == Approx(100 * (row.compute_2x_ms - 3.8) / 3.8));
    if (row.note != nullptr) CHECK(twice->note.find(row.note) != std::string::npos);
    CHECK(twice->note.find("kind:compute 2x faster: 3.80 -> ") != std::string::npos);
  }
}

TEST_CASE("what-if: the feed itself is not bounded by the feed", "[analysis][whatif][pipeline]") {
  // The halved run: 1.9 ms compute, 0.6 ms waiting on a 2.5 ms loader.
  Shares s;
  s.input = 0.6 / 2.5;
  s.compute = 1.9 / 2.5;
  Report r = host_report(s, 200, 2.5);
  add_phase(r, "data", PhaseKind::input, ThreadRole::step, 0.6 / 2.5, 0.6);
  add_phase(r, "forward", PhaseKind::compute, ThreadRole::step, 1.9 / 2.5, 1.9);
  add_phase(r, "read", PhaseKind::input, ThreadRole::background, 0, 2.5).overlap_with_steps = 1.0;
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* input_free = find(all, "kind:input", 0.0);
  REQUIRE(input_free != nullptr);
  CHECK(input_free->step_ms_projected == Approx(1.9));  // a faster loader: the wait goes
  const WhatIf* compute_2x = find(all, "kind:compute", 2.0);
  REQUIRE(compute_2x != nullptr);
  CHECK(compute_2x->step_ms_projected == Approx(2.5));  // the loader still sets the pace
  // ... and the verdict on that run is io (24% on the critical path), compute runner-up.
  const Verdict v = classify(r);
  CHECK(v.category == "io");
  CHECK(v.summary.find("runner-up") != std::string::npos);
}

TEST_CASE("what-if: a merged job goes at its slowest rank's pace", "[analysis][whatif]") {
  // Four ranks, synchronous: rank 3 computes 14 ms, the others 8 ms; every
  // rank spends 2 ms in other work, the collective takes 1 ms, so the step is
  // 17 ms everywhere and ranks 0-2 wait 6 ms per step for rank 3.
  Shares s;
  s.compute = 9.5 / 17;  // mean over ranks
  s.communication = 5.5 / 17;
  s.other = 2.0 / 17;
  Report r = host_report(s, 100, 17);
  MultiRank m;
  m.world_size = m.ranks_merged = 4;
  for (int i = 0; i < 4; ++i) {
    RankSummary k;
    k.rank = i;
    k.step_ms = 17;
    k.kind_ms[PhaseKind::compute] = i == 3 ? 14 : 8;
    k.kind_ms[PhaseKind::other] = 2;
    k.busy_ms = k.kind_ms[PhaseKind::compute] + k.kind_ms[PhaseKind::other];
    k.kind_ms[PhaseKind::communication] = 17 - k.busy_ms;
    m.ranks.push_back(k);
  }
  m.comm_collective_ms = 1;
  r.ranks = m;
  const std::vector<WhatIf> all = project_what_if(r);
  // Communication free: Amdahl promises 17 -> 11.5 ms, but rank 3 still needs
  // 16 ms outside communication, so the step cannot drop below that.
  const WhatIf* free = find(all, "kind:communication", 0);
  REQUIRE(free != nullptr);
  CHECK(free->step_ms_projected == Approx(16.0));
  CHECK(free->note.find("bound by the slowest rank: rank 3") != std::string::npos);
  // A network twice as fast halves only the collective itself: 16 + 0.5.
  const WhatIf* twice = find(all, "kind:communication", 2);
  REQUIRE(twice != nullptr);
  CHECK(twice->step_ms_projected == Approx(16.5));
  // Compute 2x faster on every rank: rank 3 then needs 9 ms; the Amdahl
  // projection (12.25 ms) stays above that bound and is kept.
  const WhatIf* compute = find(all, "kind:compute", 2);
  REQUIRE(compute != nullptr);
  CHECK(compute->step_ms_projected == Approx(17 - 9.5 / 2));
  CHECK(compute->note.find("keeps pace") != std::string::npos);
  // Without the ranks, communication free is plain Amdahl.
  r.ranks.reset();
  const std::vector<WhatIf> single = project_what_if(r);
  const WhatIf* alone = find(single, "kind:communication", 0);
  REQUIRE(alone != nullptr);
  CHECK(alone->step_ms_projected == Approx(11.5));
}

TEST_CASE("what-if: a background loader's pace bounds the step (issue 29 item 3)", "[analysis][whatif][pipeline]") {
  // A loader at 40 ms per batch; the step waits 59% of its 40.5 ms for it.
  Shares s;
  s.input = 0.59;
  s.compute = 0.41;
  Report r = host_report(s, 100, 40.5);
  add_phase(r, "data", PhaseKind::input, ThreadRole::step, 0.59, 0.59 * 40.5);
  add_phase(r, "train", PhaseKind::compute, ThreadRole::step, 0.41, 0.41 * 40.5);
  add_phase(r, "load_batch", PhaseKind::input, ThreadRole::background, 0, 40).overlap_with_steps = 0.95;
  const std::vector<WhatIf> all = project_what_if(r);
  // Made 2x faster for real: 20.6 ms.
  const WhatIf* loader_2x = find(all, "load_batch", 2);
  REQUIRE(loader_2x != nullptr);
  CHECK(loader_2x->step_ms_projected == Approx(20.6).epsilon(0.05));
  CHECK(loader_2x->note.find("sets the pace") != std::string::npos);
  const WhatIf* data_2x = find(all, "data", 2);
  REQUIRE(data_2x != nullptr);
  CHECK(data_2x->step_ms_projected == Approx(20.6).epsilon(0.05));
  // Without the loader's wait the step is its own work.
  const WhatIf* data_free = find(all, "data", 0);
  REQUIRE(data_free != nullptr);
  CHECK(data_free->step_ms_projected == Approx(0.41 * 40.5).epsilon(0.05));
}

TEST_CASE("what-if: a part never promises more than its whole; CPU wait has its own (issue 32 item 4)",
          "[analysis][whatif]") {
  // backward is 90% of the step by the host clock, and 57% of the step was
  // waiting for a CPU (the settled breakdown: compute 39%, CPU wait 57%).
  // Removing backward removes its waiting too (a thread with less to do
  // waits less), so the kind it belongs to promises as much, never less; the
  // CPU wait is a lever of its own.
  Shares s;
  s.compute = 0.9;
  s.other = 0.1;
  Report r = host_report(s, 100, 100);
  r.system.runqueue_wait_s = 0.57 * r.system.wall_s;
  add_phase(r, "backward", PhaseKind::compute, ThreadRole::step, 0.9, 90);
  add_phase(r, "forward_part", PhaseKind::compute, ThreadRole::step, 0.95, 95);  // a bad share: capped by its kind
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* kind = find(all, "kind:compute", 0);
  const WhatIf* backward = find(all, "backward", 0);
  const WhatIf* part = find(all, "forward_part", 0);
  const WhatIf* cpu_wait = find(all, "cpu_wait", 0);
  REQUIRE(kind != nullptr);
  REQUIRE(backward != nullptr);
  REQUIRE(part != nullptr);
  REQUIRE(cpu_wait != nullptr);
  CHECK(kind->step_change_pct == Approx(-90));
  CHECK(backward->step_change_pct == Approx(-90));
  CHECK(part->step_change_pct == Approx(kind->step_change_pct));  // never more than its whole
  CHECK(part->share <= kind->share + 1e-9);
  CHECK(kind->note.find("CPU wait included") != std::string::npos);
  CHECK(cpu_wait->step_change_pct == Approx(-57).margin(0.5));
  for (const WhatIf& w : all) CHECK(w.step_change_pct >= -100);
}

TEST_CASE("what-if: a device-clocked step is the slower of the host's issue work and the device",
          "[analysis][whatif][pipeline]") {
  // The H200's slow-input loop: the host waits 40 ms for data, then launches
  // 3.65 ms of work the device runs in 8.7 ms, overlapping the next fetch.
  // The device's data phase is 35.1 ms (the fetch less the hidden backlog).
  Shares s;
  s.input = 35.1 / 43.8;
  s.compute = 8.7 / 43.8;
  Report r = host_report(s, 100, 43.8);
  r.steps.clock = "device";
  Shares h;
  h.input = 40 / 43.65;
  h.compute = 3.65 / 43.65;
  r.steps.host_breakdown = host_report(h, 100, 43.65).steps.breakdown;
  PhaseSummary& data = add_phase(r, "data", PhaseKind::input, ThreadRole::step, 35.1 / 43.8, 40);
  data.device_ms = dist(35.1, 0.1, data.count);
  PhaseSummary& train = add_phase(r, "train", PhaseKind::compute, ThreadRole::step, 8.7 / 43.8, 3.65);
  train.device_ms = dist(8.7, 0.1, train.count);
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* data_free = find(all, "data", 0);
  REQUIRE(data_free != nullptr);
  CHECK(data_free->step_ms_projected == Approx(8.7).epsilon(0.1));  // the GPU's own work, not 3.65
  const WhatIf* data_2x = find(all, "data", 2);
  REQUIRE(data_2x != nullptr);
  CHECK(data_2x->step_ms_projected == Approx(23.65).epsilon(0.1));
  // Kernels twice as fast: the step is still the host's fetch.
  const WhatIf* compute_2x = find(all, "kind:compute", 2);
  REQUIRE(compute_2x != nullptr);
  CHECK(compute_2x->step_change_pct > -2);
}

TEST_CASE("what-if: a projection the data cannot support says so", "[analysis][whatif][pipeline]") {
  // A device-clocked step whose 'forward' has device time on a third of its
  // occurrences: its device share is not known, so no number is projected.
  Shares s;
  s.compute = 1.0;
  Report r = host_report(s, 90, 10);
  r.steps.clock = "device";
  r.steps.host_breakdown = r.steps.breakdown;
  PhaseSummary& fwd = add_phase(r, "forward", PhaseKind::compute, ThreadRole::step, 0.5, 5);
  fwd.device_ms = dist(5, 0.1, fwd.count / 3);
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* w = find(all, "forward", 0);
  REQUIRE(w != nullptr);
  CHECK(w->note.rfind("not projected", 0) == 0);
  CHECK(w->step_ms_projected == Approx(w->step_ms_now));
  // The summary says so instead of printing a number.
  r.what_if = {*w};
  CHECK(format_summary(r).find("what if forward were free: not projected") != std::string::npos);
}

TEST_CASE("what-if: the summary says where a projection holds what the breakdown shows apart", "[analysis][whatif]") {
  // 256 MiB touched in no phase every step: the breakdown shows its page
  // faults on their own row, net of the unattributed one, while removing the
  // unattributed work removes its faults too (a PyTorch VAE read "what if
  // unattributed were free: -89%" beside a row of 33%, unexplained).
  Shares s;
  s.compute = 0.3;
  s.unattributed = 0.7;
  Report r = host_report(s, 100, 100);
  add_phase(r, "forward", PhaseKind::compute, ThreadRole::step, 0.3, 30);
  r.system.minor_faults = 256 * 256 * r.steps.count;  // 256 MiB of fresh 4 KiB pages a step
  r.system.cpu_system_s = 0.5 * r.system.wall_s;
  analyze(r);
  const StepBreakdown b = settled_breakdown(r);
  REQUIRE(b.page_fault_ms > 0);
  const WhatIf* free = find(r.what_if, "unattributed", 0);
  REQUIRE(free != nullptr);
  CHECK(free->share > b.unattributed_ms / b.wall_ms + 0.1);
  const std::string text = format_summary(r);
  INFO(text);
  CHECK(text.find("what if unattributed were free: step 100.000 -> 30.000 ms (-70.0%; 70% of the step measured "
                  "there, the page faults in it included, which the breakdown shows apart)") != std::string::npos);
  // A part whose row is the measured time gets no such words.
  CHECK(text.find("what if forward were free: step 100.000 -> 70.000 ms (-30.0%)") != std::string::npos);
}

TEST_CASE("what-if: a background loader on the cores the step needs: their CPU work together sets the pace",
          "[analysis][whatif][pipeline]") {
  // (report_builder.hpp.) Measured by removing each: no decoding 61-64 ms,
  // decoding 2x faster 67-70 ms, a tiny model 64-65 ms. The loader's wall
  // per batch (its own CPU wait in it) made it look like a stage that keeps
  // up: "decode free -2%".
  const std::vector<WhatIf> shared = project_what_if(loader_on_shared_cores(false));
  const WhatIf* decode_free = find(shared, "decode", 0);
  const WhatIf* decode_2x = find(shared, "decode", 2);
  const WhatIf* compute_free = find(shared, "kind:compute", 0);
  const WhatIf* wait_free = find(shared, "cpu_wait", 0);
  REQUIRE(decode_free != nullptr);
  REQUIRE(decode_2x != nullptr);
  REQUIRE(compute_free != nullptr);
  REQUIRE(wait_free != nullptr);
  // step work 90 - 7.2 - 27 = 55.8 ms; the loader's CPU min(172.8 ms of its
  // wall, 1.9 x 90 - 56 = 115 ms); pace max(55.8, 115 / 2, (55.8 + 115) / 2)
  // = 85.4 ms + 4.6 ms unexplained.
  CHECK(decode_free->step_ms_projected == Approx(55.8 + 4.6).epsilon(0.02));
  CHECK(decode_2x->step_ms_projected == Approx((55.8 + 57.5) / 2 + 4.6).epsilon(0.02));
  CHECK(decode_free->note.find("background loader on the step's cores") != std::string::npos);
  CHECK(compute_free->step_ms_projected == Approx(57.5 + 4.6).epsilon(0.02));  // the loader's own pace
  CHECK(compute_free->note.find("share 2 full cores") != std::string::npos);
  CHECK(wait_free->step_change_pct == Approx(0).margin(0.5));  // not without less work or more cores
  CHECK(wait_free->note.find("less work or more cores") != std::string::npos);
  // Other processes held the cores: the loader's wall pace, as before.
  const std::vector<WhatIf> busy = project_what_if(loader_on_shared_cores(true));
  const WhatIf* busy_decode = find(busy, "decode", 0);
  REQUIRE(busy_decode != nullptr);
  CHECK(busy_decode->step_change_pct > -10);
  CHECK(busy_decode->note.find("background loader on the step's cores") == std::string::npos);
}

TEST_CASE("what-if: DataLoader worker processes on the step's full cores set the pace with it",
          "[analysis][whatif][pipeline]") {
  // The same loop in PyTorch (num_workers=2, tests/python trial in
  // docs/trials.md): the workers are child processes, whose CPU read as
  // "other processes" (a busy machine): kind:compute free projected -87%
  // where a tiny model measured -34%; no loading free at all (measured -37%).
  const Report r = loader_on_shared_cores(false, true);
  const std::vector<WhatIf> all = project_what_if(r);
  const WhatIf* data_free = find(all, "data", 0);
  const WhatIf* compute_free = find(all, "kind:compute", 0);
  REQUIRE(data_free != nullptr);
  REQUIRE(compute_free != nullptr);
  CHECK(data_free->step_ms_projected == Approx(55.8 + 4.6).epsilon(0.02));
  CHECK(compute_free->step_ms_projected == Approx(57.5 + 4.6).epsilon(0.02));
  CHECK(compute_free->note.find("DataLoader worker processes") != std::string::npos);
  const detail::CpuHolders h = detail::cpu_holders(r.system);
  CHECK_FALSE(h.others_hold);  // the job's own workers
  CHECK(h.children_cores == Approx(0.115 * 40 / r.system.wall_s));
  // Children of unknown purpose (no num_workers): the job's own CPU, not its loader.
  Report unknown = r;
  unknown.run.config.erase("num_workers");
  CHECK(detail::loader_cpu(unknown).cpu_ms == 0);
  CHECK_FALSE(detail::shared_cores(unknown, settled_breakdown(unknown)).active);
  CHECK_FALSE(detail::cpu_holders(unknown.system).others_hold);
}
