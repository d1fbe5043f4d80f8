// src/import/trace_import.hpp — the Kineto importer's C++ interface inside
// the project: the trace read into a timeline::Timeline, the Report built
// from it, HTA's tables and the text views of `stepscope analyze`. Not
// installed (docs/architecture.md, "The installed API"): a user program calls
// analyze_trace_file() (stepscope/import.hpp) or the `stepscope analyze` CLI.
//
//   stepscope::ImportResult r = stepscope::import_kineto_trace("rank0.json.gz");
//   if (!r.ok) { std::fprintf(stderr, "%s\n", r.error.c_str()); return 1; }
//   auto facts = stepscope::timeline::device_facts(r.trace);
//
// A trace of up to ImportOptions::max_in_memory_json_bytes of JSON is read
// whole and parsed on two threads; a larger one streams: gzip (or plain JSON)
// is inflated in fixed-size chunks and parsed as it comes, so memory grows with
// the number of events kept, not with the size of the file. No JSON DOM is
// ever built. Nothing throws: every
// failure (unreadable file, bad gzip, truncated or invalid JSON, a field of
// the wrong type, no traceEvents) comes back as ok == false with an error
// naming what is wrong and where (byte offset in the uncompressed JSON,
// event index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stepscope/export.hpp"
#include "stepscope/import.hpp"  // analyze_trace_file()
#include "stepscope/report.hpp"
#include "timeline/timeline.hpp"

