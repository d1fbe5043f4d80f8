// The Kineto importer: model mapping, HTA rounding and step dropping, and
// clear errors (never a crash or an escaping exception) on malformed input.
#include <zlib.h>
#include <catch2/catch.hpp>

#include <dirent.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "import/trace_import.hpp"
#include "test_bytes.hpp"

using namespace stepscope;
using namespace stepscope::timeline;

namespace {

using stepscope::test::gzip;
using stepscope::test::read_file;

const std::string kCorpus = STEPSCOPE_SOURCE_DIR "/tests/import/corpus/";

ImportResult import_text(const std::string& text, ImportOptions options = {}) {
  return import_kineto_trace_from_buffer(text, options);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("a minimal trace maps onto the timeline model", "[import]") {
  const ImportResult r = import_kineto_trace(kCorpus + "minimal.json");
  INFO(r.error);
  REQUIRE(r.ok);
  const Timeline& tl = r.trace;
  CHECK(tl.rank == 1);
  CHECK(tl.world_size == 2);
  CHECK(tl.distributed_backend == "nccl");
  REQUIRE(tl.devices.size() == 1);
  CHECK(tl.devices[0].name == "Test GPU");
  CHECK(tl.devices[0].multiprocessor_count == 108);
  // Two ProfilerSteps: the last one and what it launched are dropped.
  REQUIRE(tl.steps.size() == 1);
  CHECK(tl.steps[0].number == 3);
  CHECK(tl.steps[0].start_ns == 100'000);
  REQUIRE(tl.device_ops.size() == 1);
  const DeviceInterval& k = tl.device_ops[0];
  CHECK(tl.name_of(k.name) == "gemm_kernel");
  CHECK(k.kind == DeviceOpKind::kernel);
  CHECK(k.cls == KernelClass::computation);
  CHECK(k.stream == 7);
  CHECK(k.correlation == 11);
  CHECK(k.start_ns == 120'000);
  CHECK(k.end_ns == 150'000);
  CHECK(r.stats.events_dropped_after_last_step == 3);
  CHECK(r.stats.events_seen == 8);

  ImportOptions keep_all;
  keep_all.drop_last_profiler_step = false;
  const ImportResult all = import_kineto_trace(kCorpus + "minimal.json", keep_all);
  REQUIRE(all.ok);
  CHECK(all.trace.steps.size() == 2);
  REQUIRE(all.trace.device_ops.size() == 2);
  CHECK(all.trace.device_ops[1].cls == KernelClass::communication);
}

TEST_CASE("the last step is found among the host's ProfilerSteps, not PyTorch 2.x's GPU-row copies", "[import]") {
  // PyTorch 2.x writes each ProfilerStep#N a second time as a
  // gpu_user_annotation on the GPU's row (no correlation), from the step's
  // first GPU work: here #3's copy starts in the middle of host step #3.
  // Taken for the last step's start, it kept host step #3 with its second
  // half (backward, optimizer) dropped: a step of 30 us in phases out of
  // 100. HTA's rule on the host rows drops all of #3.
  const std::string json = R"({"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
    {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1, "tid": 1, "ts": 60, "dur": 30},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 40, "dur": 5},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 100, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110, "dur": 20},
    {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1, "tid": 1, "ts": 160, "dur": 30},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#2", "pid": 0, "tid": 7, "ts": 140, "dur": 5},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 200, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 210, "dur": 20},
    {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1, "tid": 1, "ts": 260, "dur": 30},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#3", "pid": 0, "tid": 7, "ts": 240, "dur": 5}
  ]})";
  const ImportResult r = import_text(json);
  INFO(r.error);
  REQUIRE(r.ok);
  REQUIRE(r.trace.steps.size() == 2);
  CHECK(r.trace.steps[0].number == 1);
  CHECK(r.trace.steps[1].number == 2);
  std::size_t optimizer_steps = 0;
  for (const HostInterval& h : r.trace.host_ops) {
    CHECK(h.start_ns < 200'000);  // nothing of host step #3
    optimizer_steps += r.trace.name_of(h.name) == "Optimizer.step#SGD.step";
  }
  CHECK(optimizer_steps == 2);
}

TEST_CASE("gzip and plain input give the same timeline", "[import]") {
  const ImportResult plain = import_kineto_trace(kCorpus + "minimal.json");
  const ImportResult gz = import_kineto_trace(kCorpus + "minimal.json.gz");
  REQUIRE(plain.ok);
  REQUIRE(gz.ok);
  CHECK(gz.stats.gzip);
  CHECK_FALSE(plain.stats.gzip);
  CHECK(gz.trace.device_ops.size() == plain.trace.device_ops.size());
  CHECK(gz.trace.host_ops.size() == plain.trace.host_ops.size());
  ImportOptions inline_decode;
  inline_decode.pipelined_decompression = false;
  const ImportResult gz_inline = import_kineto_trace(kCorpus + "minimal.json.gz", inline_decode);
  REQUIRE(gz_inline.ok);
  CHECK(gz_inline.trace.host_ops.size() == plain.trace.host_ops.size());
}

TEST_CASE("host and phase threads come from the trace's \"tid\"", "[import][tid]") {
  // The Chrome trace format and Kineto name the thread "tid"; any other key
  // (here "td") is not a thread, and a non-numeric tid reads as -1.
  const std::string json = R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 1262, "ts": 10, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 7, "tid": 1262, "ts": 20, "dur": 30},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 1102, "ts": 25, "dur": 5, "args": {"correlation": 3}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "td": 99, "ts": 30, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": "main", "ts": 40, "dur": 5},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 31, "dur": 2, "args": {"stream": 7, "correlation": 3}}
  ]})";
  for (const bool gzipped : {false, true}) {
    const ImportResult r = import_text(gzipped ? gzip(json) : json);
    INFO(r.error);
    REQUIRE(r.ok);
    std::map<std::string, std::int64_t> tid_of;
    for (const HostInterval& h : r.trace.host_ops) tid_of[r.trace.name_of(h.name)] = h.tid;
    CHECK(tid_of.at("ProfilerStep#1") == 1262);
    CHECK(tid_of.at("forward") == 1262);
    CHECK(tid_of.at("cudaLaunchKernel") == 1102);
    CHECK(tid_of.at("aten::mm") == -1);
    CHECK(tid_of.at("aten::add") == -1);
    REQUIRE(r.trace.phases.size() == 1);
    CHECK(r.trace.phases[0].tid == 1262);
  }
}

