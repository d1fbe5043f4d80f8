// Reports from traces PyTorch itself wrote: the legacy traces of Debian's
// PyTorch 1.13 (tests/data/pytorch, recorded by record_trace.py) with no
// user annotation, and traces with nothing to time, which must be an error.
#include "import/trace_import.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace stepscope;

namespace {

Report analyze_legacy(const std::string& mode) {
  Report r;
  std::string error;
  const bool ok =
      analyze_trace_file(std::string(STEPSCOPE_TEST_DATA_DIR "/pytorch/legacy_1.13_") + mode + ".json.gz", r, error);
  INFO(error);
  REQUIRE(ok);
  return r;
}

const PhaseSummary* phase(const Report& r, const std::string& name) {
  for (const auto& p : r.phases)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("a legacy trace's own names become data/forward/backward/optimizer", "[report][trace][legacy]") {
  for (const char* mode : {"compute", "io", "io-workers"}) {
    INFO(mode);
    const Report r = analyze_legacy(mode);
    CHECK(r.run.source == "kineto-import");
    CHECK(r.steps.count == 11);  // 12 recorded, the last dropped (HTA)
    for (const char* name : {"data", "forward", "backward", "optimizer"}) {
      INFO(name);
      const PhaseSummary* p = phase(r, name);
      REQUIRE(p != nullptr);
      CHECK(p->count == 11);  // once per step
      CHECK(p->thread_role == ThreadRole::step);
      CHECK(p->self_ms.total > 0);
    }
    CHECK(phase(r, "data")->kind == PhaseKind::input);
    CHECK(phase(r, "backward")->kind == PhaseKind::compute);
    // PyTorch's own ranges are not listed as if the user had written them.
    for (const auto& p : r.phases) {
      INFO(p.name);
      CHECK(p.name.find("enumerate(DataLoader)") == std::string::npos);
      CHECK(p.name.find("Optimizer.") == std::string::npos);
    }
    // The parts account for the step: almost nothing left unattributed.
    const auto& b = r.steps.breakdown;
    CHECK(b.kind_ms[PhaseKind::input] + b.kind_ms[PhaseKind::compute] + b.unattributed_ms ==
          Approx(b.wall_ms).epsilon(0.01));
    CHECK(b.unattributed_ms < 0.2 * b.wall_ms);
  }
}

TEST_CASE("legacy traces get the verdict their loop deserves", "[report][trace][legacy]") {
  SECTION("compute-bound MLP -> compute") {
    const Report r = analyze_legacy("compute");
    CHECK(r.steps.breakdown.kind_ms[PhaseKind::compute] > 0.8 * r.steps.breakdown.wall_ms);
    CHECK(r.bottleneck.category == "compute");
  }
  SECTION("slow Dataset, no workers -> io") {
    const Report r = analyze_legacy("io");
    CHECK(r.steps.breakdown.kind_ms[PhaseKind::input] > 0.8 * r.steps.breakdown.wall_ms);
    CHECK(r.bottleneck.category == "io");
  }
  SECTION("the same Dataset with workers -> not io") {
    const Report r = analyze_legacy("io-workers");
    CHECK(r.bottleneck.category != "io");
  }
}

TEST_CASE("a trace with nothing to time is an error that says how to record one", "[report][trace][errors]") {
  const std::string dir = STEPSCOPE_BINARY_DIR "/pytorch_trace_report_test";
  std::filesystem::create_directories(dir);
  // export_chrome_trace without a schedule: operators, no ProfilerStep#N.
  const std::string path = dir + "/no_steps.json";
  {
    std::ofstream out(path);
    out << R"([{"name": "aten::addmm", "ph": "X", "ts": 1, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
               {"name": "aten::relu", "ph": "X", "ts": 7, "dur": 2, "tid": 1, "pid": "CPU functions", "args": {}}])";
  }
  Report r;
  std::string error;
  CHECK_FALSE(analyze_trace_file(path, r, error));
  INFO(error);
  CHECK(error.find(path) == 0);
  CHECK(error.find("nothing to time") != std::string::npos);
  CHECK(error.find("ProfilerStep#N") != std::string::npos);
  CHECK(error.find("torch.profiler.schedule") != std::string::npos);
  CHECK(error.find("prof.step()") != std::string::npos);
  CHECK(error.find('\n') == std::string::npos);  // one line

  // An annotated trace without steps says its ranges belong to no step.
  {
    std::ofstream out(path);
    out << R"([{"name": "forward", "ph": "X", "ts": 1, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}}])";
  }
  CHECK_FALSE(analyze_trace_file(path, r, error));
  CHECK(error.find("1 record_function ranges belong to no step") != std::string::npos);
}

