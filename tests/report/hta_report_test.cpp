// report.device.hta: HTA's own tables in the report, equal to what HTA 0.6.1
// printed for every trace in tests/data/traces (REFERENCE.json) within
// 0.1 percentage point / 1 us, after a JSON round trip too; and its text view.
#include "import/trace_import.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

using namespace stepscope;

namespace {

const std::string kTraces = STEPSCOPE_TEST_DATA_DIR "/traces/";

void check_us(const std::string& what, double ours, double reference) {
  INFO(what << ": ours " << ours << " us, HTA " << reference << " us");
  CHECK(std::fabs(ours - reference) <= 1.0);
}
void check_pp(const std::string& what, double ours, double reference) {
  INFO(what << ": ours " << ours << "%, HTA " << reference << "%");
  CHECK(std::fabs(ours - reference) <= 0.1);
}

void check_against_reference(const HtaTables& h, const nlohmann::json& expected) {
  REQUIRE(h.present);
  CHECK(h.steps_kept == expected["profiler_steps_kept"].get<std::vector<std::int64_t>>());

  const auto& row = expected["temporal_breakdown_us"].at(0);
  CHECK(h.rank == row["rank"].get<int>());
  const auto& t = h.temporal_breakdown;
  check_us("kernel_time", t.kernel_time_us, row["kernel_time(us)"].get<double>());
  check_us("idle_time", t.idle_us, row["idle_time(us)"].get<double>());
  check_us("compute_time", t.compute_us, row["compute_time(us)"].get<double>());
  check_us("non_compute_time", t.non_compute_us, row["non_compute_time(us)"].get<double>());
  check_pp("idle_time_pctg", t.idle_pctg, row["idle_time_pctg"].get<double>());
  check_pp("compute_time_pctg", t.compute_pctg, row["compute_time_pctg"].get<double>());
  check_pp("non_compute_time_pctg", t.non_compute_pctg, row["non_compute_time_pctg"].get<double>());

  // The same kernel-type rows, "X overlapping Y" ones included.
  std::map<std::string, const HtaKernelTypeRow*> by_type;
  for (const auto& k : h.kernel_type_breakdown) by_type[k.kernel_type] = &k;
  CHECK(by_type.size() == expected["kernel_type_us"].size());
  for (const auto& kt : expected["kernel_type_us"]) {
    const std::string type = kt["kernel_type"].get<std::string>();
    INFO("kernel type " << type);
    REQUIRE(by_type.count(type) == 1);
    check_us(type, by_type[type]->sum_us, kt["sum"].get<double>());
    check_pp(type, by_type[type]->percentage, kt["percentage"].get<double>());
  }

  if (expected["comm_comp_overlap"].is_null()) {
    CHECK_FALSE(h.comp_comm_overlap_pctg.has_value());
  } else {
    REQUIRE(h.comp_comm_overlap_pctg.has_value());
    check_pp("comp_comm_overlap_pctg", *h.comp_comm_overlap_pctg,
             expected["comm_comp_overlap"].at(0)["comp_comm_overlap_pctg"].get<double>());
  }

  // Exactly HTA's idle rows: (stream, category) pairs, time and ratio.
  std::map<std::pair<std::int64_t, std::string>, const HtaIdleRow*> by_key;
  for (const auto& i : h.idle_time_breakdown) by_key[{i.stream, i.idle_category}] = &i;
  CHECK(by_key.size() == expected["idle_time_us"].size());
  for (const auto& r : expected["idle_time_us"]) {
    const auto key = std::make_pair(r["stream"].get<std::int64_t>(), r["idle_category"].get<std::string>());
    INFO("stream " << key.first << " " << key.second);
    REQUIRE(by_key.count(key) == 1);
    check_us("idle_time", by_key[key]->idle_time_us, r["idle_time"].get<double>());
    if (r["idle_time_ratio"].is_number())  // HTA rounds the ratio to 2 decimals
      CHECK(std::fabs(by_key[key]->idle_time_ratio - r["idle_time_ratio"].get<double>()) <= 0.006);
  }

  const auto& launch = expected["launch_stats"].at(std::to_string(h.rank));
  CHECK(h.launch_stats.pairs == launch["num_correlated_pairs"].get<std::int64_t>());
  CHECK(h.launch_stats.short_kernels == launch["short_kernels_count"].get<std::int64_t>());
  CHECK(h.launch_stats.runtime_outliers == launch["runtime_outliers_count"].get<std::int64_t>());
  CHECK(h.launch_stats.launch_delay_outliers == launch["launch_delay_outliers_count"].get<std::int64_t>());
  CHECK(h.launch_stats.runtime_cutoff_us == 50);
  CHECK(h.launch_stats.launch_delay_cutoff_us == 100);
}

}  // namespace

TEST_CASE("device.hta equals HTA 0.6.1's tables on every reference trace", "[report][hta]") {
  std::ifstream in(kTraces + "REFERENCE.json");
  REQUIRE(in.good());
  const nlohmann::json reference = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& [file, expected] : reference["traces"].items()) {
    DYNAMIC_SECTION(file) {
      Report r;
      std::string error;
      INFO(error);
      REQUIRE(analyze_trace_file(kTraces + file, r, error));
      check_against_reference(r.device.hta, expected);
      // The JSON carries the same tables under device.hta and reads them back.
      const std::string text = report_to_json(r);
      const nlohmann::json j = nlohmann::json::parse(text);
      REQUIRE(j["device"].contains("hta"));
      CHECK(j["device"]["hta"]["kernel_type_breakdown"].size() == expected["kernel_type_us"].size());
      Report back;
      REQUIRE(report_from_json(text, back, error));
      check_against_reference(back.device.hta, expected);
      ++checked;
    }
  }
  CHECK(checked >= 1);
}

TEST_CASE("format_hta shows HTA's tables; a live report has none", "[report][hta]") {
  Report r;
  std::string error;
  REQUIRE(analyze_trace_file(kTraces + "a100_2rank_nccl.json.gz", r, error));
  const std::string text = format_hta(r);
  INFO(text);
  CHECK(text.find("HTA tables, rank 0") != std::string::npos);
  CHECK(text.find("steps kept: 4 5") != std::string::npos);
  CHECK(text.find("temporal breakdown") != std::string::npos);
  CHECK(text.find("77.78") != std::string::npos);  // HTA's idle_time_pctg
  CHECK(text.find("COMPUTATION overlapping COMMUNICATION") != std::string::npos);
  CHECK(text.find("stream 7") != std::string::npos);
  CHECK(text.find("host_wait") != std::string::npos);
  CHECK(text.find("2516 launch/op pairs") != std::string::npos);

  const Report live;
  CHECK_FALSE(live.device.hta.present);
  CHECK(format_hta(live).find("none") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(report_to_json(live));
  CHECK_FALSE(j["device"].contains("hta"));
}
