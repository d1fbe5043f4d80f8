// Each analysis on small hand-built timelines whose answers can be worked
// out on paper. Times in microseconds via us() for readability.
#include <stepscope/report.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "timeline/timeline.hpp"
#include "timeline/timeline_builder.hpp"

using namespace stepscope::timeline;

using stepscope::test::Builder;
using stepscope::test::us;

TEST_CASE("kernel classification follows HTA's name rules", "[timeline][classify]") {
  CHECK(classify_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(...)") == KernelClass::communication);
  CHECK(classify_kernel("ncclDevKernel_Generic") == KernelClass::communication);
  CHECK(classify_kernel("void at::native::ncclKernel_wrapper") == KernelClass::communication);
  CHECK(classify_kernel("hipLaunchKernel") == KernelClass::communication);  // HTA: ^hip is comm
  CHECK(classify_kernel("Memcpy HtoD (Pageable -> Device)") == KernelClass::memory);
  CHECK(classify_kernel("Memset (Device)") == KernelClass::memory);
  CHECK(classify_kernel("void at::native::vectorized_elementwise_kernel<4>") == KernelClass::computation);
  CHECK(classify_kernel("Stream Sync") == KernelClass::other);
  CHECK(classify_kernel("Stream Wait Event") == KernelClass::other);
  CHECK(classify_kernel("Context Sync") == KernelClass::other);
  CHECK(classify_kernel("void copy_dmaish_kernel") == KernelClass::other);  // contains "dma"
  CHECK(classify_runtime_call("cudaLaunchKernel") == HostOpKind::runtime_launch);
  CHECK(classify_runtime_call("cudaMemcpyAsync") == HostOpKind::runtime_launch);
  CHECK(classify_runtime_call("cudaStreamSynchronize") == HostOpKind::runtime_sync);
  CHECK(classify_runtime_call("cudaMemcpy") == HostOpKind::runtime_sync);
  CHECK(classify_runtime_call("cudaEventRecord") == HostOpKind::runtime_other);
}

TEST_CASE("merge_intervals follows HTA's grouping", "[timeline][intervals]") {
  const auto merged = merge_intervals({{us(5), us(8)}, {us(0), us(3)}, {us(3), us(4)}, {us(2), us(6)}});
  REQUIRE(merged.size() == 1);  // touching and overlapping intervals merge
  CHECK(total_length(merged) == us(8));
  const auto apart = merge_intervals({{0, 10}, {20, 30}});
  CHECK(total_length(apart) == 20);
  CHECK(intersection_length(apart, {{5, 25}}) == 10);
  // After microsecond rounding an op can end before it starts; HTA keeps it
  // as a group of negative length, and so do we.
  CHECK(total_length(merge_intervals({{0, 10}, {15, 14}})) == 9);
}

TEST_CASE("temporal breakdown: span, idle, compute, non-compute", "[timeline][temporal]") {
  Builder b;
  b.device("gemm_kernel", 0, 10);
  b.device("gemm_kernel", 5, 15, 8);  // overlaps on another stream
  b.device("Memcpy DtoH (Device -> Pageable)", 20, 30, 7, DeviceOpKind::memcpy);
  b.device("Stream Sync", 30, 32, 7, DeviceOpKind::sync);
  b.device("ncclKernel_AllReduce", 40, 50, 9);
  const TemporalBreakdown t = temporal_breakdown(b.tl);
  CHECK(t.span_ns == us(50));
  CHECK(t.idle_ns == us(50 - 15 - 12 - 10));
  CHECK(t.compute_ns == us(15));
  CHECK(t.non_compute_ns == us(22));
  CHECK(t.idle_percent() + t.compute_percent() + t.non_compute_percent() == Approx(100.0));
  CHECK(temporal_breakdown(Timeline{}).span_ns == 0);
}

TEST_CASE("kernel-type breakdown slices the union exclusively", "[timeline][kernel-type]") {
  Builder b;
  b.device("gemm_kernel", 0, 10);
  b.device("ncclKernel_AllReduce", 5, 20, 9);
  b.device("Memcpy HtoD (Pinned -> Device)", 8, 12, 10, DeviceOpKind::memcpy);
  const auto slices = kernel_type_breakdown(b.tl);
  std::map<std::string, std::int64_t> got;
  for (const auto& s : slices) got[s.label] = s.time_ns;
  CHECK(got["COMPUTATION"] == us(5));
  CHECK(got["COMPUTATION overlapping COMMUNICATION"] == us(3));
  CHECK(got["COMPUTATION overlapping COMMUNICATION overlapping MEMORY"] == us(2));
  CHECK(got["COMMUNICATION overlapping MEMORY"] == us(2));
  CHECK(got["COMMUNICATION"] == us(8));
  CHECK(slices.front().label == "COMMUNICATION");  // largest first
  double total = 0;
  for (const auto& s : slices) total += s.percent;
  CHECK(total == Approx(100.0));
}

TEST_CASE("comm/compute overlap and exposed communication", "[timeline][overlap]") {
  Builder b;
  b.device("gemm_kernel", 0, 10);
  b.device("ncclKernel_AllReduce", 6, 16, 9);   // 4 us hidden, 6 us exposed
  b.device("ncclKernel_AllReduce", 30, 40, 9);  // fully exposed
  const CommComputeOverlap o = comm_compute_overlap(b.tl);
  CHECK(o.has_communication);
  CHECK(o.communication_ns == us(20));
  CHECK(o.overlapped_ns == us(4));
  CHECK(o.exposed_communication_ns == us(16));
  CHECK(o.overlap_percent() == Approx(20.0));

  Builder none;
  none.device("gemm_kernel", 0, 10);
  CHECK_FALSE(comm_compute_overlap(none.tl).has_communication);
}

TEST_CASE("idle-time breakdown: host wait, kernel wait, other", "[timeline][idle]") {
  Builder b;
  b.device("k0", 0, 10, 7, DeviceOpKind::kernel, /*launch_at=*/0);
  b.device("k1", 15, 20, 7, DeviceOpKind::kernel, /*launch_at=*/1);      // queued early: kernel wait 5
  b.device("k2", 100, 110, 7, DeviceOpKind::kernel, /*launch_at=*/2);    // queued early, gap 80 >= 30: other
  b.device("k3", 200, 210, 7, DeviceOpKind::kernel, /*launch_at=*/150);  // launched after k2 ended: host wait 90
  b.device("Stream Sync", 220, 230, 7, DeviceOpKind::sync);              // not a kernel/copy: ignored
  b.device("m0", 0, 1, 20, DeviceOpKind::memset, /*launch_at=*/0);
  const auto idle = idle_time_breakdown(b.tl);
  REQUIRE(idle.size() == 2);
  CHECK(idle[0].stream == 7);
  CHECK(idle[0].kernel_wait_ns == us(5));
  CHECK(idle[0].other_ns == us(80));
  CHECK(idle[0].host_wait_ns == us(90));
  CHECK(idle[0].other_count == 2);  // k0 (first op) and k2
  CHECK(idle[1].stream == 20);
  CHECK(idle[1].total_ns() == 0);
  // A lower threshold turns the 5 us kernel wait into "other".
  CHECK(idle_time_breakdown(b.tl, us(5))[0].kernel_wait_ns == 0);
}

TEST_CASE("device idle under a range is input's by the kind its name gives, the rule of every phase",
          "[timeline][attribution]") {
  for (const auto& [name, input] :
       {std::pair{"load_data", true}, std::pair{"Data Loading", true}, std::pair{"## data ##", true},
        std::pair{"recommend_items", false}, std::pair{"## sparse_data_dist ##", false}}) {
    Builder b;
    b.tl.steps.push_back({1, 0, us(100)});
    b.host(name, 0, 40, HostOpKind::annotation);
    b.device("gemm_kernel", 40, 100, 7, DeviceOpKind::kernel, 39, 40);
    const auto usage = per_step_device_usage(b.tl);
    REQUIRE(usage.size() == 1);
    INFO(name);
    CHECK(usage[0].idle_host_input_ns == (input ? us(40) : 0));
  }
}

TEST_CASE("a sync's device idle goes to the innermost annotation around it on its thread, else the outermost op",
          "[timeline][attribution]") {
  Builder b;
  b.tl.steps.push_back({1, 0, us(1000)});
  b.device("gemm_kernel", 0, 10, 7, DeviceOpKind::kernel, 0, 1);  // the device idles from 10 on
  // 100-110: inside "## train ##" and "## loss ##"; "## log ##" ended before it;
  // a shorter range on another thread is not its owner.
  b.host("## train ##", 20, 250, HostOpKind::annotation);
  b.host("## loss ##", 90, 120, HostOpKind::annotation);
  b.host("## log ##", 95, 99, HostOpKind::annotation);
  b.host("## other thread ##", 99, 111, HostOpKind::annotation, 2);
  b.host("cudaStreamSynchronize", 100, 110, HostOpKind::runtime_sync);
  // 300-310: no annotation; the outermost operator around it.
  b.host("aten::item", 290, 320, HostOpKind::framework_op);
  b.host("aten::_local_scalar_dense", 298, 312, HostOpKind::framework_op);
  b.host("cudaMemcpyAsync", 300, 310, HostOpKind::runtime_sync);
  // 400-410: nothing around it but the step: the call itself.
  b.host("cudaDeviceSynchronize", 400, 410, HostOpKind::runtime_sync);
  // 500-510: two ranges as long as each other: the first in the trace.
  b.host("## first ##", 495, 515, HostOpKind::annotation);
  b.host("## second ##", 495, 515, HostOpKind::annotation);
  b.host("cudaEventSynchronize", 500, 510, HostOpKind::runtime_sync);
  const auto usage = per_step_device_usage(b.tl);
  REQUIRE(usage.size() == 1);
  std::map<std::string, std::int64_t> owners;
  for (const auto& s : usage[0].sync_by_phase) owners[s.phase] = s.idle_ns;
  CHECK(owners == std::map<std::string, std::int64_t>{{"## loss ##", us(10)},
                                                      {"aten::item", us(10)},
                                                      {"cudaDeviceSynchronize", us(10)},
                                                      {"## first ##", us(10)}});
}

TEST_CASE("launch statistics pair runtime calls with their ops", "[timeline][launch]") {
  Builder b;
  b.tl.steps.push_back({1, 0, us(1000)});
  b.device("tiny", 10, 11, 7, DeviceOpKind::kernel, 0, 5);      // cpu 5 > gpu 1: short; delay 5
  b.device("long", 200, 300, 7, DeviceOpKind::kernel, 20, 90);  // cpu 70 > 50: runtime outlier; delay 110 > 100
  b.device("Memcpy HtoD (Pinned -> Device)", 95, 96, 7, DeviceOpKind::memcpy, 91, 93);  // short
  b.device("orphan", 400, 410);                                                         // no launch call: not paired
  const LaunchStats s = launch_statistics(b.tl);
  CHECK(s.pairs == 3);
  CHECK(s.short_kernels == 2);
  CHECK(s.runtime_outliers == 1);
  CHECK(s.launch_delay_outliers == 1);
  CHECK(s.launch_delay_p50_ns == Approx(us(5)));
  CHECK(s.launches_per_step == Approx(3.0));
  const auto pairs = launch_pairs(b.tl);
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[1].launch_delay_ns == us(110));
}

