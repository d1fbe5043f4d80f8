// Reports from the real GPU traces in tests/data/traces: the same report a
// live run writes, with a verdict a GPU engineer would agree with.
#include "import/trace_import.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace stepscope;

namespace {
Report analyze(const std::string& name) {
  Report r;
  std::string error;
  const bool ok = analyze_trace_file(std::string(STEPSCOPE_TEST_DATA_DIR) + "/traces/" + name, r, error);
  INFO(error);
  REQUIRE(ok);
  return r;
}
bool has_supporting_evidence(const Report& r) {
  for (const auto& e : r.bottleneck.evidence)
    if (e.supports) return true;
  return false;
}
}  // namespace

TEST_CASE("v100 trace: the GPU is almost always busy computing -> compute", "[report][trace]") {
  const Report r = analyze("v100_single_rank_compute.json.gz");
  CHECK(r.run.source == "kineto-import");
  CHECK(r.device.enabled);
  CHECK(r.device.facts.device_busy_fraction.value() > 0.9);
  CHECK(r.bottleneck.category == "compute");
  CHECK(r.bottleneck.confidence > 0.5);
  CHECK(has_supporting_evidence(r));
  CHECK(!r.bottleneck.recommendations.empty());
  CHECK(r.steps.count >= 1);
  CHECK(!r.what_if.empty());
  // Serialises and loads back like a live report.
  Report back;
  std::string error;
  REQUIRE(report_from_json(report_to_json(r), back, error));
  CHECK(back.bottleneck.category == "compute");
}

TEST_CASE("mostly idle GPUs are never called compute-bound", "[report][trace]") {
  for (const char* name : {"a100_alexnet_idle.json.gz", "mi250_minitoy.json.gz", "a100_2rank_nccl.json.gz"}) {
    INFO(name);
    const Report r = analyze(name);
    CHECK(r.device.facts.device_idle_fraction.value() > 0.5);
    CHECK(r.bottleneck.category != "compute");
    CHECK(r.bottleneck.category == "scheduling");  // idle while the host launches work
    CHECK(has_supporting_evidence(r));
  }
}

TEST_CASE("128-rank job: exposed communication dominates -> communication", "[report][trace]") {
  for (const char* name : {"sampled_128rank_rank0.json.gz", "sampled_128rank_rank1.json.gz"}) {
    INFO(name);
    const Report r = analyze(name);
    CHECK(r.run.world_size == 128);
    CHECK(r.device.facts.exposed_communication_fraction.value() > 0.2);  // as much as compute
    CHECK(r.device.facts.launch_delay_p50_us.value() > 1000);            // the host runs ahead
    CHECK(r.bottleneck.category == "communication");
    CHECK(has_supporting_evidence(r));
  }
}

TEST_CASE("a missing or malformed trace gives a clear error", "[report][trace]") {
  Report r;
  std::string error;
  CHECK_FALSE(analyze_trace_file("/nonexistent/trace.json.gz", r, error));
  CHECK(error.find("/nonexistent/trace.json.gz") != std::string::npos);
}