TEST_CASE("a real Kineto trace keeps its host threads apart", "[import][tid]") {
  // PyTorch's main thread (1102) and autograd thread (1262) in the v100 trace.
  const ImportResult r = import_kineto_trace(STEPSCOPE_TEST_DATA_DIR "/traces/v100_single_rank_compute.json.gz");
  INFO(r.error);
  REQUIRE(r.ok);
  std::map<std::int64_t, std::size_t> ops_per_thread;
  for (const HostInterval& h : r.trace.host_ops) ++ops_per_thread[h.tid];
  CHECK(ops_per_thread.count(-1) == 0);
  CHECK(ops_per_thread[1102] > 1000);
  CHECK(ops_per_thread[1262] > 1000);
  std::set<std::int64_t> phase_threads;
  for (const Phase& p : r.trace.phases)
    if (!p.on_device) phase_threads.insert(p.tid);
  CHECK(phase_threads == std::set<std::int64_t>{1102, 1262});
}

TEST_CASE("fractional microseconds: HTA rounding or exact nanoseconds", "[import][rounding]") {
  const std::string path = kCorpus + "float_ts.json";
  const ImportResult hta = import_kineto_trace(path);
  REQUIRE(hta.ok);
  CHECK(hta.stats.fractional_timestamps);
  REQUIRE(hta.trace.device_ops.size() == 2);
  // memcpy: ts 4203669604598.2 -> ceil 599; end floor(598.7) = 598 (ends before it starts, as in HTA)
  CHECK(hta.trace.device_ops[0].start_ns == 4203669604599'000);
  CHECK(hta.trace.device_ops[0].end_ns == 4203669604598'000);
  CHECK(hta.trace.device_ops[0].direction == MemcpyDirection::host_to_device);
  CHECK(hta.trace.device_ops[0].host_memory == HostMemoryKind::pageable);
  CHECK(hta.trace.device_ops[0].bytes == 4096);

  ImportOptions exact;
  exact.hta_rounding = false;
  const ImportResult ns = import_kineto_trace(path, exact);
  REQUIRE(ns.ok);
  CHECK(ns.trace.device_ops[0].start_ns == 4203669604598'200);
  CHECK(ns.trace.device_ops[0].end_ns == 4203669604598'700);
  CHECK(ns.trace.device_ops[1].duration_ns() == 3'250);
  CHECK(ns.trace.host_ops[0].start_ns == 4203669604595'407);
}

TEST_CASE("the Chrome JSON array format is accepted", "[import]") {
  const ImportResult r = import_kineto_trace(kCorpus + "array_format.json");
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK(r.trace.device_ops.size() == 1);
}

TEST_CASE("malformed input gives a clear error", "[import][errors]") {
  SECTION("missing file") {
    const ImportResult r = import_kineto_trace("/nonexistent/trace.json.gz");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "cannot open"));
  }
  SECTION("empty file") {
    const ImportResult r = import_text("");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "empty input"));
  }
  SECTION("not JSON") {
    const ImportResult r = import_text("hello, world");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "invalid or truncated JSON at byte offset"));
  }
  SECTION("truncated JSON names the event") {
    const ImportResult r = import_kineto_trace(kCorpus + "truncated.json");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "truncated JSON"));
    CHECK(contains(r.error, "traceEvents[1]"));
  }
  SECTION("wrong field type names the field and the event") {
    const ImportResult r = import_kineto_trace(kCorpus + "wrong_type.json");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "traceEvents[0]"));
    CHECK(contains(r.error, "\"ts\" must be a number, got string"));
  }
  SECTION("traceEvents of the wrong type") {
    const ImportResult r = import_text(R"({"traceEvents": {"a": 1}})");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "\"traceEvents\" must be an array"));
    const ImportResult s = import_text(R"({"traceEvents": 3})");
    CHECK_FALSE(s.ok);
    CHECK(contains(s.error, "\"traceEvents\" must be an array, got number"));
    const ImportResult e = import_text(R"({"traceEvents": [1]})");
    CHECK_FALSE(e.ok);
    CHECK(contains(e.error, "traceEvents[0] must be an object"));
  }
  SECTION("missing traceEvents") {
    const ImportResult r = import_text(R"({"schemaVersion": 1})");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "no \"traceEvents\""));
  }
  SECTION("a bare scalar") {
    const ImportResult r = import_text("42");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "expected an object"));
  }
  SECTION("truncated gzip") {
    const std::string gz = read_file(kCorpus + "minimal.json.gz");
    const ImportResult r = import_text(gz.substr(0, gz.size() / 2));
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "gzip stream truncated"));
  }
  SECTION("corrupt gzip") {
    std::string gz = read_file(kCorpus + "minimal.json.gz");
    for (std::size_t i = 20; i < gz.size() - 8; i += 7) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
    const ImportResult r = import_text(gz);
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "gzip"));
  }
  SECTION("out-of-range timestamp") {
    const ImportResult r = import_text(R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1e300,"dur":1}]})");
    CHECK_FALSE(r.ok);
    CHECK(contains(r.error, "out of range"));
  }
}

