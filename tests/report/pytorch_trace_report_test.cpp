// Reports from traces PyTorch itself wrote: the legacy traces of Debian's
// PyTorch 1.13 (tests/data/pytorch, recorded by record_trace.py) with no
// user annotation, and traces with nothing to time, which must be an error.
#include <stepscope/import.hpp>

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
    CHECK(b.input_ms + b.compute_ms + b.unattributed_ms == Approx(b.wall_ms).epsilon(0.01));
    CHECK(b.unattributed_ms < 0.2 * b.wall_ms);
  }
}

TEST_CASE("legacy traces get the verdict their loop deserves", "[report][trace][legacy]") {
  SECTION("compute-bound MLP -> compute") {
    const Report r = analyze_legacy("compute");
    CHECK(r.steps.breakdown.compute_ms > 0.8 * r.steps.breakdown.wall_ms);
    CHECK(r.bottleneck.category == "compute");
  }
  SECTION("slow Dataset, no workers -> io") {
    const Report r = analyze_legacy("io");
    CHECK(r.steps.breakdown.input_ms > 0.8 * r.steps.breakdown.wall_ms);
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
