#include "cuda/cupti_windows.hpp"

#include <stepscope/clock.hpp>

#include <algorithm>
#include <thread>

namespace stepscope {
inline namespace v1 {
namespace detail::cuda {
namespace {

constexpr std::size_t kMaxStepsKept = 1u << 16;  // per kind: 512 KiB at most
constexpr std::size_t kMaxSwitchesKept = 512;

double median_ms(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double m = static_cast<double>(*mid);
  if (v.size() % 2 == 0) m = (m + static_cast<double>(*std::max_element(v.begin(), mid))) / 2;
  return m * 1e-6;
}

}  // namespace

void CollectionWindows::start(WindowSchedule schedule, bool collecting, Switch fn, void* context) noexcept {
  schedule_ = schedule;
  fn_ = schedule.always() ? nullptr : fn;
  context_ = context;
  initially_on_ = collecting;
  on_.store(collecting, std::memory_order_relaxed);
}

bool CollectionWindows::want(std::uint32_t step) const noexcept {
  const std::uint64_t warmup = warmup_.load(std::memory_order_relaxed);
  if (step <= warmup) return false;
  return (step - warmup - 1) % schedule_.period < schedule_.on;
}

void CollectionWindows::switch_to(bool on) noexcept {
  if (stopped_.load(std::memory_order_acquire)) return;
  if (busy_.exchange(true, std::memory_order_acquire)) return;  // another thread is switching
  if (on_.load(std::memory_order_relaxed) != on && !stopped_.load(std::memory_order_acquire)) {
    // The logged time brackets collection conservatively: before a disable,
    // after an enable, so "on" intervals were wholly collected.
    if (!on) {
      const std::uint64_t n = written_.load(std::memory_order_relaxed);
      log_[n % log_.size()] = Entry{static_cast<std::int64_t>(monotonic_ns()), false};
      written_.store(n + 1, std::memory_order_release);
    }
    fn_(context_, on);
    if (on) {
      const std::uint64_t n = written_.load(std::memory_order_relaxed);
      log_[n % log_.size()] = Entry{static_cast<std::int64_t>(monotonic_ns()), true};
      written_.store(n + 1, std::memory_order_release);
    }
    on_.store(on, std::memory_order_relaxed);
  }
  busy_.store(false, std::memory_order_release);
}

void CollectionWindows::stop() noexcept {
  stopped_.store(true, std::memory_order_release);
  // A switch in progress on another thread finishes first (microseconds).
  for (int i = 0; i < 100000 && busy_.load(std::memory_order_acquire); ++i) std::this_thread::yield();
}

void CollectionWindows::read_log() noexcept {
  const std::uint64_t written = written_.load(std::memory_order_acquire);
  try {
    for (; read_ < written; ++read_) switches_.push_back(log_[read_ % log_.size()]);
  } catch (...) {
    read_ = written;  // out of memory: later steps read as partly collected
  }
  if (switches_.size() > kMaxSwitchesKept)
    switches_.erase(switches_.begin(), switches_.begin() + static_cast<std::ptrdiff_t>(kMaxSwitchesKept / 2));
}

Collected CollectionWindows::classify(std::int64_t start_ns, std::int64_t end_ns) noexcept {
  read_log();
  // The first switch after the start: none before the end means one state throughout.
  const auto after = std::upper_bound(switches_.begin(), switches_.end(), start_ns,
                                      [](std::int64_t t, const Entry& e) { return t < e.ns; });
  if (after != switches_.end() && after->ns <= end_ns) return Collected::partly;
  // Switches alternate: the state at the start is the last switch's, or the opposite of the next one's.
  const bool on = after != switches_.begin() ? std::prev(after)->on
                  : after != switches_.end() ? !after->on
                                             : initially_on_;
  return on ? Collected::yes : Collected::no;
}

void CollectionWindows::add_step(Collected where, std::int64_t ns) noexcept {
  try {
    if (where == Collected::yes && on_ns_.size() < kMaxStepsKept) on_ns_.push_back(ns);
    if (where == Collected::no && off_ns_.size() < kMaxStepsKept) off_ns_.push_back(ns);
  } catch (...) {
  }
  if (where == Collected::partly) ++partly_;
}

void CollectionWindows::describe(Overhead& out, const char* mode) const {
  out.device_mode = mode;
  if (fn_ != nullptr) {
    out.window_steps = schedule_.on;
    out.window_period = schedule_.period;
  }
  out.instrumented_steps = on_ns_.size();
  out.uninstrumented_steps = off_ns_.size();
  out.instrumented_step_ms = median_ms(on_ns_);
  out.uninstrumented_step_ms = median_ms(off_ns_);
  out.measured = on_ns_.size() >= 2 && off_ns_.size() >= 2 && out.uninstrumented_step_ms > 0;
  if (!out.measured) return;
  out.window_cost_pct = (out.instrumented_step_ms / out.uninstrumented_step_ms - 1.0) * 100.0;
  const double all = static_cast<double>(on_ns_.size() + off_ns_.size() + partly_);
  // Steps during which collection was switched were partly collected: counted with the collected.
  out.run_cost_pct = out.window_cost_pct * static_cast<double>(on_ns_.size() + partly_) / all;
}

}  // namespace detail::cuda
}  // namespace v1
}  // namespace stepscope
