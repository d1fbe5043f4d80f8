// libFuzzer target: any byte string fed to the Kineto importer (gzip or
// plain) must produce either a timeline or an error, never a crash, a hang
// or an escaping exception; analyses on whatever was imported must cope too.
// The importer reads an input whole, streamed in chunks, or whole on two
// threads (split at a point the input picks here); all three must give the
// same answer, or the target traps.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "import/kineto_reader_internal.hpp"
#include "import/trace_import.hpp"
#include "timeline/timeline.hpp"

namespace {

// Everything an import produced that a difference between the paths could change.
std::string fingerprint(const stepscope::ImportResult& r) {
  std::ostringstream out;
  out << r.ok << '|' << r.error << '|' << r.stats.compressed_bytes << ' ' << r.stats.uncompressed_bytes << ' '
      << r.stats.events_seen << ' ' << r.stats.complete_events << ' ' << r.stats.events_dropped_after_last_step << ' '
      << r.stats.gzip << ' ' << r.stats.fractional_timestamps << '|';
  const stepscope::timeline::Timeline& tl = r.trace;
  out << tl.rank << ' ' << tl.world_size << ' ' << tl.has_distributed_info << ' ' << tl.distributed_backend << '|';
  for (const auto& d : tl.devices) out << d.id << ' ' << d.name << ' ' << d.total_memory_bytes << ';';
  for (const auto& n : tl.names) out << n << ';';
  for (const auto& d : tl.device_ops)
    out << d.start_ns << ' ' << d.end_ns << ' ' << d.stream << ' ' << d.correlation << ' ' << d.name << ';';
  for (const auto& h : tl.host_ops)
    out << h.start_ns << ' ' << h.end_ns << ' ' << h.pid << ' ' << h.tid << ' ' << h.correlation << ' ' << h.name
        << ';';
  for (const auto& p : tl.phases) out << p.name << ' ' << p.start_ns << ' ' << p.tid << ';';
  return out.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  stepscope::ImportOptions options;
  options.pipelined_decompression = (size % 2) == 0;  // exercise both paths
  options.hta_rounding = (size % 3) != 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const stepscope::ImportResult result = stepscope::import_kineto_trace_from_buffer(bytes, options);
  if (!result.ok && result.error.empty()) __builtin_trap();  // a failure must say why

  using stepscope::detail::KinetoParser;
  const std::string expected = fingerprint(result);
  stepscope::ImportOptions streaming = options;
  streaming.max_in_memory_json_bytes = 0;
  if (fingerprint(stepscope::detail::import_kineto_buffer_with(bytes, streaming, KinetoParser::automatic)) != expected)
    __builtin_trap();
  // A quarter of the inputs: starting a thread under the sanitizers costs more than the rest of a run.
  if (size > 0 && (data[size - 1] & 3) == 0) {
    stepscope::ImportOptions two_threads = options;
    two_threads.pipelined_decompression = true;
    stepscope::detail::ImportTuning split;
    split.min_split_bytes = 0;
    split.split_search_from = static_cast<std::int64_t>(data[0]) * static_cast<std::int64_t>(size) / 256;
    if (fingerprint(stepscope::detail::import_kineto_buffer_with(bytes, two_threads, KinetoParser::automatic, nullptr,
                                                                 split)) != expected)
      __builtin_trap();
  }

  if (!result.ok) return 0;
  namespace tl = stepscope::timeline;
  (void)tl::temporal_breakdown(result.trace);
  (void)tl::kernel_type_breakdown(result.trace);
  (void)tl::comm_compute_overlap(result.trace);
  (void)tl::idle_time_breakdown(result.trace);
  (void)tl::launch_statistics(result.trace);
  (void)tl::device_facts(result.trace);
  return 0;
}
