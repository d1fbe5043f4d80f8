// The CUDA backend end to end, each case in its own process
// (tests/cuda/gpu_probe.cu). Without a GPU: the fallback path (report says
// why, one stderr line, host timing intact, no hang). [gpu] cases need a
// usable device and skip themselves with a message otherwise.
#include <stepscope/report.hpp>

#include "core/device_backend.hpp"
#include "device_fact_key.hpp"

#include "common/files.hpp"

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace stepscope;
using stepscope_test::slurp;
using stepscope_test::TempDir;

namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// Runs the probe under `timeout` (a hang fails the test instead of blocking CI).
int run_probe(const TempDir& dir, const std::string& env, const std::string& args) {
  const std::string cmd = "cd '" + dir.path + "' && env STEPSCOPE_QUIET=1 " + env + " timeout 120 '" +
                          STEPSCOPE_GPU_PROBE + "' " + args + " >'" + dir.path + "/stdout.txt' 2>'" + dir.path +
                          "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Report load(const std::string& path) {
  Report r;
  std::string error;
  INFO(error);
  REQUIRE(load_report(path, r, error));
  return r;
}

const PhaseSummary* find(const Report& r, const std::string& name) {
  for (const auto& p : r.phases)
    if (p.name == name && p.thread_role == ThreadRole::step) return &p;
  return nullptr;
}

bool gpu_available() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

double fact(const Report& r, const std::string& key) {
  return test::device_fact(r.device.facts, key).value_or(std::nan(""));
}

}  // namespace

TEST_CASE("without a GPU the run falls back to host timing and says why, once", "[cuda][fallback]") {
  if (gpu_available()) {
    WARN("skipped: a GPU is usable here, the fallback path is not taken");
    return;
  }
  TempDir dir;
  REQUIRE(run_probe(dir, "", "spin 200 30") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(r.run.build.at("cuda") == "ON");
  CHECK_FALSE(r.device.enabled);
  CHECK((r.device.status == "no_driver" || r.device.status == "no_device" || r.device.status == "driver_too_old"));
  CHECK_FALSE(r.device.reason.empty());
  // Host timing intact: every step and phase measured, no device time invented.
  CHECK(r.steps.count == 25);
  const PhaseSummary* spin = find(r, "spin");
  REQUIRE(spin != nullptr);
  CHECK(spin->count == 25);
  CHECK(spin->host_ms.mean > 0.04);
  CHECK_FALSE(spin->device_ms.has_value());
  // STEPSCOPE_QUIET=1 (run_probe): nothing on stderr, the reason is in the
  // report (issue 12). Without it, no start-up notice and no summary line
  // either (issue 29: every CPU-only run of a CUDA build printed one): a
  // machine without a GPU is said in the report only.
  CHECK(lines(slurp(dir.path + "/stderr.txt")).empty());
  REQUIRE(run_probe(dir, "STEPSCOPE_QUIET=0", "spin 200 30") == 0);
  const auto err = lines(slurp(dir.path + "/stderr.txt"));
  INFO(slurp(dir.path + "/stderr.txt"));
  std::size_t notices = 0, summary_lines = 0;
  for (const auto& line : err) {
    if (line.rfind("stepscope: ", 0) == 0 && line.find(r.device.status) != std::string::npos) ++notices;
    if (line.find("device timing") != std::string::npos) ++summary_lines;
  }
  CHECK(notices == 0);
  CHECK(summary_lines == 0);
  CHECK(err.size() > 5);  // the summary itself was printed
}

TEST_CASE("STEPSCOPE_CUDA=0 turns device timing off at run time", "[cuda][fallback]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_CUDA=0", "spin 200 10") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(r.device.status == "disabled");
  CHECK(r.device.reason == "device timing turned off by STEPSCOPE_CUDA");  // whichever spelling of off was used
  CHECK_FALSE(r.device.enabled);
  CHECK(find(r, "spin") != nullptr);
  CHECK(lines(slurp(dir.path + "/stderr.txt")).empty());  // STEPSCOPE_QUIET=1: the notice is in the report only
}

TEST_CASE("a bad STEPSCOPE_NVTX value is one warning, not a failure", "[cuda][fallback]") {
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_NVTX=maybe", "spin 100 8") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(find(r, "spin") != nullptr);
  if (!gpu_available()) CHECK_FALSE(r.device.enabled);  // no GPU: NVTX is never read
}

TEST_CASE("[gpu] a kernel of known duration: device time matches, host time does not wait", "[cuda][gpu]") {
  if (!gpu_available()) {
    WARN("skipped: no usable CUDA device (cudaGetDeviceCount failed or found none)");
    return;
  }
  TempDir dir;
  REQUIRE(run_probe(dir, "", "spin 2000 60") == 0);
  const Report r = load(dir.path + "/stepscope-report.json");
  INFO(r.device.status << ": " << r.device.reason);
  REQUIRE(r.device.enabled);
  const PhaseSummary* spin = find(r, "spin");
  REQUIRE(spin != nullptr);
  REQUIRE(spin->device_ms.has_value());
  CHECK(spin->device_ms->count == spin->count);
  CHECK(spin->device_ms->mean == Approx(2.0).epsilon(0.02));  // within 2%
  CHECK(spin->host_ms.mean < 0.2 * spin->device_ms->mean);    // launch returns long before the kernel ends
  CHECK(fact(r, "sync_calls_in_steps") == 0);                 // nothing synchronised inside the steps
  CHECK(fact(r, "cupti_kernels") == 60);
  CHECK(fact(r, "kernel_launch_calls") == 60);
  CHECK(fact(r, "event_pool_exhausted") == 0);
  CHECK(fact(r, "device_busy_fraction") > 0.8);
}

TEST_CASE("[gpu] phases inside a graph capture record no events; graph replays are timed as one unit", "[cuda][gpu]") {
  if (!gpu_available()) {
    WARN("skipped: no usable CUDA device (cudaGetDeviceCount failed or found none)");
    return;
  }
  TempDir dir;
  REQUIRE(run_probe(dir, "STEPSCOPE_WARMUP=0", "capture 20") == 0);  // the capture itself must not break
  const Report r = load(dir.path + "/stepscope-report.json");
  CHECK(fact(r, "phases_in_graph_capture") == 4);
  const PhaseSummary* captured = find(r, "captured");
  REQUIRE(captured != nullptr);
  CHECK_FALSE(captured->device_ms.has_value());  // never a fake 0 ms
  const PhaseSummary* graph = find(r, "graph");
  REQUIRE(graph != nullptr);
  REQUIRE(graph->device_ms.has_value());
  CHECK(graph->device_ms->mean == Approx(1.0).epsilon(0.05));  // 4 x 250 us kernels per replay
}

namespace {
// Independent of dl_iterate_phdr: the kernel's list of the process's mappings.
bool driver_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcuda.so") != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("device_in_use: true exactly when the CUDA driver library is loaded", "[cuda][fallback]") {
  CHECK(stepscope::detail::device_in_use() == driver_mapped());
  if (driver_mapped()) {
    WARN("the driver is already loaded here (a GPU machine): the not-loaded case is not exercised");
    return;
  }
  void* stub = ::dlopen(STEPSCOPE_CUDA_STUB, RTLD_NOW | RTLD_LOCAL);
  if (stub == nullptr) {
    WARN("skipped: cannot load the toolkit's driver stub " STEPSCOPE_CUDA_STUB);
    return;
  }
  REQUIRE(driver_mapped());
  CHECK(stepscope::detail::device_in_use());
  ::dlclose(stub);
}
