// PyTorch's own ranges as phases (framework_phases): hand-built timelines of
// one step whose parts can be worked out on paper. Times in microseconds.
#include <catch2/catch.hpp>

#include <string>

#include "timeline/framework_phases.hpp"
#include "timeline/timeline.hpp"
#include "timeline/timeline_builder.hpp"

using namespace stepscope::timeline;

namespace {

using stepscope::test::us;

// A Builder whose ProfilerStep ranges also become Timeline::steps.
struct StepBuilder {
  stepscope::test::Builder b;
  Timeline& tl = b.tl;

  void host(const char* name, std::int64_t start, std::int64_t end, HostOpKind kind, std::int64_t tid = 1) {
    const HostInterval& h = b.host(name, start, end, kind, tid);
    if (kind == HostOpKind::step) tl.steps.push_back({7, h.start_ns, h.end_ns});
  }
  std::int64_t phase(const StepFrameworkPhases& p, FrameworkPhase which) const {
    return p.phase_ns[static_cast<int>(which)];
  }
};

}  // namespace

TEST_CASE("a torch.profiler step splits into data, forward, backward and optimizer", "[timeline][phases]") {
  StepBuilder b;
  // Step 0..100 us on thread 1:
  //   0..30   enumerate(DataLoader)   (aten::randn inside it: still data)
  //   30..50  forward operators       (aten::addmm, aten::relu)
  //   50..80  backward on thread 2    (the autograd engine's own thread)
  //   80..95  Optimizer.step
  //   95..100 nothing recorded
  b.host("ProfilerStep#7", 0, 100, HostOpKind::step);
  b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 30, HostOpKind::annotation);
  b.host("aten::randn", 10, 12, HostOpKind::framework_op);
  b.host("aten::addmm", 30, 42, HostOpKind::framework_op);
  b.host("aten::relu", 42, 50, HostOpKind::framework_op);
  b.host("autograd::engine::evaluate_function: AddmmBackward0", 50, 80, HostOpKind::framework_op, 2);
  b.host("aten::mm", 55, 60, HostOpKind::framework_op, 2);  // inside backward: not forward
  b.host("Optimizer.step#SGD.step", 80, 95, HostOpKind::annotation);
  b.host("aten::add_", 81, 90, HostOpKind::framework_op);

  const auto steps = framework_phases(b.tl);
  REQUIRE(steps.size() == 1);
  const StepFrameworkPhases& p = steps[0];
  CHECK(p.step == 7);
  CHECK(p.tid == 1);
  CHECK(p.span_ns == us(100));
  CHECK(b.phase(p, FrameworkPhase::data) == us(30));
  CHECK(b.phase(p, FrameworkPhase::forward) == us(20));
  CHECK(b.phase(p, FrameworkPhase::backward) == us(30));
  CHECK(b.phase(p, FrameworkPhase::optimizer) == us(15));
  CHECK(p.user_ns == 0);
  CHECK(p.unattributed_ns == us(5));
}

TEST_CASE("the user's record_function ranges win over PyTorch's phases", "[timeline][phases]") {
  StepBuilder b;
  b.host("ProfilerStep#7", 0, 100, HostOpKind::step);
  b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 30, HostOpKind::annotation);
  b.host("aten::addmm", 30, 90, HostOpKind::framework_op);
  // The user wrapped 40..70 in record_function("loss"): that time is theirs.
  b.host("loss", 40, 70, HostOpKind::annotation);
  // ... and one range on another thread, which does not claim step time.
  b.host("prefetch", 0, 100, HostOpKind::annotation, 3);

  const auto steps = framework_phases(b.tl);
  REQUIRE(steps.size() == 1);
  const StepFrameworkPhases& p = steps[0];
  CHECK(p.user_ns == us(30));
  CHECK(b.phase(p, FrameworkPhase::data) == us(30));
  CHECK(b.phase(p, FrameworkPhase::forward) == us(30));  // 30..40 and 70..90
  CHECK(b.phase(p, FrameworkPhase::backward) == 0);
  CHECK(p.unattributed_ns == us(10));
}

