// `stepscope analyze TRACE` as a whole process (part of import_bench): what a
// user waits for, start-up, first touch of fresh memory and the report
// written included. Each iteration spawns the CLI on one trace of
// tests/data/traces and waits for it; `x_hta` is HTA 0.6.1's load time of
// that trace (tests/data/traces/REFERENCE.json, hta_seconds.load, measured
// where the reference was made: HTA cannot be installed here) divided by the
// wall time per run. Baselines in the same run: BM_ProcessFloor spawns
// /bin/true (what any process costs on this machine), and with
// STEPSCOPE_BENCH_CLI_BASE=/path/to/another/stepscope, BM_CliProcessBase runs
// that binary on the same traces. Interleave them on a shared machine:
//
//   build/ci/bench/import_bench --benchmark_filter='Process' --benchmark_repetitions=10
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true  (one line)
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

const char* const kTraces[] = {"v100_single_rank_compute", "a100_2rank_nccl",   "sampled_128rank_rank0",
                               "sampled_128rank_rank1",    "a100_alexnet_idle", "mi250_minitoy"};

std::string trace_path(int index) {
  return std::string(STEPSCOPE_TEST_DATA_DIR "/traces/") + kTraces[index] + ".json.gz";
}

// HTA's load time of the trace in seconds (REFERENCE.json), 0 when absent.
double hta_load_seconds(int index) {
  static const nlohmann::json reference = [] {
    std::ifstream in(STEPSCOPE_TEST_DATA_DIR "/traces/REFERENCE.json");
    return nlohmann::json::parse(in, nullptr, false);
  }();
  const std::string name = std::string(kTraces[index]) + ".json.gz";
  if (!reference.is_object() || !reference.contains("traces") || !reference["traces"].contains(name)) return 0;
  return reference["traces"][name]["hta_seconds"].value("load", 0.0);
}

// Runs argv to its end; the wall seconds, or a negative value when it failed.
double spawn_and_wait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? seconds : -1;
}

void run_process(benchmark::State& state, const std::vector<std::string>& args, double hta_seconds) {
  double total = 0;
  for (auto _ : state) {
    const double seconds = spawn_and_wait(args);
    if (seconds < 0) {
      state.SkipWithError(("failed: " + args[0] + " " + (args.size() > 2 ? args[2] : "")).c_str());
      return;
    }
    state.SetIterationTime(seconds);
    total += seconds;
  }
  // HTA's load time over this binary's mean wall time per run: "x times faster".
  if (hta_seconds > 0 && total > 0)
    state.counters["x_hta"] = hta_seconds * static_cast<double>(state.iterations()) / total;
}

std::vector<std::string> analyze_args(const std::string& binary, int index) {
  static const std::string out = "/tmp/stepscope-import-bench-" + std::to_string(getpid()) + ".json";
  return {binary, "analyze", trace_path(index), "-q", "-o", out};
}

void BM_CliProcess(benchmark::State& state) {
  const int index = static_cast<int>(state.range(0));
  state.SetLabel(kTraces[index]);
  run_process(state, analyze_args(STEPSCOPE_CLI_PATH, index), hta_load_seconds(index));
}
BENCHMARK(BM_CliProcess)->DenseRange(0, 5)->Unit(benchmark::kMillisecond)->UseManualTime();

void BM_CliProcessBase(benchmark::State& state) {
  const char* base = std::getenv("STEPSCOPE_BENCH_CLI_BASE");
  if (base == nullptr || *base == '\0') {
    state.SkipWithError("set STEPSCOPE_BENCH_CLI_BASE to another stepscope binary to compare with");
    return;
  }
  const int index = static_cast<int>(state.range(0));
  state.SetLabel(kTraces[index]);
  run_process(state, analyze_args(base, index), hta_load_seconds(index));
}
BENCHMARK(BM_CliProcessBase)->DenseRange(0, 5)->Unit(benchmark::kMillisecond)->UseManualTime();

void BM_ProcessFloor(benchmark::State& state) {
  run_process(state, {"/bin/true"}, 0);
}
BENCHMARK(BM_ProcessFloor)->Unit(benchmark::kMillisecond)->UseManualTime();

}  // namespace
