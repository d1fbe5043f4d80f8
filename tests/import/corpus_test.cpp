// The regression corpus of real traces (tests/data/traces/corpus/README.md):
// each file's verdict, step count and rank, as `stepscope analyze` reports
// them. A verdict that moves must be explained in the README.
#include <catch2/catch.hpp>

#include <string>

#include "import/trace_import.hpp"

namespace {

struct Expected {
  const char* file;
  const char* category;
  std::uint64_t steps;
  int rank, world_size;
};

constexpr Expected kCorpus[] = {
    {"a100_2rank_ddp_rank0.json.gz", "scheduling", 2, 0, 2},
    {"a100_16rank_torchrec_rank0.json.gz", "communication", 4, 0, 16},
    {"a100_triton_one_step.json.gz", "scheduling", 1, 0, 1},
    {"cpu_only_gloo_rank34.json.gz", "unknown", 1, 34, 300},
};

}  // namespace

TEST_CASE("every corpus trace keeps its verdict", "[import][corpus]") {
  for (const Expected& e : kCorpus) {
    const std::string path = std::string(STEPSCOPE_TEST_DATA_DIR "/traces/corpus/") + e.file;
    INFO(path);
    stepscope::Report r;
    std::string error;
    REQUIRE(stepscope::analyze_trace_file(path, r, error));
    CHECK(r.bottleneck.category == e.category);
    CHECK(r.steps.count == e.steps);
    CHECK(r.run.rank == e.rank);
    CHECK(r.run.world_size == e.world_size);
    CHECK(r.device.enabled == (std::string(e.category) != "unknown"));
  }
}

TEST_CASE("the TorchRec trace's top phase is its sparse data distribution", "[import][corpus]") {
  // 69% of each step is the all-to-all of the embeddings: the phase the
  // communication verdict is about, and the first phase of the report.
  stepscope::Report r;
  std::string error;
  REQUIRE(stepscope::analyze_trace_file(STEPSCOPE_TEST_DATA_DIR "/traces/corpus/a100_16rank_torchrec_rank0.json.gz", r,
                                        error));
  REQUIRE(!r.phases.empty());
  CHECK(r.phases.front().name.find("sparse_data_dist") != std::string::npos);
  CHECK(r.phases.front().share_of_step > 0.6);
}
