// End-to-end cost of analysing a real PyTorch-profiler trace: inflate the
// 1.15 MB gzip (15 MB of JSON), parse it, build the timeline and run every
// analysis. HTA 0.6.1 takes ~1.3 s just to load the same file.
//
// Besides wall and main-thread CPU time, each benchmark reports
// process_cpu_ms: user+system CPU of the whole process per iteration (both
// threads when inflating on the helper), which is what a loaded machine
// cannot hide. The pieces are measured separately so the floor is visible:
// inflating alone (BM_V100InflateWhole, BM_V100InflateOnly) and scanning
// already-inflated JSON (BM_V100ScanPlain), and the parse alone on one thread:
// the fast scanner (BM_V100ScanFastScannerOnly) against simdjson On-Demand
// (BM_V100ScanSimdjson, built only when CMake finds simdjson).
#include <benchmark/benchmark.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "import/byte_source.hpp"
#include "import/kineto_fast_scanner.hpp"
#include "import/kineto_reader_internal.hpp"
#include "import/trace_import.hpp"
#include "import/worker.hpp"
#include "timeline/timeline.hpp"

// Shared with import_bench_simdjson.cpp (simdjson's benchmarks, compiled with AVX2).
namespace import_bench {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The V100 JSON inflated whole once per process; null (and the benchmark
// skipped) in a build without libdeflate, which streams gzip instead.
const stepscope::detail::WholeDocument* v100_document(benchmark::State& state) {
  static const auto* const document = [] {
    const std::string gz = read_file(STEPSCOPE_TEST_DATA_DIR "/traces/v100_single_rank_compute.json.gz");
    stepscope::detail::MemoryInput input(gz);
    stepscope::detail::WholeDocumentLoader loader;
    auto* loaded = new stepscope::detail::WholeDocument;  // lives as long as the process
    if (loader.load(input, std::size_t{64} << 20, *loaded) != stepscope::detail::WholeDocumentLoader::Outcome::loaded) {
      delete loaded;
      return static_cast<stepscope::detail::WholeDocument*>(nullptr);
    }
    return loaded;
  }();
  if (document == nullptr) state.SkipWithError("not inflated whole (a build without libdeflate streams gzip)");
  return document;
}

void count_document(benchmark::State& state, std::size_t bytes, std::size_t kept_events) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.counters["kept_events"] = benchmark::Counter(static_cast<double>(kept_events));
}

}  // namespace import_bench

namespace {

using stepscope::detail::KinetoParser;
namespace kin = stepscope::detail::kineto;

const std::string kV100 = STEPSCOPE_TEST_DATA_DIR "/traces/v100_single_rank_compute.json.gz";

double process_cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
  };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// Reports process CPU per iteration; call finish() after the loop.
class ProcessCpu {
 public:
  ProcessCpu() : start_(process_cpu_ms()) {}
  void finish(benchmark::State& state) const {
    state.counters["process_cpu_ms"] =
        benchmark::Counter((process_cpu_ms() - start_) / static_cast<double>(state.iterations()));
  }

 private:
  double start_;
};

using import_bench::read_file;

void run_all_analyses(const stepscope::timeline::Timeline& tl) {
  namespace t = stepscope::timeline;
  benchmark::DoNotOptimize(t::temporal_breakdown(tl));
  benchmark::DoNotOptimize(t::kernel_type_breakdown(tl));
  benchmark::DoNotOptimize(t::comm_compute_overlap(tl));
  benchmark::DoNotOptimize(t::idle_time_breakdown(tl));
  benchmark::DoNotOptimize(t::launch_statistics(tl));
  benchmark::DoNotOptimize(t::device_facts(tl));
}

