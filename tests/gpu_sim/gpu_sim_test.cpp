// The CUDA backend end to end on the simulated device (label gpu-sim): each
// case runs tests/gpu_sim/sim_probe.cpp (or the nvcc-built probe/example) as
// its own process with libstepscope_cudasim.so preloaded, then reads the
// report, the simulator's counters (STEPSCOPE_SIM_COUNTERS) and the output.
// Device times are programmed, so the checks are exact where the model is;
// no host wall-clock time is asserted.
#include <stepscope/analysis.hpp>
#include <stepscope/report.hpp>

#include "device_fact_key.hpp"

#include "common/files.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace stepscope;
using stepscope_test::slurp;
using stepscope_test::TempDir;

namespace {

struct Run {
  TempDir dir;
  int exit_code = -1;
  std::string out, err;
  std::map<std::string, double> counters;
  Report report;
  bool has_report = false;

  double counter(const std::string& k) const {
    auto it = counters.find(k);
    return it != counters.end() ? it->second : 0;
  }
  double fact(const std::string& k) const { return test::device_fact(report.device.facts, k).value_or(-1); }
  bool has_fact(const std::string& k) const { return test::device_fact(report.device.facts, k).has_value(); }
  const PhaseSummary* phase(const std::string& name) const {
    for (const auto& p : report.phases)
      if (p.name == name) return &p;
    return nullptr;
  }
  // stdout "key=value" lines.
  std::string value(const std::string& key) const {
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (l.rfind(key + "=", 0) == 0) return l.substr(key.size() + 1);
    return "";
  }
};

// Runs `program args` on the simulator under `timeout` (a hang fails the
// test instead of blocking CI). CUPTI collects on every step unless a case
// says otherwise (most cases count every step's records); the default
// windows have their own cases.
void run_on_sim(Run& run, const std::string& program, const std::string& args, const std::string& env = "") {
  const std::string& d = run.dir.path;
  const std::string cmd = "cd '" + d + "' && env STEPSCOPE_OUT='" + d + "/report.json' STEPSCOPE_SIM_COUNTERS='" + d +
                          "/counters.txt' LD_PRELOAD='" STEPSCOPE_SIM_LIBRARY "' STEPSCOPE_CUPTI_WINDOW=always " + env +
                          " timeout 120 '" + program + "' " + args + " >'" + d + "/stdout.txt' 2>'" + d +
                          "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = slurp(d + "/stdout.txt");
  run.err = slurp(d + "/stderr.txt");
  std::istringstream in(slurp(d + "/counters.txt"));
  std::string k;
  double v = 0;
  while (in >> k >> v) run.counters[k] = v;
  std::string error;
  run.has_report = load_report(d + "/report.json", run.report, error);
  INFO("stderr: " << run.err << "\nstdout: " << run.out << "\nreport error: " << error);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.has_report);
}

void probe(Run& run, const std::string& args, const std::string& env = "") {
  run_on_sim(run, STEPSCOPE_SIM_PROBE, args, "STEPSCOPE_QUIET=1 " + env);
}

bool has_finding(const Report& r, const std::string& kind) {
  for (const auto& f : r.findings)
    if (f.kind == kind) return true;
  return false;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find(needle) != std::string::npos) ++n;
  return n;
}

}  // namespace

TEST_CASE("simulator: the backend runs on the simulated device", "[gpu-sim]") {
  Run run;
  probe(run, "async 20");
  CHECK(run.report.device.enabled);
  CHECK(run.report.device.name.find("simulated") != std::string::npos);
  CHECK(run.counter("events_created") > 0);
  CHECK(run.counter("invalid_handle_uses") == 0);
}

// CUDA cannot be used in a child forked after its parent initialised it: a
// recorded worker (STEPSCOPE_CHILDREN=1) must not probe the device (the
// probe fails or hangs in the driver); its phases are host-timed. It probed.
TEST_CASE("a worker forked after its parent used the device never probes it", "[gpu-sim][fork]") {
  Run run;
  probe(run, "fork-child 10", "STEPSCOPE_CHILDREN=1");
  CHECK(run.report.device.enabled);  // the parent's
  const std::string child = run.value("child");
  REQUIRE_FALSE(child.empty());
  std::string child_path;
  for (const auto& entry : std::filesystem::directory_iterator(run.dir.path)) {
    const std::string name = entry.path().filename().string();
    if (name.find(child) != std::string::npos && name.find(".json") != std::string::npos) child_path = entry.path();
  }
  INFO("child " << child << " in " << run.dir.path);
  REQUIRE_FALSE(child_path.empty());
  Report r;
  std::string error;
  REQUIRE(load_report(child_path, r, error));
  CHECK_FALSE(r.device.enabled);
  CHECK(r.device.status == "forked_child");
  const auto decode = std::find_if(r.phases.begin(), r.phases.end(), [](const auto& p) { return p.name == "decode"; });
  REQUIRE(decode != r.phases.end());
  CHECK(decode->count == 20);
}

TEST_CASE("async correctness: host-timed 0.05 ms forward, 5 ms on the device", "[gpu-sim]") {
  Run run;
  probe(run, "async 20", "STEPSCOPE_WARMUP=2");
  const PhaseSummary* fwd = run.phase("forward");
  REQUIRE(fwd != nullptr);
  REQUIRE(fwd->device_ms.has_value());
  CHECK(fwd->device_ms->count == fwd->count);
  // The programmed device time. min and p50, not the mean: a host stall that
  // lets the device drain adds a real gap to one phase on a busy machine.
  CHECK(fwd->device_ms->min == Approx(5.0).epsilon(0.001));
  CHECK(fwd->device_ms->p50 == Approx(5.0).epsilon(0.03));
  CHECK(fwd->host_ms.mean < 0.1 * fwd->device_ms->mean);       // the launch returns long before the work ends
  CHECK(std::stod(run.value("host_timer_forward_ms")) < 0.5);  // what the tutorial's host timer reports
  CHECK(has_finding(run.report, "host_device_mismatch"));
}