TEST_CASE("a trace without ProfilerStep is timed by the iterations its DataLoader fetches mark",
          "[report][trace][infer]") {
  const std::string dir = STEPSCOPE_BINARY_DIR "/pytorch_trace_report_test";
  std::filesystem::create_directories(dir);
  // export_chrome_trace of a loop profiled without a schedule: 12 fetches of
  // 6 us (the first 40 us: the loader starting), 3 us of operators, a 1 us
  // optimizer step, every 10 us.
  const std::string path = dir + "/fetch_steps.json";
  {
    std::ofstream out(path);
    out << "[";
    std::int64_t t = 0;
    for (int i = 0; i < 12; ++i) {
      const int fetch = i == 0 ? 40 : 6;
      out << (i ? "," : "")
          << R"({"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ph": "X", "ts": )" << t
          << R"(, "dur": )" << fetch << R"(, "tid": 1, "pid": "CPU functions", "args": {}},)"
          << R"({"name": "aten::addmm", "ph": "X", "ts": )" << t + fetch
          << R"(, "dur": 3, "tid": 1, "pid": "CPU functions", "args": {}},)"
          << R"({"name": "Optimizer.step#SGD.step", "ph": "X", "ts": )" << t + fetch + 3
          << R"(, "dur": 1, "tid": 1, "pid": "CPU functions", "args": {}})";
      t += fetch + 4;
    }
    out << "]";
  }
  Report r;
  std::string error;
  REQUIRE(analyze_trace_file(path, r, error));
  INFO(error);
  // 11 iterations between the 12 fetches; the first (the slow start) is warm-up.
  CHECK(r.steps.count == 10);
  CHECK(r.steps.warmup_excluded == 1);
  CHECK(r.steps.warmup_wall_ms.mean == Approx(0.044));
  CHECK(r.steps.wall_ms.mean == Approx(0.010));
  CHECK(r.steps.breakdown.kind_ms[PhaseKind::input] == Approx(0.006));
  CHECK(r.steps.breakdown.unattributed_ms == Approx(0.0).margin(1e-9));
  CHECK(r.bottleneck.category == "io");
  bool said = false;
  for (const std::string& w : r.warnings)
    said = said || w.find("11 iterations inferred from its DataLoader fetches") != std::string::npos;
  CHECK(said);
}

namespace {

// A PyTorch 2.x-style inference step (categories python_function, cpu_op,
// cuda_runtime, kernel), built by hand after the BERT-on-H100 trace of issue
// 14: one ProfilerStep, no data loader, Python frames whose names hold
// "input", and 300 kernels of 2 us each launched by 10 us cudaLaunchKernel
// calls: the GPU idles ~94% because the host cannot launch faster.
timeline::Timeline launch_bound_step() {
  using namespace timeline;
  Timeline tl;
  auto host = [&tl](const char* name, std::int64_t start_us, std::int64_t end_us, HostOpKind kind) -> HostInterval& {
    HostInterval h;
    h.start_ns = start_us * 1000;
    h.end_ns = end_us * 1000;
    h.kind = kind;
    h.tid = 1;
    h.name = tl.intern(name);
    tl.host_ops.push_back(h);
    return tl.host_ops.back();
  };
  host("ProfilerStep#6", 0, 9000, HostOpKind::step);
  tl.steps.push_back({6, 0, 9000 * 1000});
  host("bench.py(30): <module>", -100, 9100, HostOpKind::python);
  host("transformers/models/bert/modeling_bert.py(1012): get_input_embeddings", 0, 9000, HostOpKind::python);
  for (std::int64_t i = 0; i < 300; ++i) {
    const std::int64_t t = 30 * i;
    host("aten::linear", t, t + 25, HostOpKind::framework_op);
    host("cudaLaunchKernel", t + 5, t + 15, HostOpKind::runtime_launch).correlation = i + 1;
    DeviceInterval d;
    d.start_ns = (t + 16) * 1000;
    d.end_ns = (t + 18) * 1000;
    d.stream = 7;
    d.correlation = i + 1;
    d.kind = DeviceOpKind::kernel;
    d.name = tl.intern("void cutlass::Kernel<gemm>");
    d.cls = classify_kernel("void cutlass::Kernel<gemm>");
    tl.device_ops.push_back(d);
  }
  return tl;
}

}  // namespace

TEST_CASE("a launch-bound PyTorch 2.x step is scheduling, in the trace's words", "[report][trace][modern]") {
  const Report r = report_from_timeline(launch_bound_step(), "bert_h100.json");
  INFO(r.bottleneck.summary);
  CHECK(r.device.facts.device_idle_fraction.value() > 0.9);
  // No input phase exists, so no GPU idle is charged to input.
  CHECK(r.device.facts.idle_host_input_fraction.value() == 0.0);
  CHECK(r.steps.breakdown.kind_ms[PhaseKind::input] == 0.0);
  CHECK(r.device.facts.short_kernel_fraction.value() > 0.9);
  CHECK(r.bottleneck.category == "scheduling");
  // The forward work is PyTorch's operators: attributed without annotations.
  CHECK(r.steps.breakdown.kind_ms[PhaseKind::compute] > 0.5 * r.steps.breakdown.wall_ms);
  // Advice for a Python trace: record_function, never STEPSCOPE_PHASE.
  auto all_text = [&r] {
    std::string text = r.bottleneck.summary;
    for (const auto& e : r.bottleneck.evidence) text += "\n" + e.sentence;
    for (const auto& a : r.bottleneck.recommendations) text += "\n" + a;
    for (const auto& f : r.findings) text += "\n" + f.message;
    return text;
  }();
  INFO(all_text);
  CHECK(all_text.find("STEPSCOPE_") == std::string::npos);
  CHECK(r.device.hta.present);
  CHECK(r.device.hta.launch_stats.pairs == 300);
  CHECK(r.device.hta.launch_stats.short_kernels == 300);
}
