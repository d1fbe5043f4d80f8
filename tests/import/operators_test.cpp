// The top operators inside each phase of an imported trace
// (src/import/phase_operators.cpp): self time, the phase an operator and a
// kernel belong to, the cap, the JSON round trip, and real traces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "import/trace_import.hpp"
#include "stepscope/merge.hpp"

using namespace stepscope;
using namespace stepscope::timeline;

namespace {

NameId name(Timeline& tl, const std::string& text) {
  tl.names.push_back(text);
  return static_cast<NameId>(tl.names.size() - 1);
}

HostInterval host(NameId n, HostOpKind kind, std::int64_t start, std::int64_t end, std::int64_t tid,
                  std::int64_t correlation = -1) {
  HostInterval h;
  h.name = n;
  h.kind = kind;
  h.start_ns = start;
  h.end_ns = end;
  h.tid = tid;
  h.pid = 1;
  h.correlation = correlation;
  return h;
}

const PhaseSummary* phase(const std::vector<PhaseSummary>& phases, const std::string& n) {
  for (const auto& p : phases)
    if (p.name == n) return &p;
  return nullptr;
}

const OperatorTime* op(const PhaseSummary& p, const std::string& n) {
  for (const auto& o : p.top_operators)
    if (o.name == n) return &o;
  return nullptr;
}

// One step [0, 1000) on thread 1: a user range "loss" [100, 200), PyTorch's
// optimizer range [800, 900), an addmm [300, 500) with a nested copy_
// [350, 400) that launched a kernel, a backward op on the autograd thread 2
// [600, 700), and an op outside the step.
Timeline small_trace() {
  Timeline tl;
  const NameId step = name(tl, "ProfilerStep#3"), loss = name(tl, "loss"), opt = name(tl, "Optimizer.step#SGD.step");
  const NameId addmm = name(tl, "aten::addmm"), copy = name(tl, "aten::copy_"), mul = name(tl, "aten::mul");
  const NameId launch = name(tl, "cudaLaunchKernel"), kernel = name(tl, "gemm_kernel");
  const NameId bwd = name(tl, "autograd::engine::evaluate_function: AddmmBackward0"), add = name(tl, "aten::add_");
  tl.steps.push_back({3, 0, 1000});
  tl.host_ops.push_back(host(step, HostOpKind::step, 0, 1000, 1));
  tl.host_ops.push_back(host(loss, HostOpKind::annotation, 100, 200, 1));
  tl.phases.push_back({loss, 100, 200, 1, false});
  tl.host_ops.push_back(host(mul, HostOpKind::framework_op, 120, 150, 1));
  tl.host_ops.push_back(host(addmm, HostOpKind::framework_op, 300, 500, 1));
  tl.host_ops.push_back(host(copy, HostOpKind::framework_op, 350, 400, 1));
  tl.host_ops.push_back(host(launch, HostOpKind::runtime_launch, 360, 370, 1, 42));
  tl.host_ops.push_back(host(bwd, HostOpKind::framework_op, 600, 700, 2));
  tl.host_ops.push_back(host(opt, HostOpKind::annotation, 800, 900, 1));
  tl.host_ops.push_back(host(add, HostOpKind::framework_op, 810, 830, 1));
  tl.host_ops.push_back(host(add, HostOpKind::framework_op, 840, 850, 1));
  tl.host_ops.push_back(host(addmm, HostOpKind::framework_op, 2000, 2500, 1));  // outside the step
  DeviceInterval k;
  k.name = kernel;
  k.kind = DeviceOpKind::kernel;
  k.start_ns = 380;
  k.end_ns = 980;
  k.stream = 7;
  k.correlation = 42;
  tl.device_ops.push_back(k);
  return tl;
}

std::vector<PhaseSummary> phases_named(std::initializer_list<const char*> names) {
  std::vector<PhaseSummary> out;
  for (const char* n : names) {
    PhaseSummary p;
    p.name = n;
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST_CASE("operators land in the phase the step's thread is in, with self time", "[import][operators]") {
  const Timeline tl = small_trace();
  std::vector<PhaseSummary> phases = phases_named({"loss", "forward", "backward", "optimizer"});
  attach_top_operators(tl, phases);

  const PhaseSummary& loss = *phase(phases, "loss");
  REQUIRE(loss.top_operators.size() == 1);
  CHECK(loss.top_operators[0].name == "aten::mul");
  CHECK(loss.top_operators[0].self_ms == Approx(30e-6));

  // addmm's self time leaves out the nested copy_; the kernel the copy_
  // launched is forward's too, with its device time. The op outside the
  // step counts nowhere.
  const PhaseSummary& forward = *phase(phases, "forward");
  REQUIRE(op(forward, "aten::addmm") != nullptr);
  CHECK(op(forward, "aten::addmm")->count == 1);
  CHECK(op(forward, "aten::addmm")->self_ms == Approx(150e-6));
  CHECK(op(forward, "aten::copy_")->self_ms == Approx(50e-6));
  REQUIRE(op(forward, "gemm_kernel") != nullptr);
  CHECK(op(forward, "gemm_kernel")->kind == "kernel");
  CHECK(op(forward, "gemm_kernel")->self_ms == Approx(600e-6));
  // cpu_ops first (most self time first), then kernels.
  CHECK(forward.top_operators.front().name == "aten::addmm");
  CHECK(forward.top_operators.back().kind == "kernel");

  // The autograd engine's thread: backward, although the step ran on thread 1.
  const PhaseSummary& backward = *phase(phases, "backward");
  REQUIRE(backward.top_operators.size() == 1);
  CHECK(backward.top_operators[0].kind == "cpu_op");

  const PhaseSummary& optimizer = *phase(phases, "optimizer");
  REQUIRE(optimizer.top_operators.size() == 1);
  CHECK(optimizer.top_operators[0].name == "aten::add_");
  CHECK(optimizer.top_operators[0].count == 2);
  CHECK(optimizer.top_operators[0].self_ms == Approx(30e-6));
}

TEST_CASE("an operator after a nested range ended is its enclosing range's; after every range, forward's",
          "[import][operators]") {
  // Many steps, each with "train" [s+0, s+600) around "loss" [s+100, s+200)
  // on thread 1: aten::mul at s+300 is in train (past the ended loss), and
  // aten::add_ at s+700 in no range (forward), in every step.
  Timeline tl;
  const NameId train = name(tl, "train"), loss = name(tl, "loss"), mul = name(tl, "aten::mul"),
               add = name(tl, "aten::add_");
  const int steps = 50;
  for (int i = 0; i < steps; ++i) {
    const std::int64_t s = 1000 * i;
    tl.steps.push_back({i, s, s + 1000});
    tl.phases.push_back({train, s, s + 600, 1, false});
    tl.phases.push_back({loss, s + 100, s + 200, 1, false});
    tl.host_ops.push_back(host(train, HostOpKind::annotation, s, s + 600, 1));
    tl.host_ops.push_back(host(loss, HostOpKind::annotation, s + 100, s + 200, 1));
    tl.host_ops.push_back(host(mul, HostOpKind::framework_op, s + 300, s + 320, 1));
    tl.host_ops.push_back(host(add, HostOpKind::framework_op, s + 700, s + 710, 1));
  }
  std::vector<PhaseSummary> phases = phases_named({"train", "loss", "forward"});
  attach_top_operators(tl, phases);
  REQUIRE(op(*phase(phases, "train"), "aten::mul") != nullptr);
  CHECK(op(*phase(phases, "train"), "aten::mul")->count == steps);
  CHECK(phase(phases, "loss")->top_operators.empty());
  REQUIRE(op(*phase(phases, "forward"), "aten::add_") != nullptr);
  CHECK(op(*phase(phases, "forward"), "aten::add_")->count == steps);
  CHECK(op(*phase(phases, "forward"), "aten::mul") == nullptr);
}

TEST_CASE("each phase keeps its top operators of each kind only", "[import][operators]") {
  Timeline tl;
  const NameId step = name(tl, "ProfilerStep#1");
  tl.steps.push_back({1, 0, 100000});
  tl.host_ops.push_back(host(step, HostOpKind::step, 0, 100000, 1));
  for (int i = 0; i < 20; ++i) {
    const NameId n = name(tl, "aten::op" + std::to_string(i));
    tl.host_ops.push_back(host(n, HostOpKind::framework_op, i * 1000, i * 1000 + 10 * (i + 1), 1));
  }
  std::vector<PhaseSummary> phases = phases_named({"forward"});
  attach_top_operators(tl, phases, 3);
  REQUIRE(phases[0].top_operators.size() == 3);
  CHECK(phases[0].top_operators[0].name == "aten::op19");
  CHECK(phases[0].top_operators[2].name == "aten::op17");
}

TEST_CASE("top operators survive the JSON report", "[import][operators]") {
  Report r;
  r = report_from_timeline(small_trace(), "small.json");
  bool any = false;
  for (const auto& p : r.phases) any = any || !p.top_operators.empty();
  REQUIRE(any);
  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(r), back, error));
  REQUIRE(back.phases.size() == r.phases.size());
  for (std::size_t i = 0; i < r.phases.size(); ++i) {
    REQUIRE(back.phases[i].top_operators.size() == r.phases[i].top_operators.size());
    for (std::size_t k = 0; k < r.phases[i].top_operators.size(); ++k) {
      CHECK(back.phases[i].top_operators[k].name == r.phases[i].top_operators[k].name);
      CHECK(back.phases[i].top_operators[k].kind == r.phases[i].top_operators[k].kind);
      CHECK(back.phases[i].top_operators[k].count == r.phases[i].top_operators[k].count);
      CHECK(back.phases[i].top_operators[k].self_ms == Approx(r.phases[i].top_operators[k].self_ms));
    }
  }
  CHECK(format_top_operators(r).find("aten::addmm") != std::string::npos);
}

TEST_CASE("real traces: an MLP's matmuls top its forward and backward", "[import][operators]") {
  // torch 1.13 on the CPU (tests/data/pytorch): a compute-bound MLP.
  Report r;
  std::string error;
  REQUIRE(analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/pytorch/legacy_1.13_compute.json.gz", r, error));
  const PhaseSummary* forward = phase(r.phases, "forward");
  const PhaseSummary* backward = phase(r.phases, "backward");
  REQUIRE(forward != nullptr);
  REQUIRE(backward != nullptr);
  REQUIRE(!forward->top_operators.empty());
  REQUIRE(!backward->top_operators.empty());
  CHECK(forward->top_operators[0].name == "aten::addmm");
  CHECK(backward->top_operators[0].name == "aten::mm");
  // Self times inside a phase never add up to more than the phase's host time.
  for (const PhaseSummary* p : {forward, backward}) {
    double cpu = 0;
    for (const auto& o : p->top_operators) cpu += o.kind == "cpu_op" ? o.self_ms : 0;
    CHECK(cpu <= p->self_ms.total * 1.0001);
  }
}

TEST_CASE("real traces: the V100 step's kernels are attributed to its annotated phases", "[import][operators]") {
  Report r;
  std::string error;
  REQUIRE(analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/traces/v100_single_rank_compute.json.gz", r, error));
  // The user's "## forward ##" (DDP's "DistributedDataParallel.forward" inside it is the forward pass, not a phase).
  const PhaseSummary* forward = phase(r.phases, "## forward ##");
  REQUIRE(forward != nullptr);
  bool conv = false, kernel = false;
  for (const auto& o : forward->top_operators) {
    conv = conv || o.name == "aten::cudnn_convolution";
    kernel = kernel || o.kind == "kernel";
  }
  CHECK(conv);
  CHECK(kernel);
  // The backward of this DDP step runs on the autograd engine's thread while
  // the step's thread is in the user's "## backward ##" range: its ops are
  // that range's (not only the loss ops on the step's thread).
  const PhaseSummary* backward = phase(r.phases, "## backward ##");
  REQUIRE(backward != nullptr);
  REQUIRE(!backward->top_operators.empty());
  CHECK(backward->top_operators[0].name == "aten::convolution_backward");
  // Every phase's list holds at most kTopOperatorsPerKind of each kind.
  for (const auto& p : r.phases) {
    std::size_t cpu = 0, kernels = 0;
    for (const auto& o : p.top_operators) (o.kind == "kernel" ? kernels : cpu)++;
    CHECK(cpu <= kTopOperatorsPerKind);
    CHECK(kernels <= kTopOperatorsPerKind);
  }
}

TEST_CASE("a merge of imported ranks sums their top operators per phase", "[import][operators][merge]") {
  // Two real ranks of one job: the merged phase lists each operator with the
  // count and self time summed over the ranks that listed it
  // (docs/report-schema.md, phases[].top_operators).
  std::vector<Report> ranks(2);
  std::string error;
  REQUIRE(analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/traces/sampled_128rank_rank0.json.gz", ranks[0], error));
  REQUIRE(analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/traces/sampled_128rank_rank1.json.gz", ranks[1], error));
  const Report job = merge_reports(ranks, error);
  INFO(error);
  REQUIRE(job.ranks.has_value());
  std::size_t phases_with_operators = 0;
  for (const PhaseSummary& p : job.phases) {
    if (p.top_operators.empty()) continue;
    ++phases_with_operators;
    INFO(p.name);
    std::size_t rank_rows = 0;
    for (const Report& r : ranks)
      for (const PhaseSummary& rp : r.phases)
        if (rp.name == p.name && rp.kind == p.kind && rp.thread_role == p.thread_role)
          rank_rows = std::max(rank_rows, rp.top_operators.size());
    CHECK(p.top_operators.size() <= rank_rows);
    bool kernels_started = false;
    for (std::size_t i = 0; i < p.top_operators.size(); ++i) {
      const OperatorTime& o = p.top_operators[i];
      // cpu_ops first, then kernels, each most self time first.
      if (o.kind == "kernel") kernels_started = true;
      CHECK((o.kind == "kernel") == kernels_started);
      if (i > 0 && p.top_operators[i - 1].kind == o.kind) CHECK(p.top_operators[i - 1].self_ms >= o.self_ms);
      double self_ms = 0;
      std::uint64_t count = 0;
      for (const Report& r : ranks)
        for (const PhaseSummary& rp : r.phases)
          if (rp.name == p.name && rp.kind == p.kind && rp.thread_role == p.thread_role)
            if (const OperatorTime* ro = op(rp, o.name); ro != nullptr && ro->kind == o.kind) {
              self_ms += ro->self_ms;
              count += ro->count;
            }
      CHECK(o.self_ms == Approx(self_ms));
      CHECK(o.count == count);
    }
  }
  CHECK(phases_with_operators > 0);
  // The sum is over both ranks: the top row of the biggest phase has more
  // time than the same row in either rank alone when both list it.
  const PhaseSummary& top = job.phases.front();
  REQUIRE(!top.top_operators.empty());
  double best_single = 0;
  for (const Report& r : ranks)
    for (const PhaseSummary& rp : r.phases)
      if (rp.name == top.name)
        if (const OperatorTime* ro = op(rp, top.top_operators[0].name))
          best_single = std::max(best_single, ro->self_ms);
  CHECK(top.top_operators[0].self_ms >= best_single);
}