// The public entry point: the fast scanner (falls back to nlohmann on input it does not handle). This
// trace is under the in-memory limit: pipelined:1 inflates it whole and parses it on two threads,
// pipelined:0 does both on the calling thread.
void BM_V100EndToEnd(benchmark::State& state) {
  stepscope::ImportOptions options;
  options.pipelined_decompression = state.range(0) != 0;
  std::uint64_t bytes = 0;
  const ProcessCpu cpu;
  for (auto _ : state) {
    stepscope::detail::ImportDiagnostics how;
    const stepscope::ImportResult r =
        stepscope::detail::import_kineto_trace_with(kV100, options, KinetoParser::automatic, &how);
    if (!r.ok || !how.fast_path_used) {
      state.SkipWithError(r.ok ? ("fast path gave up: " + how.fast_path_gave_up).c_str() : r.error.c_str());
      return;
    }
    run_all_analyses(r.trace);
    bytes = r.stats.uncompressed_bytes;
  }
  cpu.finish(state);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_V100EndToEnd)->Arg(1)->Arg(0)->ArgName("pipelined")->Unit(benchmark::kMillisecond)->UseRealTime();

// What `stepscope analyze` does before it writes anything: import, every
// analysis, the report (phases, PyTorch's own phases, device.hta) and the
// analyzer's verdict, through the public analyze_trace_file.
void BM_V100AnalyzeTraceFile(benchmark::State& state) {
  const ProcessCpu cpu;
  for (auto _ : state) {
    stepscope::Report report;
    std::string error;
    if (!stepscope::analyze_trace_file(kV100, report, error)) {
      state.SkipWithError(error.c_str());
      return;
    }
    benchmark::DoNotOptimize(report.bottleneck.category.data());
  }
  cpu.finish(state);
}
BENCHMARK(BM_V100AnalyzeTraceFile)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same with the exact nlohmann SAX parser (what the importer used before the fast scanner).
void BM_V100EndToEndExact(benchmark::State& state) {
  stepscope::ImportOptions options;
  options.pipelined_decompression = state.range(0) != 0;
  const ProcessCpu cpu;
  for (auto _ : state) {
    const stepscope::ImportResult r = stepscope::detail::import_kineto_trace_with(kV100, options, KinetoParser::exact);
    if (!r.ok) {
      state.SkipWithError(r.error.c_str());
      return;
    }
    run_all_analyses(r.trace);
  }
  cpu.finish(state);
}
BENCHMARK(BM_V100EndToEndExact)->Arg(1)->ArgName("pipelined")->Unit(benchmark::kMillisecond)->UseRealTime();

// Parse + timeline only, from JSON already inflated in memory: the parser's own cost.
void BM_V100ScanPlain(benchmark::State& state) {
  const std::string gz = read_file(kV100);
  std::string plain;
  {
    stepscope::detail::Decoder decoder(std::make_unique<stepscope::detail::MemoryInput>(gz));
    std::vector<char> chunk;
    while (decoder.next(chunk)) plain.append(chunk.data(), chunk.size());
  }
  const auto parser = state.range(0) != 0 ? KinetoParser::fast_only : KinetoParser::exact;
  const ProcessCpu cpu;
  for (auto _ : state) {
    const stepscope::ImportResult r = stepscope::detail::import_kineto_buffer_with(plain, {}, parser);
    if (!r.ok) {
      state.SkipWithError(r.error.c_str());
      return;
    }
    benchmark::DoNotOptimize(r.trace.device_ops.data());
  }
  cpu.finish(state);
  state.SetBytesProcessed(static_cast<std::int64_t>(plain.size()) * state.iterations());
}
BENCHMARK(BM_V100ScanPlain)->Arg(1)->Arg(0)->ArgName("fast")->Unit(benchmark::kMillisecond)->UseRealTime();

// --- the parse alone, fast scanner against simdjson On-Demand -----------------
// Both read the same inflated document, in the importer's own padded buffer
// (WholeDocument keeps kPadding readable bytes after the JSON, as many as
// simdjson's padded_string_view asks for), on one thread, and stop at the
// TraceBuilder: no timeline. docs/benchmarks-import.md, "simdjson On-Demand,
// measured", has the figures.

