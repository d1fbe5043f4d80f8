#include "core/trace_recorder.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/env.hpp"

namespace stepscope {
inline namespace v1 {
namespace detail {

namespace {
constexpr std::size_t kMaxEventsPerOpenStep = 4096;
constexpr std::size_t kRecentBackground = 4096;
}  // namespace

bool parse_trace_window(const std::string& text, TraceWindow& out) {
  out = TraceWindow{};
  out.text = text;
  if (text.empty() || text == "0" || text == "off") return true;
  if (text == "slow") {
    out.mode = TraceWindow::Mode::slow_relative;
    return true;
  }
  if (text.rfind("slow:", 0) == 0) {
    char* end = nullptr;
    const double ms = std::strtod(text.c_str() + 5, &end);
    if (end == text.c_str() + 5 || *end != '\0' || !(ms > 0)) return false;
    out.mode = TraceWindow::Mode::slow_absolute;
    out.slow_ms = ms;
    return true;
  }
  const auto dash = text.find('-');
  std::uint64_t a = 0, b = 0;
  if (dash == std::string::npos) {
    if (!parse_uint(text.c_str(), 1, ~0u, a)) return false;
    b = a;
  } else if (!parse_uint(text.substr(0, dash).c_str(), 1, ~0u, a) ||
             !parse_uint(text.substr(dash + 1).c_str(), 1, ~0u, b) || b < a) {
    return false;
  }
  out.mode = TraceWindow::Mode::steps;
  out.first_step = a;
  out.last_step = b;
  return true;
}

TraceRecorder::TraceRecorder(TraceWindow window, std::size_t max_events, const TickConverter* clock)
    : window_(std::move(window)), max_events_(max_events), clock_(clock) {
  capture_.window = window_.text;
}

TraceEvent TraceRecorder::convert(std::int64_t tid, const PhaseRecord& r) const {
  TraceEvent e;
  e.name = r.site->name ? r.site->name : "";
  e.kind = r.site->kind;
  e.is_step = (r.flags & kRecordIsStep) != 0;
  if (r.flags & kRecordOuterStep) {  // held the steps within it: not one of them
    e.is_step = false;
    e.name = "loop of steps";
  }
  e.thread = tid;
  e.start_ns = clock_->to_ns(r.start_ticks);
  e.end_ns = clock_->to_ns(r.end_ticks);
  e.step = r.step;
  e.depth = r.depth;
  return e;
}

void TraceRecorder::keep(TraceEvent e) {
  if (capture_.events.size() >= max_events_) {
    ++capture_.events_over_limit;
    return;
  }
  capture_.events.push_back(std::move(e));
}

void TraceRecorder::add_device_event(TraceEvent event) {
  if (enabled()) keep(std::move(event));
}

void TraceRecorder::on_record(std::int64_t tid, bool step_thread, const PhaseRecord& r, double median_step_ms) {
  if (r.flags & kRecordHoldsSteps) return;  // a mark, not a scope
  const bool is_step = (r.flags & kRecordIsStep) != 0;
  bool& known_step_thread = step_threads_[tid];
  if (is_step || step_thread) known_step_thread = true;
  if (window_.mode == TraceWindow::Mode::steps) {
    if (r.step >= window_.first_step && r.step <= window_.last_step) keep(convert(tid, r));
    return;
  }
  // Slow-step modes: hold the step's records until the step says whether it was slow.
  const bool in_step = (r.flags & kRecordInStep) != 0;
  if (!in_step) {
    recent_background_.push_back(convert(tid, r));
    if (recent_background_.size() > kRecentBackground) recent_background_.pop_front();
    return;
  }
  auto& open = open_steps_[tid];
  if (!is_step) {
    if (open.size() < kMaxEventsPerOpenStep) open.push_back(convert(tid, r));
    return;
  }
  const double ms = static_cast<double>(clock_->duration_ns(r.start_ticks, r.end_ticks)) * 1e-6;
  const double threshold =
      window_.mode == TraceWindow::Mode::slow_absolute ? window_.slow_ms : window_.slow_factor * median_step_ms;
  if (median_step_ms > 0 || window_.mode == TraceWindow::Mode::slow_absolute) {
    if (ms > threshold) {
      TraceEvent step = convert(tid, r);
      for (auto& e : open) keep(std::move(e));
      for (const auto& b : recent_background_)
        if (b.end_ns > step.start_ns && b.start_ns < step.end_ns) keep(b);
      keep(std::move(step));
    }
  }
  open.clear();
}

TraceCapture TraceRecorder::take() {
  TraceCapture out = std::move(capture_);
  std::sort(out.events.begin(), out.events.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.depth < b.depth;
  });
  out.events.erase(std::unique(out.events.begin(), out.events.end(),
                               [](const TraceEvent& a, const TraceEvent& b) {
                                 return a.start_ns == b.start_ns && a.end_ns == b.end_ns && a.thread == b.thread &&
                                        a.name == b.name;
                               }),
                   out.events.end());
  for (const auto& [tid, is_step] : step_threads_)
    out.thread_names.emplace_back(tid, is_step ? "step thread" : "background");
  capture_ = TraceCapture{};
  capture_.window = window_.text;
  return out;
}

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