TEST_CASE("a large in-memory gzip trace streams through the importer", "[import]") {
  std::string json = R"({"traceEvents":[)";
  for (int i = 0; i < 20000; ++i) {
    if (i > 0) json += ',';
    json += R"({"ph":"X","cat":"kernel","name":"k)" + std::to_string(i % 13) + R"(","pid":0,"tid":7,"ts":)" +
            std::to_string(1000 + i * 10) + R"(,"dur":5,"args":{"stream":7,"correlation":)" + std::to_string(i) + "}}";
  }
  json += "]}";
  const ImportResult r = import_text(gzip(json));
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK(r.trace.device_ops.size() == 20000);
  CHECK(r.trace.names.size() == 13);  // interned
  CHECK(r.stats.uncompressed_bytes == json.size());
  // Two gzip members back to back read as one stream; the JSON then has trailing garbage.
  const ImportResult twice = import_text(gzip(json) + gzip(json));
  CHECK_FALSE(twice.ok);
}

TEST_CASE("every fuzz corpus seed imports without crashing", "[import][corpus]") {
  DIR* dir = opendir(kCorpus.c_str());
  REQUIRE(dir != nullptr);
  int seeds = 0;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string bytes = read_file(kCorpus + name);
    const ImportResult r = import_text(bytes);
    INFO(name << ": " << r.error);
    CHECK((r.ok || !r.error.empty()));
    // Every prefix must also fail cleanly (or succeed).
    for (std::size_t cut = 0; cut < bytes.size(); cut += 17) {
      const ImportResult partial = import_text(bytes.substr(0, cut));
      CHECK((partial.ok || !partial.error.empty()));
    }
    ++seeds;
  }
  closedir(dir);
  CHECK(seeds >= 5);
}