// The product's fast scanner on one thread into a TraceBuilder: BM_V100ScanPlain/fast:1 without
// the second thread (it splits documents above 1 MiB) and without building the timeline.
void BM_V100ScanFastScannerOnly(benchmark::State& state) {
  const stepscope::detail::WholeDocument* document = import_bench::v100_document(state);
  if (document == nullptr) return;
  const stepscope::ImportOptions options;
  std::size_t kept = 0;
  for (auto _ : state) {
    kin::TraceBuilder builder(options);
    stepscope::detail::ChunkWindow window(*document);
    kin::FastScanner scanner(options, window, builder);
    if (!scanner.run()) {
      state.SkipWithError(scanner.give_up_reason());
      return;
    }
    kept = builder.events().size();
    benchmark::DoNotOptimize(kept);
  }
  import_bench::count_document(state, document->size(), kept);
}
BENCHMARK(BM_V100ScanFastScannerOnly)->Unit(benchmark::kMillisecond);

// zlib inflate of the file alone, in 256 KiB chunks: the floor of any streaming importer on one core
// (the importer streams traces above ImportOptions::max_in_memory_json_bytes).
void BM_V100InflateOnly(benchmark::State& state) {
  const std::string gz = read_file(kV100);
  std::uint64_t bytes = 0;
  const ProcessCpu cpu;
  for (auto _ : state) {
    stepscope::detail::Decoder decoder(std::make_unique<stepscope::detail::MemoryInput>(gz));
    std::vector<char> chunk;
    bytes = 0;
    while (decoder.next(chunk)) bytes += chunk.size();
    benchmark::DoNotOptimize(bytes);
  }
  cpu.finish(state);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_V100InflateOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

// The whole gzip inflated in one call (libdeflate when the build has it),
// as the importer does for traces under ImportOptions::max_in_memory_json_bytes.
void BM_V100InflateWhole(benchmark::State& state) {
  const std::string gz = read_file(kV100);
  std::uint64_t bytes = 0;
  const ProcessCpu cpu;
  for (auto _ : state) {
    stepscope::detail::MemoryInput input(gz);
    stepscope::detail::WholeDocumentLoader loader;
    stepscope::detail::WholeDocument document;
    if (loader.load(input, std::size_t{64} << 20, document) !=
        stepscope::detail::WholeDocumentLoader::Outcome::loaded) {
      state.SkipWithError("not inflated whole (a build without libdeflate streams gzip)");
      return;
    }
    bytes = document.size();
    benchmark::DoNotOptimize(document.begin());
  }
  cpu.finish(state);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
}
BENCHMARK(BM_V100InflateWhole)->Unit(benchmark::kMillisecond)->UseRealTime();

// A trace of N steps, each a data range, a "## forward ##" range with 10
// aten::linear -> cudaLaunchKernel -> kernel, then aten::item around a
// cudaStreamSynchronize outside every range (loss.item()). The whole command's
// work should grow with N, not N^2: per-step sync owners and the operator's
// enclosing range were found by scanning every earlier op (2.8 s at N = 8000
// before, 0.24 s after; docs/benchmarks-import.md).
std::string many_steps_trace(int steps) {
  std::string j = R"({"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA A100"}],"traceEvents":[)";
  const auto x = [&j](const char* cat, const std::string& name, int pid, int tid, double ts, double dur,
                      const std::string& args) {
    j += R"({"ph":"X","cat":")" + std::string(cat) + R"(","name":")" + name + R"(","pid":)" + std::to_string(pid) +
         R"(,"tid":)" + std::to_string(tid) + R"(,"ts":)" + std::to_string(ts) + R"(,"dur":)" + std::to_string(dur) +
         (args.empty() ? "" : R"(,"args":{)" + args + "}") + "},";
  };
  double t = 1000;
  long corr = 1;
  for (int s = 0; s < steps; ++s) {
    const double start = t;
    x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 1, t, 50, "");
    t += 50;
    x("user_annotation", "## forward ##", 1, 1, t, 120, "");
    double device = t + 5;
    for (int k = 0; k < 10; ++k, ++corr, t += 12) {
      const std::string c = std::to_string(corr);
      x("cpu_op", "aten::linear", 1, 1, t, 10, R"("External id":)" + c);
      x("cuda_runtime", "cudaLaunchKernel", 1, 1, t + 2, 5, R"("correlation":)" + c);
      device = std::max(device, t + 8);
      x("kernel", "ampere_sgemm_128x64_tn", 0, 7, device, 9, R"("correlation":)" + c + R"(,"device":0,"stream":7)");
      device += 10;
    }
    x("cpu_op", "aten::item", 1, 1, t, std::max(20.0, device - t + 5), "");
    x("cuda_runtime", "cudaStreamSynchronize", 1, 1, t + 2, std::max(10.0, device - t), "");
    t = std::max(t + 25, device + 10);
    x("user_annotation", "ProfilerStep#" + std::to_string(s), 1, 1, start, t - start, "");
    t += 5;
  }
  j.back() = ']';
  return j + "}";
}

