// Every number HTA 0.6.1 computed on the real GPU traces in tests/data/traces
// (REFERENCE.json) must come out of stepscope's importer + analyses.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "import/trace_import.hpp"
#include "timeline/timeline.hpp"

using namespace stepscope::timeline;

namespace {

nlohmann::json load_reference() {
  std::ifstream in(STEPSCOPE_TEST_DATA_DIR "/traces/REFERENCE.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

double us(std::int64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

// Within 0.1% of the reference (absolute 1 us for tiny values).
void check_time(const std::string& what, double ours_us, double reference_us) {
  INFO(what << ": ours " << ours_us << " us, HTA " << reference_us << " us");
  CHECK(std::fabs(ours_us - reference_us) <= std::max(1.0, 0.001 * std::fabs(reference_us)));
}

// Within 0.1 percentage point.
void check_percent(const std::string& what, double ours, double reference) {
  INFO(what << ": ours " << ours << "%, HTA " << reference << "%");
  CHECK(std::fabs(ours - reference) <= 0.1);
}

void check_count(const std::string& what, std::int64_t ours, std::int64_t reference) {
  INFO(what << ": ours " << ours << ", HTA " << reference);
  CHECK(std::fabs(static_cast<double>(ours - reference)) <= 0.001 * static_cast<double>(reference));
}

}  // namespace

TEST_CASE("analyses reproduce HTA 0.6.1 on every reference trace", "[timeline][reference]") {
  const nlohmann::json reference = load_reference();
  REQUIRE(reference.contains("traces"));
  int traces_checked = 0;
  for (const auto& [file, expected] : reference["traces"].items()) {
    DYNAMIC_SECTION(file) {
      const std::string path = std::string(STEPSCOPE_TEST_DATA_DIR "/traces/") + file;
      const stepscope::ImportResult imported = stepscope::import_kineto_trace(path);
      INFO(imported.error);
      REQUIRE(imported.ok);
      const Timeline& tl = imported.trace;

      // Steps kept after dropping the last ProfilerStep.
      std::vector<std::int64_t> kept;
      for (const Step& s : tl.steps) kept.push_back(s.number);
      CHECK(kept == expected["profiler_steps_kept"].get<std::vector<std::int64_t>>());

      // Temporal breakdown.
      const auto& row = expected["temporal_breakdown_us"].at(0);
      CHECK(tl.rank == row["rank"].get<int>());
      const TemporalBreakdown temporal = temporal_breakdown(tl);
      check_time("kernel_time", us(temporal.span_ns), row["kernel_time(us)"].get<double>());
      check_time("idle_time", us(temporal.idle_ns), row["idle_time(us)"].get<double>());
      check_time("compute_time", us(temporal.compute_ns), row["compute_time(us)"].get<double>());
      check_time("non_compute_time", us(temporal.non_compute_ns), row["non_compute_time(us)"].get<double>());
      check_percent("idle_time_pctg", temporal.idle_percent(), row["idle_time_pctg"].get<double>());
      check_percent("compute_time_pctg", temporal.compute_percent(), row["compute_time_pctg"].get<double>());
      check_percent("non_compute_time_pctg", temporal.non_compute_percent(),
                    row["non_compute_time_pctg"].get<double>());

      // Kernel-type breakdown: the same rows, each within tolerance.
      const std::vector<KernelTypeSlice> slices = kernel_type_breakdown(tl);
      std::map<std::string, const KernelTypeSlice*> by_label;
      for (const KernelTypeSlice& s : slices) by_label[s.label] = &s;
      CHECK(slices.size() == expected["kernel_type_us"].size());
      for (const auto& kt : expected["kernel_type_us"]) {
        const std::string label = kt["kernel_type"].get<std::string>();
        INFO("kernel type row " << label);
        REQUIRE(by_label.count(label) == 1);
        check_time(label, us(by_label[label]->time_ns), kt["sum"].get<double>());
        check_percent(label, by_label[label]->percent, kt["percentage"].get<double>());
      }

      // Communication / computation overlap.
      const CommComputeOverlap overlap = comm_compute_overlap(tl);
      if (expected["comm_comp_overlap"].is_null()) {
        CHECK_FALSE(overlap.has_communication);
      } else {
        REQUIRE(overlap.has_communication);
        check_percent("comp_comm_overlap_pctg", overlap.overlap_percent(),
                      expected["comm_comp_overlap"].at(0)["comp_comm_overlap_pctg"].get<double>());
        CHECK(overlap.exposed_communication_ns == overlap.communication_ns - overlap.overlapped_ns);
      }

      // Idle-time breakdown per stream; HTA omits categories with no ops.
      const std::vector<StreamIdleBreakdown> idle = idle_time_breakdown(tl);
      std::map<std::int64_t, const StreamIdleBreakdown*> by_stream;
      for (const StreamIdleBreakdown& s : idle) by_stream[s.stream] = &s;
      std::map<std::int64_t, int> reference_streams;
      for (const auto& r : expected["idle_time_us"]) {
        const std::int64_t stream = r["stream"].get<std::int64_t>();
        reference_streams[stream]++;
        INFO("stream " << stream);
        REQUIRE(by_stream.count(stream) == 1);
        const StreamIdleBreakdown& s = *by_stream[stream];
        const std::string category = r["idle_category"].get<std::string>();
        const double reference_time = r["idle_time"].get<double>();
        if (category == "host_wait") {
          check_time("host_wait", us(s.host_wait_ns), reference_time);
          CHECK(s.host_wait_count > 0);
        } else if (category == "kernel_wait") {
          check_time("kernel_wait", us(s.kernel_wait_ns), reference_time);
          CHECK(s.kernel_wait_count > 0);
        } else {
          check_time("other", us(s.other_ns), reference_time);
        }
        if (!r["idle_time_ratio"].is_null() && s.total_ns() > 0) {
          const std::int64_t part = category == "host_wait"     ? s.host_wait_ns
                                    : category == "kernel_wait" ? s.kernel_wait_ns
                                                                : s.other_ns;
          // HTA rounds the ratio to 2 decimals.
          CHECK(std::fabs(static_cast<double>(part) / static_cast<double>(s.total_ns()) -
                          r["idle_time_ratio"].get<double>()) <= 0.006);
        }
      }
      CHECK(reference_streams.size() == by_stream.size());
      for (const StreamIdleBreakdown& s : idle) {
        // A category HTA does not list must be empty here too.
        const int rows = reference_streams[s.stream];
        CHECK(rows == (s.host_wait_count > 0) + (s.kernel_wait_count > 0) + 1);
      }

      // Launch statistics.
      const auto& launch = expected["launch_stats"].at(std::to_string(tl.rank));
      const LaunchStats stats = launch_statistics(tl);
      check_count("num_correlated_pairs", stats.pairs, launch["num_correlated_pairs"].get<std::int64_t>());
      check_count("short_kernels_count", stats.short_kernels, launch["short_kernels_count"].get<std::int64_t>());
      check_count("runtime_outliers_count", stats.runtime_outliers,
                  launch["runtime_outliers_count"].get<std::int64_t>());
      check_count("launch_delay_outliers_count", stats.launch_delay_outliers,
                  launch["launch_delay_outliers_count"].get<std::int64_t>());
      ++traces_checked;
    }
  }
  CHECK(traces_checked >= 1);
}

TEST_CASE("device facts on the reference traces point at the expected bottleneck", "[timeline][facts]") {
  auto facts_of = [](const char* file) {
    const auto imported = stepscope::import_kineto_trace(std::string(STEPSCOPE_TEST_DATA_DIR "/traces/") + file);
    REQUIRE(imported.ok);
    return device_facts(imported.trace);
  };
  SECTION("v100: the device is busy, compute dominates") {
    const DeviceFacts f = facts_of("v100_single_rank_compute.json.gz");
    CHECK(f.steps == 4);
    CHECK(f.device_busy_fraction > 0.9);
    CHECK(f.compute_fraction > 0.9);
    CHECK(f.communication_fraction == 0.0);
  }
  SECTION("alexnet: the device idles while the host works") {
    const DeviceFacts f = facts_of("a100_alexnet_idle.json.gz");
    CHECK(f.device_idle_fraction > 0.95);
    CHECK(f.idle_host_launch_bound_fraction + f.idle_host_input_fraction + f.idle_sync_fraction > 0.9);
    CHECK(f.host_wait_idle_fraction > 0.99);
  }
  SECTION("128 ranks: collectives are a large, mostly exposed share") {
    const DeviceFacts f = facts_of("sampled_128rank_rank0.json.gz");
    CHECK(f.world_size == 128);
    CHECK(f.communication_fraction > f.compute_fraction);
    CHECK(f.exposed_communication_fraction > 0.2);
    CHECK(f.comm_compute_overlap_fraction == Approx(0.1181).margin(0.001));
  }
}