TEST_CASE("no synchronising call on the hot path", "[gpu-sim]") {
  Run run;
  probe(run, "async 30");
  CHECK(run.value("sync_calls_during_steps") == "0");
  CHECK(run.fact("sync_calls_in_steps") == 0);
  CHECK(run.counter("sync_calls") == 1);  // the program's own, after the loop
}

TEST_CASE("event-pool pressure: a slow device, every slot returned", "[gpu-sim]") {
  Run run;
  probe(run, "pressure 20", "STEPSCOPE_WARMUP=0");  // 800 phases of 1 ms queued in ~ms
  CHECK(run.fact("event_pool_exhausted") > 0);
  CHECK(run.fact("event_slots_leaked") == 0);
  CHECK(run.fact("device_times_unresolved") == 0);
  const PhaseSummary* layer = run.phase("layer");
  REQUIRE(layer != nullptr);
  REQUIRE(layer->device_ms.has_value());
  // Every phase is either timed or counted as not timed (pool empty): none lost.
  CHECK(layer->device_ms->count + run.fact("event_pool_exhausted") >= layer->count);
  // The CUPTI timeline has every step, not only those that held an event slot (C7).
  CHECK(run.fact("cupti_steps") == 20);
  CHECK(run.counter("invalid_handle_uses") == 0);
}

TEST_CASE("graph capture: phases inside a capture are not recorded into it", "[gpu-sim]") {
  Run run;
  probe(run, "capture 10", "STEPSCOPE_WARMUP=0");
  CHECK(run.value("capture") == "ok");
  CHECK(run.counter("event_records_in_capture") == 0);
  CHECK(run.counter("capture_invalidations") == 0);  // the collector's queries run in relaxed mode
  CHECK(run.fact("phases_in_graph_capture") == 4);
  const PhaseSummary* captured = run.phase("captured");
  REQUIRE(captured != nullptr);
  CHECK_FALSE(captured->device_ms.has_value());
  const PhaseSummary* graph = run.phase("graph");
  REQUIRE(graph != nullptr);
  REQUIRE(graph->device_ms.has_value());
  // 4 x 1 ms nodes per replay
  CHECK(graph->device_ms->min == Approx(4.0).epsilon(0.001));
  CHECK(graph->device_ms->p50 == Approx(4.0).epsilon(0.03));
}

TEST_CASE("a phase on a user stream (STEPSCOPE_PHASE_STREAM)", "[gpu-sim]") {
  Run run;
  probe(run, "user-stream 10", "STEPSCOPE_WARMUP=0");
  const PhaseSummary* h2d = run.phase("h2d");
  REQUIRE(h2d != nullptr);
  REQUIRE(h2d->device_ms.has_value());
  CHECK(h2d->device_ms->min == Approx(3.0).epsilon(0.001));
  CHECK(h2d->device_ms->p50 == Approx(3.0).epsilon(0.03));
}

TEST_CASE("unbound phases are not timed on the legacy default stream (C3)", "[gpu-sim]") {
  Run run;
  probe(run, "unbound 10");
  CHECK(run.counter("event_records_legacy_stream") == 0);
  CHECK(run.fact("device_times_unbound_stream") > 0);  // the report says these times are of the thread's default stream
}

TEST_CASE("CUPTI verdicts: GPU waiting on host launches -> scheduling", "[gpu-sim]") {
  Run run;
  probe(run, "scheduling 20");
  CHECK(run.fact("cupti_kernels") == 800);
  CHECK(run.fact("kernel_launch_calls") == 800);
  CHECK(run.fact("device_busy_fraction") < 0.2);
  CHECK(run.report.bottleneck.category == "scheduling");
}

TEST_CASE("CUPTI verdicts: long kernels -> compute", "[gpu-sim]") {
  Run run;
  probe(run, "compute 15");
  CHECK(run.fact("device_busy_fraction") > 0.8);
  CHECK(run.report.bottleneck.category == "compute");
}

TEST_CASE("CUPTI verdicts: copies dominating -> memory", "[gpu-sim]") {
  Run run;
  probe(run, "memory 15");
  CHECK(run.fact("cupti_pageable_memcpys") == 15);
  CHECK(run.report.bottleneck.category == "memory");
}

TEST_CASE("live phases reach the attribution: an input-bound GPU run gets io (C2)", "[gpu-sim]") {
  Run run;
  probe(run, "input 15");
  CHECK(run.fact("idle_host_input_fraction") > 0.5);
  CHECK(run.report.bottleneck.category == "io");
}

TEST_CASE("CUPTI buffer overflow is counted as dropped (C10)", "[gpu-sim]") {
  Run run;
  probe(run, "scheduling 10", "STEPSCOPE_SIM_CUPTI_CAPACITY=50");
  REQUIRE(run.counter("cupti_records_dropped") > 0);
  CHECK(run.fact("cupti_records_dropped") == run.counter("cupti_records_dropped"));
}

TEST_CASE("a kernel still running at exit is not counted as a kernel (C10)", "[gpu-sim]") {
  Run run;
  probe(run, "running-at-exit 10");
  CHECK(run.fact("cupti_records_incomplete") == 1);
  CHECK(run.fact("cupti_kernels") == 10);
}

