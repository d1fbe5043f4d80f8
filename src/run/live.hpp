// src/run/live.hpp (not installed) — the live progress line (STEPSCOPE_LIVE=SECONDS).
//
// While a run is going, the collector thread prints one line on stderr every
// STEPSCOPE_LIVE seconds (rewritten in place on a terminal, plain lines when
// STEPSCOPE_LIVE_FORCE=1 and stderr is a file or pipe):
//
//   stepscope 12.0s | step 1234 | 41.2 ms/step (last 2.0s) | top: data 38% | verdict: io-bound (0.78)
//
// The pieces are apart so the line can be tested:
//
//   stepscope::LiveTracker tracker;
//   stepscope::LiveStatus status = tracker.update(facts_snapshot, elapsed_s);
//   std::string line = stepscope::format_live_line(status, /*max_width=*/120);
//
// Everything here is off the hot path (collector thread) and never throws.
#pragma once

#include <stepscope/export.hpp>
#include <stepscope/report.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace stepscope {
inline namespace v1 {

// What one progress line shows.
struct LiveStatus {
  double elapsed_s = 0;            // since the collector started
  std::uint64_t steps = 0;         // steps finished so far, warm-up included
  std::uint64_t warmup_steps = 0;  // of which warm-up (not in the statistics)
  // Mean ms per measured step over the window since the previous line
  // (`window_s` seconds); < 0 when no measured step finished in the window.
  double recent_ms_per_step = -1;
  double window_s = 0;
  double overall_ms_per_step = -1;    // mean over all measured steps; < 0: none yet
  std::string largest_phase;          // step-thread phase with the largest self share ("" if none)
  double largest_phase_share = 0;     // of step time, [0, 1]
  std::optional<Bottleneck> verdict;  // classify() on the facts so far; none: unknown
  std::string severity;               // "highly", "moderately", "mildly" or ""
  double confidence = 0;
  std::uint64_t dropped_records = 0;
};

// Turns successive fact snapshots into progress lines; remembers the previous
// snapshot's step count and total so the ms/step is over the recent window
// rather than the whole run (a slowdown shows up within one interval).
class STEPSCOPE_API LiveTracker {
 public:
  // `facts`: Collector facts (steps, phases, drops); the verdict is computed
  // here with classify(). Never throws (a failed classification is "unknown").
  LiveStatus update(const Report& facts, double elapsed_s) noexcept;

 private:
  std::uint64_t previous_measured_ = 0;
  double previous_total_ms_ = 0;
  double previous_elapsed_s_ = 0;
};

// One line, no newline or carriage return. `max_width` > 0 truncates (a line
// wider than the terminal would wrap and break the in-place update).
STEPSCOPE_API std::string format_live_line(const LiveStatus& status, std::size_t max_width = 0);

}  // namespace v1
}  // namespace stepscope
