// src/core/trace.hpp (not installed) — raw phase intervals for timeline viewers.
//
// With STEPSCOPE_TRACE set, the collector keeps the raw intervals of a window
// of steps and finish() writes them as a gzipped Chrome-trace JSON file that
// Perfetto UI and chrome://tracing open:
//
//   STEPSCOPE_TRACE=100-120 ./train     # steps 100 to 120
//   STEPSCOPE_TRACE=slow ./train        # steps slower than 1.5x the running median
//   STEPSCOPE_TRACE=slow:25 ./train     # steps slower than 25 ms
//
// The number of events kept is bounded (STEPSCOPE_TRACE_MAX_EVENTS, default
// 200000, about 10 MB in memory); events past the bound are counted.
#pragma once

#include <stepscope/report.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace stepscope {
inline namespace v1 {

struct TraceEvent {
  std::string name;
  PhaseKind kind = PhaseKind::other;
  bool is_step = false;
  std::int64_t thread = 0;    // OS thread id, or a stream id for device events
  bool device = false;        // a device (GPU) interval
  std::int64_t start_ns = 0;  // CLOCK_MONOTONIC ns
  std::int64_t end_ns = 0;
  std::uint64_t step = 0;  // step number the interval belongs to
  std::uint8_t depth = 0;
};

struct TraceCapture {
  std::string window;              // as given in STEPSCOPE_TRACE
  std::vector<TraceEvent> events;  // sorted by (start, depth)
  std::uint64_t events_over_limit = 0;
  std::vector<std::pair<std::int64_t, std::string>> thread_names;  // tid -> "step thread" / "background"
};

// Writes a Chrome-trace JSON (gzipped when path ends in .gz): one process per
// rank with a readable process_name, one track per thread (and per device
// stream), phases as complete events, steps marked. False with `error` set
// to the reason (the caller names the path).
bool write_chrome_trace(const TraceCapture& capture, const RunInfo& run, const std::string& path, std::string& error);

}  // namespace v1
}  // namespace stepscope