TEST_CASE("device lost mid-run: host timing goes on, one warning", "[gpu-sim]") {
  Run run;
  run_on_sim(run, STEPSCOPE_SIM_PROBE, "lost 20");
  CHECK(run.report.device.status == "device_lost");
  CHECK(count_lines_with(run.err, "stepscope: warning: the CUDA device") == 1);
  CHECK(run.fact("phases_in_graph_capture") == 0);  // a sticky error is not a capture (C13)
  const PhaseSummary* fwd = run.phase("forward");
  REQUIRE(fwd != nullptr);
  CHECK(fwd->count == 15);  // host timing of all measured steps (20 - 5 warm-up)
}

TEST_CASE("STEPSCOPE_NVTX=1: one balanced NVTX range per timed scope", "[gpu-sim]") {
  Run run;
  probe(run, "async 10", "STEPSCOPE_NVTX=1 NVTX_INJECTION64_PATH='" STEPSCOPE_SIM_LIBRARY "'");
  CHECK(run.fact("nvtx") == 1);
  CHECK(run.counter("nvtx_pushes") == 20);  // 10 steps + 10 forward phases
  CHECK(run.counter("nvtx_pops") == 20);
  CHECK(run.counter("nvtx_unbalanced_pops") == 0);
  CHECK(run.counter("nvtx_bad_attributes") == 0);
}

TEST_CASE("a CPU-only program gets no CUDA context (C1)", "[gpu-sim]") {
  Run run;
  probe(run, "cpu 30");
  CHECK(run.counter("contexts_created_device0") == 0);
}

TEST_CASE("a rank on GPU 1 creates no context on GPU 0 (C1, C8, S5)", "[gpu-sim]") {
  Run run;
  probe(run, "device1 20", "STEPSCOPE_SIM_DEVICES=2 STEPSCOPE_WARMUP=0");
  CHECK(run.counter("contexts_created_device0") == 0);
  CHECK(run.counter("contexts_created_device1") == 1);
  CHECK(run.counter("event_record_wrong_device") == 0);
  CHECK(run.fact("event_record_failed") == 0);
  const PhaseSummary* prefetch = run.phase("prefetch");
  REQUIRE(prefetch != nullptr);
  CHECK(prefetch->device_ms.has_value());
}

TEST_CASE("two GPUs in one process: the facts describe the timed device (C14)", "[gpu-sim]") {
  Run run;
  probe(run, "two-gpus 20", "STEPSCOPE_SIM_DEVICES=2");
  CHECK(run.fact("cupti_other_device_ops") > 0);
  CHECK(run.fact("device_busy_fraction") < 0.6);  // device 1 computes ~1 ms of each ~5 ms step; device 0 is always busy
}

TEST_CASE("two timed GPUs in one process: per-device figures and peer copies (C14)", "[gpu-sim]") {
  Run run;
  probe(run, "multi-gpu 30", "STEPSCOPE_SIM_DEVICES=2");
  const DeviceInfo& d = run.report.device;
  REQUIRE(d.devices.size() == 2);
  const DeviceUsage& gpu0 = d.devices[0];
  const DeviceUsage& gpu1 = d.devices[1];
  CHECK(gpu0.id == 0);
  CHECK(gpu1.id == 1);
  for (const DeviceUsage* u : {&gpu0, &gpu1}) {
    CHECK(u->phases_timed);
    CHECK(u->steps_ran_on);
    CHECK(u->kernels == 30);  // each device its own kernels, not the process's 60
    CHECK(u->memcpys == 0);
  }
  // The peer copies (MEMCPY2 records) belong to the device that ran them.
  CHECK(gpu0.peer_memcpys == 30);
  CHECK(gpu0.peer_memcpy_mb == Approx(30 * 48.0));
  CHECK(gpu1.peer_memcpys == 0);
  // Memory of each device: its context (512 MiB) plus what it allocated.
  CHECK(gpu0.memory_peak_mb == Approx(768));
  CHECK(gpu1.memory_peak_mb == Approx(576));
  CHECK(gpu0.name == "stepscope simulated GPU 0");
  CHECK(gpu1.name == "stepscope simulated GPU 1");
  // Busy: device 0 computes 4.5 of each ~4.5 ms step, device 1 1 of ~4 ms
  // (a host stall on a busy machine only lowers both).
  CHECK(gpu0.busy_fraction > 0.5);
  CHECK(gpu1.busy_fraction >= 0);
  CHECK(gpu1.busy_fraction < 0.5);
  CHECK(gpu0.busy_fraction > gpu1.busy_fraction);
  // The report's figures and verdict inputs are the busiest step device's.
  CHECK(d.facts_device == 0);
  CHECK(run.fact("device_busy_fraction") == Approx(gpu0.busy_fraction));
  CHECK(d.memory_peak_mb == Approx(768));
  CHECK(d.name == gpu0.name);
  CHECK(run.fact("cupti_other_device_ops") == 30);  // device 1's kernels
  CHECK(run.fact("cupti_memcpys") == 30);           // process-wide counts: the 30 peer copies
  CHECK(run.fact("event_record_failed") == 0);
  const PhaseSummary* fwd1 = run.phase("forward_gpu1");
  REQUIRE(fwd1 != nullptr);
  REQUIRE(fwd1->device_ms.has_value());
  CHECK(fwd1->device_ms->min == Approx(1.0).margin(0.01));
}