TEST_CASE("per-step usage attributes device idle to what the host did", "[timeline][attribution]") {
  Builder b;
  b.tl.steps.push_back({7, 0, us(100)});
  b.host("## data ##", 0, 30, HostOpKind::annotation);               // io: device idle 0-30
  b.device("gemm_kernel", 30, 50, 7, DeviceOpKind::kernel, 29, 30);  // busy 30-50
  b.host("aten::linear", 50, 70, HostOpKind::framework_op);          // scheduling: idle 50-70
  b.device("gemm_kernel", 70, 80, 7, DeviceOpKind::kernel, 69, 70);  // busy 70-80
  b.host("## loss ##", 80, 95, HostOpKind::annotation);
  b.host("cudaStreamSynchronize", 82, 92, HostOpKind::runtime_sync);  // sync idle 82-92, in "## loss ##"
  const auto usage = per_step_device_usage(b.tl);
  REQUIRE(usage.size() == 1);
  const StepDeviceUsage& u = usage[0];
  CHECK(u.step == 7);
  CHECK(u.busy_ns == us(30));
  CHECK(u.idle_ns == us(70));
  CHECK(u.idle_host_input_ns == us(30));
  CHECK(u.idle_host_sync_ns == us(10));
  // 50-70 framework op, 70-80 busy, 80-82 and 92-95 inside "## loss ##".
  CHECK(u.idle_host_scheduling_ns == us(20 + 2 + 3));
  CHECK(u.idle_unattributed_ns == us(5));  // 95-100: host did nothing we saw
  REQUIRE(u.sync_by_phase.size() == 1);
  CHECK(u.sync_by_phase[0].phase == "## loss ##");
  CHECK(u.kernels == 2);

  const DeviceFacts f = device_facts(b.tl);
  CHECK(f.steps == 1);
  CHECK(f.device_busy_fraction == Approx(0.30));
  CHECK(f.idle_host_input_fraction == Approx(0.30));
  CHECK(f.idle_sync_fraction == Approx(0.10));
  CHECK(f.top_sync_phase == "## loss ##");
  CHECK(f.kernels_per_step == Approx(2.0));
}