TEST_CASE("a legacy (pre-Kineto) trace: top-level array, no cat, string pid and tid", "[import][legacy]") {
  // What torch.autograd.profiler / libtorch RecordProfile write when PyTorch
  // is built without Kineto (Debian's 1.13): no "cat" anywhere, "pid" is
  // "CPU functions", and some writers give the thread as a string.
  const std::string json = R"([
    {"name": "ProfilerStep#3", "ph": "X", "ts": 100, "dur": 50, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ph": "X", "ts": 100, "dur": 20, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::addmm", "ph": "X", "ts": 121, "dur": 10, "tid": "1", "pid": "CPU functions", "args": {}},
    {"name": "my_forward", "ph": "X", "ts": 121, "dur": 12, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "AddmmBackward0", "ph": "X", "ts": 134, "dur": 3, "tid": 2, "pid": "CPU functions", "args": {}},
    {"name": "detach_", "ph": "X", "ts": 138, "dur": 1, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "ProfilerStep#4", "ph": "X", "ts": 150, "dur": 40, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::mm", "ph": "X", "ts": 151, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}}
  ])";
  for (const bool gzipped : {false, true}) {
    INFO((gzipped ? "gzip" : "plain"));
    const ImportResult r = import_text(gzipped ? gzip(json) : json);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.stats.legacy_format);
    // HTA's rule holds here too: the last of two ProfilerSteps is dropped.
    REQUIRE(r.trace.steps.size() == 1);
    CHECK(r.trace.steps[0].number == 3);
    CHECK(r.trace.devices.empty());
    CHECK_FALSE(r.trace.has_distributed_info);
    std::map<std::string, HostInterval> by_name;
    for (const HostInterval& h : r.trace.host_ops) by_name[r.trace.name_of(h.name)] = h;
    CHECK(by_name.count("aten::mm") == 0);  // after the last step's start
    CHECK(by_name.at("aten::addmm").kind == HostOpKind::framework_op);
    CHECK(by_name.at("aten::addmm").tid == 1);  // "1" is thread 1
    CHECK(by_name.at("my_forward").kind == HostOpKind::annotation);
    CHECK(by_name.at("AddmmBackward0").kind == HostOpKind::framework_op);  // an autograd node
    CHECK(by_name.at("detach_").kind == HostOpKind::framework_op);         // a bare in-place op
    CHECK(by_name.at("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__").kind == HostOpKind::annotation);
    CHECK(by_name.at("ProfilerStep#3").kind == HostOpKind::step);
    CHECK(r.trace.phases.size() == 2);  // the two record_function ranges
  }
}

