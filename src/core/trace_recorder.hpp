// Keeps raw phase intervals for the trace export (STEPSCOPE_TRACE), bounded.
// Collector thread only.
#pragma once

#include "stats/clock.hpp"

#include <stepscope/ring.hpp>
#include "core/trace.hpp"

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace stepscope {
inline namespace v1 {
namespace detail {

struct TraceWindow {
  enum class Mode { off, steps, slow_relative, slow_absolute } mode = Mode::off;
  std::uint64_t first_step = 0, last_step = 0;  // steps mode, inclusive
  double slow_factor = 1.5;                     // slow_relative: step > factor x running median
  double slow_ms = 0;                           // slow_absolute
  std::string text;
};

// Parses STEPSCOPE_TRACE: "A-B", "N", "slow", "slow:MS". False when invalid.
bool parse_trace_window(const std::string& text, TraceWindow& out);

class TraceRecorder {
 public:
  TraceRecorder(TraceWindow window, std::size_t max_events, const TickConverter* clock);
  bool enabled() const { return window_.mode != TraceWindow::Mode::off; }
  // median_step_ms: current median step time (slow_relative mode).
  void on_record(std::int64_t tid, bool step_thread, const PhaseRecord& record, double median_step_ms);
  void add_device_event(TraceEvent event);
  TraceCapture take();

 private:
  TraceEvent convert(std::int64_t tid, const PhaseRecord& r) const;
  void keep(TraceEvent e);

  TraceWindow window_;
  std::size_t max_events_;
  const TickConverter* clock_;
  TraceCapture capture_;
  // slow modes: the current step's records per step thread, and recent background ones.
  std::unordered_map<std::int64_t, std::vector<TraceEvent>> open_steps_;
  std::deque<TraceEvent> recent_background_;
  std::unordered_map<std::int64_t, bool> step_threads_;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