TEST_CASE("CUPTI's per-thread buffers are not zeroed on the training thread (S4)", "[gpu-sim]") {
  Run run;
  probe(run, "async 60");
  // The training thread's launches make CUPTI request its per-thread buffer
  // inside the launch call (CUDA 13's default); stepscope hands over a
  // buffer zeroed beforehand and says so (ZEROED_OUT_ACTIVITY_BUFFER = 1),
  // so CUPTI does not memset 4 MiB there.
  REQUIRE(run.counter("cupti_buffer_requests_in_api_calls") > 0);
  INFO("request callback on the launching thread: "
       << run.counter("cupti_request_ns_in_api_calls") / run.counter("cupti_buffer_requests_in_api_calls")
       << " ns per request (simulator, incl. CUPTI's zeroing if any)");
  CHECK(run.counter("cupti_bytes_zeroed_in_api_calls") == 0);  // was 4 MiB per request
  CHECK(run.counter("cupti_buffers_not_zeroed_by_client") == 0);
  CHECK(run.fact("cupti_records_dropped") == 0);
  CHECK(run.fact("cupti_kernels") == 60);
}

TEST_CASE("a context created inside step 1 is timed a few steps later (C12)", "[gpu-sim]") {
  Run run;
  probe(run, "late-context 40", "STEPSCOPE_WARMUP=0");
  const PhaseSummary* fwd = run.phase("forward");
  REQUIRE(fwd != nullptr);
  REQUIRE(fwd->device_ms.has_value());
  CHECK(fwd->device_ms->count >= 34);  // timed from step 6 at the latest (was: never, within 1024 scopes)
}

TEST_CASE("STEPSCOPE_WARMUP reaches the CUPTI side (C4)", "[gpu-sim]") {
  Run run;
  probe(run, "async 4", "STEPSCOPE_WARMUP=0");
  CHECK(run.report.run.warmup_steps == 0);
  CHECK(run.fact("cupti_steps") == 4);
}

TEST_CASE("the CUPTI subscriber is released at finish (C5)", "[gpu-sim]") {
  Run run;
  probe(run, "second-client 5");
  CHECK(run.value("second_subscribe") == "0");  // CUPTI_SUCCESS: torch.profiler would get its events
  CHECK(run.counter("cupti_subscribed_at_exit") == 0);
}

TEST_CASE("STEPSCOPE_CUPTI=0: call counts are absent, not zero (C11)", "[gpu-sim]") {
  Run run;
  probe(run, "async 10", "STEPSCOPE_CUPTI=0");
  CHECK(run.report.device.status == "cupti_disabled");
  CHECK_FALSE(run.has_fact("sync_calls_in_steps"));
  CHECK_FALSE(run.has_fact("kernel_launch_calls"));
  CHECK(run.counter("cupti_subscribe_calls") == 0);
}

TEST_CASE("the CUDA switches take every spelling of off: STEPSCOPE_CUDA=No, STEPSCOPE_CUPTI=FALSE", "[gpu-sim]") {
  // Issue 29: the CUDA backend had its own parser, which took FALSE/False/Off/NO/No for "on".
  for (const char* off : {"No", "FALSE", "Off"}) {
    INFO(off);
    Run device_off;
    probe(device_off, "async 10", std::string("STEPSCOPE_CUDA=") + off);
    CHECK(device_off.report.device.status == "disabled");
    CHECK_FALSE(device_off.report.device.enabled);
    Run cupti_off;
    probe(cupti_off, "async 10", std::string("STEPSCOPE_CUPTI=") + off);
    CHECK(cupti_off.report.device.status == "cupti_disabled");
  }
}

TEST_CASE("the collector's own calls stay out of the CUPTI runtime timeline (C9)", "[gpu-sim]") {
  Run run;
  probe(run, "async 40");
  // The program makes ~45 runtime calls (40 launches, stream create, sync);
  // stepscope's event records, queries and capture checks must not add to them.
  CHECK(run.fact("cupti_runtime_records") < 60);
}

TEST_CASE("cudaDeviceReset before exit: no use of destroyed events (C6)", "[gpu-sim]") {
  Run run;
  probe(run, "reset 10");
  CHECK(run.counter("invalid_handle_uses") == 0);
  CHECK(run.counter("contexts_created_device0") == 1);  // not re-created at exit
}

TEST_CASE("a phase closed in a forked child makes no CUDA call there (C16)", "[gpu-sim]") {
  Run run;
  probe(run, "fork 5", "STEPSCOPE_CHILDREN=0");
  CHECK(run.value("child_cuda_calls") == "0");
}

#ifdef STEPSCOPE_GPU_PROBE
TEST_CASE("the nvcc-built probe (<<<>>> launches) runs on the simulator", "[gpu-sim]") {
  Run run;
  run_on_sim(run, STEPSCOPE_GPU_PROBE, "spin 2000 30", "STEPSCOPE_QUIET=1 STEPSCOPE_SIM_KERNEL_NS=spin_kernel=2000000");
  const PhaseSummary* spin = run.phase("spin");
  REQUIRE(spin != nullptr);
  REQUIRE(spin->device_ms.has_value());
  CHECK(spin->device_ms->min == Approx(2.0).epsilon(0.001));
  CHECK(spin->device_ms->p50 == Approx(2.0).epsilon(0.03));
  CHECK(run.fact("cupti_kernels") == 30);
  CHECK(run.fact("kernel_launch_calls") == 30);
  CHECK(run.fact("sync_calls_in_steps") == 0);
  CHECK(run.report.device.cupti_launches_unrecorded == 0);
}