TEST_CASE("per-step usage: memcpy, pageable, exposed communication", "[timeline][attribution]") {
  Builder b;
  b.tl.steps.push_back({1, 0, us(100)});
  b.tl.steps.push_back({2, us(100), us(200)});
  auto& copy = b.device("Memcpy HtoD (Pageable -> Device)", 0, 10, 7, DeviceOpKind::memcpy);
  copy.host_memory = HostMemoryKind::pageable;
  b.device("gemm_kernel", 100, 150);
  b.device("ncclKernel_AllReduce", 140, 180, 9);
  const auto usage = per_step_device_usage(b.tl);
  REQUIRE(usage.size() == 2);
  CHECK(usage[0].memcpy_ns == us(10));
  CHECK(usage[0].pageable_memcpy_ns == us(10));
  CHECK(usage[1].communication_ns == us(40));
  CHECK(usage[1].exposed_communication_ns == us(30));
  const DeviceFacts f = device_facts(b.tl);
  CHECK(f.exposed_communication_fraction == Approx(0.15));
  CHECK(f.pageable_memcpy_fraction == Approx(0.05));
}

TEST_CASE("a device busy behind the host's step windows is judged over its own span", "[timeline][attribution]") {
  // Four host steps of 100 us (0-400); every kernel launched in them runs
  // back to back from 250 to 650 us, queued behind earlier work: the windows
  // see the device busy only 250-400 (37.5%, idle 62.5%), its own span
  // 400 us, all of it busy, a quarter of it communication.
  Builder b;
  for (int i = 0; i < 4; ++i) b.tl.steps.push_back({i + 1, us(100 * i), us(100 * (i + 1))});
  for (int i = 0; i < 8; ++i) {
    const std::int64_t start = 250 + 50 * i;
    b.device(i % 4 == 3 ? "ncclKernel_AllReduce" : "gemm_kernel", start, start + 50, 7, DeviceOpKind::kernel, 10 * i,
             10 * i + 5);
  }
  const DeviceFacts f = device_facts(b.tl);
  CHECK(f.device_span_busy_fraction == Approx(1.0));
  CHECK(f.host_window_idle_fraction == Approx(0.625));
  CHECK(f.device_busy_fraction == Approx(1.0));
  CHECK(f.device_idle_fraction == Approx(0.0));
  CHECK(f.idle_host_launch_bound_fraction == Approx(0.0));
  CHECK(f.compute_fraction == Approx(0.75));
  CHECK(f.communication_fraction == Approx(0.25));
  CHECK(f.exposed_communication_fraction == Approx(0.25));
  stepscope::DeviceFactsSection out;
  add_device_facts(f, out);
  CHECK(out.host_window_idle_fraction.value_or(-1) == Approx(0.625));

  // Not behind: the same kernels with gaps (busy 50% of their span) ...
  Builder gaps;
  for (int i = 0; i < 4; ++i) gaps.tl.steps.push_back({i + 1, us(100 * i), us(100 * (i + 1))});
  for (int i = 0; i < 8; ++i) gaps.device("gemm_kernel", 250 + 100 * i, 300 + 100 * i);
  const DeviceFacts g = device_facts(gaps.tl);
  CHECK(g.device_span_busy_fraction < 0.9);
  CHECK(g.host_window_idle_fraction < 0);
  stepscope::DeviceFactsSection gaps_out;
  add_device_facts(g, gaps_out);
  CHECK_FALSE(gaps_out.host_window_idle_fraction.has_value());
  // ... nor one short kernel in a long step (busy all of its own 10 us).
  Builder one;
  one.tl.steps.push_back({1, 0, us(1000)});
  one.device("gemm_kernel", 500, 510);
  const DeviceFacts o = device_facts(one.tl);
  CHECK(o.device_span_busy_fraction == Approx(1.0));
  CHECK(o.host_window_idle_fraction < 0);
  CHECK(o.device_idle_fraction == Approx(0.99));
}

TEST_CASE("no steps: one whole-trace window; empty timeline is harmless", "[timeline][attribution]") {
  Builder b;
  b.host("aten::mm", 0, 10, HostOpKind::framework_op);
  b.device("gemm_kernel", 10, 20);
  const auto usage = per_step_device_usage(b.tl);
  REQUIRE(usage.size() == 1);
  CHECK(usage[0].step == -1);
  CHECK(usage[0].span_ns() == us(20));
  const DeviceFacts empty = device_facts(Timeline{});
  CHECK_FALSE(empty.has_device_activity);
  CHECK(empty.steps == 0);
  CHECK(empty.device_busy_fraction == 0.0);
}
