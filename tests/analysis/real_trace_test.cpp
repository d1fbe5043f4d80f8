// The classifier on the real GPU traces in tests/data/traces: imported with
// the Kineto reader, reduced to timeline::DeviceFacts, put into a Report's
// device facts (the members the GPU rules read), classified.
#include <stepscope/analysis.hpp>
#include "import/trace_import.hpp"

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
  // The facts the classifier's GPU rules read, without launch_delay_p50_us
  // (the importer's report_from_timeline adds it and the rest).
  DeviceFactsSection& t = r.device.facts;
  t.device_busy_fraction = f.device_busy_fraction;
  t.device_idle_fraction = f.device_idle_fraction;
  t.idle_host_input_fraction = f.idle_host_input_fraction;
  t.idle_host_launch_bound_fraction = f.idle_host_launch_bound_fraction;
  t.idle_sync_fraction = f.idle_sync_fraction;
  t.compute_fraction = f.compute_fraction;
  t.exposed_communication_fraction = f.exposed_communication_fraction;
  t.memcpy_fraction = f.memcpy_fraction;
  t.pageable_memcpy_fraction = f.pageable_memcpy_fraction;
  t.short_kernel_fraction = f.short_kernel_fraction;
  t.kernels_per_step = f.kernels_per_step;
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

TEST_CASE("real traces: exposed communication ranks above compute on the 128-rank job", "[analysis][traces]") {
  const Verdict v = classify(report_from_trace("sampled_128rank_rank0.json.gz"));
  CHECK(cost(v, "communication") > cost(v, "compute"));
  CHECK(v.ranking.at(1).first == "communication");
}