TEST_CASE("a second CUPTI activity client taking the buffers is reported (S3)", "[gpu-sim]") {
  Run run;
  run_on_sim(run, STEPSCOPE_GPU_PROBE, "second-client 20", "STEPSCOPE_SIM_KERNEL_NS_FROM_ARG=spin_kernel");
  // The simulator, like CUPTI, keeps one pair of buffer callbacks per
  // process: the second client's registration (after step 5) takes them.
  CHECK(run.value("second_client_register") == "0");
  CHECK(run.value("second_client_kernels") == "20");
  CHECK(run.fact("kernel_launch_calls") == 20);
  CHECK(run.fact("cupti_kernels") == 0);
  // Not silent: the report counts the launches without records, and one
  // warning says so (was: nothing, the facts just had no device activity).
  CHECK(run.report.device.cupti_launches_unrecorded == 20);
  CHECK(run.report.device.reason.find("another CUPTI activity client") != std::string::npos);
  CHECK(count_lines_with(run.err, "another CUPTI client took the activity buffers") == 1);
}

// scripts/gpu-check's two-GPU run (C14), first on the simulator.
TEST_CASE("the nvcc-built probe's two-GPU mode on the simulator (C14)", "[gpu-sim]") {
  Run run;
  run_on_sim(run, STEPSCOPE_GPU_PROBE, "multi-gpu 20",
             "STEPSCOPE_QUIET=1 STEPSCOPE_SIM_DEVICES=2 STEPSCOPE_SIM_KERNEL_NS_FROM_ARG=spin_kernel");
  CHECK(run.value("devices") == "2");
  const DeviceInfo& d = run.report.device;
  REQUIRE(d.devices.size() == 2);
  CHECK(d.devices[0].kernels == 20);
  CHECK(d.devices[1].kernels == 20);
  CHECK(d.devices[0].peer_memcpys == 20);
  CHECK(d.devices[1].peer_memcpys == 0);
  CHECK(d.facts_device == 0);
  CHECK(d.devices[0].busy_fraction > d.devices[1].busy_fraction);
}
#endif

#ifdef STEPSCOPE_HOST_TIMER_TRAP
TEST_CASE("examples/cuda/host_timer_trap on the simulator prints host vs device", "[gpu-sim]") {
  Run run;
  run_on_sim(run, STEPSCOPE_GPU_SIM_SCRIPT, std::string("'") + STEPSCOPE_HOST_TIMER_TRAP + "'", "STEPSCOPE_QUIET=1");
  CHECK(run.out.find("host timer") != std::string::npos);
  const PhaseSummary* fwd = run.phase("forward");
  REQUIRE(fwd != nullptr);
  REQUIRE(fwd->device_ms.has_value());
  CHECK(fwd->device_ms->mean > 10 * fwd->host_ms.mean);
}
#endif

// ---- device-true accounting (issue 27 items 1-4, 6) ------------------------

namespace {

const WhatIf* what_if(const Report& r, const std::string& target, double speedup) {
  for (const WhatIf& w : r.what_if)
    if (w.target == target && w.speedup == speedup) return &w;
  return nullptr;
}
const Finding* finding(const Report& r, const std::string& kind) {
  for (const Finding& f : r.findings)
    if (f.kind == kind) return &f;
  return nullptr;
}

// The behind-the-host loop's programmed device work (sim_probe.cpp, behind()).
constexpr double kBehindStepMs = 84.8;
constexpr double kBehindBackwardMs = 54, kBehindOptimizerMs = 0.8;

}  // namespace

