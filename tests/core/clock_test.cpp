// Fixed-point tick conversion: exact to the nearest ns for the calibrated
// slope, over the tick rates clocks really have, and never more than 1 ns from
// the double formula it replaced.
#include "stats/clock.hpp"

#include <stepscope/clock.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using stepscope::detail::TickConverter;
using stepscope::detail::TickScale;
using stepscope::detail::Uint128;

namespace {

// ticks * ns_per_tick rounded to the nearest ns (halves up), in exact integer
// arithmetic: a double is m * 2^e with an integer m below 2^53.
std::uint64_t exact_ns(std::uint64_t ticks, double ns_per_tick) {
  int exponent = 0;
  const double mantissa = std::frexp(ns_per_tick, &exponent);  // in [0.5, 1)
  const auto m = static_cast<std::uint64_t>(std::ldexp(mantissa, 53));
  const int e = exponent - 53;
  const Uint128 product = static_cast<Uint128>(ticks) * m;
  if (e >= 0) return static_cast<std::uint64_t>(product << e);
  const int shift = -e;
  REQUIRE(shift < 128);
  return static_cast<std::uint64_t>((product + (Uint128{1} << (shift - 1))) >> shift);
}

// What TickConverter::duration_ns computed before the fixed-point version.
std::uint64_t double_ns(std::uint64_t ticks, double ns_per_tick) {
  return static_cast<std::uint64_t>(static_cast<double>(ticks) * ns_per_tick + 0.5);
}

std::vector<double> tick_rates_ns_per_tick() {
  // Invariant TSCs from 1 to 5 GHz, CLOCK_MONOTONIC (1 ns/tick), a 24 MHz
  // ARM generic timer, a 32 kHz clock, plus random slopes across the range.
  std::vector<double> rates = {1.0,          1e9 / 1.0e9,  1e9 / 1.5e9, 1e9 / 2.1e9, 1e9 / 2.9e9, 1e9 / 2.89345e9,
                               1e9 / 3.0e9,  1e9 / 3.7e9,  1e9 / 5.0e9, 0.5,         2.0,         1e9 / 24e6,
                               1e9 / 19.2e6, 1e9 / 32768.0};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log_rate(std::log(0.05), std::log(100.0));
  for (int i = 0; i < 40; ++i) rates.push_back(std::exp(log_rate(rng)));
  // A calibrated slope is a ratio of measured intervals: not a round number.
  for (int i = 0; i < 20; ++i) rates.push_back(1e9 / 2.9e9 * (1 + 1e-6 * static_cast<double>(i)));
  return rates;
}

std::vector<std::uint64_t> tick_counts(double ns_per_tick) {
  // Up to results of 2^62 ns (146 years); denser where durations really are.
  const double max_ticks = std::ldexp(1.0, 62) / ns_per_tick;
  std::vector<std::uint64_t> ticks = {0, 1, 2, 3, 4, 5, 7, 10, 100, 1000};
  for (int k = 1; k < 64 && std::ldexp(1.0, k) + 2 < max_ticks; ++k)
    for (std::int64_t d : {-1, 0, 1}) ticks.push_back((std::uint64_t{1} << k) + static_cast<std::uint64_t>(d));
  std::mt19937_64 rng(11);
  for (int bits : {10, 20, 30, 40, 50, 62}) {
    const double limit = std::min(std::ldexp(1.0, bits), max_ticks);
    std::uniform_int_distribution<std::uint64_t> dist(0, static_cast<std::uint64_t>(limit) - 1);
    for (int i = 0; i < 2000; ++i) ticks.push_back(dist(rng));
  }
  return ticks;
}

}  // namespace

TEST_CASE("fixed-point tick conversion is the exact product rounded to the nearest ns", "[clock]") {
  for (const double rate : tick_rates_ns_per_tick()) {
    const TickScale scale = TickScale::from_ns_per_tick(rate);
    std::size_t wrong = 0, wrong_parts = 0, checked = 0;
    std::uint64_t first_wrong = 0;
    for (const std::uint64_t ticks : tick_counts(rate)) {
      ++checked;
      if (scale.to_ns(ticks) != exact_ns(ticks, rate) && wrong++ == 0) first_wrong = ticks;
      const std::uint64_t by_parts =
          scale.parts() == TickScale::kFractionOnly ? scale.to_ns<TickScale::kFractionOnly>(ticks)
          : scale.parts() == TickScale::kWholeOnly  ? scale.to_ns<TickScale::kWholeOnly>(ticks)
                                                    : scale.to_ns(ticks);
      if (by_parts != scale.to_ns(ticks)) ++wrong_parts;
    }
    INFO("ns_per_tick=" << rate << " first wrong at ticks=" << first_wrong);
    REQUIRE(checked > 10000);
    REQUIRE(wrong == 0);
    REQUIRE(wrong_parts == 0);  // the variant consume() picks for this slope
  }
}