void BM_ManyStepsAnalyze(benchmark::State& state) {
  char path[] = "/tmp/stepscope_bench_many_steps_XXXXXX";  // a new file of our own, as mkstemp makes it
  const int fd = mkstemp(path);
  if (fd < 0) {
    state.SkipWithError("mkstemp failed");
    return;
  }
  const std::string text = many_steps_trace(static_cast<int>(state.range(0)));
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written) {
    std::remove(path);
    state.SkipWithError("cannot write the trace");
    return;
  }
  const ProcessCpu cpu;
  for (auto _ : state) {
    stepscope::Report report;
    std::string error;
    if (!stepscope::analyze_trace_file(path, report, error)) {
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(report.bottleneck.category.data());
  }
  cpu.finish(state);
  std::remove(path);
}
BENCHMARK(BM_ManyStepsAnalyze)
    ->Arg(1000)
    ->Arg(2000)
    ->Arg(4000)
    ->Arg(8000)
    ->ArgName("steps")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_V100AnalysesOnly(benchmark::State& state) {
  const stepscope::ImportResult r = stepscope::import_kineto_trace(kV100);
  if (!r.ok) {
    state.SkipWithError(r.error.c_str());
    return;
  }
  for (auto _ : state) run_all_analyses(r.trace);
}
BENCHMARK(BM_V100AnalysesOnly)->Unit(benchmark::kMillisecond);

// How soon a second thread runs what it is handed while the calling thread
// is busy (as the importer is, parsing its own half), the other core idle
// before: a thread created then (what the split parse did), or a
// detail::Worker started earlier and waiting (what it does now). Time per
// iteration: from the hand-over to the thread's first line (manual time).
using BenchClock = std::chrono::steady_clock;

void busy_for(std::chrono::microseconds d) {
  const auto until = BenchClock::now() + d;
  while (BenchClock::now() < until) {
  }
}

void BM_SecondThreadStart(benchmark::State& state) {
  const bool worker_ahead = state.range(0) != 0;
  stepscope::detail::Worker worker;
  if (worker_ahead && !worker.start()) {
    state.SkipWithError("no thread");
    return;
  }
  for (auto _ : state) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the other core idles, as during the inflate
    std::atomic<std::int64_t> latency_ns{-1};
    const auto handed = BenchClock::now();
    const auto first_line = [&] {
      latency_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(BenchClock::now() - handed).count();
    };
    std::thread fresh;
    if (worker_ahead)
      (void)worker.post(first_line);
    else
      fresh = std::thread(first_line);
    busy_for(std::chrono::microseconds(3000));  // the caller parses its half meanwhile
    if (worker_ahead)
      worker.wait();
    else
      fresh.join();
    state.SetIterationTime(static_cast<double>(latency_ns.load()) * 1e-9);
  }
}
BENCHMARK(BM_SecondThreadStart)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("worker_ahead")
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(30);

}  // namespace

BENCHMARK_MAIN();
