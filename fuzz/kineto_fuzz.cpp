// libFuzzer target: any byte string fed to the Kineto importer (gzip or
// plain) must produce either a timeline or an error, never a crash, a hang
// or an escaping exception; analyses on whatever was imported must cope too.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stepscope/import.hpp"
#include "stepscope/timeline.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  stepscope::ImportOptions options;
  options.pipelined_decompression = (size % 2) == 0;  // exercise both paths
  options.hta_rounding = (size % 3) != 0;
  const stepscope::ImportResult result = stepscope::import_kineto_trace_from_buffer(
      std::string_view(reinterpret_cast<const char*>(data), size), options);
  if (!result.ok) {
    if (result.error.empty()) __builtin_trap();  // a failure must say why
    return 0;
  }
  namespace tl = stepscope::timeline;
  (void)tl::temporal_breakdown(result.trace);
  (void)tl::kernel_type_breakdown(result.trace);
  (void)tl::comm_compute_overlap(result.trace);
  (void)tl::idle_time_breakdown(result.trace);
  (void)tl::launch_statistics(result.trace);
  (void)tl::device_facts(result.trace);
  return 0;
}