TEST_CASE("PyTorch 1.9's \"Operator\" events: record_function ranges told from operators by name", "[import][legacy]") {
  // Kineto before PyTorch 1.10 files every record_function range, the user's
  // and PyTorch's own, under "Operator" with the operators themselves.
  const std::string json = R"({"traceEvents": [
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#5", "pid": 7, "tid": 1, "ts": 100, "dur": 50},
    {"ph": "X", "cat": "Operator", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 7, "tid": 1, "ts": 100, "dur": 20},
    {"ph": "X", "cat": "Operator", "name": "my_forward", "pid": 7, "tid": 1, "ts": 121, "dur": 12},
    {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 7, "tid": 1, "ts": 122, "dur": 10},
    {"ph": "X", "cat": "Operator", "name": "CudnnConvolutionBackward", "pid": 7, "tid": 2, "ts": 134, "dur": 3},
    {"ph": "X", "cat": "Operator", "name": "Optimizer.step#SGD.step", "pid": 7, "tid": 1, "ts": 140, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "my_cpu_op_range", "pid": 7, "tid": 1, "ts": 146, "dur": 1},
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#6", "pid": 7, "tid": 1, "ts": 150, "dur": 40}
  ]})";
  const ImportResult r = import_text(json);
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK_FALSE(r.stats.legacy_format);
  REQUIRE(r.trace.steps.size() == 1);
  std::map<std::string, HostInterval> by_name;
  for (const HostInterval& h : r.trace.host_ops) by_name[r.trace.name_of(h.name)] = h;
  CHECK(by_name.at("ProfilerStep#5").kind == HostOpKind::step);
  CHECK(by_name.at("my_forward").kind == HostOpKind::annotation);  // the user's range: a phase
  CHECK(by_name.at("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__").kind == HostOpKind::annotation);
  CHECK(by_name.at("Optimizer.step#SGD.step").kind == HostOpKind::annotation);
  CHECK(by_name.at("aten::conv2d").kind == HostOpKind::framework_op);
  CHECK(by_name.at("CudnnConvolutionBackward").kind == HostOpKind::framework_op);  // an autograd node
  // Only "Operator" is read by name: a 1.10+ cpu_op stays an operator.
  CHECK(by_name.at("my_cpu_op_range").kind == HostOpKind::framework_op);
  std::set<std::string> phases;
  for (const Phase& p : r.trace.phases) phases.insert(r.trace.name_of(p.name));
  CHECK(phases.count("my_forward") == 1);

  // The report: the user's range is a phase of its own, beside PyTorch's.
  const Report report = report_from_timeline(r.trace, "operator-1.9");
  std::set<std::string> names;
  for (const PhaseSummary& p : report.phases) names.insert(p.name);
  CHECK(names.count("my_forward") == 1);
  CHECK(names.count("data") == 1);
  CHECK(names.count("optimizer") == 1);
}

TEST_CASE("a Kineto trace still drops the few events without cat, as HTA", "[import][legacy]") {
  const std::string json = R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "name": "no category", "pid": 7, "tid": 1, "ts": 12, "dur": 5},
    {"ph": "X", "cat": null, "name": "null category", "pid": 7, "tid": 1, "ts": 12, "dur": 5}
  ]})";
  const ImportResult r = import_text(json);
  INFO(r.error);
  REQUIRE(r.ok);
  CHECK_FALSE(r.stats.legacy_format);
  CHECK(r.stats.events_without_category == 2);  // counted, not lost silently
  CHECK(r.stats.complete_events == 1);
  REQUIRE(r.trace.host_ops.size() == 1);
  CHECK(r.trace.name_of(r.trace.host_ops[0].name) == "aten::mm");
}

TEST_CASE("legacy traces recorded by Debian's PyTorch 1.13 import", "[import][legacy]") {
  // tests/data/pytorch/record_trace.py, torch 1.13 without Kineto, 12 active steps.
  for (const char* mode : {"compute", "io", "io-workers"}) {
    INFO(mode);
    const ImportResult r =
        import_kineto_trace(std::string(STEPSCOPE_TEST_DATA_DIR "/pytorch/legacy_1.13_") + mode + ".json.gz");
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.stats.gzip);
    CHECK(r.stats.legacy_format);
    CHECK(r.trace.steps.size() == 11);  // 12 recorded, the last dropped as HTA does
    CHECK(r.trace.device_ops.empty());
    std::size_t data = 0, optimizer = 0, backward = 0;
    for (const HostInterval& h : r.trace.host_ops) {
      const std::string& n = r.trace.name_of(h.name);
      if (n.rfind("enumerate(DataLoader)", 0) == 0) ++data;
      if (n.rfind("Optimizer.step#", 0) == 0) ++optimizer;
      if (n.rfind("autograd::engine::evaluate_function:", 0) == 0) ++backward;
    }
    CHECK(data >= 3);
    CHECK(optimizer >= 3);
    CHECK(backward >= 3);
  }
}