TEST_CASE("PyTorch's own range names are told from the user's", "[timeline][phases]") {
  CHECK(is_pytorch_range("ProfilerStep#12"));
  CHECK(is_pytorch_range("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"));
  CHECK(is_pytorch_range("Optimizer.step#AdamW.step"));
  CHECK(is_pytorch_range("Optimizer.zero_grad#AdamW.zero_grad"));
  CHECK_FALSE(is_pytorch_range("forward"));
  CHECK_FALSE(is_pytorch_range("## data ##"));
  CHECK_FALSE(is_pytorch_range("optimizer"));
  CHECK(std::string(to_string(FrameworkPhase::data)) == "data");
  CHECK(std::string(to_string(FrameworkPhase::optimizer)) == "optimizer");
}

TEST_CASE("outer Python frames do not make the whole step forward", "[timeline][phases]") {
  StepBuilder b;
  b.host("train.py(40): <module>", -10, 200, HostOpKind::python);
  b.host("ProfilerStep#7", 0, 100, HostOpKind::step);
  b.host("nn.Module: Linear_0", 20, 40, HostOpKind::python);
  b.host("torch/_tensor.py(396): backward", 50, 70, HostOpKind::python);
  const auto steps = framework_phases(b.tl);
  REQUIRE(steps.size() == 1);
  CHECK(b.phase(steps[0], FrameworkPhase::forward) == us(20));
  CHECK(b.phase(steps[0], FrameworkPhase::backward) == us(20));
  CHECK(steps[0].unattributed_ns == us(60));
}

TEST_CASE("a trace without ProfilerStep has no framework phases", "[timeline][phases]") {
  StepBuilder b;
  b.host("aten::addmm", 0, 10, HostOpKind::framework_op);
  CHECK(framework_phases(b.tl).empty());
}

TEST_CASE("a trace without ProfilerStep: its DataLoader fetches mark the iterations", "[timeline][phases][infer]") {
  StepBuilder b;
  // Three iterations on thread 1 (fetch, forward op, optimizer), a fourth
  // fetch whose iteration the trace does not end; thread 3 is a second loader
  // thread with one fetch (fewer: not the loop's).
  for (int i = 0; i < 4; ++i) {
    const std::int64_t t = 100 * i;
    b.host("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t + 10, t + 40, HostOpKind::annotation);
    b.host("aten::addmm", t + 45, t + 70, HostOpKind::framework_op);
    b.host("Optimizer.step#SGD.step", t + 80, t + 90, HostOpKind::annotation);
  }
  b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5, 8, HostOpKind::annotation, 3);
  const InferredIterations it = infer_iterations(b.tl);
  CHECK(std::string(it.marked_by) == "DataLoader fetches");
  CHECK(it.tid == 1);
  REQUIRE(it.steps.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(it.steps[i].number == static_cast<std::int64_t>(i));
    CHECK(it.steps[i].start_ns == us(100 * static_cast<std::int64_t>(i) + 10));
    CHECK(it.steps[i].end_ns == us(100 * static_cast<std::int64_t>(i) + 110));
  }
  // The framework phases split them, on the fetching thread (the one with
  // the most marked time: no ProfilerStep names it).
  b.tl.steps = it.steps;
  const FrameworkMarks marks = framework_marks(b.tl);
  CHECK(marks.main_tid == 1);
  const auto phases = framework_phases(b.tl, marks);
  REQUIRE(phases.size() == 3);
  for (const auto& p : phases) {
    CHECK(p.tid == 1);
    CHECK(b.phase(p, FrameworkPhase::data) == us(30));
    CHECK(b.phase(p, FrameworkPhase::forward) == us(25));
    CHECK(b.phase(p, FrameworkPhase::optimizer) == us(10));
    CHECK(p.unattributed_ns == us(35));
  }
}

