// Real traces from real PyTorch, recorded at test time: runs
// tests/data/pytorch/record_trace.py <mode> with the system's python3 (Debian's
// python3-torch, scripts/install-deps --all), then analyses the trace and
// checks the verdict and step count a user would expect:
//   compute     compute-bound MLP              -> compute
//   io          slow Dataset, num_workers=0    -> io
//   io-workers  the same Dataset, 2 workers    -> not io
//   io-no-schedule  io without a profiler schedule or prof.step() (no
//               ProfilerStep#N): the 15 DataLoader fetches mark 14
//               iterations, the first warm-up -> io over 13 steps
// Not Catch2: it exits 77 (ctest SKIP_RETURN_CODE) when torch is missing.
#include <stepscope/import.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

constexpr int kSkipped = 77;

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s compute|io|io-workers|io-no-schedule\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const std::string python = STEPSCOPE_SYSTEM_PYTHON3;
  if (python.empty() || !std::filesystem::exists(python)) {
    std::printf("skipped: no python3 found\n");
    return kSkipped;
  }
  const std::filesystem::path dir = std::filesystem::path(STEPSCOPE_BINARY_DIR) / "pytorch_live_test";
  std::filesystem::create_directories(dir);
  const std::string trace = (dir / (mode + ".json.gz")).string();
  std::filesystem::remove(trace);
  const std::string command =
      "'" + python + "' '" STEPSCOPE_SOURCE_DIR "/tests/data/pytorch/record_trace.py' " + mode + " '" + trace + "'";
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) {
    std::printf("FAILED: could not run %s\n", command.c_str());
    return 1;
  }
  if (WEXITSTATUS(status) == kSkipped) {
    std::printf("skipped: python3-torch is not installed (scripts/install-deps --all)\n");
    return kSkipped;
  }
  check(WEXITSTATUS(status) == 0, "recorded " + trace);
  if (failures > 0) return 1;

  stepscope::Report r;
  std::string error;
  const bool analysed = stepscope::analyze_trace_file(trace, r, error);
  check(analysed, "analysed: " + error);
  if (!analysed) return 1;
  const auto& b = r.steps.breakdown;
  std::printf("verdict %s; steps %llu; step %.1f ms = input %.1f + compute %.1f + unattributed %.1f\n",
              r.bottleneck.category.c_str(), static_cast<unsigned long long>(r.steps.count), b.wall_ms,
              b.kind_ms[stepscope::PhaseKind::input], b.kind_ms[stepscope::PhaseKind::compute], b.unattributed_ms);
  if (mode == "io-no-schedule") {
    check(r.steps.count == 13, "13 steps: 15 fetches mark 14 iterations, the first is warm-up");
    check(r.steps.warmup_excluded == 1, "1 warm-up iteration reported");
    check(r.bottleneck.category == "io", "slow Dataset, 0 workers, no schedule -> io");
    check(b.kind_ms[stepscope::PhaseKind::input] > 0.5 * b.wall_ms, "input is most of the step");
    bool said = false;
    for (const std::string& w : r.warnings)
      said = said || w.find("inferred from its DataLoader fetches") != std::string::npos;
    check(said, "a warning says the steps were inferred");
    return failures == 0 ? 0 : 1;
  }
  check(r.steps.count == 11, "11 steps kept (12 profiled, the last dropped as HTA does)");
  if (mode == "compute") {
    check(r.bottleneck.category == "compute", "compute-bound MLP -> compute");
  } else if (mode == "io") {
    check(r.bottleneck.category == "io", "slow Dataset, 0 workers -> io");
  } else {
    check(r.bottleneck.category != "io", "slow Dataset, 2 workers -> not io");
  }
  return failures == 0 ? 0 : 1;
}