TEST_CASE("device-true accounting: a device that runs behind the host", "[gpu-sim][accounting]") {
  // The H200's libtorch loop: nothing waits, a launch queue of 256 (5 steps
  // and 16 launches: the host's launch k waits for the kernel 256 before it,
  // so it blocks in the optimizer, on the forward's and backward's kernels,
  // with 5 steps of backlog left to keep the device busy through a host
  // stall on a busy machine); the driver yields while the host blocks
  // (kernel time) and faults pages of its own.
  std::unique_ptr<Run> attempt;
  for (int i = 0; i < 3; ++i) {
    attempt = std::make_unique<Run>();
    probe(*attempt, "behind 30",
          "STEPSCOPE_SIM_LAUNCH_QUEUE=256 STEPSCOPE_SIM_DRIVER_WAIT=spin STEPSCOPE_SIM_DRIVER_WAIT_FAULT_PAGES=2000");
    // The device idled only if the host stalled for 5 steps (a busy
    // machine): then the device's steps were not steady, truly; try again.
    if (attempt->counter("device_gap_ns") < 1e6) break;
    WARN("the host stalled long enough to idle the device; running again");
  }
  const Run& run = *attempt;
  const Report& r = run.report;
  INFO(format_summary(r));
  REQUIRE(run.counter("launch_queue_full") > 0);  // the host did block on the queue
  REQUIRE(r.steps.clock == "device");
  REQUIRE(r.steps.host_wall_ms.has_value());
  REQUIRE(r.steps.host_breakdown.has_value());

  // Step statistics from the device's step boundaries, within 10% of the truth.
  const bool steady = run.counter("device_gap_ns") < 1e6;
  CHECK(r.steps.wall_ms.p50 == Approx(kBehindStepMs).epsilon(0.1));
  if (steady) {
    CHECK(r.steps.wall_ms.mean == Approx(kBehindStepMs).epsilon(0.1));
    CHECK(r.steps.wall_ms.p90 == Approx(kBehindStepMs).epsilon(0.1));
    CHECK(r.steps.breakdown.wall_ms == Approx(kBehindStepMs).epsilon(0.1));
    CHECK_FALSE(has_finding(r, "jitter"));
    CHECK_FALSE(has_finding(r, "step_outliers"));
  }

  // Shares: the device time each phase accounts for, host time beside it.
  const PhaseSummary* optimizer = run.phase("optimizer");
  const PhaseSummary* backward = run.phase("backward");
  REQUIRE(optimizer != nullptr);
  REQUIRE(backward != nullptr);
  REQUIRE(optimizer->host_share_of_step.has_value());
  if (steady) CHECK(backward->share_of_step == Approx(kBehindBackwardMs / kBehindStepMs).epsilon(0.1));
  CHECK(optimizer->share_of_step < (steady ? 0.03 : 0.1));  // truth 0.9%
  CHECK(*optimizer->host_share_of_step > 0.2);              // where the host paid for the backlog
  const StepBreakdown settled = settled_breakdown(r);
  if (steady) CHECK(settled.kind_ms[PhaseKind::compute] == Approx(kBehindStepMs).epsilon(0.1));

  // What-ifs on the pipeline: removing the optimizer saves its 1%, not its host time.
  // (Below the what-if floor, it is not projected at all; the host clock gave it 99%.)
  if (const WhatIf* optimizer_free = what_if(r, "optimizer", 0)) {
    CHECK(optimizer_free->step_ms_projected == Approx(kBehindStepMs - kBehindOptimizerMs).epsilon(0.1));
    CHECK(optimizer_free->step_change_pct > (steady ? -3 : -10));
  }
  const WhatIf* backward_free = what_if(r, "backward", 0);
  const WhatIf* compute_2x = what_if(r, "kind:compute", 2);
  REQUIRE(backward_free != nullptr);
  REQUIRE(compute_2x != nullptr);
  if (steady) {
    CHECK(backward_free->step_ms_projected == Approx(kBehindStepMs - kBehindBackwardMs).epsilon(0.1));
    CHECK(compute_2x->step_ms_projected == Approx(kBehindStepMs / 2).epsilon(0.1));
  }

  // The wait is named where it is paid, with the device work behind it.
  const Finding* wait = finding(r, "host_waits_for_device");
  REQUIRE(wait != nullptr);
  CHECK(wait->message.find("'optimizer'") != std::string::npos);
  CHECK(wait->message.find("'backward'") != std::string::npos);

  // Host OS signals: the driver's yields are kernel time and its pages are
  // faults, enough for a storm by count, but they cost a device-paced step nothing.
  CHECK(static_cast<double>(r.system.minor_faults) / static_cast<double>(r.steps.count) >= 1000);
  CHECK_FALSE(has_finding(r, "page_fault_storm"));
  CHECK(settled.page_fault_ms == 0);
  CHECK(format_summary(r).find("page faults") == std::string::npos);
}

TEST_CASE("device-true accounting: a periodic slow device step is named with its period", "[gpu-sim][accounting]") {
  // The behind-the-host loop with every 8th step's backward kernels 3x longer
  // (192.8 ms on the device against 84.8). The host, blocked wherever the
  // launch queue (5 steps deep) fills, pays for that step spread over the
  // steps that follow it: host-paced the period was smeared (and the finding
  // was skipped on device-paced runs).
  std::unique_ptr<Run> attempt;
  for (int i = 0; i < 3; ++i) {  // as above: a host stalled for 5 steps idles the device; try again
    attempt = std::make_unique<Run>();
    probe(*attempt, "behind-periodic 45", "STEPSCOPE_SIM_LAUNCH_QUEUE=256");
    if (attempt->counter("device_gap_ns") < 1e6) break;
    WARN("the host stalled long enough to idle the device; running again");
  }
  const Run& run = *attempt;
  const Report& r = run.report;
  INFO(format_summary(r));
  REQUIRE(r.steps.clock == "device");
  const Finding* periodic = finding(r, "periodic_slow_steps");
  REQUIRE(periodic != nullptr);
  CHECK(periodic->values.at("period_steps") == 8);
  CHECK(periodic->message.find("in compute phases") != std::string::npos);
  // The slowest steps are the device's: the slow steps, at their device time.
  REQUIRE(r.steps.slowest.size() >= 4);
  const std::uint64_t phase = r.steps.slowest.front().step % 8;
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(r.steps.slowest[i].step % 8 == phase);
    CHECK(r.steps.slowest[i].wall_ms >= 1.5 * kBehindStepMs);
    CHECK(r.steps.slowest[i].kind_ms[PhaseKind::compute] >= 1.5 * kBehindStepMs);
  }
  // The series (one point per step here) is device-paced: the slow steps
  // stand out where they ran, the others sit at the device's step.
  // (Where the device idled inside some step, that step is slow on the device too, truly.)
  const bool steady = run.counter("device_gap_ns") < 1e6;
  const StepSeries& series = r.steps.series;
  REQUIRE(series.stride == 1);
  REQUIRE(series.wall_ms.size() == r.steps.count);
  int slow_points = 0;
  for (std::size_t i = 0; i < series.wall_ms.size(); ++i) {
    INFO("step " << series.first_step[i] << ": " << series.wall_ms[i] << " ms");
    if (series.first_step[i] % 8 == phase) {
      ++slow_points;
      CHECK(series.wall_ms[i] >= 1.5 * kBehindStepMs);
      CHECK(series.kind_ms[PhaseKind::compute][i] >= 1.5 * kBehindStepMs);
    } else if (steady) {
      CHECK(series.wall_ms[i] < 1.5 * kBehindStepMs);
    }
  }
  CHECK(slow_points >= 4);
}