namespace stepscope {
inline namespace v1 {

struct ImportOptions {
  // Apply HTA's rounding of fractional-microsecond timestamps
  // (start' = ceil(ts), end' = floor(ts + dur), in float64 microseconds) so
  // the analyses match HTA exactly. Off: keep nanosecond precision.
  bool hta_rounding = true;
  // With two or more distinct ProfilerStep#N, drop the last (usually partial)
  // step as HTA does: host events starting at or after it and the device
  // events they launched.
  bool drop_last_profiler_step = true;
  // Refuse a single event larger than this (uncompressed bytes of its JSON);
  // protects against a hostile file holding one gigantic string.
  std::size_t max_event_bytes = 64u << 20;
  // Use a second thread: a trace read whole (below) is parsed in two halves
  // at once; a streamed one is inflated while it is parsed.
  bool pipelined_decompression = true;
  // Traces with at most this many bytes of JSON are read into memory whole
  // (a gzip's size comes from its trailer) and parsed faster; larger ones, and
  // anything that cannot say its size up front (a pipe), stream in 256 KiB
  // chunks, so memory follows what is kept, not the size of the file. 0:
  // always stream.
  std::size_t max_in_memory_json_bytes = 64u << 20;
  // Bounds on one import, so that a hostile or endless input (a gzip bomb of
  // identical events, a generator behind a FIFO) ends with an error naming
  // the limit instead of taking all memory or running forever: at most this
  // many elements of traceEvents (memory follows the events kept, about 150
  // bytes each at the peak: docs/benchmarks-import.md, "Memory bound") and at
  // most this many bytes of JSON. Real traces are far below both (the largest
  // in tests/data: 0.2 M events, 36 MB).
  std::uint64_t max_events = 10'000'000;
  std::uint64_t max_json_bytes = std::uint64_t{8} << 30;
};

struct ImportStats {
  std::uint64_t compressed_bytes = 0;    // bytes read from the file
  std::uint64_t uncompressed_bytes = 0;  // JSON bytes parsed
  std::uint64_t events_seen = 0;         // elements of traceEvents
  std::uint64_t complete_events = 0;     // ph "X" events with cat and dur
  std::uint64_t events_dropped_after_last_step = 0;
  // Complete events without "cat" in a Kineto trace: dropped, as HTA drops
  // them (in a legacy trace, where none has one, they are all kept).
  std::uint64_t events_without_category = 0;
  bool gzip = false;
  bool fractional_timestamps = false;
  // The legacy Chrome trace of a PyTorch built without Kineto (no event has a
  // "cat"; usually a top-level array with "pid": "CPU functions"): every
  // event is read as a host event, operators ("::" in the name) as cpu_op,
  // the rest as record_function ranges.
  bool legacy_format = false;
};

struct ImportResult {
  bool ok = false;
  std::string error;  // empty when ok
  timeline::Timeline trace;
  ImportStats stats;

  explicit operator bool() const { return ok; }
};

// Reads a .json or .json.gz file (gzip is recognised by its magic bytes, not
// the extension). Never throws.
STEPSCOPE_API ImportResult import_kineto_trace(const std::string& path, const ImportOptions& options = {}) noexcept;

// Same, from bytes already in memory (gzip or plain). Never throws.
STEPSCOPE_API ImportResult import_kineto_trace_from_buffer(std::string_view bytes,
                                                           const ImportOptions& options = {}) noexcept;

// ---- a report from a trace (src/import/trace_report.cpp) -------------------

// Builds the same Report a live run writes, from an imported trace: steps from
// ProfilerStep#N, phases from user annotations, device facts from the
// timeline analyses, then the analyzer's verdict. Never throws.
// analyze_trace_file (stepscope/import.hpp) with the importer's options
// (`stepscope analyze --max-events`).
STEPSCOPE_API bool analyze_trace_file(const std::string& path, const ImportOptions& options, Report& out,
                                      std::string& error) noexcept;

// Writes the report of an analysed trace as write_report_file does (atomic
// rename, links, devices and FIFOs in place) but without the fsync: the
// report is derived from a trace that is still there, so a machine crash
// loses nothing one more run does not give back (a compiler does not fsync
// its output either), and the fsync was 0.2-6 ms of a 30 ms `stepscope
// analyze` on a shared disk (docs/benchmarks-import.md).
STEPSCOPE_API bool write_trace_report_file(const Report& report, const std::string& path, std::string& error);

STEPSCOPE_API Report report_from_timeline(const timeline::Timeline& trace, const std::string& source) noexcept;

// The steps report_from_timeline analyses: the trace's ProfilerSteps; in a
// trace without them, the iterations its loop's own ranges mark
// (timeline::infer_iterations, the first left out as warm-up when three or
// more), else with device activity the whole trace as one window
// (docs/timeline.md). `timeline` is the trace with those steps when they
// differ from its own (restepped); `warning` says what was done. Copies the
// trace when it re-steps it (may throw std::bad_alloc; report_from_timeline
// catches it and says so in the report).
struct AnalysedSteps {
  bool restepped = false;
  timeline::Timeline timeline;
  std::vector<timeline::Step> warmup;
  std::string warning;
};
STEPSCOPE_API AnalysedSteps analysed_steps(const timeline::Timeline& trace);

// HTA's tables (Report::device.hta) for one rank's timeline; present == false
// when the trace holds no device activity. Never throws on a valid timeline.
STEPSCOPE_API HtaTables hta_tables(const timeline::Timeline& trace);

// Fills PhaseSummary::top_operators of the step phases of a report built
// from `trace` (user annotations and PyTorch's data/forward/backward/
// optimizer): the `per_kind` cpu_ops and the `per_kind` kernels with the most
// self time inside each phase. report_from_timeline calls it.
inline constexpr std::size_t kTopOperatorsPerKind = 8;
STEPSCOPE_API void attach_top_operators(const timeline::Timeline& trace, std::vector<PhaseSummary>& phases,
                                        std::size_t per_kind = kTopOperatorsPerKind);
// The text view of the phases' top_operators (`stepscope show/analyze --operators`).
STEPSCOPE_API std::string format_top_operators(const Report& report);

// The text view of report.device.hta (`stepscope analyze --hta`): HTA's
// temporal, kernel-type and idle-time tables and the launch statistics.
STEPSCOPE_API std::string format_hta(const Report& report);

// Why a timeline gives no step to analyse, and how to record one that does
// (torch.profiler's schedule and prof.step()). One line, no path.
std::string nothing_to_time(const timeline::Timeline& trace);

}  // namespace v1
}  // namespace stepscope
