// Tick-to-nanosecond conversion for the collector (the hot path only reads
// raw ticks, see include/stepscope/clock.hpp).
#pragma once

#include "stats/int128.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace stepscope {
inline namespace v1 {
namespace detail {

// Ticks -> nanoseconds as a fixed-point multiply: the collector converts
// every record's duration, and this is a few integer instructions where the
// double formula needs conversions in and out of floating point.
//
//   ns = ticks * whole + round(ticks * fraction / 2^64)
//
// whole and fraction hold ns_per_tick exactly (a double's fractional part
// has at most 53 significant bits, all at or above 2^-64 when ns_per_tick >=
// 2^-11, i.e. for any clock up to 2 THz), so the result is ticks *
// ns_per_tick rounded to the nearest ns: at least as accurate as the double
// formula, whose product rounds to 53 bits.
struct TickScale {
  std::uint64_t whole = 1;     // integer part of ns per tick
  std::uint64_t fraction = 0;  // fractional part of ns per tick, in units of 2^-64 ns

  static TickScale from_ns_per_tick(double ns_per_tick) noexcept {
    TickScale s;
    if (!(ns_per_tick > 0) || ns_per_tick >= 18446744073709551616.0) return s;  // keep 1 ns per tick
    const double whole = static_cast<double>(static_cast<std::uint64_t>(ns_per_tick));
    s.whole = static_cast<std::uint64_t>(whole);
    // ns_per_tick - whole is exact and below 1, so the scaled value fits.
    s.fraction = static_cast<std::uint64_t>(std::ldexp(ns_per_tick - whole, 64));
    return s;
  }
  // Which parts a conversion needs: a TSC (over 1 GHz) has no whole part,
  // CLOCK_MONOTONIC (1 ns per tick) no fraction. Hot loops pick the variant
  // once, per run of records.
  enum Parts { kFractionOnly, kWholeOnly, kWholeAndFraction };
  Parts parts() const noexcept { return whole == 0 ? kFractionOnly : fraction == 0 ? kWholeOnly : kWholeAndFraction; }

  // Rounded to the nearest ns (ties up); wraps if the result needs more than
  // 64 bits. A Parts other than the default only when parts() says so.
  template <Parts kParts = kWholeAndFraction>
  std::uint64_t to_ns(std::uint64_t ticks) const noexcept {
    std::uint64_t ns = 0;
    if (kParts != kWholeOnly) {
      const Uint128 scaled = static_cast<Uint128>(ticks) * fraction;
      // Rounding adds half a ns: a carry out of the low half exactly when its top bit is set.
      ns = static_cast<std::uint64_t>(scaled >> 64) + (static_cast<std::uint64_t>(scaled) >> 63);
    }
    if (kParts != kFractionOnly) ns += ticks * whole;
    return ns;
  }
  // 0 when end <= start (a clock that went backwards).
  std::uint64_t duration_ns(std::uint64_t start, std::uint64_t end) const noexcept {
    return to_ns(end > start ? end - start : 0);
  }
};

// Decides the clock at start-up: TSC when the CPU says its TSC is invariant
// (CPUID 0x80000007 EDX bit 8) and the kernel uses it as clock source (it
// would switch away from an unstable TSC); STEPSCOPE_CLOCK=monotonic forces
// CLOCK_MONOTONIC. Sets g_use_tsc. Allocates nothing (it runs on the thread
// of the first record).
struct ClockChoice {
  const char* source = "clock_monotonic";  // "tsc" or "clock_monotonic"
  bool override_invalid = false;           // STEPSCOPE_CLOCK was neither: the default was used
};
ClockChoice choose_clock(const char* env_override) noexcept;
bool cpu_has_invariant_tsc() noexcept;
bool kernel_clocksource_is_tsc() noexcept;
// Why choose_clock() chose what it did, in words (run.clock.reason): the
// kernel's clocksource and whether it still lists the TSC (a kernel that
// marked the TSC unstable drops it from available_clocksource), tsc=unstable
// on its command line, the CPU's invariant-TSC flag, STEPSCOPE_CLOCK. Static
// storage, written once by choose_clock(); "" before it ran.
const char* clock_reason() noexcept;
// The reason for a kernel whose clock files read `current` and `available`
// (the sysfs text, "" when unreadable) and whose command line is `cmdline`;
// writes at most `size` bytes (NUL included) into `out`. choose_clock()'s
// text, testable without the machine's files.
void explain_clock(bool forced_monotonic, bool have_tsc, bool invariant_tsc, const char* current, const char* available,
                   const char* cmdline, char* out, std::size_t size) noexcept;

// The floor of one enabled scope with a clock: two reads of it and a 32-byte
// store, ns (the fastest of a few batches, on the calling thread: about a
// tenth of a millisecond). use_tsc false: CLOCK_MONOTONIC. 0 when use_tsc and there is
// no TSC instruction.
double scope_floor_ns(bool use_tsc) noexcept;

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
    return base_ns_ + static_cast<std::int64_t>(static_cast<double>(static_cast<std::int64_t>(ticks - base_ticks_)) *
                                                ns_per_tick_);
  }
  std::uint64_t duration_ns(std::uint64_t start, std::uint64_t end) const noexcept {
    return scale_.duration_ns(start, end);
  }
  // The same conversion as a value, for loops that keep it in registers.
  TickScale scale() const noexcept { return scale_; }
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
  TickScale scale_;  // ns_per_tick_ in fixed point
  double error_ppm_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace stepscope