TEST_CASE("device-true accounting: loss.item() is where the host waits", "[gpu-sim][accounting]") {
  Run run;
  probe(run, "behind-item 15", "STEPSCOPE_SIM_DRIVER_WAIT=spin STEPSCOPE_SIM_DRIVER_WAIT_FAULT_PAGES=1500");
  const Report& r = run.report;
  INFO(format_summary(r));
  REQUIRE(r.steps.clock == "device");
  // A loop that waits every step: the two clocks agree on the step (the
  // device idles while the host wakes and launches: that is its step too).
  CHECK(r.steps.wall_ms.p50 == Approx(r.steps.host_wall_ms->p50).epsilon(0.1));
  CHECK(r.steps.wall_ms.min >= kBehindStepMs);
  const PhaseSummary* item = run.phase("loss_item");
  REQUIRE(item != nullptr);
  REQUIRE(item->host_share_of_step.has_value());
  CHECK(*item->host_share_of_step > 0.5);  // the host clock: the step is in loss.item()
  REQUIRE(item->device_ms.has_value());
  CHECK(item->device_ms->p50 < 0.5 * item->host_ms.p50);  // the device: a 4-byte copy (and the host's wake-up)
  const Finding* wait = finding(r, "host_waits_for_device");
  REQUIRE(wait != nullptr);
  CHECK(wait->message.find("'loss_item'") != std::string::npos);
  CHECK(wait->message.find("'backward'") != std::string::npos);
  // The wait in loss.item() is the driver's kernel time and faults: no storm.
  CHECK(static_cast<double>(r.system.minor_faults) / static_cast<double>(r.steps.count) >= 1000);
  CHECK_FALSE(has_finding(r, "page_fault_storm"));
  CHECK(settled_breakdown(r).page_fault_ms == 0);
}

TEST_CASE("device-true accounting: a launch-bound loop's lever is the host", "[gpu-sim][accounting]") {
  Run run;
  probe(run, "scheduling 30");
  const Report& r = run.report;
  INFO(format_summary(r));
  REQUIRE(r.steps.clock == "device");
  // Faster kernels do not shorten a step the host's launches pace (truth: 0%).
  const WhatIf* compute_2x = what_if(r, "kind:compute", 2);
  REQUIRE(compute_2x != nullptr);
  CHECK(compute_2x->step_change_pct > -10);
  // The host's launches are: the device idles while the host launches.
  const WhatIf* launch = what_if(r, "host:launch", 0);
  REQUIRE(launch != nullptr);
  CHECK(launch->step_change_pct < -50);
  CHECK(launch->note.find("CUDA graphs") != std::string::npos);
}

TEST_CASE("device-true accounting: the launch-bound lever with the default CUPTI windows", "[gpu-sim][accounting]") {
  // CUPTI on for 5 of every 200 measured steps: the device facts come from
  // the first window (measured steps 1-5), in a run shorter than one period
  // too, and in one that ends inside its first window (3 measured steps).
  for (const char* args : {"scheduling 30", "scheduling 8"}) {
    Run run;
    probe(run, args, "STEPSCOPE_CUPTI_WINDOW=");
    const Report& r = run.report;
    INFO(args << "\n" << format_summary(r));
    REQUIRE(r.steps.clock == "device");
    CHECK(r.overhead.device_mode == "windows");
    CHECK(run.fact("cupti_steps") == std::min<double>(5, static_cast<double>(r.steps.count)));
    CHECK(r.bottleneck.category == "scheduling");
    const WhatIf* launch = what_if(r, "host:launch", 0);
    REQUIRE(launch != nullptr);
    CHECK(launch->step_change_pct < -50);
    CHECK(launch->note.find("CUDA graphs") != std::string::npos);
    // (Below the what-if floor, the kernels' share is not projected at all.)
    if (const WhatIf* compute_2x = what_if(r, "kind:compute", 2)) CHECK(compute_2x->step_change_pct > -10);
  }
  // No CUPTI timeline at all: the lever is not projected, and says why (was: no line).
  Run off;
  probe(off, "scheduling 30", "STEPSCOPE_CUPTI=0");
  REQUIRE(off.report.steps.clock == "device");
  const WhatIf* launch = what_if(off.report, "host:launch", 0);
  REQUIRE(launch != nullptr);
  CHECK(launch->note.rfind("not projected: ", 0) == 0);
  CHECK(launch->note.find("STEPSCOPE_CUPTI=0") != std::string::npos);
  CHECK(launch->step_change_pct == 0);
}

// ---- CUPTI in windows and the run's own cost (issue 27 item 5) ----------------

