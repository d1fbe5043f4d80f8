// The classifier on the real GPU traces in tests/data/traces: imported with
// the Kineto reader, reduced to timeline::DeviceFacts, put into a Report's
// device facts as the importer puts them (timeline::add_device_facts), classified.
#include <stepscope/analysis.hpp>
#include <stepscope/import.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace stepscope;

namespace {

Report report_from_trace(const std::string& file) {
  const ImportResult imported = import_kineto_trace(std::string(STEPSCOPE_TEST_DATA_DIR) + "/traces/" + file);
  REQUIRE(imported.ok);
  const timeline::DeviceFacts f = timeline::device_facts(imported.trace);
  REQUIRE(f.has_device_activity);
  Report r;
  r.run.source = "kineto-import";
  r.steps.count = static_cast<std::uint64_t>(f.steps);
  r.steps.wall_ms.count = r.steps.count;
  r.steps.wall_ms.mean = f.step_time_mean_ns / 1e6;
  r.device.enabled = true;
  timeline::add_device_facts(f, r.device.facts.timeline);
  return r;
}

double cost(const Verdict& v, const std::string& category) {
  for (const auto& [name, c] : v.ranking)
    if (name == category) return c;
  return -1;
}

}  // namespace

TEST_CASE("real traces: a V100 almost always busy is compute-bound", "[analysis][traces]") {
  const Verdict v = classify(report_from_trace("v100_single_rank_compute.json.gz"));
  CHECK(v.category == "compute");
  CHECK(v.severity == "highly");
  CHECK(cost(v, "compute") > 0.9);
}

TEST_CASE("real traces: mostly idle GPUs are never compute-bound", "[analysis][traces]") {
  for (const char* file : {"a100_alexnet_idle.json.gz", "a100_2rank_nccl.json.gz", "mi250_minitoy.json.gz",
                           "sampled_128rank_rank0.json.gz", "sampled_128rank_rank1.json.gz"}) {
    const Verdict v = classify(report_from_trace(file));
    INFO(file << ": " << v.summary);
    CHECK(v.category != "compute");
    // Their GPUs idle while the host launches work: the host cannot feed them.
    CHECK(v.category == "scheduling");
  }
}

TEST_CASE("real traces: exposed communication ranks above compute on the 128-rank job",
          "[analysis][traces]") {
  const Verdict v = classify(report_from_trace("sampled_128rank_rank0.json.gz"));
  CHECK(cost(v, "communication") > cost(v, "compute"));
  CHECK(v.ranking.at(1).first == "communication");
}