TEST_CASE("without fetches the Optimizer.step calls mark the iterations; one mark is none",
          "[timeline][phases][infer]") {
  StepBuilder b;
  for (int i = 0; i < 3; ++i) {
    const std::int64_t t = 50 * i;
    b.host("aten::addmm", t, t + 30, HostOpKind::framework_op);
    b.host("Optimizer.step#Adam.step", t + 30, t + 40, HostOpKind::framework_op);  // PyTorch 1.9: an "Operator"
  }
  const InferredIterations it = infer_iterations(b.tl);
  CHECK(std::string(it.marked_by) == "Optimizer.step calls");
  REQUIRE(it.steps.size() == 2);
  CHECK(it.steps[0].start_ns == us(40));
  CHECK(it.steps[0].end_ns == us(90));
  CHECK(it.steps[1].start_ns == us(90));
  CHECK(it.steps[1].end_ns == us(140));

  // A background prefetcher iterates the DataLoader on thread 5: its fetches
  // are not the loop's; the updates on thread 1 mark the iterations.
  for (int i = 0; i < 6; ++i)
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 20 * i, 20 * i + 15, HostOpKind::annotation,
           5);
  const InferredIterations prefetched = infer_iterations(b.tl);
  CHECK(std::string(prefetched.marked_by) == "Optimizer.step calls");
  CHECK(prefetched.tid == 1);
  CHECK(prefetched.steps.size() == 2);

  StepBuilder one;
  one.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10, HostOpKind::annotation);
  one.host("Optimizer.step#SGD.step", 20, 30, HostOpKind::annotation);
  const InferredIterations none = infer_iterations(one.tl);
  CHECK(none.steps.empty());
  CHECK(std::string(none.marked_by).empty());
}

TEST_CASE("two loaders zipped, or gradients accumulated: an iteration is one optimizer update",
          "[timeline][phases][infer]") {
  StepBuilder b;
  // for (a, b) in zip(loader_a, loader_b): two fetches, the model, one update.
  for (int i = 0; i < 4; ++i) {
    const std::int64_t t = 100 * i;
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, t + 10, HostOpKind::annotation);
    b.host("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t + 10, t + 20, HostOpKind::annotation);
    if (i == 3) break;  // the loop's end: fetched, then stopped
    b.host("aten::addmm", t + 20, t + 60, HostOpKind::framework_op);
    b.host("Optimizer.step#SGD.step", t + 60, t + 70, HostOpKind::annotation);
  }
  const InferredIterations it = infer_iterations(b.tl);
  REQUIRE(it.steps.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(it.steps[i].start_ns == us(100 * static_cast<std::int64_t>(i)));
    CHECK(it.steps[i].end_ns == us(100 * static_cast<std::int64_t>(i) + 100));
  }
  b.tl.steps = it.steps;
  const auto phases = framework_phases(b.tl, framework_marks(b.tl));
  REQUIRE(phases.size() == 3);
  CHECK(b.phase(phases[0], FrameworkPhase::data) == us(20));  // both fetches

  // Accumulating over two batches: fetch, model, fetch, model, update.
  StepBuilder acc;
  for (int i = 0; i < 6; ++i) {
    const std::int64_t t = 50 * i;
    acc.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, t + 10, HostOpKind::annotation);
    acc.host("aten::addmm", t + 10, t + 40, HostOpKind::framework_op);
    if (i % 2 == 1) acc.host("Optimizer.step#AdamW.step", t + 40, t + 48, HostOpKind::annotation);
  }
  const InferredIterations grouped = infer_iterations(acc.tl);
  REQUIRE(grouped.steps.size() == 2);  // updates after fetches 1, 3, 5: iterations start at fetches 0, 2, 4
  CHECK(grouped.steps[0].start_ns == us(0));
  CHECK(grouped.steps[0].end_ns == us(100));
  CHECK(grouped.steps[1].end_ns == us(200));
}