TEST_CASE("CUPTI in windows: a launch-bound loop measures what collecting costs it", "[gpu-sim]") {
  Run run;
  // The default schedule (5 of every 200 measured steps after 5 warm-up
  // steps); CUPTI's kernel activity costs each launch 100 us while on: a
  // step of ~0.45 ms takes ~2.5 ms in a window. The H200 showed +50% (15 us
  // a launch here), which a busy CI machine's swings hid: the windows' steps
  // ran before the load came, the others after it (0.74 ms against 1.00).
  probe(run, "launch-bound 250", "STEPSCOPE_CUPTI_WINDOW= STEPSCOPE_SIM_CUPTI_LAUNCH_NS=100000");
  const Overhead& o = run.report.overhead;
  CHECK(o.device_mode == "windows");
  CHECK(o.window_steps == 5);
  CHECK(o.window_period == 200);
  // Measured steps 1-5 and 201-205 collected; the switch happens in the
  // step scope's own hook, before its start: no step is partly collected,
  // but the one during which the collector thread started CUPTI. That start
  // runs beside the first steps: where it takes longer than the 5 warm-up
  // steps (seen on a fresh 2-core VM), the step it ends in is partly
  // collected, and the window's steps before that not at all.
  CHECK(o.uninstrumented_steps >= 235);
  CHECK(o.instrumented_steps >= 6);
  CHECK(o.instrumented_steps <= 10);
  CHECK(o.instrumented_steps + o.uninstrumented_steps >= 244);  // one partly, at most
  CHECK(run.fact("cupti_steps") == static_cast<double>(o.instrumented_steps));
  CHECK(run.fact("cupti_kernels") >= 20.0 * static_cast<double>(o.instrumented_steps));
  CHECK(run.fact("cupti_kernels") <= 10 * 20);
  CHECK(run.counter("cupti_launch_cost_paid") == run.fact("cupti_kernels"));
  // The callbacks count launches outside the windows too (from when the
  // backend started, on the collector thread after the first steps' launches).
  CHECK(run.fact("kernel_launch_calls") > 200 * 20);
  // The programmed cost shows in the run's own comparison (medians of the
  // same run: a busy machine slows both kinds of steps alike).
  REQUIRE(o.measured);
  CHECK(o.window_cost_pct > 20);
  CHECK(o.run_cost_pct ==
        Approx(o.window_cost_pct * static_cast<double>(245 - o.uninstrumented_steps) / 245.0).epsilon(0.01));
  CHECK(o.instrumented_step_ms > o.uninstrumented_step_ms);
}

TEST_CASE("STEPSCOPE_CUPTI_WINDOW=always: every step collected, its cost not claimed", "[gpu-sim]") {
  Run run;
  probe(run, "launch-bound 30", "STEPSCOPE_SIM_CUPTI_LAUNCH_NS=15000");
  const Overhead& o = run.report.overhead;
  CHECK(o.device_mode == "always");
  CHECK(o.instrumented_steps == 25);
  CHECK(o.uninstrumented_steps == 0);
  CHECK_FALSE(o.measured);
  CHECK(o.window_cost_pct == 0);
  // Every launch since CUPTI started paid, and was recorded.
  CHECK(run.counter("cupti_launch_cost_paid") == run.fact("cupti_kernels"));
  CHECK(run.fact("cupti_kernels") >= 25 * 20);
  CHECK(run.fact("cupti_steps") == 25);
}

TEST_CASE("STEPSCOPE_CUPTI_WINDOW: other windows, a bad value, CUPTI off", "[gpu-sim]") {
  SECTION("2 of every 10") {
    Run run;
    probe(run, "launch-bound 45", "STEPSCOPE_CUPTI_WINDOW=2/10");
    CHECK(run.report.overhead.instrumented_steps == 8);  // measured steps 1-2, 11-12, 21-22, 31-32
    CHECK(run.report.overhead.uninstrumented_steps == 32);
    CHECK(run.fact("cupti_kernels") == 8 * 20);
  }
  SECTION("a bad value: one warning, the default") {
    Run run;
    probe(run, "launch-bound 12", "STEPSCOPE_CUPTI_WINDOW=7");
    CHECK(count_lines_with(run.err, "STEPSCOPE_CUPTI_WINDOW='7'") == 1);
    CHECK(run.report.overhead.device_mode == "windows");
    CHECK(run.report.overhead.window_period == 200);
  }
  SECTION("STEPSCOPE_CUPTI=0") {
    Run run;
    probe(run, "launch-bound 12", "STEPSCOPE_CUPTI=0 STEPSCOPE_SIM_CUPTI_LAUNCH_NS=15000");
    CHECK(run.report.overhead.device_mode == "off");
    CHECK(run.counter("cupti_launch_cost_paid") == 0);
  }
}

TEST_CASE("a phase's events need no capture check while no capture is open", "[gpu-sim]") {
  Run run;
  probe(run, "async 20");
  CHECK(run.counter("event_records") > 0);
  CHECK(run.counter("capture_checks") == 0);
}

TEST_CASE("capture checks come back when a capture opens, or when nobody counts captures", "[gpu-sim]") {
  SECTION("a capture") {
    Run capture;
    probe(capture, "capture 10", "STEPSCOPE_WARMUP=0");
    CHECK(capture.counter("capture_checks") > 0);
    CHECK(capture.counter("event_records_in_capture") == 0);
  }
  SECTION("STEPSCOPE_CUPTI=0: no callbacks, every phase edge checks") {
    Run off;
    probe(off, "async 20", "STEPSCOPE_CUPTI=0");
    CHECK(off.counter("capture_checks") > 0);
  }
}

TEST_CASE("CUPTI in windows: the verdicts come from the collected steps, and stay right", "[gpu-sim]") {
  // The cases above with the default schedule and 2 of every 4 steps: the
  // device facts describe the collected steps only (an uncollected step
  // would read as an idle device).
  for (const char* windows : {"STEPSCOPE_CUPTI_WINDOW=", "STEPSCOPE_CUPTI_WINDOW=2/4"}) {
    for (const auto& [args, category] : std::vector<std::pair<std::string, std::string>>{
             {"scheduling 20", "scheduling"}, {"compute 15", "compute"}, {"memory 15", "memory"}, {"input 15", "io"}}) {
      INFO(windows << " " << args);
      Run run;
      probe(run, args, windows);
      CHECK(run.report.overhead.device_mode == "windows");
      CHECK(run.fact("cupti_steps") > 0);
      CHECK(run.fact("cupti_steps") < 15);
      CHECK(run.report.bottleneck.category == category);
    }
  }
}
