// The report's tail (src/import/trace_report.cpp) computes the verdict's
// device facts and HTA's tables from one run of the analyses they share, on a
// second thread, and the top operators from framework marks it computed for
// the PyTorch phases. Each must equal what the public analysis of the same
// name returns on its own, on every real trace: the report's JSON with those
// parts replaced by the public functions' results is the same text.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "import/trace_import.hpp"
#include "stepscope/report.hpp"
#include "timeline/timeline.hpp"

using namespace stepscope;

namespace {

const std::vector<std::string> kTraces = {
    "a100_2rank_nccl.json.gz",
    "a100_alexnet_idle.json.gz",
    "mi250_minitoy.json.gz",
    "sampled_128rank_rank0.json.gz",
    "v100_single_rank_compute.json.gz",
    "corpus/a100_16rank_torchrec_rank0.json.gz",
    "corpus/b200_8rank_eager_inference_rank0.json.gz",
    "corpus/cpu_only_gloo_rank34.json.gz",
    "corpus/h100_bert_small_forward.json.gz",
    "corpus/mi300x_8rank_ddp_resnet_checkpointing_rank0.json.gz",  // ROCm launches: the facts pair them, HTA does not
    "corpus/mi300x_sglang_qwen3_decode.json.gz",
    "corpus/rtx2080ti_resnet_training_slow_loader.json.gz",  // no ProfilerStep: iterations inferred
};

}  // namespace

TEST_CASE("the report's device facts, HTA tables and top operators equal the public analyses", "[import][report]") {
  for (const std::string& file : kTraces) {
    INFO(file);
    const ImportResult imported = import_kineto_trace(std::string(STEPSCOPE_TEST_DATA_DIR "/traces/") + file);
    REQUIRE(imported.ok);
    const timeline::Timeline& trace = imported.trace;
    const Report report = report_from_timeline(trace, file);
    for (const std::string& w : report.warnings) CHECK(w.find("analysis incomplete") == std::string::npos);

    // The steps the report analyses (a trace without ProfilerSteps: its
    // inferred iterations or one window); HTA's tables read the trace itself.
    const AnalysedSteps analysed = analysed_steps(trace);
    const timeline::Timeline& tl = analysed.restepped ? analysed.timeline : trace;
    Report expected = report;
    const timeline::DeviceFacts facts = timeline::device_facts(tl);
    if (facts.has_device_activity) {
      expected.device.facts = DeviceFactsSection{};
      timeline::add_device_facts(facts, expected.device.facts);
      expected.device.hta = hta_tables(trace);
      CHECK(expected.device.hta.present);
    }
    for (PhaseSummary& p : expected.phases) p.top_operators.clear();
    attach_top_operators(tl, expected.phases);
    CHECK(report_to_json(report) == report_to_json(expected));
  }
}

TEST_CASE("analyze_trace_file, one worker for the split parse and the device analyses, reports as the steps apart do",
          "[import][report][worker]") {
  // analyze_trace_file starts its worker before the trace is inflated, parses
  // half of a large trace on it, then runs the device analyses on it beside
  // the report; import_kineto_trace and report_from_timeline each start their
  // own. The reports are the same text.
  for (const std::string& file : kTraces) {
    INFO(file);
    const std::string path = std::string(STEPSCOPE_TEST_DATA_DIR "/traces/") + file;
    const ImportResult imported = import_kineto_trace(path);
    REQUIRE(imported.ok);
    Report analyzed;
    std::string error;
    REQUIRE(analyze_trace_file(path, analyzed, error));
    CHECK(report_to_json(analyzed) == report_to_json(report_from_timeline(imported.trace, path)));
  }
}

TEST_CASE("a timeline without device activity gets facts but no HTA tables", "[import][report]") {
  timeline::Timeline tl;
  tl.names = {"ProfilerStep#1", "aten::mm"};
  tl.steps.push_back({1, 0, 1000});
  timeline::HostInterval step;
  step.name = 0;
  step.kind = timeline::HostOpKind::step;
  step.end_ns = 1000;
  step.tid = 1;
  timeline::HostInterval mm = step;
  mm.name = 1;
  mm.kind = timeline::HostOpKind::framework_op;
  mm.start_ns = 100;
  mm.end_ns = 600;
  tl.host_ops = {step, mm};
  const Report r = report_from_timeline(tl, "hand-built");
  CHECK(!r.device.enabled);
  CHECK(!r.device.hta.present);
  CHECK(r.steps.count == 1);
  for (const std::string& w : r.warnings) CHECK(w.find("analysis incomplete") == std::string::npos);
}
