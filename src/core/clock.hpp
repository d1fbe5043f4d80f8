// Tick-to-nanosecond conversion for the collector (the hot path only reads
// raw ticks, see include/stepscope/clock.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace stepscope::detail {

// Decides the clock at start-up: TSC when the CPU says its TSC is invariant
// (CPUID 0x80000007 EDX bit 8) and the kernel uses it as clock source (it
// would switch away from an unstable TSC); STEPSCOPE_CLOCK=monotonic forces
// CLOCK_MONOTONIC. Sets g_use_tsc. Returns "tsc" or "clock_monotonic".
std::string choose_clock(const char* env_override, std::string& warning);
bool cpu_has_invariant_tsc() noexcept;
bool kernel_clocksource_is_tsc() noexcept;

// Linear map ticks -> CLOCK_MONOTONIC ns, calibrated from (tsc, ns) pairs
// taken off the hot path. Each pair is bracketed by two clock_gettime calls
// and the tightest of several tries is kept, so a pair is accurate to about
// the cost of one clock_gettime (~20-50 ns). The slope error is that divided
// by the time between the pairs: under 5 ppm after 10 ms, 0.05 ppm after 1 s.
class TickConverter {
 public:
  void start() noexcept;        // first pair
  void recalibrate() noexcept;  // new slope from the first pair to now (collector, every drain)
  double ns_per_tick() const noexcept { return ns_per_tick_; }
  std::int64_t to_ns(std::uint64_t ticks) const noexcept {  // CLOCK_MONOTONIC ns
    return base_ns_ + static_cast<std::int64_t>(static_cast<double>(static_cast<std::int64_t>(ticks - base_ticks_)) * ns_per_tick_);
  }
  std::uint64_t duration_ns(std::uint64_t start, std::uint64_t end) const noexcept {
    return end > start ? static_cast<std::uint64_t>(static_cast<double>(end - start) * ns_per_tick_ + 0.5) : 0;
  }
  bool tsc() const noexcept { return tsc_; }
  double ghz() const noexcept { return tsc_ ? 1.0 / ns_per_tick_ : 0; }
  // Largest relative change of the slope between consecutive calibrations
  // after the first 100 ms: an empirical bound on the conversion error.
  double error_ppm() const noexcept { return error_ppm_; }

 private:
  struct Pair {
    std::uint64_t ticks;
    std::int64_t ns;
  };
  static Pair take_pair() noexcept;
  bool tsc_ = false;
  std::uint64_t base_ticks_ = 0;
  std::int64_t base_ns_ = 0;
  double ns_per_tick_ = 1.0;
  double error_ppm_ = 0;
};

}  // namespace stepscope::detail