TEST_CASE("fixed-point tick conversion is within 1 ns of the double formula", "[clock]") {
  // Below 2^50 ns the double product is accurate to well under 1 ns; beyond,
  // the fixed-point result is the more accurate of the two.
  for (const double rate : tick_rates_ns_per_tick()) {
    const TickScale scale = TickScale::from_ns_per_tick(rate);
    std::uint64_t worst = 0, worst_ticks = 0;
    for (const std::uint64_t ticks : tick_counts(rate)) {
      if (static_cast<double>(ticks) * rate >= std::ldexp(1.0, 50)) continue;
      const std::uint64_t fixed = scale.to_ns(ticks), floating = double_ns(ticks, rate);
      const std::uint64_t diff = fixed > floating ? fixed - floating : floating - fixed;
      if (diff > worst) worst = diff, worst_ticks = ticks;
    }
    INFO("ns_per_tick=" << rate << " worst at ticks=" << worst_ticks);
    REQUIRE(worst <= 1);
  }
}

TEST_CASE("one ns per tick is the identity; unusable slopes fall back to it", "[clock]") {
  const TickScale one = TickScale::from_ns_per_tick(1.0);
  REQUIRE(one.whole == 1);
  REQUIRE(one.fraction == 0);
  REQUIRE(one.parts() == TickScale::kWholeOnly);
  for (std::uint64_t t : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{123456789}, ~std::uint64_t{0}})
    REQUIRE(one.to_ns(t) == t);
  for (double bad : {0.0, -1.0, std::nan(""), std::ldexp(1.0, 64)}) {
    const TickScale s = TickScale::from_ns_per_tick(bad);
    REQUIRE(s.whole == 1);
    REQUIRE(s.fraction == 0);
  }
  // A TSC slope has no whole part.
  const TickScale tsc = TickScale::from_ns_per_tick(1e9 / 2.9e9);
  REQUIRE(tsc.whole == 0);
  REQUIRE(tsc.fraction != 0);
  REQUIRE(tsc.parts() == TickScale::kFractionOnly);
  REQUIRE(TickScale::from_ns_per_tick(1e9 / 24e6).parts() == TickScale::kWholeAndFraction);
}

TEST_CASE("durations: end before start is zero; CLOCK_MONOTONIC ticks are ns", "[clock]") {
  stepscope::detail::g_use_tsc = false;
  TickConverter clock;
  clock.start();
  REQUIRE(clock.duration_ns(5, 12) == 7);
  REQUIRE(clock.duration_ns(12, 5) == 0);
  REQUIRE(clock.duration_ns(12, 12) == 0);
  REQUIRE(clock.scale().whole == 1);
  REQUIRE(clock.scale().fraction == 0);
}

namespace {
std::string explained(bool forced, bool have_tsc, bool invariant, const char* current, const char* available,
                      const char* cmdline) {
  char out[320];
  stepscope::detail::explain_clock(forced, have_tsc, invariant, current, available, cmdline, out, sizeof out);
  return out;
}
}  // namespace

TEST_CASE("the report says why the clock is not the TSC", "[clock]") {
  // This VM: kvm-clock the only clocksource, tsc=unstable on the command line (after tsc=reliable).
  const std::string vm =
      explained(false, true, true, "kvm-clock", "kvm-clock", "clocksource=kvm-clock tsc=reliable tsc=unstable");
  CHECK(vm.find("the kernel marked the TSC unstable (boot parameter tsc=unstable)") == 0);
  CHECK(vm.find("clocksource kvm-clock") != std::string::npos);
  // Marked unstable at run time (the watchdog), no boot parameter: the last tsc= is the one that counts.
  const std::string watchdog = explained(false, true, true, "hpet", "hpet acpi_pm", "quiet tsc=unstable tsc=reliable");
  CHECK(watchdog.find("the kernel marked the TSC unstable (clocksource hpet;") == 0);
  CHECK(explained(false, true, true, "kvm-clock", "kvm-clock tsc hpet", "")
            .find("the kernel's clocksource is kvm-clock, not tsc") == 0);
  CHECK(explained(false, true, false, "tsc", "tsc hpet", "").find("the CPU reports no invariant TSC") == 0);
  CHECK(explained(false, true, true, "tsc", "tsc hpet", "") == "invariant TSC, kernel clocksource tsc");
  CHECK(explained(true, true, true, "tsc", "tsc", "") == "STEPSCOPE_CLOCK=monotonic");
  CHECK(explained(false, false, false, "arch_sys_counter", "arch_sys_counter", "") ==
        "no TSC on this CPU architecture");
  CHECK(explained(false, true, true, "", "", "").find("could not be read") != std::string::npos);
  // A clocksource list that merely contains the letters (tsc_early) is not the TSC.
  CHECK(
      explained(false, true, true, "kvm-clock", "kvm-clock tsc_early", "").find("the kernel marked the TSC unstable") ==
      0);
}

TEST_CASE("the per-scope floor is measured for the clock in use and for the TSC", "[clock]") {
  const double monotonic = stepscope::detail::scope_floor_ns(false);
  CHECK(monotonic > 0);
  if (STEPSCOPE_DETAIL_HAVE_TSC) CHECK(stepscope::detail::scope_floor_ns(true) > 0);
}
